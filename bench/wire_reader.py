"""The fetch connection's HTTP/1.1 reader against httptools' C parser (uvicorn's).

Two jobs, both over loopback from a thread that answers canned responses:

* ``big_gbps``: answers of ``body_mib`` MiB framed by Content-Length (the
  fetch answer's shape) over one loopback TCP connection. ``reader``: :class:`app.wire.FetchConnection`
  (:class:`app.common.http1.ResponseReader` driven by a blocking socket), the
  body read with ``recv_into`` into one preallocated buffer. ``httptools``: ``recv`` chunks fed to
  ``HttpResponseParser``, ``on_body`` copying into one preallocated buffer.
* ``head_us``: the parse of one small answer's head (status line, five
  headers, empty body) held in memory, no socket, into a status and a dict of
  lowercased headers: the per-fetch overhead.

Figures are the best of ``rounds``; ``python -m bench.wire_reader`` prints JSON.
The module docstring of :mod:`app.common.http1` quotes them.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import httptools

from app.common.http1 import ResponseReader
from app.wire import Endpoint, FetchConnection

HEAD = (
    b"HTTP/1.1 200 OK\r\ndate: Tue, 24 Nov 2026 11:00:00 GMT\r\nserver: uvicorn\r\n"
    b"content-type: application/octet-stream\r\nlogbus-high-watermark: 123456\r\n"
    b"content-length: %d\r\n\r\n"
)
_CHUNK = 256 * 1024


def _server(body: bytes, count: int) -> tuple[int, socket.socket, threading.Thread]:
    """A listener whose first connection gets ``count`` answers to its first request."""
    listener = socket.create_server(("127.0.0.1", 0))
    answer = HEAD % len(body) + body

    def run() -> None:
        b, _ = listener.accept()
        listener.close()
        with b:
            b.recv(4096)  # the request, read so that closing does not reset the connection
            for _ in range(count):
                b.sendall(answer)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return listener.getsockname()[1], listener, thread


def _reader_loop(port: int, count: int) -> int:
    """The fetch connection as the consumer uses it (its reader, ``recv_into`` the body)."""
    conn = FetchConnection(Endpoint.parse(f"http://127.0.0.1:{port}"), 30.0)
    conn.send("/bench")
    total = 0
    for _ in range(count):
        total += len(conn.read_response().body)
    conn.close()
    return total


class _Sink:
    def __init__(self) -> None:
        self.body = bytearray()
        self.have = 0
        self.done = False
        self.headers: dict[str, str] = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        # What the connection needs from a head: a dict of lowercased names.
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        pass

    def on_body(self, data: bytes) -> None:
        n = len(data)
        self.body[self.have : self.have + n] = data
        self.have += n

    def on_message_complete(self) -> None:
        self.done = True


def _httptools_loop(sock: socket.socket, count: int, size: int) -> int:
    sink = _Sink()
    parser = httptools.HttpResponseParser(sink)
    total = 0
    for _ in range(count):
        sink.body = bytearray(size)
        sink.have = 0
        sink.done = False
        while not sink.done:
            parser.feed_data(sock.recv(_CHUNK))
        total += sink.have
    return total


def big_gbps(mode: str, body_mib: int, count: int) -> float:
    body = b"x" * (body_mib << 20)
    port, _, thread = _server(body, count)
    start = time.perf_counter()
    if mode == "reader":
        total = _reader_loop(port, count)
    else:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET /bench HTTP/1.1\r\nHost: bench\r\n\r\n")
            total = _httptools_loop(sock, count, len(body))
    elapsed = time.perf_counter() - start
    thread.join()
    return total / elapsed / 1e9


def head_us(mode: str, n: int) -> float:
    answer = HEAD % 0
    start = time.perf_counter()
    if mode == "reader":
        reader = ResponseReader()
        for _ in range(n):
            reader.feed(answer)
            reader.next()
    else:
        sink = _Sink()
        parser = httptools.HttpResponseParser(sink)
        for _ in range(n):
            sink.headers = {}
            parser.feed_data(answer)
            parser.get_status_code()
    return (time.perf_counter() - start) / n * 1e6


def main(rounds: int = 5, body_mib: int = 64, count: int = 16) -> dict[str, Any]:
    out: dict[str, Any] = {"big_gbps": {}, "head_us": {}}
    for mode in ("reader", "httptools"):
        out["big_gbps"][mode] = round(
            max(big_gbps(mode, body_mib, count) for _ in range(rounds)), 2
        )
        out["head_us"][mode] = round(min(head_us(mode, 100_000) for _ in range(rounds)), 2)
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
