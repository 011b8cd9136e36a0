"""One in-process broker per test module (each test makes its own topics)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest
from isolation_helpers import Broker, Writer, broker_at

_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with broker_at(tmp_path_factory.mktemp("iso-broker")) as b:
        yield b


@pytest.fixture
def topic(broker: Broker) -> Callable[[], tuple[str, Writer]]:
    """A fresh one-partition topic and a writer on its log."""

    def make() -> tuple[str, Writer]:
        name = f"iso-{next(_names)}"
        broker.create_topic(name)
        return name, Writer(broker.log(name))

    return make
