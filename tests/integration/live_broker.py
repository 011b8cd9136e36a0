"""A real broker in the test process: the app served by uvicorn (httptools and
websockets-sansio, as in production) on a thread, on a free loopback port, so that tests
speak HTTP and WebSocket to it and still reach its partition logs. Shared by the
integration tests (``tests/integration/conftest.py`` puts this folder on ``sys.path``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from app.api import create_app
from app.api.server import ws_keepalive
from app.config import Settings
from app.core.log import Log


class LiveBroker:
    """The real app served by uvicorn (websockets-sansio, as in production) on a thread."""

    def __init__(self, settings: Settings) -> None:
        self.app = create_app(settings)
        ping_interval, ping_timeout = ws_keepalive(settings)
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=0,
            loop="asyncio",
            http="httptools",
            lifespan="on",
            log_level="warning",
            ws_ping_interval=ping_interval,
            ws_ping_timeout=ping_timeout,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.port = 0

    def start(self) -> LiveBroker:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive(), "the broker thread died"
            assert time.monotonic() < deadline, "the broker did not start"
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ws_url(self, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    @property
    def stats(self) -> Any:
        return self.app.state.logbus_ws

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)

    def create_topic(self, name: str, partitions: int = 1) -> None:
        with self.http() as c:
            r = c.post("/topics", json={"name": name, "partitions": partitions})
            assert r.status_code == 201, r.text

    def produce(self, topic: str, records: list[dict[str, Any]], **body: Any) -> Any:
        with self.http() as c:
            r = c.post(f"/topics/{topic}/records", json={"records": records, **body})
            assert r.status_code == 200, r.text
            return r.json()["offsets"]

    def log(self, topic: str, partition: int = 0) -> Log:
        """The partition's log in this process (tests reach what a client cannot)."""
        log: Log = self.app.state.logbus.manager.get_log(topic, partition)
        return log


@contextmanager
def live_broker(tmp_path: Path, **overrides: Any) -> Iterator[LiveBroker]:
    """A started broker on ``tmp_path/data`` (one partition per topic unless overridden),
    stopped on exit."""
    values: dict[str, Any] = {"data_dir": tmp_path / "data", "num_partitions": 1}
    values.update(overrides)
    broker = LiveBroker(Settings(**values)).start()
    try:
        yield broker
    finally:
        broker.stop()
