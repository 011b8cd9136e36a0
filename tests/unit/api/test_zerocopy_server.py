"""The zero-copy uvicorn protocol against real sockets, on asyncio and on uvloop.

The server runs in a thread of this process so the test can read the
prometheus counters directly; the broker-level proof is in tests/e2e.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.api.memory import DRAINED_EXTENSION
from app.api.zerocopy import ZEROCOPY_EXTENSION, ZeroCopyResponse
from app.api.zerocopy_protocol import PlainHttpToolsProtocol, ZeroCopyHttpToolsProtocol

SIZE = 24 * 1024 * 1024 + 7


@dataclass(frozen=True, slots=True)
class Slice:
    fd: int
    position: int
    length: int


@dataclass
class Served:
    url: str
    port: int
    data: bytes


def _make_app(fd: int) -> Starlette:
    async def data(request: Request) -> Response:
        offset = int(request.query_params.get("offset", 0))
        length = int(request.query_params.get("length", SIZE - offset))
        parts = int(request.query_params.get("parts", 1))
        step = length // parts
        slices = [
            Slice(fd, offset + i * step, step if i < parts - 1 else length - step * (parts - 1))
            for i in range(parts)
        ]
        return ZeroCopyResponse(slices, headers={"x-parts": str(parts)})

    async def plain(request: Request) -> Response:
        return Response(b"p" * int(request.query_params["length"]))

    async def extensions(request: Request) -> Response:
        return JSONResponse(sorted(request.scope.get("extensions", {})))

    class Chunked:
        # No Content-Length: uvicorn frames the body as chunks, which the
        # protocol cannot interleave with sendfile, so it must copy instead.
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send(
                {
                    "type": ZEROCOPY_EXTENSION,
                    "file": fd,
                    "offset": 5,
                    "count": 1000,
                    "more_body": False,
                }
            )

    return Starlette(
        routes=[
            Route("/data", data, methods=["GET", "HEAD"]),
            Route("/plain", plain),
            Route("/extensions", extensions),
            Route("/chunked", Chunked()),
        ]
    )


def _serve(app: Starlette, protocol: type[Any], loop: str) -> Iterator[tuple[int, uvicorn.Server]]:
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, http=protocol, loop=loop, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield port, server
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, bytes]]:
    data = os.urandom(SIZE)
    path: Path = tmp_path_factory.mktemp("zc") / "00000000000000000000.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd, data
    finally:
        os.close(fd)


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def served(request: pytest.FixtureRequest, data_file: tuple[int, bytes]) -> Iterator[Served]:
    fd, data = data_file
    for port, _ in _serve(_make_app(fd), ZeroCopyHttpToolsProtocol, request.param):
        yield Served(f"http://127.0.0.1:{port}", port, data)


def _sent() -> float:
    return REGISTRY.get_sample_value("logbus_zerocopy_bytes_total") or 0.0


def _copied() -> float:
    return REGISTRY.get_sample_value("logbus_fetch_copy_bytes_total") or 0.0


def _count_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Count calls of a ZeroCopyHttpToolsProtocol coroutine method, to prove a path ran."""
    calls: list[int] = []
    original = getattr(ZeroCopyHttpToolsProtocol, name)

    async def counted(self: Any, *args: Any) -> Any:
        calls.append(1)
        return await original(self, *args)

    monkeypatch.setattr(ZeroCopyHttpToolsProtocol, name, counted)
    return calls


def _read_response(sock: socket.socket, pending: bytearray) -> tuple[bytes, bytes]:
    """One Content-Length response from ``sock``; ``pending`` carries bytes read past it."""
    while b"\r\n\r\n" not in pending:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the response head"
        pending += chunk
    end = pending.index(b"\r\n\r\n") + 4
    head = bytes(pending[:end])
    del pending[:end]
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(pending) < length:
        chunk = sock.recv(1 << 20)
        assert chunk, f"connection closed after {len(pending)} of {length} body bytes"
        pending += chunk
    body = bytes(pending[:length])
    del pending[:length]
    return head, body


def test_extension_is_offered(served: Served) -> None:
    # Beside the listener's own drained-callback extension (app/api/memory.py).
    assert httpx.get(f"{served.url}/extensions").json() == [ZEROCOPY_EXTENSION, DRAINED_EXTENSION]


def test_bytes_are_exact_and_counted_and_keep_alive_survives(served: Served) -> None:
    before = _sent()
    copied = _copied()
    with httpx.Client(base_url=served.url) as client:
        for offset, length, parts in [(0, SIZE, 1), (3, 5_000_000, 3), (SIZE - 1, 1, 1)]:
            r = client.get("/data", params={"offset": offset, "length": length, "parts": parts})
            assert r.status_code == 200
            assert r.headers["content-length"] == str(length)
            assert r.content == served.data[offset : offset + length]
        # Ordinary responses on the same connection still work after zero-copy ones.
        assert client.get("/plain", params={"length": 10}).content == b"p" * 10
    assert _sent() - before == SIZE + 5_000_000 + 1
    assert _copied() == copied


