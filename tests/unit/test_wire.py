"""The consumer's HTTP/1.1 reader against canned answers on a socket pair."""

from __future__ import annotations

import socket
import threading

import pytest

from app.wire import Endpoint, FetchConnection, parse_head


def serve(answer: bytes) -> tuple[FetchConnection, threading.Thread]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def run() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(4096)
            # Dribble the answer out to exercise partial reads.
            for i in range(0, len(answer), 7):
                conn.sendall(answer[i : i + 7])
        listener.close()

    thread = threading.Thread(target=run)
    thread.start()
    return FetchConnection(Endpoint.parse(f"http://127.0.0.1:{port}"), 5.0), thread


def roundtrip(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    conn, thread = serve(answer)
    conn.send("/x")
    response = conn.read_response()
    thread.join()
    conn.close()
    return response.status, response.headers, bytes(response.body)


def test_content_length_body() -> None:
    status, headers, body = roundtrip(
        b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nLogbus-High-Watermark: 5\r\n\r\nhello world"
    )
    assert (status, body) == (200, b"hello world")
    assert headers["logbus-high-watermark"] == "5"


def test_chunked_body_and_trailers() -> None:
    status, _, body = roundtrip(
        b"HTTP/1.1 416 Range\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )
    assert (status, body) == (416, b"hello world")


def test_body_until_close_and_no_body_statuses() -> None:
    assert (
        roundtrip(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")[2]
        == b"until the end"
    )
    assert roundtrip(b"HTTP/1.1 204 No Content\r\n\r\n")[:1] == (204,)


def test_early_close_is_a_connection_error() -> None:
    conn, thread = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
    conn.send("/x")
    with pytest.raises(ConnectionError):
        conn.read_response()
    thread.join()
    assert conn.sock is None


def test_parse_head_and_endpoint() -> None:
    assert parse_head(b"HTTP/1.1 200 OK\r\nA: b\r\nC:d") == (200, {"a": "b", "c": "d"})
    with pytest.raises(ConnectionError):
        parse_head(b"SSH-2.0-OpenSSH")
    e = Endpoint.parse("https://broker.example:9443")
    assert (e.host, e.port, e.tls, e.host_header) == (
        "broker.example",
        9443,
        True,
        b"broker.example:9443",
    )
    assert Endpoint.parse("http://h").port == 80
