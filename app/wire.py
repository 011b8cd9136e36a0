"""A minimal HTTP/1.1 keep-alive connection for binary fetches: the SDK consumer,
Spark tasks and follower brokers pulling from their leaders.

Why not httpx here: a fetch answer is megabytes of raw batches, and httpx
reads it in 64 KiB pieces through h11 and joins them, which cost ~1 GB/s of
client CPU on this project's machine (about 110 ns per 100-byte record,
a third of the consumer's budget), while ``recv_into`` one preallocated
buffer of the announced Content-Length runs at 4-9 GB/s. It also lets a
request be written now and its answer read later, which is how the sync
consumer keeps the next fetch in flight without a thread (a reader thread
would fight the decoding thread for the GIL on every ``recv``).

The framing (status line, headers, a body framed by Content-Length or chunked
encoding, or ended by the connection closing) is :mod:`app.common.http1`'s
:class:`~app.common.http1.ResponseReader`, which does no I/O; the three
connections here are the loops that feed it: blocking sockets (TLS through
:mod:`ssl` for ``https`` URLs), asyncio sockets, and asyncio streams for TLS.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from app.common.http1 import MAX_HEAD_BYTES, Response, ResponseReader, parse_head
from app.common.tls import ClientTls, client_context, default_context

_READ_CHUNK = 256 * 1024

__all__ = [
    "MAX_HEAD_BYTES",
    "AsyncConnection",
    "AsyncSocketConnection",
    "AsyncStreamConnection",
    "Endpoint",
    "FetchConnection",
    "Response",
    "async_connection",
    "parse_head",
    "request_bytes",
]


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    tls: bool
    host_header: bytes
    # More request header lines, each ending in CRLF (a follower's credentials).
    extra_headers: bytes = b""
    # TLS options for https (a follower's, from its settings); None: the process default.
    tls_options: ClientTls | None = None

    def ssl_context(self) -> ssl.SSLContext:
        """The verifying client context for this endpoint (:mod:`app.common.tls`)."""
        if self.tls_options is None:
            return default_context()
        return client_context(self.tls_options)

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if tls else 80)
        return cls(host, port, tls, parts.netloc.encode("idna"))


def request_bytes(endpoint: Endpoint, target: str, accept: bytes) -> bytes:
    return (
        b"GET " + target.encode("ascii") + b" HTTP/1.1\r\nHost: " + endpoint.host_header
        + b"\r\nAccept: " + accept + b"\r\nUser-Agent: logbus-python\r\n"
        + endpoint.extra_headers + b"\r\n"
    )  # fmt: skip


class _SocketConnection:
    """A socket (None until the first request) and the framing state of its answers."""

    def __init__(self, endpoint: Endpoint, timeout_s: float) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.sock: socket.socket | None = None
        self._reader = ResponseReader()

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None
                self._reader.reset()


class FetchConnection(_SocketConnection):
    """Blocking connection: ``send`` a GET now, ``read_response`` when the socket is readable."""

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.endpoint.host, self.endpoint.port), self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.endpoint.tls:
            context = self.endpoint.ssl_context()
            sock = context.wrap_socket(sock, server_hostname=self.endpoint.host)
        sock.settimeout(self.timeout_s)
        return sock

    def fileno(self) -> int:
        return -1 if self.sock is None else self.sock.fileno()

    def has_buffered(self) -> bool:
        """Bytes already read (ours or TLS's) that select() cannot see."""
        if self._reader.buffered():
            return True
        return isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0

    def send(self, target: str, accept: bytes = b"application/octet-stream") -> None:
        if self.sock is None:
            self.sock = self._connect()
            self._reader.reset()
        try:
            self.sock.sendall(request_bytes(self.endpoint, target, accept))
        except OSError:
            self.close()
            raise

    def read_response(self) -> Response:
        sock = self.sock
        if sock is None:
            raise ConnectionError("no request was sent")
        reader = self._reader
        try:
            while True:
                step = reader.next()
                if step is None:
                    reader.feed(sock.recv(_READ_CHUNK))
                elif isinstance(step, memoryview):
                    reader.filled(sock.recv_into(step))
                else:
                    break
        except (OSError, ValueError):
            self.close()
            raise
        if not reader.keep_alive:
            self.close()
        return step


class AsyncSocketConnection(_SocketConnection):
    """The asyncio twin of :class:`FetchConnection` for plain TCP.

    ``sock_recv_into`` straight into one buffer of the announced length: the
    stream reader's buffer (extend, then slice and delete) cost ~15% of the
    asyncio consumer's time.
    """

    async def fetch(self, target: str, accept: bytes = b"application/octet-stream") -> Response:
        try:
            return await asyncio.wait_for(self._fetch(target, accept), self.timeout_s)
        except (OSError, ValueError, TimeoutError):
            self.close()
            raise

    async def _fetch(self, target: str, accept: bytes) -> Response:
        loop = asyncio.get_running_loop()
        if self.sock is None:
            sock = socket.socket(socket.AF_INET6 if ":" in self.endpoint.host else socket.AF_INET)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, (self.endpoint.host, self.endpoint.port))
            except BaseException:
                sock.close()
                raise
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = sock
            self._reader.reset()
        sock = self.sock
        await loop.sock_sendall(sock, request_bytes(self.endpoint, target, accept))
        reader = self._reader
        while True:
            step = reader.next()
            if step is None:
                reader.feed(await loop.sock_recv(sock, _READ_CHUNK))
            elif isinstance(step, memoryview):
                reader.filled(await loop.sock_recv_into(sock, step))
            else:
                break
        if not reader.keep_alive:
            self.close()
        return step


