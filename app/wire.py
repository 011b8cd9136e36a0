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

Only what the broker's fetch answers need: a status line, headers, a body
framed by Content-Length or chunked encoding, or ended by the connection
closing; TLS through :mod:`ssl` for ``https`` URLs.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024
_READ_CHUNK = 256 * 1024


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    tls: bool
    host_header: bytes
    # More request header lines, each ending in CRLF (a follower's credentials).
    extra_headers: bytes = b""

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if tls else 80)
        return cls(host, port, tls, parts.netloc.encode("idna"))


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytearray


def request_bytes(endpoint: Endpoint, target: str, accept: bytes) -> bytes:
    return (
        b"GET " + target.encode("ascii") + b" HTTP/1.1\r\nHost: " + endpoint.host_header
        + b"\r\nAccept: " + accept + b"\r\nUser-Agent: logbus-python\r\n"
        + endpoint.extra_headers + b"\r\n"
    )  # fmt: skip


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/1."):
        raise ConnectionError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
    status = int(rest.split(" ", 1)[0])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return status, headers


def _no_body(status: int) -> bool:
    return status == 204 or status == 304 or 100 <= status < 200


class FetchConnection:
    """Blocking connection: ``send`` a GET now, ``read_response`` when the socket is readable."""

    def __init__(self, endpoint: Endpoint, timeout_s: float) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.sock: socket.socket | None = None
        self._buf = bytearray()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.endpoint.host, self.endpoint.port), self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.endpoint.tls:
            context = ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=self.endpoint.host)
        sock.settimeout(self.timeout_s)
        return sock

    def fileno(self) -> int:
        return -1 if self.sock is None else self.sock.fileno()

    def has_buffered(self) -> bool:
        """Bytes already read (ours or TLS's) that select() cannot see."""
        if self._buf:
            return True
        return isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0

    def send(self, target: str, accept: bytes = b"application/octet-stream") -> None:
        if self.sock is None:
            self.sock = self._connect()
            self._buf.clear()
        try:
            self.sock.sendall(request_bytes(self.endpoint, target, accept))
        except OSError:
            self.close()
            raise

    def _recv_more(self) -> None:
        assert self.sock is not None
        chunk = self.sock.recv(_READ_CHUNK)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        self._buf += chunk

    def read_response(self) -> Response:
        try:
            return self._read_response()
        except (OSError, ValueError):
            self.close()
            raise

    def _read_response(self) -> Response:
        sock = self.sock
        if sock is None:
            raise ConnectionError("no request was sent")
        buf = self._buf
        while (end := buf.find(b"\r\n\r\n")) < 0:
            if len(buf) > MAX_HEAD_BYTES:
                raise ConnectionError("response head too large")
            self._recv_more()
            buf = self._buf
        status, headers = parse_head(bytes(buf[:end]))
        del buf[: end + 4]
        if _no_body(status):
            body = bytearray()
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._read_chunked()
        elif "content-length" in headers:
            body = self._read_exactly(int(headers["content-length"]))
        else:
            body = self._read_to_close()
        if headers.get("connection", "").lower() == "close":
            self.close()
        return Response(status, headers, body)

    def _read_exactly(self, n: int) -> bytearray:
        assert self.sock is not None
        buf = self._buf
        if len(buf) >= n:
            body = buf[:n]
            del buf[:n]
            return body
        body = bytearray(n)
        view = memoryview(body)
        have = len(buf)
        view[:have] = buf
        buf.clear()
        recv_into = self.sock.recv_into
        while have < n:
            got = recv_into(view[have:])
            if not got:
                raise ConnectionError(f"the broker closed the connection {n - have} bytes early")
            have += got
        return body

    def _read_line(self) -> bytes:
        while (end := self._buf.find(b"\r\n")) < 0:
            self._recv_more()
        line = bytes(self._buf[:end])
        del self._buf[: end + 2]
        return line

    def _read_chunked(self) -> bytearray:
        body = bytearray()
        while True:
            size = int(self._read_line().split(b";", 1)[0], 16)
            if size == 0:
                while self._read_line():  # trailers, up to the empty line
                    pass
                return body
            body += self._read_exactly(size)
            self._read_line()

    def _read_to_close(self) -> bytearray:
        assert self.sock is not None
        body = self._buf
        self._buf = bytearray()
        while chunk := self.sock.recv(_READ_CHUNK):
            body += chunk
        self.close()
        return body

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None
                self._buf.clear()


