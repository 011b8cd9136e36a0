"""Responses to bytes, with the records of a fetch left in the segment files.

A response frame is ``int32 size``, the response header (v0: ``int32 correlation_id``;
v1 adds tagged fields, for flexible versions; ApiVersions always v0, as the message
definition says), then the body, all written by kio's writers from the typed message.
A FetchResponse's ``records`` fields are the on-disk batches: instead of reading them
into memory, the handler puts a :class:`SlicedRecords` there, a ``bytes`` of length 0
whose ``len()`` is its slices' total. kio's writers write a records field as a length
prefix from ``len(value)`` followed by ``buffer.write(value)``; :class:`ResponseWriter`
recognizes the object in that ``write`` and keeps its :class:`FileSlice`\\ s as parts of
their own, which the connection sends with ``os.sendfile``. So the frame's bytes are
kio's, the records never pass through Python, and nothing here encodes a message field
by hand. (``tests/unit/kafka/test_kafka_encode.py`` checks the frame equals kio's
encoding of the same response with the records as bytes.)

Pure functions, no I/O; used on the event loop.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import IO, Any, cast

from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i32

from app.common.errors import LogbusError
from app.core.log.fileslice import FileSlice

Part = bytes | FileSlice


class SlicedRecords(bytes):
    """A records field whose bytes are file slices: empty as ``bytes``, ``len()`` their
    total. Only :class:`ResponseWriter` knows to write its slices."""

    slices: tuple[FileSlice, ...]
    size: int

    def __new__(cls, slices: Iterable[FileSlice]) -> SlicedRecords:
        self = super().__new__(cls, b"")
        self.slices = tuple(slices)
        self.size = sum(s.length for s in self.slices)
        return self

    def __len__(self) -> int:
        return self.size


class ResponseWriter:
    """kio's ``Writable``: bytes gathered in one buffer, :class:`SlicedRecords` kept as
    the file slices they name, in order."""

    __slots__ = ("_buffer", "parts")

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self._buffer = bytearray()

    def write(self, value: bytes | bytearray | memoryview) -> int:
        if isinstance(value, SlicedRecords):
            if self._buffer:
                self.parts.append(bytes(self._buffer))
                self._buffer.clear()
            self.parts.extend(value.slices)
            return value.size
        self._buffer += value
        return len(value)

    def finish(self) -> list[Part]:
        if self._buffer:
            self.parts.append(bytes(self._buffer))
            self._buffer.clear()
        return self.parts


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: Any, **values: Any) -> Any:
    """``cls(**values)`` keeping only the fields ``cls`` has: one call site builds a
    message of any version, the fields a version lacks left out (kio makes one class
    per version, each with exactly its version's fields)."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def encode_response(correlation_id: int, response: Any) -> list[Part]:
    """The whole response frame (size prefix included) as parts to send in order."""
    writer = ResponseWriter()
    writer.write(b"\0\0\0\0")  # the size, patched below
    header_cls = response.__header_schema__
    out = cast("IO[bytes]", writer)  # kio's writers only call write()
    entity_writer(header_cls)(out, header_cls(correlation_id=i32(correlation_id)))
    entity_writer(type(response))(out, response)
    parts = writer.finish()
    size = sum(len(p) if isinstance(p, bytes) else p.length for p in parts) - 4
    first = parts[0]
    assert isinstance(first, bytes)
    parts[0] = struct.pack(">i", size) + first[4:]
    return parts


def error_code(exc: BaseException) -> ErrorCode:
    """The Kafka error code of an error: a :class:`LogbusError` by its Kafka name (every
    name in the error tree is Kafka's; ``tests/unit/kafka/test_kafka_encode.py`` checks
    that each maps), anything else UNKNOWN_SERVER_ERROR."""
    if isinstance(exc, LogbusError):
        return _by_name(exc.error_code)
    return ErrorCode.unknown_server_error


@dataclasses.dataclass(slots=True)
class Outcome:
    """What one entry of a request (a topic, a resource) is answered: its error code and
    message, none until :func:`answered` catches an error."""

    code: ErrorCode = ErrorCode.none
    message: str | None = None


@contextmanager
def answered() -> Iterator[Outcome]:
    """The per-entry answer of Kafka's batch APIs (CreateTopics, DeleteTopics,
    CreatePartitions, DescribeConfigs, AlterConfigs...): an error of the error tree raised
    in the block is that entry's code and message, not the request's. Anything else
    propagates (the connection's handler answers it)."""
    outcome = Outcome()
    try:
        yield outcome
    except LogbusError as exc:
        outcome.code, outcome.message = _by_name(exc.error_code), exc.message


def per_partition(
    topics: Iterable[Any],
    topic_cls: Any,
    partition_cls: Any,
    code_of: Callable[[str, int], ErrorCode],
    *,
    partitions_field: str = "partitions",
    code_field: str = "error_code",
) -> tuple[Any, ...]:
    """The answer's topics, each with its partitions' error codes (``code_of(topic,
    partition)``), in the request's order: the shape OffsetCommit, OffsetDelete,
    TxnOffsetCommit and AddPartitionsToTxn share. A request topic's ``partitions`` are
    entries with ``partition_index`` or, in AddPartitionsToTxn, the indexes themselves;
    ``partitions_field`` and ``code_field`` name the answer's fields where a message
    names them otherwise."""
    out = []
    for t in topics:
        indexes = [int(getattr(p, "partition_index", p)) for p in t.partitions]
        partitions = tuple(
            build(partition_cls, partition_index=i, **{code_field: code_of(t.name, i)})
            for i in indexes
        )
        topic_id = getattr(t, "topic_id", None)  # by id (v10+): answered by id
        out.append(
            build(topic_cls, name=t.name, topic_id=topic_id, **{partitions_field: partitions})
        )
    return tuple(out)


@cache
def _by_name(name: str) -> ErrorCode:
    try:
        return ErrorCode[name.lower()]
    except KeyError:
        return ErrorCode.unknown_server_error
