"""One Kafka client connection on asyncio: frames in, responses out, records by sendfile.

:class:`KafkaConnection` is an ``asyncio.Protocol``: ``data_received`` feeds the
sans-I/O :class:`~app.kafka.frames.FrameReader`; complete frames queue for one task that
handles them in order, one at a time (Kafka's rule, so responses leave in request order
and a long-poll fetch holds only its own connection). While a request is being handled
and more are queued, reading pauses (Kafka mutes the channel likewise): a connection
holds at most ``MAX_QUEUED`` waiting frames or one maximum frame's worth of them, plus
the partial frame being read. Those bytes are held from the broker's memory budget
(:class:`~app.api.memory.MemoryBudget`, Kafka's ``queued.max.request.bytes``, shared with
HTTP request bodies): a frame's declared size is reserved when its size prefix arrives,
and while the budget cannot grant it the connection stops reading until memory frees;
each frame's bytes are given back once it is answered.

A response is parts (:mod:`app.kafka.encode`): bytes go through the transport; file
slices leave with ``os.sendfile`` on a ``dup`` of the socket's descriptor, after the
transport's buffer has drained (bytes written to the fd directly would overtake it), as
``app/api/zerocopy_protocol.py`` does for HTTP: the dup keeps the number ours while we
wait for writability (``loop.add_writer`` is refused on a transport's own fd).

Over TLS (``kafka_security_protocol`` SSL or SASL_SSL) sendfile cannot apply (the
kernel would write the file's bytes unencrypted): file slices are read with ``pread``
and written through the TLS transport instead (one copy into Python, one by OpenSSL).

Security (:mod:`app.kafka.security`): on a SASL listener, any request other than
ApiVersions, SaslHandshake and SaslAuthenticate before a successful authentication
closes the connection with a log line (Kafka's rule); a failed authentication is
answered SASL_AUTHENTICATION_FAILED, then the connection closes. After a v0
SaslHandshake the next frames are bare SASL tokens, answered bare.

Client quotas (the broker's, :mod:`app.core.security.quotas`, the same manager and the
same entities as HTTP): the user is the principal's name (``ANONYMOUS`` unauthenticated),
the client id the request header's. Every request counts 1 toward ``request_rate``, a
Produce frame's bytes toward ``producer_byte_rate``, a Fetch answer's bytes (its records
too) toward ``consumer_byte_rate``. As Kafka does (KIP-219), nothing is refused: an answer
over quota carries the throttle time in its ``throttle_time_ms`` and is sent at once, and
the connection then takes no next request until the throttle time has passed (its reads
pause once the queue is full), so a client that ignores the field is slowed all the same.

Bad input (a frame the reader refuses, a request that does not parse, an API or version
not served other than ApiVersions' fallback) closes the connection with one log line;
nothing raises out of the protocol. Idle connections (no request for
``connections.max.idle.ms``) are closed by a timer handle that each request re-arms.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import errno
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from app.api.memory import Reservation
from app.common.errors import LogbusError
from app.core.security.quotas import FETCH as FETCH_QUOTA
from app.core.security.quotas import PRODUCE as PRODUCE_QUOTA
from app.core.security.quotas import REQUEST as REQUEST_QUOTA
from app.kafka.apis import HANDLERS, Context, unsupported_api_versions
from app.kafka.apis.sasl import step as sasl_step
from app.kafka.encode import Part, encode_response, error_code
from app.kafka.frames import FrameError, FrameReader, Request, decode_request
from app.kafka.versions import (
    API_VERSIONS,
    FETCH,
    NAMES,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)

if TYPE_CHECKING:
    from app.core.log.fileslice import FileSlice

log = logging.getLogger(__name__)

# Reading pauses while this many requests wait behind the one being handled (librdkafka
# keeps up to 5 in flight per connection with idempotence, so they never wait on us), or
# while the waiting ones hold a whole maximum frame's worth of bytes.
MAX_QUEUED = 8
SENDFILE_MAX_CALL_BYTES = 8 * 1024 * 1024
# What a SASL listener serves before authentication (Kafka's rule); anything else closes.
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
# Over TLS records cannot leave by sendfile (the kernel would send them unencrypted):
# they are read from the segment in pieces this large and written through the transport.
TLS_READ_BYTES = 1024 * 1024
_DISCONNECT_ERRNOS = frozenset(
    {errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN, errno.ESHUTDOWN}
)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class KafkaConnection(asyncio.Protocol):
    """The Kafka protocol on one accepted connection (event-loop only)."""

    def __init__(
        self,
        ctx: Context,
        max_frame_bytes: int,
        idle_s: float,
        on_open: Callable[[KafkaConnection], bool],
        on_close: Callable[[KafkaConnection], None],
    ) -> None:
        """``on_open`` is asked once connected (False: refuse, close at once);
        ``on_close`` is told once the connection is gone."""
        self._ctx = ctx
        self._reader = FrameReader(max_frame_bytes)
        self._idle_s = idle_s
        self._on_open = on_open
        self._on_close = on_close
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued_bytes = 0
        self._max_frame = max_frame_bytes
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._paused = False
        self._memory = ctx.state.memory
        # What this connection holds of the budget: queued frames and the declared size of
        # the one being read. ``_memory_wait`` is set while reading waits for a grant.
        self._held = Reservation(self._memory, 0)
        self._memory_wait: Any = None
        self.peer = "?"
        self.ip = ""
        self._tls = False

    # -- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast("asyncio.Transport", transport)
        peer = transport.get_extra_info("peername")
        self.ip = str(peer[0]) if peer else ""
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        session = self._ctx.session
        session.host = self.ip or "*"
        security = self._ctx.security
        self._tls = transport.get_extra_info("ssl_object") is not None
        if security is not None:
            session.authenticated = not security.sasl
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if der and not security.sasl:
                # Kafka's SSL principal (ssl.principal.mapping.rules=DEFAULT): the
                # verified client certificate's subject DN, as HTTP names it.
                from app.kafka.security import subject_name

                session.principal = f"User:{subject_name(der)}"
        if not self._on_open(self):
            self._transport.close()
            return
        self._task = asyncio.get_running_loop().create_task(self._serve())
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._reader.feed(data)
        except FrameError as exc:
            self._abort(str(exc))
            return
        if frames:
            self._queue.extend(frames)
            self._queued_bytes += sum(len(f) for f in frames)
            self._wake.set()
        self._charge()
        self._update_reading()

    def _charge(self) -> None:
        """Hold the queued frames and the declared frame being read from the budget."""
        held = self._held
        in_memory = self._queued_bytes
        if held.size < in_memory:
            # Already read (whole frames that came in one read): held, granted or not.
            held.grow(in_memory - held.size)
        wanted = in_memory + self._reader.pending
        if held.size >= wanted or self._memory_wait is not None:
            return
        granted = self._memory.try_reserve(wanted - held.size)
        if granted is not None:
            held.absorb(granted)
            return

        def on_grant(reservation: Reservation) -> None:
            self._memory_wait = None
            if self._transport is None:
                reservation.release()
                return
            held.absorb(reservation)
            self._update_reading()

        # Over the budget: stop reading this frame until memory frees.
        self._memory_wait = self._memory.reserve_later(wanted - held.size, on_grant)

    def _over_queue(self) -> bool:
        return len(self._queue) > MAX_QUEUED or self._queued_bytes >= self._max_frame

    def _update_reading(self) -> None:
        """Pause reading while the queue is full or memory is awaited; resume after."""
        if self._transport is None:
            return
        hold = self._over_queue() or self._memory_wait is not None
        if hold and not self._paused:
            self._paused = True
            self._transport.pause_reading()
        elif not hold and self._paused:
            self._paused = False
            self._transport.resume_reading()

    def eof_received(self) -> bool | None:
        return False  # close: a client that stops sending has nothing more to ask

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._memory_wait is not None:
            self._memory_wait.cancel()
            self._memory_wait = None
        self._held.release()
        self._memory.connection_closed()
        self._drained.set()
        if self._idle is not None:
            self._idle.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._on_close(self)

    def pause_writing(self) -> None:
        self._drained.clear()

    def resume_writing(self) -> None:
        self._drained.set()

    # -- requests ---------------------------------------------------------------------
    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _abort(self, why: str) -> None:
        log.warning("kafka connection from %s closed: %s", self.peer, why)
        if self._transport is not None:
            self._transport.abort()

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        loop = asyncio.get_running_loop()
        self._idle = loop.call_later(self._idle_s, self._expire)

    def _expire(self) -> None:
        if self._transport is not None:
            log.info("kafka connection from %s idle for %.0f s: closed", self.peer, self._idle_s)
            self._transport.close()

    async def _serve(self) -> None:
        try:
            while self._transport is not None:
                if not self._queue:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                frame = self._queue.popleft()
                self._queued_bytes -= len(frame)
                self._update_reading()
                # Idle means no request in progress: a long poll is not idleness.
                if self._idle is not None:
                    self._idle.cancel()
                answered = await self._handle(frame)
                # The frame is answered: its bytes go back to the budget.
                del frame
                self._held.shrink(self._queued_bytes + self._reader.pending)
                if not answered:
                    return
                self._arm_idle()
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: log it and drop this connection, never the broker
            log.exception("kafka connection from %s failed", self.peer)
            if self._transport is not None:
                self._transport.abort()

    async def _handle(self, frame: bytes) -> bool:
        """Answer one frame; False when the connection must close."""
        session = self._ctx.session
        if session.raw_tokens:
            return await self._raw_token(frame)
        try:
            request = decode_request(frame)
        except FrameError as exc:
            self._abort(str(exc))
            return False
        session.client_id = (request.client_id or "")[:255]
        if not session.authenticated and request.api_key not in BEFORE_AUTHENTICATION:
            name = NAMES.get(request.api_key, f"api key {request.api_key}")
            self._abort(f"{name} before SASL authentication (this listener requires SASL)")
            return False
        expires = session.expires_at
        if (
            expires is not None
            and request.api_key not in BEFORE_AUTHENTICATION
            and time.time() >= expires
        ):
            # KIP-368: the session outlived its lifetime without re-authenticating.
            name = NAMES.get(request.api_key, f"api key {request.api_key}")
            log.warning(
                "kafka connection from %s closed: %s after its SASL session expired "
                "(kafka_connections_max_reauth_ms; the client did not re-authenticate)",
                self.peer,
                name,
            )
            self.close()
            return False
        handler = HANDLERS.get(request.api_key)
        if request.body is None or handler is None:
            if request.api_key == API_VERSIONS:
                await self._send(
                    encode_response(request.correlation_id, unsupported_api_versions())
                )
                return True
            name = NAMES.get(request.api_key, f"api key {request.api_key}")
            self._abort(f"{name} v{request.api_version} is not served (see ApiVersions)")
            return False
        quotas = self._ctx.quotas
        if quotas is None or not quotas.manager.config:
            response = await self._answer(request)
            if response is not None:
                await self._send(encode_response(request.correlation_id, response))
        else:
            await self._answer_within_quota(request, len(frame))
        if session.close_after:
            self.close()  # a failed authentication: answered, then closed (Kafka's way)
            return False
        return True

    async def _answer_within_quota(self, request: Request, frame_bytes: int) -> None:
        """Answer ``request`` measured against the client's quotas (module docstring)."""
        assert self._ctx.quotas is not None
        quotas = self._ctx.quotas.manager
        user = self._ctx.session.principal.partition(":")[2]
        client = self._ctx.session.client_id
        throttle = quotas.record(REQUEST_QUOTA, user, client, 1.0)
        if request.api_key == PRODUCE:
            throttle = max(throttle, quotas.record(PRODUCE_QUOTA, user, client, frame_bytes))
        response = await self._answer(request)
        if response is None:
            return
        parts = encode_response(request.correlation_id, response)
        if request.api_key == FETCH:
            size = sum(len(p) if isinstance(p, bytes) else p.length for p in parts)
            throttle = max(throttle, quotas.record(FETCH_QUOTA, user, client, size))
        if throttle > 0.0 and hasattr(response, "throttle_time"):
            ms = datetime.timedelta(milliseconds=int(throttle * 1000 + 0.5))
            response = dataclasses.replace(response, throttle_time=ms)  # type: ignore[type-var]
            parts = encode_response(request.correlation_id, response)
        await self._send(parts)
        if throttle > 0.0:
            # Muted (KIP-219): the next request waits; reading pauses once the queue fills.
            await asyncio.sleep(throttle)

    async def _raw_token(self, token: bytes) -> bool:
        """A bare SASL token after a v0 SaslHandshake: answered as a bare, size-prefixed
        token; a failure closes the connection without an answer (Kafka's v0 way)."""
        try:
            answer = await sasl_step(self._ctx, token)
        except LogbusError:
            self.close()
            return False
        await self._send([len(answer).to_bytes(4, "big") + answer])
        return True

    async def _answer(self, request: Request) -> object:
        try:
            return await HANDLERS[request.api_key](self._ctx, request.body, request.api_version)
        except LogbusError as exc:
            # Errors are answered per partition by the handlers; one escaping here means
            # the whole request failed (the broker is stopping): there is no per-API place
            # for it in every response, so close as Kafka does on a request it cannot answer.
            log.info(
                "kafka %s from %s failed: %s (%s)",
                NAMES.get(request.api_key),
                self.peer,
                exc,
                error_code(exc).name,
            )
            self.close()
            return None

    async def _send(self, parts: list[Part]) -> None:
        transport = self._transport
        if transport is None:
            return
        for part in parts:
            if isinstance(part, bytes):
                transport.write(part)
                continue
            sent = await (self._send_read(part) if self._tls else self._sendfile(part))
            if not sent:
                return
        if transport.get_write_buffer_size():
            # Back-pressure: do not take the next request while the client reads slowly.
            await self._drained.wait()

    async def _wait_empty(self, transport: asyncio.Transport) -> None:
        """Until the transport has written everything it buffered."""
        low, high = transport.get_write_buffer_limits()
        # A high-water mark of 0 pauses us while anything is buffered and resumes us
        # exactly when the buffer is empty.
        transport.set_write_buffer_limits(high=0, low=0)
        try:
            while transport.get_write_buffer_size() and not transport.is_closing():
                if not self._drained.is_set():
                    await self._drained.wait()  # paused: resumed once the buffer is empty
                else:
                    # A loop that does not pause on a lowered mark at once: poll briefly.
                    await asyncio.sleep(0.001)
        finally:
            if not transport.is_closing():
                transport.set_write_buffer_limits(high=high, low=low)

    async def _send_read(self, piece: FileSlice) -> bool:
        """``piece`` through a TLS transport: read from the file and written (sendfile
        cannot encrypt), in TLS_READ_BYTES pieces, waiting on back-pressure between them;
        False if the client went away."""
        position, end = piece.position, piece.position + piece.length
        while position < end:
            transport = self._transport
            if transport is None or transport.is_closing():
                return False
            data = os.pread(piece.fd, min(end - position, TLS_READ_BYTES), position)
            if not data:
                self._abort(f"segment file ended at {position} before {end}")
                return False
            transport.write(data)
            position += len(data)
            if position < end and transport.get_write_buffer_size():
                await self._drained.wait()
        return True

    async def _sendfile(self, piece: FileSlice) -> bool:
        """``piece`` into the socket with ``os.sendfile``; False if the client went away."""
        transport = self._transport
        if transport is None:
            return False
        if transport.get_write_buffer_size():
            await self._wait_empty(transport)
        sock = transport.get_extra_info("socket")
        if sock is None or transport.is_closing():
            return False
        loop = asyncio.get_running_loop()
        out_fd = os.dup(sock.fileno())
        position, end = piece.position, piece.position + piece.length
        try:
            while position < end:
                try:
                    n = os.sendfile(
                        out_fd, piece.fd, position, min(end - position, SENDFILE_MAX_CALL_BYTES)
                    )
                except BlockingIOError:
                    waiter: asyncio.Future[None] = loop.create_future()
                    loop.add_writer(out_fd, _wake, waiter)
                    try:
                        await waiter
                    finally:
                        loop.remove_writer(out_fd)
                    continue
                except OSError as exc:
                    if exc.errno in _DISCONNECT_ERRNOS:
                        return False
                    raise
                if n == 0:  # the file is shorter than the slice: the frame cannot be finished
                    self._abort(f"segment file ended at {position} before {end}")
                    return False
                position += n
                if position < end:
                    await asyncio.sleep(0)  # other connections between big pieces
        finally:
            os.close(out_fd)
        return True