class AsyncSocketConnection:
    """The asyncio twin of :class:`FetchConnection` for plain TCP.

    ``sock_recv_into`` straight into one buffer of the announced length: the
    stream reader's buffer (extend, then slice and delete) cost ~15% of the
    asyncio consumer's time.
    """

    def __init__(self, endpoint: Endpoint, timeout_s: float) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.sock: socket.socket | None = None
        self._buf = bytearray()

    async def fetch(self, target: str, accept: bytes = b"application/octet-stream") -> Response:
        try:
            return await asyncio.wait_for(self._fetch(target, accept), self.timeout_s)
        except (OSError, ValueError, TimeoutError):
            self.close()
            raise

    async def _recv_more(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        chunk = await loop.sock_recv(sock, _READ_CHUNK)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        self._buf += chunk

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
            self._buf.clear()
        sock = self.sock
        await loop.sock_sendall(sock, request_bytes(self.endpoint, target, accept))
        while (end := self._buf.find(b"\r\n\r\n")) < 0:
            if len(self._buf) > MAX_HEAD_BYTES:
                raise ConnectionError("response head too large")
            await self._recv_more(loop, sock)
        status, headers = parse_head(bytes(self._buf[:end]))
        del self._buf[: end + 4]
        if _no_body(status):
            body = bytearray()
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = bytearray()
            while True:
                size = int((await self._line(loop, sock)).split(b";", 1)[0], 16)
                if size == 0:
                    while await self._line(loop, sock):
                        pass
                    break
                body += await self._exactly(loop, sock, size)
                await self._line(loop, sock)
        elif "content-length" in headers:
            body = await self._exactly(loop, sock, int(headers["content-length"]))
        else:
            body = self._buf
            self._buf = bytearray()
            while chunk := await loop.sock_recv(sock, _READ_CHUNK):
                body += chunk
            self.close()
        if headers.get("connection", "").lower() == "close":
            self.close()
        return Response(status, headers, body)

    async def _line(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
        while (end := self._buf.find(b"\r\n")) < 0:
            await self._recv_more(loop, sock)
        line = bytes(self._buf[:end])
        del self._buf[: end + 2]
        return line

    async def _exactly(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int
    ) -> bytearray:
        buf = self._buf
        if len(buf) >= n:
            body = buf[:n]
            del buf[:n]
            return body
        body = bytearray(n)
        view = memoryview(body)
        have = len(buf)
        view[:have] = buf
        buf.clear()
        while have < n:
            got = await loop.sock_recv_into(sock, view[have:])
            if not got:
                raise ConnectionError(f"the broker closed the connection {n - have} bytes early")
            have += got
        return body

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None
                self._buf.clear()


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

    async def fetch(self, target: str, accept: bytes = b"application/octet-stream") -> Response:
        try:
            return await asyncio.wait_for(self._fetch(target, accept), self.timeout_s)
        except (OSError, ValueError, asyncio.IncompleteReadError, TimeoutError):
            self.close()
            raise

    async def _fetch(self, target: str, accept: bytes) -> Response:
        if self.writer is None:
            ctx = ssl.create_default_context() if self.endpoint.tls else None
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
        assert self.reader is not None and self.writer is not None
        self.writer.write(request_bytes(self.endpoint, target, accept))
        reader = self.reader
        head = await reader.readuntil(b"\r\n\r\n")
        status, headers = parse_head(head[:-4])
        if _no_body(status):
            body = bytearray()
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = bytearray()
            while True:
                line = await reader.readuntil(b"\r\n")
                size = int(line.split(b";", 1)[0], 16)
                if size == 0:
                    while await reader.readuntil(b"\r\n") != b"\r\n":
                        pass
                    break
                body += await reader.readexactly(size)
                await reader.readexactly(2)
        elif "content-length" in headers:
            body = bytearray(await reader.readexactly(int(headers["content-length"])))
        else:
            body = bytearray(await reader.read())
            self.close()
        if headers.get("connection", "").lower() == "close":
            self.close()
        return Response(status, headers, body)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


AsyncConnection = AsyncSocketConnection | AsyncStreamConnection


def async_connection(endpoint: Endpoint, timeout_s: float, max_body: int) -> AsyncConnection:
    if endpoint.tls:
        return AsyncStreamConnection(endpoint, timeout_s, max_body)
    return AsyncSocketConnection(endpoint, timeout_s)
