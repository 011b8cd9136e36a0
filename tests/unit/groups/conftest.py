"""A coordinator over a real LogManager in a temp dir, with a clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from groups_unit_helpers import FakeClock

from app.core.log import LogManager


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    m = LogManager(tmp_path / "data")
    m.start()
    try:
        yield m
    finally:
        m.shutdown()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
