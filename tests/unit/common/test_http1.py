"""The sans-I/O HTTP/1.1 response reader, fed by hand: no socket, every split of the bytes."""

from __future__ import annotations

import pytest

from app.common.http1 import MAX_HEAD_BYTES, Response, ResponseReader


def drive(reader: ResponseReader, data: bytes, step: int) -> Response:
    """Hand ``data`` to ``reader`` ``step`` bytes at a time, then EOF, as a socket would."""
    pos = 0
    while True:
        want = reader.next()
        if isinstance(want, Response):
            return want
        if isinstance(want, memoryview):
            n = min(len(want), step, len(data) - pos)
            want[:n] = data[pos : pos + n]
            pos += n
            reader.filled(n)
        else:
            reader.feed(data[pos : pos + step])
            pos += step


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_content_length_chunked_and_close_at_any_split(step: int) -> None:
    fixed = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nA: b\r\n\r\nhello world"
    r = drive(ResponseReader(), fixed, step)
    assert (r.status, r.headers["a"], bytes(r.body)) == (200, "b", b"hello world")

    chunked = (
        b"HTTP/1.1 416 Range\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )
    r = drive(ResponseReader(), chunked, step)
    assert (r.status, bytes(r.body)) == (416, b"hello world")

    reader = ResponseReader()
    r = drive(reader, b"HTTP/1.1 200 OK\r\n\r\nuntil the end", step)
    assert bytes(r.body) == b"until the end"
    assert not reader.keep_alive


def test_a_large_body_is_read_into_one_view() -> None:
    reader = ResponseReader()
    reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    view = reader.next()
    assert isinstance(view, memoryview) and len(view) == 7
    view[:7] = b"defghij"
    reader.filled(7)
    answer = reader.next()
    assert isinstance(answer, Response) and bytes(answer.body) == b"abcdefghij"
    assert reader.keep_alive and not reader.buffered()


def test_answers_back_to_back_and_bodiless_statuses() -> None:
    reader = ResponseReader()
    reader.feed(
        b"HTTP/1.1 204 No Content\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nokHTTP"
    )
    first, second = reader.next(), reader.next()
    assert isinstance(first, Response) and (first.status, first.body) == (204, bytearray())
    assert isinstance(second, Response) and second.body == bytearray(b"ok")
    assert not reader.keep_alive and reader.buffered()
    reader.reset()
    assert not reader.buffered() and reader.keep_alive


def test_broken_answers() -> None:
    reader = ResponseReader()
    reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
    assert isinstance(reader.next(), memoryview)
    with pytest.raises(ConnectionError, match="95 bytes early"):
        reader.filled(0)

    reader = ResponseReader()
    reader.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe")
    assert reader.next() is None
    reader.feed(b"")
    with pytest.raises(ConnectionError, match="closed the connection"):
        reader.next()

    reader = ResponseReader()
    reader.feed(b"SSH-2.0-OpenSSH\r\n\r\n")
    with pytest.raises(ConnectionError, match="not an HTTP"):
        reader.next()

    reader = ResponseReader()
    reader.feed(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * (MAX_HEAD_BYTES // 6 + 1))
    with pytest.raises(ConnectionError, match="head too large"):
        reader.next()
