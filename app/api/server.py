"""The HTTP server: uvicorn with a protocol that can send file bytes with ``os.sendfile``.

uvicorn (0.5x) offers no zero-copy ASGI extension, and uvloop does not
implement ``loop.sendfile``, so :class:`ZeroCopyHttpToolsProtocol` adds one:
it is uvicorn's httptools protocol whose requests advertise
``http.response.zerocopysend`` and whose ``send`` handles that message by
calling ``os.sendfile`` from the segment file straight into the client's
socket. Everything else (parsing, keep-alive, pipelining, flow control of
ordinary bodies, the response head) stays uvicorn's.

How one zero-copy body goes out:

1. uvicorn has written the response head with ``transport.write``. The
   transport may still hold some of it (a slow client), and bytes written to
   the fd directly would overtake it, so we wait until the transport's write
   buffer is empty (lowering its high-water mark to 0 turns that into the
   ordinary pause/resume-writing signal).
2. ``os.sendfile`` on a ``dup`` of the socket fd, in a loop. The socket is
   non-blocking; on ``EAGAIN`` we wait for writability with
   ``loop.add_writer``. Both are done on the dup because asyncio refuses
   ``add_writer`` on an fd a transport owns, and because the dup keeps the
   socket alive while we wait: if the transport closes its fd meanwhile, the
   number could be reused by another connection and a sendfile on it would
   write into someone else's response.
3. Content-Length bookkeeping is uvicorn's own: we lower the cycle's
   expected length by what we sent and finish with an empty final body
   message, so keep-alive, ``connection: close`` and the next pipelined
   request work exactly as after any other response.

This works on both the standard asyncio loop and uvloop (we only need the
socket's fd, ``add_writer`` and the transport's write-buffer size), so the
default loop stays uvicorn's ``auto`` (uvloop when installed).

Both protocols answer each request through :func:`single_write`: the response head is
held until the first body bytes and both leave in one ``transport.write`` (uvicorn writes
them separately: two sends, and on loopback two wake-ups of the reader, per small answer).
The bytes are uvicorn's own, only the number of writes changes (a property test compares
them with uvicorn's plain path); the same per-request send wrapper routes zero-copy
messages.

Both protocols are :class:`GuardedHttpToolsProtocol`s: before a request reaches the app
they enforce the listener's limits (:mod:`app.api.limits`): connections in total and per
address, idle, header and body timeouts, the size and count of headers and the declared
body size. The head's size is counted as bytes arrive, before the parser buffers them,
so a huge header line costs at most ``max_header_bytes`` (plus one read) of memory.
"""

from __future__ import annotations

import asyncio
import errno
import http
import logging
import os
import signal
import ssl
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, ClassVar

import httptools
import uvicorn
from uvicorn._types import ASGI3Application, ASGIReceiveCallable, ASGISendEvent, Scope
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.utils import is_ssl

from app.api import peer
from app.api.errors import response_for
from app.api.limits import (
    ConnectionCounter,
    HeadersTooLarge,
    ListenerLimits,
    RequestReadTimeout,
    head_bytes,
)
from app.api.memory import (
    DRAINED_EXTENSION,
    JSON_BODY_FACTOR,
    MemoryBudget,
    Reservation,
    tune_allocator,
)
from app.api.zerocopy import COPY_BYTES, ZEROCOPY_BYTES, ZEROCOPY_EXTENSION, pread_exactly
from app.common import errors as core

if TYPE_CHECKING:
    from app.config import Settings

# uvicorn configures this logger; ours would print nothing without extra setup.
logger = logging.getLogger("uvicorn.error")

# One sendfile call moves at most this much before we let other connections
# run: a fast loopback reader can drain hundreds of MB without ever giving
# EAGAIN, which would otherwise hold the event loop for the whole body.
SENDFILE_MAX_CALL_BYTES = 8 * 1024 * 1024
# Chunked bodies need framing between the file bytes; ZeroCopyResponse always
# sets Content-Length, so this path is only for other apps and is copied.
CHUNKED_COPY_BYTES = 1024 * 1024
# Long polls may still be waiting at shutdown; they are cut after this.
GRACEFUL_SHUTDOWN_SECONDS = 5

