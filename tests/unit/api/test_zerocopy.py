"""ZeroCopyResponse's ASGI messages: zerocopysend when offered, pread chunks otherwise."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.api import zerocopy
from app.api.zerocopy import ZEROCOPY_EXTENSION, ZeroCopyResponse


@dataclass(frozen=True, slots=True)
class Slice:
    fd: int
    position: int
    length: int


@pytest.fixture
def data_fd(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    data = os.urandom(3 * 1024 * 1024 + 123)
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd, data
    finally:
        os.close(fd)


def _run(
    response: ZeroCopyResponse, *, method: str = "GET", extensions: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    scope: dict[str, Any] = {"type": "http", "method": method, "headers": []}
    if extensions is not None:
        scope["extensions"] = extensions
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(response(scope, receive, send))
    return sent


def _header(start: dict[str, Any], name: bytes) -> list[bytes]:
    return [value for key, value in start["headers"] if key == name]


def _counter(name: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name) or 0.0


def test_extension_sends_one_zerocopysend_per_slice(data_fd: tuple[int, bytes]) -> None:
    fd, _ = data_fd
    slices = [Slice(fd, 0, 100), Slice(fd, 500, 0), Slice(fd, 1000, 2_000_000)]
    copied_before = _counter("logbus_fetch_copy_bytes_total")

    sent = _run(ZeroCopyResponse(slices), extensions={ZEROCOPY_EXTENSION: {}})

    start, *body = sent
    assert start["type"] == "http.response.start"
    assert start["status"] == 200
    assert _header(start, b"content-length") == [b"2000100"]
    assert _header(start, b"content-type") == [b"application/octet-stream"]
    # The empty slice is dropped: a zero-length sendfile would be a wasted message.
    assert body == [
        {"type": ZEROCOPY_EXTENSION, "file": fd, "offset": 0, "count": 100, "more_body": True},
        {
            "type": ZEROCOPY_EXTENSION,
            "file": fd,
            "offset": 1000,
            "count": 2_000_000,
            "more_body": False,
        },
    ]
    # Sendfile bytes are the server's to count; the response copied nothing.
    assert _counter("logbus_fetch_copy_bytes_total") == copied_before


def test_fallback_reads_the_same_bytes_in_chunks(data_fd: tuple[int, bytes]) -> None:
    fd, data = data_fd
    slices = [Slice(fd, 10, 2_500_000), Slice(fd, 3_000_000, 100_000)]
    copied_before = _counter("logbus_fetch_copy_bytes_total")

    sent = _run(ZeroCopyResponse(slices, headers={"x-high-watermark": "7"}))

    start, *body = sent
    assert _header(start, b"content-length") == [b"2600000"]
    assert _header(start, b"x-high-watermark") == [b"7"]
    assert all(m["type"] == "http.response.body" for m in body)
    assert all(len(m["body"]) <= zerocopy.COPY_CHUNK_BYTES for m in body)
    assert [m["more_body"] for m in body] == [True] * (len(body) - 1) + [False]
    assert b"".join(m["body"] for m in body) == data[10:2_500_010] + data[3_000_000:3_100_000]
    assert _counter("logbus_fetch_copy_bytes_total") - copied_before == 2_600_000


def test_empty_fetch_is_an_empty_body() -> None:
    options: list[dict[str, Any] | None] = [None, {ZEROCOPY_EXTENSION: {}}]
    for extensions in options:
        start, body = _run(ZeroCopyResponse([]), extensions=extensions)
        assert _header(start, b"content-length") == [b"0"]
        assert body == {"type": "http.response.body", "body": b"", "more_body": False}


def test_head_sends_length_but_no_body(data_fd: tuple[int, bytes]) -> None:
    fd, _ = data_fd
    start, body = _run(
        ZeroCopyResponse([Slice(fd, 0, 4096)]),
        method="HEAD",
        extensions={ZEROCOPY_EXTENSION: {}},
    )
    assert _header(start, b"content-length") == [b"4096"]
    assert body == {"type": "http.response.body", "body": b"", "more_body": False}


def test_fallback_refuses_a_short_file(data_fd: tuple[int, bytes]) -> None:
    fd, data = data_fd
    with pytest.raises(RuntimeError, match="ends early"):
        _run(ZeroCopyResponse([Slice(fd, len(data) - 10, 20)]))


def test_negative_slice_is_rejected() -> None:
    with pytest.raises(ValueError):
        ZeroCopyResponse([Slice(3, -1, 10)])
