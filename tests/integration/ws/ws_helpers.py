"""Helpers for the WebSocket integration tests: clients of the in-process broker
(``live_broker.py``), re-exported here.

A unique module name: tests dirs are not packages.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from live_broker import LiveBroker, live_broker
from websockets.asyncio.client import ClientConnection, connect

__all__ = ["LiveBroker", "live_broker", "recv", "send", "subscribe"]


async def send(ws: ClientConnection, message: dict[str, Any]) -> None:
    await ws.send(orjson.dumps(message).decode())


async def recv(ws: ClientConnection, timeout: float = 10) -> Any:
    frame = await asyncio.wait_for(ws.recv(), timeout)
    return orjson.loads(frame) if isinstance(frame, str) else frame


async def subscribe(url: str, **message: Any) -> tuple[ClientConnection, Any]:
    ws = await connect(url, max_size=None)
    await send(ws, {"type": "subscribe", **message})
    return ws, await recv(ws)
