"""The listener's HTTP protocol: uvicorn's httptools protocol under the listener's limits.

:class:`GuardedHttpToolsProtocol` enforces, before a request reaches the app, the limits
of :mod:`app.api.limits`: connections in total and per address, idle, header and body
timeouts, the size and count of headers and the declared body size. The head's size is
counted as bytes arrive, before the parser buffers them, so a huge header line costs at
most ``max_header_bytes`` (plus one read) of memory. Request bodies are reserved from the
app's memory budget (:mod:`app.api.memory`) as they are declared or arrive; over the
budget, reading stops until memory frees. Every request is answered through
:func:`app.api.single_write.single_write` (head and body in one write). Refusals are
answered as JSON with their Kafka error name, then the connection is closed.
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

import httptools
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from app.api import peer
from app.api.errors import response_for
from app.api.limits import (
    ConnectionCounter,
    HeadersTooLarge,
    ListenerLimits,
    RequestReadTimeout,
    head_bytes,
)
from app.api.memory import DRAINED_EXTENSION, JSON_BODY_FACTOR, MemoryBudget, Reservation
from app.api.single_write import SendExtension, single_write
from app.common import errors as core

# uvicorn configures this logger; ours would print nothing without extra setup.
logger = logging.getLogger("uvicorn.error")

# The parts of a request a read timeout names (RequestReadTimeout), compared by identity.
HEAD = "line and headers"
BODY = "body"


class _Refused(Exception):
    """Raised from a parser callback to stop parsing and answer ``error``."""

    def __init__(self, error: core.LogbusError) -> None:
        super().__init__(error.message)
        self.error = error


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
        # sends a request would otherwise be held forever. Idle from now.
        self._idle_since = self.loop.time()
        self._idle_timer = self.loop.call_later(self.timeout_keep_alive, self._idle_check)

    # -- the idle (keep-alive) timer ------------------------------------------------------
    #
    # uvicorn cancels its keep-alive timer on every read and arms a new one after every
    # response: a call_later and a cancel per request (and a heap of cancelled timers) on
    # a busy keep-alive connection. Here a connection has at most one idle timer, armed
    # when it goes idle with none armed; a request only marks the connection busy
    # (``_idle_since`` None) and its answer idle again (the loop's clock). When the timer
    # fires it closes the connection if it has been idle for the whole timeout, else it
    # re-arms for what is left of it (or not at all while busy). Same deadline as
    # uvicorn's: ``timeout_keep_alive`` after the last answer, or after connect.

    _idle_since: float | None = None
    _idle_timer: asyncio.TimerHandle | None = None

    def _unset_keepalive_if_required(self) -> None:
        # Called by uvicorn (and here) on every read: the connection is busy.
        self._idle_since = None

    def _idle_check(self) -> None:
        self._idle_timer = None
        since = self._idle_since
        if since is None or self.transport.is_closing():
            return  # busy: the next answer arms a timer again
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._idle_timer = self.loop.call_later(left, self._idle_check)
        else:
            self.timeout_keep_alive_handler()

    def _stop_idle_timer(self) -> None:
        self._idle_since = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        peer.lost(self._peer)
        self._disarm()
        self._stop_idle_timer()
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
        # uvicorn's on_response_complete, with the idle timer above instead of its
        # call_later per answer.
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self._idle_timer is None:
            self._idle_timer = self.loop.call_later(self.timeout_keep_alive, self._idle_check)

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
        # Not in the middle of a body, which can then never complete (a client killed
        # while sending): closing now tells the app (http.disconnect) and frees the body's
        # reservation, where waiting held both until the body timeout (120 s by
        # default), and a broker stop for its graceful 5 s.
        if self._in_body:
            return None
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
        self._stop_idle_timer()
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
        self._stop_idle_timer()
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
