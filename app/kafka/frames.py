"""Kafka's request framing, sans I/O: size-prefixed frames in, request headers out.

Format (Kafka's protocol guide): every request is ``int32 size`` followed by ``size``
bytes: the request header, then the request body. The header is v1 (``int16 api_key,
int16 api_version, int32 correlation_id, nullable string client_id``) for an API
version that is not flexible, v2 (v1 plus tagged fields) for a flexible one; which one
is the message's own definition (kio's ``__header_schema__``), so this module never
guesses. The first eight bytes are the same in every header version, which is how a
request of an API version we do not know is still answered (ApiVersions' v0 fallback).

Invariants: :class:`FrameReader` never holds more than one partial frame plus what one
``feed`` brought, and refuses a frame whose declared size is negative, zero or above
``max_frame_bytes`` (Kafka's ``socket.request.max.bytes``) before buffering it, so a
client cannot make the broker allocate what it declares. Errors are :class:`FrameError`;
the connection closes on the first one (there is no resynchronizing a byte stream whose
framing is wrong). Not thread-safe: one reader per connection, used on the event loop.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kio.index import load_request_schema
from kio.serial import entity_reader
from kio.static.protocol import Entity

from app.kafka.versions import SUPPORTED

_SIZE = struct.Struct(">i")
_FIXED_HEADER = struct.Struct(">hhi")


class FrameError(Exception):
    """A frame that cannot be a Kafka request: the connection must close."""


class FrameReader:
    """Splits a byte stream into request frames (the bytes after each size prefix)."""

    __slots__ = ("_buffer", "_max", "_need")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buffer = bytearray()
        self._max = max_frame_bytes
        self._need = -1  # the current frame's size once its prefix is read

    @property
    def buffered(self) -> int:
        """Bytes held that are not yet a whole frame."""
        return len(self._buffer)

    @property
    def pending(self) -> int:
        """The declared size of the frame being read (its prefix seen, its bytes not all
        here yet); 0 between frames. What the connection reserves memory for."""
        return max(self._need, 0)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """The frames completed by ``data``, in order; FrameError on a bad size prefix."""
        self._buffer += data
        frames: list[bytes] = []
        buffer = self._buffer
        pos = 0
        while True:
            if self._need < 0:
                if len(buffer) - pos < 4:
                    break
                (size,) = _SIZE.unpack_from(buffer, pos)
                if size <= 0 or size > self._max:
                    self._buffer = bytearray()
                    raise FrameError(
                        f"request size {size} outside 1..{self._max} (socket.request.max.bytes)"
                    )
                self._need = size
                pos += 4
            if len(buffer) - pos < self._need:
                break
            frames.append(bytes(buffer[pos : pos + self._need]))
            pos += self._need
            self._need = -1
        if pos:
            del buffer[:pos]
        return frames


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request: its header's fields and its body (None when the API or the
    version is not one this broker serves: the handler answers that)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Entity | None


def decode_request(frame: bytes) -> Request:
    """The header and body of one frame; FrameError when they do not parse.

    An API or version outside :data:`~app.kafka.versions.SUPPORTED` is returned with
    ``body=None`` (its header parsed as far as the fixed fields), so the caller can
    answer it as Kafka does; a frame too short for even those fields is a FrameError.
    """
    if len(frame) < _FIXED_HEADER.size:
        raise FrameError(f"request header of {len(frame)} bytes")
    api_key, api_version, correlation_id = _FIXED_HEADER.unpack_from(frame)
    supported = SUPPORTED.get(api_key)
    if supported is None or not supported[0] <= api_version <= supported[1]:
        return Request(api_key, api_version, correlation_id, None, None)
    schema = load_request_schema(api_key, api_version)
    try:
        header, header_size = entity_reader(schema.__header_schema__)(frame, 0)
        body, _ = entity_reader(schema)(frame, header_size)
    except Exception as exc:  # kio raises several types for bad bytes: all mean the same
        raise FrameError(
            f"api {api_key} v{api_version} request does not parse: {type(exc).__name__}: {exc}"
        ) from exc
    # Bytes after the body are ignored, as Kafka's own parser ignores them: librdkafka
    # 2.x sends Metadata v11+ with IncludeClusterAuthorizedOperations (a v8-v10 field)
    # still in it, which Kafka reads as the body's end plus three unread bytes.
    return Request(api_key, api_version, correlation_id, header.client_id, body)