class AsyncStreamConnection:
    """The asyncio connection for TLS, over asyncio streams (the loop's sock_* calls take no TLS)."""

    def __init__(self, endpoint: Endpoint, timeout_s: float, max_body: int) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        # The stream buffer must hold a whole answer without pausing the transport
        # over and over (the default limit is 64 KiB).
        self.limit = max(max_body * 2, 1 << 20)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._framing = ResponseReader()

    async def fetch(self, target: str, accept: bytes = b"application/octet-stream") -> Response:
        try:
            return await asyncio.wait_for(self._fetch(target, accept), self.timeout_s)
        except (OSError, ValueError, asyncio.IncompleteReadError, TimeoutError):
            self.close()
            raise

    async def _fetch(self, target: str, accept: bytes) -> Response:
        if self.writer is None:
            ctx = self.endpoint.ssl_context() if self.endpoint.tls else None
            self.reader, self.writer = await asyncio.open_connection(
                self.endpoint.host,
                self.endpoint.port,
                ssl=ctx,
                limit=self.limit,
                server_hostname=self.endpoint.host if ctx else None,
            )
            sock = self.writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._framing.reset()
        assert self.reader is not None and self.writer is not None
        self.writer.write(request_bytes(self.endpoint, target, accept))
        stream, framing = self.reader, self._framing
        while True:
            step = framing.next()
            if step is None:
                framing.feed(await stream.read(_READ_CHUNK))
            elif isinstance(step, memoryview):
                # A stream hands out bytes, not recv_into: one copy, as readexactly made.
                data = await stream.read(len(step))
                step[: len(data)] = data
                framing.filled(len(data))
            else:
                break
        if not framing.keep_alive:
            self.close()
        return step

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None
        self._framing.reset()


AsyncConnection = AsyncSocketConnection | AsyncStreamConnection


def async_connection(endpoint: Endpoint, timeout_s: float, max_body: int) -> AsyncConnection:
    if endpoint.tls:
        return AsyncStreamConnection(endpoint, timeout_s, max_body)
    return AsyncSocketConnection(endpoint, timeout_s)
