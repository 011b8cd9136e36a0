"""Plain FastAPI dependencies: the app's state, and request bodies read under a limit.

The dependencies are ``async def`` although they never await: FastAPI runs a plain
``def`` dependency in its thread pool, which cost every request two thread hops (and
under load a wait for the GIL behind the event loop) for three attribute reads. An
``async def`` one runs inline on the loop."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from fastapi import Depends, Request
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, HTTPConnection

from app.api.state import AppState
from app.common.errors import (
    BrokerNotAvailable,
    InvalidRequest,
    KafkaStorageError,
    PayloadTooLarge,
)
from app.config import Settings

if TYPE_CHECKING:
    from app.core.log.manager import LogManager

log = logging.getLogger(__name__)


async def get_state(request: Request) -> AppState:
    return app_state(request)


def app_state(request: Request) -> AppState:
    """The app's :class:`AppState` (plain function, for code that is not a dependency)."""
    state: AppState = request.app.state.logbus
    return state


async def get_settings(request: Request) -> Settings:
    return app_state(request).settings


async def get_manager(request: Request) -> LogManager:
    return manager_of(request)


def manager_of(request: Request) -> LogManager:
    """The serving broker's LogManager; BrokerNotAvailable while starting or stopping."""
    state = app_state(request)
    if not state.ready or state.manager is None:
        raise BrokerNotAvailable("the broker is not serving yet (starting) or is stopping")
    return state.manager


def serving_coordinator(request: HTTPConnection, attr: str, kind: str) -> Any:
    """The coordinator the lifespan set as ``app.state.<attr>`` (``kind``: "group",
    "transaction"); BrokerNotAvailable before it started, once it stops, or while the
    broker is not ready."""
    coordinator = getattr(request.app.state, attr, None)
    if coordinator is None or not request.app.state.logbus.ready:
        raise BrokerNotAvailable(
            f"the {kind} coordinator is not serving yet (starting) or stopping"
        )
    return coordinator


class Startable(Protocol):
    async def start(self) -> None: ...


async def start_into_state(
    app: Starlette,
    attr: str,
    service: Startable,
    failure: str,
    errors: type[BaseException] | tuple[type[BaseException], ...] = KafkaStorageError,
) -> bool:
    """Start ``service`` (a coordinator, the registry) and publish it as
    ``app.state.<attr>``; True. When it cannot start with one of ``errors`` (a storage
    error: a manager handed in unstarted, a failed disk), log ``failure`` with the
    exception and publish nothing: its routes answer 503 (:func:`serving_coordinator`),
    the rest of the broker serves on; False. The lifespan's stop goes through
    :func:`take_from_state`."""
    try:
        await service.start()
    except errors:
        log.exception(failure)
        return False
    setattr(app.state, attr, service)
    return True


def take_from_state(app: Starlette, attr: str) -> Any:
    """``app.state.<attr>`` (None when unset), cleared first: a request arriving while
    the lifespan stops it finds it gone (:func:`serving_coordinator`'s BrokerNotAvailable)
    rather than half-stopped."""
    service = getattr(app.state, attr, None)
    setattr(app.state, attr, None)
    return service


async def stop_from_state(app: Starlette, attr: str, method: str = "stop") -> None:
    """Take ``app.state.<attr>`` (:func:`take_from_state`) and, when it was set, await its
    ``method`` (``stop``, or ``close`` for a connection pool)."""
    service = take_from_state(app, attr)
    if service is not None:
        await getattr(service, method)()


StateDep = Annotated[AppState, Depends(get_state)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
# A string: the engine is imported lazily so the API package loads without it.
ManagerDep = Annotated["LogManager", Depends(get_manager)]


def _declared_length(request: Request, limit: int) -> int | None:
    # Straight from the ASGI scope: building Starlette's Headers for one field cost
    # more than the rest of reading a small body.
    raw: bytes | None = None
    for name, value in request.scope["headers"]:
        if name == b"content-length":
            raw = value
            break
    if raw is None:
        return None
    declared = raw.decode("latin-1")
    try:
        size = int(declared)
    except ValueError:
        raise InvalidRequest(f"bad Content-Length header {declared!r}") from None
    if size > limit:
        raise PayloadTooLarge(size, limit)
    return size


async def _receive_body(request: Request) -> tuple[bytes, bool]:
    """The next body bytes from the request's ASGI ``receive`` and whether more follow:
    Starlette's ``Request.stream`` without its async generator, which took three steps
    (the body, an empty chunk, the end) for a body that arrived in one message. Marks
    the stream consumed as Starlette does; a disconnect raises ``ClientDisconnect``."""
    if request._stream_consumed:
        raise RuntimeError("Stream consumed")
    message = await request.receive()
    if message["type"] == "http.request":
        more = bool(message.get("more_body", False))
        if not more:
            request._stream_consumed = True
        return message.get("body", b""), more
    request._is_disconnected = True
    raise ClientDisconnect()


async def read_body(request: Request, limit: int) -> bytes:
    """The whole request body, refused with 413 as soon as it passes ``limit`` bytes.

    The declared Content-Length is checked before reading anything, and the
    running total while streaming, so an oversized (or lying) upload costs at
    most ``limit`` bytes of memory.
    """
    _declared_length(request, limit)
    body, more = await _receive_body(request)
    total = len(body)
    if total > limit:
        raise PayloadTooLarge(total, limit)
    if not more:
        return body  # the usual case: the whole body in one message
    chunks = [body]
    while more:
        chunk, more = await _receive_body(request)
        total += len(chunk)
        if total > limit:
            raise PayloadTooLarge(total, limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_body_mutable(request: Request, limit: int) -> bytearray:
    """Like :func:`read_body`, into one bytearray: ``Log.append`` stamps it in place
    instead of copying the whole body once more."""
    declared = _declared_length(request, limit)
    buf = bytearray()
    more = True
    while more:
        chunk, more = await _receive_body(request)
        if not chunk:
            continue
        if len(buf) + len(chunk) > limit:
            raise PayloadTooLarge(len(buf) + len(chunk), limit)
        if not buf and declared is not None and len(chunk) == declared:
            buf = bytearray(chunk)  # the usual case: one chunk, one copy
        else:
            buf += chunk
    return buf
