"""The listener's idle (keep-alive) timer (app/api/protocol.py): one timer per idle
connection, not a call_later and a cancel per request, with uvicorn's deadline.

The real protocol class on a real event loop, with an in-memory transport and a small
ASGI app answering 200; the keep-alive timeout is 0.3 s.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn

from app.api.protocol import GuardedHttpToolsProtocol

TIMEOUT = 0.3
REQUEST = b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n"


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.answers = 0
        self.closed_at: float | None = None

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.answers += data.count(b"HTTP/1.1 200")

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 4000), "sockname": ("127.0.0.1", 80)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closed_at is not None

    def close(self) -> None:
        if self.closed_at is None:
            self.closed_at = asyncio.get_running_loop().time()

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def _serve(
    requests: int, gap: float
) -> tuple[Transport, float, int, GuardedHttpToolsProtocol]:
    """One connection: ``requests`` requests ``gap`` s apart, then idle until closed.
    The transport, the time of the last answer, and the timers the protocol armed up
    to it."""
    loop = asyncio.get_running_loop()
    armed = 0
    call_later = loop.call_later

    def counting(delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        nonlocal armed
        armed += 1
        return call_later(delay, callback, *args)

    loop.call_later = counting  # type: ignore[method-assign,assignment]
    config = uvicorn.Config(app, timeout_keep_alive=TIMEOUT, lifespan="off", access_log=False)  # type: ignore[arg-type]
    config.load()
    protocol = GuardedHttpToolsProtocol(
        config=config, server_state=uvicorn.server.ServerState(), app_state={}, _loop=loop
    )
    transport = Transport()
    try:
        protocol.connection_made(transport)
        last = loop.time()
        for i in range(requests):
            protocol.data_received(REQUEST)
            while transport.answers <= i:
                await asyncio.sleep(0)
            last = loop.time()
            if gap:
                await asyncio.sleep(gap)
        counted = armed - (requests if gap else 0)  # less the test's own sleeps
        while transport.closed_at is None and loop.time() < last + 10 * TIMEOUT:
            await asyncio.sleep(0.01)
    finally:
        loop.call_later = call_later  # type: ignore[method-assign]
    return transport, last, counted, protocol


def test_a_busy_connection_arms_no_timer_per_request_and_closes_when_idle() -> None:
    async def main() -> None:
        transport, last, armed, protocol = await _serve(200, 0)
        assert transport.answers == 200
        # uvicorn's protocol arms one per answer (201 here); this one, at most a few.
        assert armed <= 3, armed
        assert transport.closed_at is not None
        assert TIMEOUT - 0.02 <= transport.closed_at - last <= TIMEOUT + 1.5
        protocol.connection_lost(None)

    asyncio.run(main())


def test_requests_less_than_the_timeout_apart_keep_the_connection_open() -> None:
    async def main() -> None:
        # 6 requests 0.1 s apart: 0.5 s of life, more than the timeout, never idle for it.
        transport, last, _, protocol = await _serve(6, TIMEOUT / 3)
        assert transport.answers == 6
        assert transport.closed_at is not None
        # Closed only a whole timeout after the last answer, not counted from connect.
        assert TIMEOUT - 0.02 <= transport.closed_at - last <= TIMEOUT + 1.5
        protocol.connection_lost(None)

    asyncio.run(main())
