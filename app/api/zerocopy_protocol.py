"""The listener's protocol with zero-copy fetch: file bytes sent with ``os.sendfile``.

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
"""

from __future__ import annotations

import asyncio
import errno
import os
from typing import Any

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.utils import is_ssl

from app.api.protocol import GuardedHttpToolsProtocol
from app.api.zerocopy import COPY_BYTES, ZEROCOPY_BYTES, ZEROCOPY_EXTENSION, pread_exactly

# One sendfile call moves at most this much before we let other connections
# run: a fast loopback reader can drain hundreds of MB without ever giving
# EAGAIN, which would otherwise hold the event loop for the whole body.
SENDFILE_MAX_CALL_BYTES = 8 * 1024 * 1024
# Chunked bodies need framing between the file bytes; ZeroCopyResponse always
# sets Content-Length, so this path is only for other apps and is copied.
CHUNKED_COPY_BYTES = 1024 * 1024

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