# The send wrapper hooks uvicorn's per-request task start. Should a uvicorn
# release rename it, the extension must not be offered: an app would send
# zerocopysend messages that plain uvicorn rejects mid-response.
_CAN_WRAP_SEND = callable(getattr(HttpToolsProtocol, "_start_asgi_task", None))

_DISCONNECT_ERRNOS = frozenset(
    {errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN, errno.ESHUTDOWN}
)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _file_fd(file: Any) -> int:
    return file if isinstance(file, int) else int(file.fileno())


# The parts of a request a read timeout names (RequestReadTimeout), compared by identity.
HEAD = "line and headers"
BODY = "body"


class _Refused(Exception):
    """Raised from a parser callback to stop parsing and answer ``error``."""

    def __init__(self, error: core.LogbusError) -> None:
        super().__init__(error.message)
        self.error = error


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


# DRAINED_EXTENSION: how an answer learns that the client has taken it:
# ``scope["extensions"][DRAINED_EXTENSION]["on_drained"](callback)`` calls ``callback()``
# once the transport's buffer is below its low-water mark, or the connection is lost.


class GatedFlowControl(FlowControl):
    """uvicorn's flow control with one more reason to stop reading: ``held`` (the request
    body waits for the memory budget). uvicorn resumes reading when its own reasons end;
    while held that is ignored."""

    held = False

    def resume_reading(self) -> None:
        if not self.held:
            super().resume_reading()


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under the listener's limits (:mod:`app.api.limits`).

    State per connection: ``_in_body`` is true from the end of a request's head to the
    end of its body (head bytes are counted only outside it); ``_reading`` names the part
    of a request being read (:data:`HEAD`, :data:`BODY`, None between requests);
    ``_deadline`` is the one armed timer among "head not complete" and "body not
    complete", for the part ``_armed`` (uvicorn's own keep-alive timer covers idleness,
    armed here at connect too). The timers are armed only when a part is still
    incomplete at the end of a read (:meth:`_sync_deadline`): a request whose head and
    body arrive in one read, as nearly all small ones do, arms and cancels no timer
    (four timer operations a request before, as costly as the produce's parsing). A
    part's clock so starts at the end of the read that began it, microseconds after
    its first byte. A WebSocket upgrade hands the connection to uvicorn's WebSocket
    protocol; the connection stays counted until that protocol loses it.
    """

    # Bound per server by build_config (one counter per listener).
    counter: ClassVar[ConnectionCounter | None] = None
    # The app's memory budget (app/api/memory.py), bound by build_config; None: unbounded.
    memory: ClassVar[MemoryBudget | None] = None

    def connection_made(  # type: ignore[override]
        self, transport: asyncio.Transport
    ) -> None:
        super().connection_made(transport)
        self.flow = GatedFlowControl(transport)
        # A client certificate names the principal (Kafka's SSL listener, app/api/peer.py).
        self._peer = peer.connected(
            transport.get_extra_info("ssl_object"), self.client, self.server
        )
        cls = type(self)
        if cls.counter is None:
            from app.config import Settings

            cls.counter = ConnectionCounter(ListenerLimits.from_settings(Settings()))
        self._counter = cls.counter
        self._limits = cls.counter.limits
        self._address = self.client[0] if self.client else ""
        self._counted = False
        self._in_body = False
        self._reading: str | None = None
        self._armed: str | None = None
        self._declared = 0
        self._head_seen = 0
        self._header_count = 0
        self._deadline: asyncio.TimerHandle | None = None
        self._send_deadline: asyncio.TimerHandle | None = None
        self._memory = cls.memory
        # One entry per request whose response is not complete (in request order, as
        # HTTP/1.1 answers): the memory its body holds.
        self._body_memory: deque[Reservation | None] = deque()
        self._memory_waiter: Any = None
        self._drained: list[Callable[[], None]] = []
        refused = self._counter.admit(self._address)
        if refused is not None:
            self._refuse(refused)
            return
        self._counted = True
        # uvicorn arms its keep-alive timer only after a response: a connection that never
        # sends a request would otherwise be held forever.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        peer.lost(self._peer)
        self._disarm()
        if self._send_deadline is not None:
            self._send_deadline.cancel()
            self._send_deadline = None
        self._uncount()
        self._free_memory()
        super().connection_lost(exc)

    def _free_memory(self) -> None:
        if self._memory_waiter is not None:
            self._memory_waiter.cancel()
            self._memory_waiter = None
        while self._body_memory:
            held = self._body_memory.popleft()
            if held is not None:
                held.release()
        self._run_drained()

    def _run_drained(self) -> None:
        callbacks, self._drained = self._drained, []
        for callback in callbacks:
            callback()

    def on_drained(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once what was written so far has left the transport's buffer
        (or the connection is lost)."""
        if self.flow.write_paused and not self.transport.is_closing():
            self._drained.append(callback)
        else:
            self.loop.call_soon(callback)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        # Every request (pipelined ones included) starts here: one send wrapper per
        # request gives the single-write head (HeadWithBody) and, in the zero-copy
        # protocol, the sendfile extension, without copying uvicorn code.
        super()._start_asgi_task(cycle, single_write(app, cycle, self._send_extension))

    # The zero-copy protocol's handler of ``http.response.zerocopysend``; None: not offered.
    _send_extension: SendExtension | None = None

    def on_response_complete(self) -> None:
        if self._body_memory:
            held = self._body_memory.popleft()
            if held is not None:
                held.release()
        super().on_response_complete()

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        if self._memory is None or not self._body_memory or self._declared > 0:
            return
        # A chunked body: its bytes are charged as they arrive; over the budget, reading
        # stops until memory frees.
        held = self._body_memory[-1]
        if held is None:
            return
        held.grow(len(body))
        if self._memory.over and self._memory_waiter is None:
            self._hold_reading(0)

    def _reserve_body(self, declared: int) -> None:
        """Reserve the body this request declares (or start charging a chunked one)."""
        if self._memory is None:
            self._body_memory.append(None)
            return
        if declared <= 0:
            chunked = any(
                name == b"transfer-encoding" and b"chunked" in value.lower()
                for name, value in self.headers
            )
            # No body (None), or a chunked one charged as it arrives.
            self._body_memory.append(Reservation(self._memory, 0) if chunked else None)
            return
        json_body = any(
            name == b"content-type" and b"json" in value.lower() for name, value in self.headers
        )
        size = declared * (JSON_BODY_FACTOR if json_body else 1)
        granted = self._memory.try_reserve(size)
        if granted is not None:
            self._body_memory.append(granted)
            return
        # Over the budget: keep the request, stop reading its body until memory frees
        # (Kafka's queued.max.request.bytes). The body timeout does not run meanwhile.
        self._body_memory.append(Reservation(self._memory, 0))
        self._hold_reading(size)

    def _hold_reading(self, size: int) -> None:
        assert self._memory is not None and isinstance(self.flow, GatedFlowControl)
        self.flow.held = True
        self.flow.pause_reading()
        target = self._body_memory[-1]

        def granted(reservation: Reservation) -> None:
            self._memory_waiter = None
            if self.transport.is_closing() or target not in self._body_memory:
                reservation.release()
                return
            assert target is not None
            target.absorb(reservation)
            assert isinstance(self.flow, GatedFlowControl)
            self.flow.held = False
            if self.cycle is None or len(self.cycle.body) <= 65536:
                self.flow.resume_reading()

        self._memory_waiter = self._memory.reserve_later(size, granted)

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self._counter.release(self._address)

    def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio's contract
        # A client may half-close after its request (shutdown(SHUT_WR)): keep the socket
        # open to answer it, then close (returning a falsy value would close it now).
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False
            return True
        return None

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        if not self._in_body:
            self._head_seen += head_bytes(data)
            if self._head_seen > self._limits.max_header_bytes:
                self._refuse(
                    HeadersTooLarge("line and headers (bytes)", self._limits.max_header_bytes)
                )
                return
        # uvicorn's data_received, with refusals and malformed requests answered as JSON.
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            refused = exc.__context__
            if isinstance(refused, _Refused):
                self._refuse(refused.error)
            else:
                logger.exception("HTTP parser callback failed", exc_info=refused)
                self._refuse(core.InvalidRequest("invalid HTTP/1.1 request"))
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as exc:
            self._refuse(core.InvalidRequest(f"invalid HTTP/1.1 request: {exc}"))
        if self._reading is not self._armed:
            self._sync_deadline()

    def _sync_deadline(self) -> None:
        """After a read: the timer of the part still incomplete, or none."""
        part = self._reading
        if self.transport.is_closing():
            return
        if part is None:
            self._disarm()
        elif part is HEAD:
            self._arm(self._limits.header_timeout_s, HEAD)
        else:
            self._arm(self._limits.body_timeout_s, BODY)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["extensions"] = {DRAINED_EXTENSION: {"on_drained": self.on_drained}}
        self._header_count = 0
        self._reading = HEAD

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self._limits.max_header_count:
            raise _Refused(HeadersTooLarge("header fields", self._limits.max_header_count))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_seen = 0
        if not (self.parser.should_upgrade() and self._should_upgrade()):
            self._declared = declared = self._declared_length()
            if declared > self._limits.max_request_bytes:
                raise _Refused(core.PayloadTooLarge(declared, self._limits.max_request_bytes))
            self._in_body = True
            self._reading = BODY
            super().on_headers_complete()
            self._reserve_body(declared)
            return
        self._reading = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_body = False
        self._reading = None
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        self._reading = None
        self._disarm()
        super().handle_websocket_upgrade()
        if self._peer is not None:
            ws = self.transport.get_protocol()
            ws_lost, key = ws.connection_lost, self._peer

            def forget(exc: Exception | None) -> None:
                peer.lost(key)
                ws_lost(exc)

            ws.connection_lost = forget  # type: ignore[method-assign]
        if not self._counted:
            return
        # The connection now belongs to the WebSocket protocol: it releases the count.
        self._counted = False
        ws = self.transport.get_protocol()
        ws_lost = ws.connection_lost
        counter, address = self._counter, self._address

        def lost(exc: Exception | None) -> None:
            counter.release(address)
            ws_lost(exc)

        ws.connection_lost = lost  # type: ignore[method-assign]

    def pause_writing(self) -> None:
        # The client is not taking what we send: give it send_timeout to start again.
        super().pause_writing()
        if self._send_deadline is None:
            self._send_deadline = self.loop.call_later(
                self._limits.send_timeout_s, self._send_expired
            )

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_deadline is not None:
            self._send_deadline.cancel()
            self._send_deadline = None
        self._run_drained()

    def _send_expired(self) -> None:
        """A reader that stopped reading: abort, so the buffered answer's memory is freed
        now (a close would wait for the buffer to drain) and the app's send returns."""
        self._send_deadline = None
        logger.info(
            "closing a connection from %s that took no bytes for %.0f s",
            self._address,
            self._limits.send_timeout_s,
        )
        self.transport.abort()

    def _declared_length(self) -> int:
        for name, value in self.headers:
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0  # the parser refuses a malformed length itself
        return 0

    def _arm(self, seconds: float, part: str) -> None:
        self._disarm()
        self._armed = part
        self._deadline = self.loop.call_later(seconds, self._expired, seconds, part)

    def _disarm(self) -> None:
        self._armed = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, seconds: float, part: str) -> None:
        self._deadline = None
        self._armed = None
        if self.transport.is_closing():
            return
        if part is BODY and self.flow.read_paused:
            # We stopped reading (the app is busy with the body or a pipelined request):
            # the client is not late, so the clock restarts.
            self._arm(seconds, part)
            return
        self._refuse(RequestReadTimeout(part, round(seconds * 1000)))

    def _refuse(self, error: core.LogbusError) -> None:
        """Answer ``error`` if no response is under way on this connection, then close."""
        self._disarm()
        self._unset_keepalive_if_required()
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:
            response = response_for(error)
            head = [f"HTTP/1.1 {response.status_code} {_reason(response.status_code)}\r\n".encode()]
            head += [name + b": " + value + b"\r\n" for name, value in response.raw_headers]
            self.transport.write(b"".join([*head, b"connection: close\r\n\r\n", response.body]))
        if cycle is not None and not cycle.response_complete:
            # The app may be reading this request's body: it now reads a disconnect, and
            # anything it still sends is dropped.
            cycle.keep_alive = False
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


