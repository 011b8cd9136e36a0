"""What both WebSocket endpoints share: receiving under an idle timeout, safe sends, closing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from app.api import security
from app.api.state import AppState
from app.api.ws.protocol import Close, error_frame, parse_text
from app.api.ws.stats import WsStats
from app.common.errors import InvalidRequest, LogbusError, PayloadTooLarge

log = logging.getLogger(__name__)

DEFAULT_IDLE_TIMEOUT_MS = 120_000
MIN_IDLE_TIMEOUT_MS = 100
MAX_IDLE_TIMEOUT_MS = 3_600_000

# A send to a peer that is gone: uvicorn raises its ClientDisconnected (an OSError),
# Starlette a WebSocketDisconnect or, after a close, a RuntimeError.
SEND_ERRORS = (WebSocketDisconnect, RuntimeError, OSError)


class ClientGone(Exception):
    """The socket is closed (by the client, by us, or by the broker shutting down)."""


def ws_stats(ws: WebSocket) -> WsStats:
    stats: WsStats = ws.app.state.logbus_ws
    return stats


def app_state(ws: WebSocket) -> AppState:
    state: AppState = ws.app.state.logbus
    return state


def idle_timeout_seconds(ws: WebSocket) -> float:
    raw = ws.query_params.get("idle_timeout_ms")
    if raw is None:
        return DEFAULT_IDLE_TIMEOUT_MS / 1000
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not MIN_IDLE_TIMEOUT_MS <= value <= MAX_IDLE_TIMEOUT_MS:
        raise InvalidRequest(
            f"query.idle_timeout_ms: expected an integer from {MIN_IDLE_TIMEOUT_MS} "
            f"to {MAX_IDLE_TIMEOUT_MS}, got {raw!r}"
        )
    return value / 1000


async def serve(
    ws: WebSocket, endpoint: str, run: Callable[[AppState, WsStats, float], Awaitable[None]]
) -> None:
    """What every WebSocket endpoint does around its own loop: accept, refuse before
    the broker is ready (1013) or on a bad ``idle_timeout_ms`` (4400), and count
    the connection while ``run(state, stats, idle_seconds)`` serves it.

    With authentication on (``app/api/security.py``), a socket whose handshake carried no
    credentials must send an ``auth`` message first (else 4401), and a socket closes with
    4401 when its bearer token expires."""
    await ws.accept(subprotocol=security.ws_subprotocol(ws))
    state = app_state(ws)
    stats = ws_stats(ws)
    if not state.ready or state.manager is None:
        await close(ws, Close.TRY_AGAIN_LATER, "the broker is not serving yet")
        return
    expiry: asyncio.TimerHandle | None = None
    if security.security_of(ws) is not None:
        try:
            identity = ws.scope.get(security.SCOPE_KEY) or await security.ws_authenticate(
                ws, ws.receive_text
            )
        except (LogbusError, WebSocketDisconnect, RuntimeError) as exc:
            reason = exc.message if isinstance(exc, LogbusError) else "authentication failed"
            await close(ws, Close.UNAUTHENTICATED, reason)
            return
        if identity.expires_at is not None:
            loop = asyncio.get_running_loop()
            expiry = loop.call_at(
                loop.time() + max(0.0, identity.expires_at - time.time()),
                lambda: loop.create_task(close(ws, Close.UNAUTHENTICATED, "token expired")),
            )
    try:
        idle = idle_timeout_seconds(ws)
    except LogbusError as exc:
        with contextlib.suppress(ClientGone):
            await send_error(ws, exc)
        await close(ws, Close.BAD_REQUEST, "bad query parameter")
        return
    stats.connections[endpoint] += 1
    try:
        await run(state, stats, idle)
    finally:
        stats.connections[endpoint] -= 1
        if expiry is not None:
            expiry.cancel()
        # Its buffers go with it; many leaving at once trim (app/api/memory.py).
        state.memory.connection_closed()


async def send_text(ws: WebSocket, text: str) -> None:
    try:
        await ws.send_text(text)
    except SEND_ERRORS:
        raise ClientGone from None


async def send_bytes(ws: WebSocket, data: bytes) -> None:
    try:
        await ws.send_bytes(data)
    except SEND_ERRORS:
        raise ClientGone from None


async def send_error(ws: WebSocket, exc: LogbusError, **extra: Any) -> None:
    await send_text(ws, error_frame(exc, **extra))


async def close(ws: WebSocket, code: int, reason: str = "") -> None:
    if ws.application_state == WebSocketState.DISCONNECTED:
        return
    # Reasons are capped at 123 bytes by RFC 6455.
    with contextlib.suppress(*SEND_ERRORS):
        await ws.close(code, reason.encode()[:123].decode(errors="ignore"))


class IdleTimer:
    """Closes the socket with 4408 when no client message arrives for ``timeout`` seconds.

    One timer per socket; a message only records its time, and the timer, when
    it fires early, re-arms for the rest. Wrapping each receive in
    ``asyncio.wait_for`` instead would cost a task per message and, worse,
    yield to the loop before every message: a producer's queued requests
    would then never be handled back to back, and subscribers would get one
    frame per append where they could get one per burst.
    """

    def __init__(self, ws: WebSocket, timeout: float) -> None:
        self.ws = ws
        self.timeout = timeout
        self.loop = asyncio.get_running_loop()
        self.last = self.loop.time()
        self._handle = self.loop.call_later(timeout, self._check)
        self._closing: asyncio.Task[None] | None = None

    def touch(self) -> None:
        self.last = self.loop.time()

    def _check(self) -> None:
        remaining = self.last + self.timeout - self.loop.time()
        if remaining > 0:
            self._handle = self.loop.call_later(remaining, self._check)
            return
        # Closing makes uvicorn hand the pending receive a disconnect: the session ends.
        self._closing = self.loop.create_task(close(self.ws, Close.IDLE_TIMEOUT, "idle timeout"))

    def cancel(self) -> None:
        self._handle.cancel()


async def receive_message(ws: WebSocket, idle: IdleTimer, max_bytes: int) -> dict[str, Any]:
    """The next client message as a JSON object.

    Raises ClientGone when the socket is closed (by the client, the idle timer
    or the broker stopping) and after closing it for a binary frame; raises
    InvalidRequest for a text frame that is not a JSON object, which the
    caller answers with an error frame.
    """
    try:
        message = await ws.receive()
    except SEND_ERRORS:
        raise ClientGone from None
    if message["type"] == "websocket.disconnect":
        raise ClientGone
    idle.touch()
    text = message.get("text")
    if text is None:
        await close(ws, Close.UNSUPPORTED_DATA, "binary frames are not accepted: send JSON text")
        raise ClientGone
    if len(text) > max_bytes:
        raise PayloadTooLarge(len(text), max_bytes)
    return parse_text(text)
