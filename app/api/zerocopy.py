"""A response whose body is byte ranges of open files, sent with ``os.sendfile``.

Binary fetches answer with the segment bytes exactly as they lie on disk
(zero-copy fetch, docs/ARCHITECTURE.md), so the body never needs to pass through Python
buffers. The ASGI server says whether it can do that by offering the
``http.response.zerocopysend`` extension in ``scope["extensions"]``; our
uvicorn protocol (``app.api.zerocopy_protocol``) does. Any other server gets the same
bytes read with ``os.pread``.

Message shape, as in the ASGI zero-copy send extension::

    {"type": "http.response.zerocopysend", "file": <fd>, "offset": int,
     "count": int, "more_body": bool}
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Protocol

import anyio.to_thread
from prometheus_client import Counter
from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

ZEROCOPY_EXTENSION = "http.response.zerocopysend"

# Bigger chunks mean fewer sends; 1 MiB keeps the per-connection copy modest.
COPY_CHUNK_BYTES = 1024 * 1024
# Below this the pread is a page-cache memcpy of a few microseconds; a thread
# hop would cost more than it saves. Above it a cold read could stall the loop.
INLINE_READ_BYTES = 256 * 1024

ZEROCOPY_BYTES = Counter(
    "logbus_zerocopy_bytes",
    "Response body bytes sent from files with os.sendfile (never copied into Python).",
)
COPY_BYTES = Counter(
    "logbus_fetch_copy_bytes",
    "Response body bytes of file slices that were read into Python and written (no zero-copy).",
)


class FileSliceLike(Protocol):
    """What ``app.core.log.FileSlice`` offers; a protocol so this module does not pin the engine."""

    @property
    def fd(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def length(self) -> int: ...


def pread_exactly(fd: int, position: int, length: int) -> bytes:
    """``length`` bytes at ``position``; a short file is an error, never a short body."""
    data = os.pread(fd, length, position)
    if len(data) == length:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, position + got)
        if not more:
            raise RuntimeError(
                f"file slice fd={fd} position={position} length={length} "
                f"ends early: only {got} bytes readable"
            )
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def split_reads(
    slices: Sequence[FileSliceLike], chunk_bytes: int = COPY_CHUNK_BYTES
) -> list[tuple[int, int, int]]:
    """The ``(fd, position, length)`` reads that cover ``slices`` in pieces of at most ``chunk_bytes``."""
    reads: list[tuple[int, int, int]] = []
    for piece in slices:
        position, remaining = piece.position, piece.length
        while remaining > 0:
            n = min(remaining, chunk_bytes)
            reads.append((piece.fd, position, n))
            position += n
            remaining -= n
    return reads


class ZeroCopyResponse(Response):
    """Body = the concatenation of ``slices``; Content-Length is their total length."""

    media_type = "application/octet-stream"

    def __init__(
        self,
        slices: Sequence[FileSliceLike],
        *,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = "application/octet-stream",
        background: BackgroundTask | None = None,
    ) -> None:
        for piece in slices:
            if piece.length < 0 or piece.position < 0:
                raise ValueError(f"invalid file slice {piece!r}")
        self.slices = [piece for piece in slices if piece.length > 0]
        self.content_length = sum(piece.length for piece in self.slices)
        self.status_code = status_code
        if media_type is not None:
            self.media_type = media_type
        self.background = background
        # Response.init_headers derives Content-Length from self.body; give it
        # nothing to derive from and set our own total instead.
        self.body = b""
        self.init_headers(headers)
        self.headers["content-length"] = str(self.content_length)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        head_only = scope.get("method", "GET").upper() == "HEAD"
        if head_only or not self.slices:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        elif ZEROCOPY_EXTENSION in scope.get("extensions", {}):
            await self._send_zerocopy(send)
        else:
            await self._send_copied(send)
        if self.background is not None:
            await self.background()

    async def _send_zerocopy(self, send: Send) -> None:
        # The server counts logbus_zerocopy_bytes_total itself: only it knows
        # how many bytes sendfile really moved before a client went away.
        last = len(self.slices) - 1
        for i, piece in enumerate(self.slices):
            await send(
                {
                    "type": ZEROCOPY_EXTENSION,
                    "file": piece.fd,
                    "offset": piece.position,
                    "count": piece.length,
                    "more_body": i < last,
                }
            )

    async def _send_copied(self, send: Send) -> None:
        reads = split_reads(self.slices)
        last = len(reads) - 1
        for i, (fd, position, length) in enumerate(reads):
            if length <= INLINE_READ_BYTES:
                chunk = pread_exactly(fd, position, length)
            else:
                chunk = await anyio.to_thread.run_sync(pread_exactly, fd, position, length)
            await send({"type": "http.response.body", "body": chunk, "more_body": i < last})
            COPY_BYTES.inc(length)