class ZeroCopyHttpToolsProtocol(GuardedHttpToolsProtocol):
    """The guarded protocol plus the ``http.response.zerocopysend`` extension."""

    def connection_made(  # type: ignore[override]
        self, transport: asyncio.Transport
    ) -> None:
        super().connection_made(transport)
        # TLS encrypts in user space: there is nothing sendfile could skip.
        self._zerocopy_ok = (
            _CAN_WRAP_SEND and not is_ssl(transport) and self._socket_fd(transport) >= 0
        )
        self._send_extension = self._send_file if self._zerocopy_ok else None

    @staticmethod
    def _socket_fd(transport: asyncio.BaseTransport) -> int:
        sock = transport.get_extra_info("socket")
        return -1 if sock is None else int(sock.fileno())

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._zerocopy_ok:
            self.scope["extensions"][ZEROCOPY_EXTENSION] = {}

    async def _send_file(self, cycle: RequestResponseCycle, message: dict[str, Any]) -> None:
        if cycle.flow.write_paused and not cycle.disconnected:
            await cycle.flow.drain()
        if cycle.disconnected:
            return
        if not cycle.response_started:
            raise RuntimeError(
                f"Expected ASGI message 'http.response.start', but got '{ZEROCOPY_EXTENSION}'."
            )
        if cycle.response_complete:
            raise RuntimeError(
                f"Unexpected ASGI message '{ZEROCOPY_EXTENSION}' sent, after response already completed."
            )
        fd = _file_fd(message["file"])
        offset = message.get("offset")
        if offset is None:
            offset = os.lseek(fd, 0, os.SEEK_CUR)
        count = message.get("count")
        if count is None:
            count = os.fstat(fd).st_size - offset
        more_body = bool(message.get("more_body", False))

        if cycle.scope["method"] == "HEAD" or count <= 0:
            pass
        elif cycle.chunked_encoding:
            await self._send_copied(cycle, fd, offset, count)
        else:
            if count > cycle.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            sent = await self._sendfile(cycle, fd, offset, count)
            cycle.expected_content_length -= sent
            if sent < count:
                # The client went away mid-body: what it got is unusable, so
                # the connection must not be reused.
                cycle.disconnected = True
                self.transport.close()
                return
        if not more_body:
            await cycle.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_copied(
        self, cycle: RequestResponseCycle, fd: int, offset: int, count: int
    ) -> None:
        end = offset + count
        while offset < end and not cycle.disconnected:
            n = min(CHUNKED_COPY_BYTES, end - offset)
            chunk = await asyncio.to_thread(pread_exactly, fd, offset, n)
            body: ASGISendEvent = {"type": "http.response.body", "body": chunk, "more_body": True}
            await cycle.send(body)
            COPY_BYTES.inc(n)
            offset += n

    async def _sendfile(
        self, cycle: RequestResponseCycle, in_fd: int, offset: int, count: int
    ) -> int:
        """Send ``count`` bytes of ``in_fd`` from ``offset``; fewer only if the client went away."""
        if self.transport.get_write_buffer_size():
            await self._drain_transport(cycle)
        if cycle.disconnected or self.transport.is_closing():
            return 0
        out_fd = os.dup(self._socket_fd(self.transport))
        position, end = offset, offset + count
        try:
            while position < end and not cycle.disconnected:
                try:
                    n = os.sendfile(
                        out_fd, in_fd, position, min(end - position, SENDFILE_MAX_CALL_BYTES)
                    )
                except BlockingIOError:
                    try:
                        await asyncio.wait_for(self._writable(out_fd), self._limits.send_timeout_s)
                    except TimeoutError:
                        self._send_expired()
                        break
                    continue
                except OSError as exc:
                    if exc.errno in _DISCONNECT_ERRNOS:
                        break
                    raise
                if n == 0:
                    raise RuntimeError(
                        f"file fd={in_fd} ended at {position} before {end}: "
                        "response shorter than its Content-Length"
                    )
                position += n
                if position < end:
                    # Let other requests in between big pieces of one body.
                    await asyncio.sleep(0)
        finally:
            os.close(out_fd)
            ZEROCOPY_BYTES.inc(position - offset)
        return position - offset

    async def _writable(self, fd: int) -> None:
        waiter: asyncio.Future[None] = self.loop.create_future()
        self.loop.add_writer(fd, _wake, waiter)
        try:
            await waiter
        finally:
            self.loop.remove_writer(fd)

    async def _drain_transport(self, cycle: RequestResponseCycle) -> None:
        """Wait until the transport has written everything it buffered (the response head)."""
        transport = self.transport
        low, high = transport.get_write_buffer_limits()
        # With a high-water mark of 0 the transport pauses us while anything is
        # buffered and resumes us exactly when its buffer is empty.
        transport.set_write_buffer_limits(high=0, low=0)
        try:
            while (
                transport.get_write_buffer_size() > 0
                and not cycle.disconnected
                and not transport.is_closing()
            ):
                if self.flow.write_paused:
                    await self.flow.drain()
                else:
                    await asyncio.sleep(0.001)
        finally:
            transport.set_write_buffer_limits(high=high, low=low)


