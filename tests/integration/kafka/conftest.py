"""Fixtures of the Kafka door's tests (the harness: kafka_harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka_harness import KafkaBroker, start_broker, stop_broker


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One broker per test module (tests use topics of their own)."""
    broker = start_broker(tmp_path_factory.mktemp("kafka"))
    yield broker
    stop_broker(broker)
