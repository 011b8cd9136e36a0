"""The WebSocket tests run against a real uvicorn server (the sansio websockets
protocol the broker uses in production), in-process on a thread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ws_helpers import LiveBroker, live_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LiveBroker]:
    with live_broker(tmp_path) as b:
        yield b