class PlainHttpToolsProtocol(GuardedHttpToolsProtocol):
    """The guarded protocol without the extension: ZeroCopyResponse falls back to pread."""


def _zerocopy_from_env() -> bool:
    return os.environ.get("LOGBUS_ZEROCOPY", "1").strip().lower() not in {"0", "false", "no", "off"}


# uvicorn's own keepalive (a ping every 20 s, 20 s for its pong) where the session timeout
# leaves room for it.
WS_PING_SECONDS = 20.0


def ws_keepalive(settings: Settings) -> tuple[float, float]:
    """(ping interval, pong timeout) in seconds for WebSocket connections.

    A group member over ``/ws/subscribe`` is heartbeated by the broker for as
    long as its socket lives, so the socket's liveness is the member's: a
    frozen client (process stopped, host gone, network cut without a reset)
    must lose its socket, and so its partitions, within the group's session
    timeout, as an HTTP member that stops heartbeating does. Pings are how a
    silent socket proves liveness; a client that answers no ping within the
    interval plus the timeout (at most the session timeout) is cut with 1011.
    Frequent pings with a long wait for each pong: a pong held up by a busy
    client or broker loop does not cost a live member its partitions.
    """
    session = settings.group_consumer_session_timeout_ms / 1000
    return min(WS_PING_SECONDS, session / 4), min(WS_PING_SECONDS, session * 3 / 4)