def test_one_connection_many_requests(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        pending = bytearray()
        for i in range(20):
            sock.sendall(f"GET /data?offset={i}&length=1000 HTTP/1.1\r\nhost: t\r\n\r\n".encode())
            head, body = _read_response(sock, pending)
            assert head.startswith(b"HTTP/1.1 200")
            assert body == served.data[i : i + 1000]


def test_pipelined_requests_keep_their_order(served: Served) -> None:
    requests = b"".join(
        f"GET /data?offset={i * 100_000}&length={100_000 + i}&parts=2 HTTP/1.1\r\nhost: t\r\n\r\n".encode()
        for i in range(5)
    )
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.sendall(requests)
        pending = bytearray()
        for i in range(5):
            _, body = _read_response(sock, pending)
            assert body == served.data[i * 100_000 : i * 100_000 + 100_000 + i]


def test_head_is_sent_before_file_bytes_behind_a_full_buffer(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small socket buffers and a client that is not reading leave part of a
    copied body (under the transport's high-water mark, so nothing pauses) in
    the transport's buffer when the next response's head is queued behind
    it. The protocol must wait for both to go out before its sendfile."""
    original = ZeroCopyHttpToolsProtocol.connection_made

    def small_send_buffer(self: ZeroCopyHttpToolsProtocol, transport: Any) -> None:
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        original(self, transport)

    monkeypatch.setattr(ZeroCopyHttpToolsProtocol, "connection_made", small_send_buffer)
    buffer_waits = _count_calls(monkeypatch, "_drain_transport")
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        sock.sendall(
            b"GET /plain?length=60000 HTTP/1.1\r\nhost: t\r\n\r\n"
            b"GET /data?offset=11&length=200000 HTTP/1.1\r\nhost: t\r\n\r\n"
        )
        time.sleep(0.2)
        pending = bytearray()
        _, first = _read_response(sock, pending)
        assert first == b"p" * 60_000
        head, second = _read_response(sock, pending)
        assert head.startswith(b"HTTP/1.1 200")
        assert second == served.data[11:200_011]
    assert buffer_waits


def test_reader_that_stalls_gets_every_byte(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The socket fills while the client sleeps, so sendfile hits EAGAIN and
    the protocol has to wait for writability before it goes on."""
    writability_waits = _count_calls(monkeypatch, "_writable")
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.sendall(b"GET /data HTTP/1.1\r\nhost: t\r\n\r\n")
        pending = bytearray()
        for _ in range(3):
            time.sleep(0.1)
            pending += sock.recv(1 << 20)
        _, body = _read_response(sock, pending)
        assert body == served.data
    assert writability_waits


def test_client_leaving_mid_body_does_not_hurt_the_server(served: Served) -> None:
    before = _sent()
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        sock.sendall(b"GET /data HTTP/1.1\r\nhost: t\r\n\r\n")
        sock.recv(1000)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    time.sleep(0.2)
    assert _sent() - before < SIZE
    r = httpx.get(f"{served.url}/data", params={"offset": 1, "length": 10})
    assert r.content == served.data[1:11]


def test_head_request_has_no_body(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.sendall(
            b"HEAD /data?length=5000 HTTP/1.1\r\nhost: t\r\n\r\n"
            b"GET /data?offset=2&length=3 HTTP/1.1\r\nhost: t\r\n\r\n"
        )
        pending = bytearray()
        while pending.count(b"\r\n\r\n") < 2 or not pending.endswith(served.data[2:5]):
            pending += sock.recv(65536)
        first, second = bytes(pending).split(b"\r\n\r\n", 1)
        assert b"content-length: 5000" in first
        assert second.startswith(b"HTTP/1.1 200")
        assert second.endswith(b"\r\n\r\n" + served.data[2:5])


def test_chunked_response_is_copied(served: Served) -> None:
    copied = _copied()
    r = httpx.get(f"{served.url}/chunked")
    assert r.headers["transfer-encoding"] == "chunked"
    assert r.content == served.data[5:1005]
    assert _copied() - copied == 1000


def test_plain_protocol_offers_no_extension_and_copies(data_file: tuple[int, bytes]) -> None:
    fd, data = data_file
    sent = _sent()
    copied = _copied()
    for port, _ in _serve(_make_app(fd), PlainHttpToolsProtocol, "asyncio"):
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/extensions").json() == [DRAINED_EXTENSION]
        r = httpx.get(f"{url}/data", params={"offset": 100, "length": 3_000_000, "parts": 2})
        assert r.content == data[100:3_000_100]
    assert _sent() == sent
    assert _copied() - copied == 3_000_000
