"""Helpers for the WebSocket integration tests: an in-process uvicorn broker and clients.

A unique module name: tests dirs are not packages.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvicorn
from websockets.asyncio.client import ClientConnection, connect

from app.api import create_app
from app.api.server import ws_keepalive
from app.config import Settings


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


@contextmanager
def live_broker(tmp_path: Path, **overrides: Any) -> Iterator[LiveBroker]:
    values: dict[str, Any] = {"data_dir": tmp_path / "data", "num_partitions": 1}
    values.update(overrides)
    broker = LiveBroker(Settings(**values)).start()
    try:
        yield broker
    finally:
        broker.stop()


async def send(ws: ClientConnection, message: dict[str, Any]) -> None:
    await ws.send(orjson.dumps(message).decode())


async def recv(ws: ClientConnection, timeout: float = 10) -> Any:
    frame = await asyncio.wait_for(ws.recv(), timeout)
    return orjson.loads(frame) if isinstance(frame, str) else frame


async def subscribe(url: str, **message: Any) -> tuple[ClientConnection, Any]:
    ws = await connect(url, max_size=None)
    await send(ws, {"type": "subscribe", **message})
    return ws, await recv(ws)