def build_config(
    settings: Settings,
    *,
    zerocopy: bool | None = None,
    loop: str = "auto",
    log_level: str = "info",
    access_log: bool = False,
) -> uvicorn.Config:
    """A uvicorn config serving ``create_app(settings)`` with zero-copy unless disabled.

    Raises:
        ValueError: a non-loopback bind with no authentication and no
            ``allow_unauthenticated_network`` (:meth:`Settings.check_network_exposure`).
    """
    from app.api import create_app

    settings.check_network_exposure()
    # Large freed blocks go back to the system at once (app/api/memory.py).
    tune_allocator()

    if zerocopy is None:
        zerocopy = _zerocopy_from_env()
    base = ZeroCopyHttpToolsProtocol if zerocopy else PlainHttpToolsProtocol
    limits = ListenerLimits.from_settings(settings)
    if limits.max_connections < settings.max_connections:
        logger.warning(
            "max_connections lowered to %d: half of the file-descriptor limit (the rest is "
            "for segment files)",
            limits.max_connections,
        )
    app = create_app(settings)
    # One counter per listener, bound to a protocol class of its own, with the app's
    # memory budget (request bodies are reserved by the protocol, before the app).
    protocol = type(
        base.__name__,
        (base,),
        {"counter": ConnectionCounter(limits), "memory": app.state.logbus.memory},
    )
    ping_interval, ping_timeout = ws_keepalive(settings)
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http=protocol,
        loop=loop,
        lifespan="on",
        access_log=access_log,
        log_level=log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        # uvicorn hands it to loop.call_later, which takes float seconds.
        timeout_keep_alive=limits.idle_timeout_s,  # type: ignore[arg-type]
        server_header=False,
        ws_ping_interval=ping_interval,
        ws_ping_timeout=ping_timeout,
        # Per-socket zlib state and per-socket compression of shared frames (config.py).
        ws_per_message_deflate=settings.ws_compression,
        **tls_options(settings),
    )


