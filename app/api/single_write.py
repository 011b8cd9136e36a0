"""One socket write per small answer: the response head and its first body bytes together.

uvicorn's HTTP protocol writes a response's head on ``http.response.start`` and its
body on each ``http.response.body``: two sends per small answer, and on loopback two
wake-ups of the reader. :func:`single_write` wraps one request's ASGI app so that the
head is held until the first body bytes and both leave in one ``transport.write``
(:class:`HeadWithBody`). The bytes are uvicorn's own, only the number of writes changes
(a property test compares them with uvicorn's plain path). The same per-request send
wrapper routes the zero-copy protocol's ``http.response.zerocopysend`` messages
(:mod:`app.api.zerocopy_protocol`). One event loop: no locking.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from uvicorn._types import ASGI3Application, ASGIReceiveCallable, Scope
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from app.api.zerocopy import ZEROCOPY_EXTENSION

# Bodies up to this size go out with their response head in one ``transport.write``:
# joining copies the body, which costs less than a second send (a syscall and, on
# loopback, waking the reader twice) up to well past a typical JSON answer.
SINGLE_WRITE_MAX_BODY_BYTES = 64 * 1024


class HeadWithBody:
    """The transport a request's :class:`RequestResponseCycle` writes to: it holds the
    response head until the first body bytes, then writes both with one ``write``.

    uvicorn writes the head on ``http.response.start`` and the body on each
    ``http.response.body``, two sends per small answer. Here the first write after the
    cycle's ``response_started`` is set (uvicorn writes the head synchronously right after
    setting it, so nothing else can write in between) is held; the next write (a body, or
    a chunk and its framing) is appended to it, or follows it as its own write when it is
    larger than :data:`SINGLE_WRITE_MAX_BODY_BYTES`. The bytes and their order on the wire
    are exactly uvicorn's; only how many writes carry them changes.

    A held head never stays behind: :meth:`flush` runs after every ASGI message but the
    start (a ``HEAD`` answer has no body write), before a zero-copy body and on
    :meth:`close`. Everything else is the real transport's (one event loop: no locking).
    """

    __slots__ = ("_cycle", "_head", "transport")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self.transport = transport
        # Until the head is written. The cycle holds this object as its transport: the
        # reference is dropped as soon as the head is seen, or each request would leave a
        # reference cycle (cycle, scope, body) to the garbage collector, which cost more
        # CPU than the saved write.
        self._cycle: RequestResponseCycle | None = cycle
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        cycle = self._cycle
        if cycle is not None and cycle.response_started:
            self._cycle = None
            self._head = data
            return
        head = self._head
        if head is not None:
            self._head = None
            if len(data) <= SINGLE_WRITE_MAX_BODY_BYTES:
                self.transport.write(head + data)
                return
            self.transport.write(head)
        self.transport.write(data)

    def flush(self) -> None:
        """Write the held head, if any."""
        head = self._head
        if head is not None:
            self._head = None
            self.transport.write(head)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


SendExtension = Callable[[RequestResponseCycle, dict[str, Any]], Awaitable[None]]


def single_write(
    app: ASGI3Application, cycle: RequestResponseCycle, extension: SendExtension | None = None
) -> ASGI3Application:
    """``app`` answering through ``cycle`` with its head and first body bytes in one write.

    Installs :class:`HeadWithBody` as the cycle's transport and gives ``app`` a send that
    flushes a held head after every message but the start. ``extension``: the handler of
    ``http.response.zerocopysend`` messages (the zero-copy protocol's), called after the
    head is flushed; None: such messages go to uvicorn, which refuses them.
    """
    out = HeadWithBody(cycle.transport, cycle)
    cycle.transport = out  # type: ignore[assignment]  # duck-typed: write/close/is_closing
    cycle_send = cycle.send

    async def send(message: Any) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            await cycle_send(message)
        elif extension is not None and kind == ZEROCOPY_EXTENSION:
            out.flush()
            await extension(cycle, message)
        else:
            await cycle_send(message)
            out.flush()

    async def with_send(scope: Scope, receive: ASGIReceiveCallable, _send: Any) -> None:
        await app(scope, receive, send)

    return with_send