_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


def tls_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's TLS arguments from the ``ssl_*`` settings (empty: plaintext).

    Over TLS, :class:`ZeroCopyHttpToolsProtocol` offers no sendfile extension
    (``is_ssl``), so a binary fetch is read from the segment and written
    through the SSL transport: Python's :mod:`ssl` cannot hand encryption to
    the kernel (kTLS), so there is nothing sendfile could skip.
    """
    if not settings.tls:
        return {}
    return {
        "ssl_certfile": str(settings.ssl_certfile),
        "ssl_keyfile": str(settings.ssl_keyfile),
        "ssl_ca_certs": None if settings.ssl_ca_file is None else str(settings.ssl_ca_file),
        "ssl_cert_reqs": _CLIENT_AUTH[settings.ssl_client_auth],
    }


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def run(
    settings: Settings,
    *,
    zerocopy: bool | None = None,
    loop: str = "auto",
    log_level: str = "info",
    access_log: bool = False,
) -> None:
    """Serve until SIGTERM or SIGINT, then shut down cleanly (LogManager writes .clean_shutdown).

    uvicorn catches both signals, drains connections and runs the lifespan
    shutdown; afterwards it re-raises the signal against the handler that was
    installed before it started. That handler is ours and exits with status 0,
    so a requested stop is a success, not a death by signal. It also covers a
    signal that arrives while the app is still being built.
    """
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_cleanly)
    if zerocopy is None:
        zerocopy = _zerocopy_from_env()
    try:
        settings.check_network_exposure()
    except ValueError as exc:
        print(f"logbus: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    config = build_config(
        settings, zerocopy=zerocopy, loop=loop, log_level=log_level, access_log=access_log
    )
    logger.info(
        "logbus broker %d serving %s on %s (zero-copy fetch %s)",
        settings.broker_id,
        settings.data_dir,
        settings.url,
        "off: TLS" if settings.tls else "on" if zerocopy else "off",
    )
    server = uvicorn.Server(config)
    server.run()
    if not server.started:
        # Startup failed (port in use, recovery error): uvicorn already logged why.
        raise SystemExit(3)
