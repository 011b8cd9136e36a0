"""Kafka RecordBatch v2 (magic 2): the one format on the wire and on disk.

Byte layout of a batch (big-endian), as in Kafka's ``DefaultRecordBatch``::

    offset  size  field
         0     8  baseOffset            stamped by the broker, not covered by the CRC
         8     4  batchLength           bytes after this field (whole batch = batchLength + 12)
        12     4  partitionLeaderEpoch  stamped by the broker, not covered by the CRC
        16     1  magic                 always 2
        17     4  crc                   CRC-32C (Castagnoli) of bytes 21 .. end, unsigned
        21     2  attributes            bits 0-2 compression, 3 timestamp type,
                                        4 transactional, 5 control, 6 delete horizon
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordCount
        61     -  records (compressed as a whole when attributes say so)

A record inside is ``length varint, attributes int8, timestampDelta varlong,
offsetDelta varint, keyLength varint, key, valueLength varint, value,
headerCount varint, headers``, all zig-zag varints.

What lives here and why:

* Header parsing, validation and stamping are ours: they are per batch, a
  ``struct`` unpack and one CRC-32C call (the ``crc32c`` package, hardware
  accelerated), so the broker never touches individual records.
* Record encoding and decoding are delegated to aiokafka's Cython codec
  (``aiokafka.record._crecords``), which builds ~4 M and decodes ~10 M
  records/s here, and compresses through ``cramjam``. Writing varint loops in
  Python would be 10-30x slower.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from enum import IntEnum
from typing import NamedTuple

import crc32c
from aiokafka.record import default_records
from aiokafka.record._protocols import DefaultRecordBatchBuilderProtocol

from app.common.errors import (
    CorruptRecord,
    InvalidRecord,
    RecordTooLarge,
    UnsupportedCompressionType,
    UnsupportedMessageFormat,
)

# baseOffset q, batchLength i, partitionLeaderEpoch i, magic b, crc I, attributes h,
# lastOffsetDelta i, baseTimestamp q, maxTimestamp q, producerId q, producerEpoch h,
# baseSequence i, recordCount i
# aiokafka's record codec, named here only: its compiled classes (Cython: ~4 M records/s
# built, ~10 M decoded here) or, where its wheel has no extension (or with
# AIOKAFKA_NO_EXTENSIONS=1), its pure-Python ones with the same interface; aiokafka picks.
# Everything else (log engine, SDK, Spark) imports RecordBatchReader/RecordBatchBuilder.
RecordBatchReader = default_records.DefaultRecordBatch
RecordBatchBuilder = default_records.DefaultRecordBatchBuilder

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
# baseOffset q, batchLength i: the part every log format shares (Kafka's LOG_OVERHEAD)
LOG_OVERHEAD = struct.Struct(">qi")
LOG_OVERHEAD_SIZE = LOG_OVERHEAD.size  # 12
# partitionLeaderEpoch i, at byte 12
LEADER_EPOCH = struct.Struct(">i")
# attributes h at byte 21, through maxTimestamp at byte 35: rewritten for LogAppendTime
ATTRIBUTES = struct.Struct(">h")
MAX_TIMESTAMP = struct.Struct(">q")

MAGIC = 2
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
# KIP-534: baseTimestamp holds the delete horizon of the batch's tombstones. Only the
# cleaner sets it (app.core.log.compact_batch); a client's would make it drop them early.
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PARTITION_LEADER_EPOCH = -1


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | int | Compression | None) -> Compression:
        if name is None:
            return cls.NONE
        if isinstance(name, int):
            return cls(name)
        try:
            return cls[name.upper()]
        except KeyError:
            raise UnsupportedCompressionType(
                f"unknown compression {name!r}; use one of none, gzip, snappy, lz4, zstd"
            ) from None


class BatchHeader(NamedTuple):
    """The 61-byte header of one batch, decoded."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes, header included."""
        return self.batch_length + LOG_OVERHEAD_SIZE

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0


class Record(NamedTuple):
    """One decoded record. Produced only on the decoding path, never on append."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header at ``pos``; the caller has checked 61 bytes are there."""
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C of a batch's CRC-covered part (attributes .. end)."""
    view = memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]
    return int(crc32c.crc32c(view))


def validate_batches(
    buf: bytes | bytearray | memoryview, max_message_bytes: int
) -> list[tuple[int, BatchHeader]]:
    """Check a producer's body of one or more batches, back to back.

    Returns ``(position, header)`` per batch. Raises :class:`CorruptRecord` for
    a truncated batch, a CRC mismatch or inconsistent counts,
    :class:`UnsupportedMessageFormat` for magic != 2, :class:`RecordTooLarge`
    for a batch over ``max_message_bytes`` and
    :class:`UnsupportedCompressionType` for codec bits 5-7, and
    :class:`InvalidRecord` for the delete-horizon bit (the cleaner's alone, so
    followers, which copy cleaned batches, validate elsewhere).
    """
    total = len(buf)
    if total == 0:
        raise InvalidRecord("the request carries no record batch")
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos < total:
        if total - pos < HEADER_SIZE:
            raise CorruptRecord(
                f"truncated record batch at byte {pos}: {total - pos} bytes left, "
                f"a header needs {HEADER_SIZE}"
            )
        header = read_header(buf, pos)
        if header.magic != MAGIC:
            raise UnsupportedMessageFormat(header.magic)
        size = header.size
        if size < HEADER_SIZE:
            raise CorruptRecord(
                f"record batch at byte {pos} declares batchLength {header.batch_length}"
            )
        if size > max_message_bytes:
            raise RecordTooLarge(size, max_message_bytes)
        if pos + size > total:
            raise CorruptRecord(
                f"truncated record batch at byte {pos}: declares {size} bytes, {total - pos} present"
            )
        if compute_crc(buf, pos, size) != header.crc:
            raise CorruptRecord(f"CRC-32C mismatch in record batch at byte {pos}")
        if header.attributes & COMPRESSION_MASK > Compression.ZSTD:
            raise UnsupportedCompressionType(
                f"record batch at byte {pos} uses compression id {header.attributes & COMPRESSION_MASK}"
            )
        if header.attributes & DELETE_HORIZON_MASK:
            # Kafka answers INVALID_RECORD too: the flag would make the cleaner drop this
            # batch's tombstones at its first pass instead of delete.retention.ms later.
            raise InvalidRecord(
                f"record batch at byte {pos} has the delete horizon flag (attribute bit 6) "
                "set; only the broker's log cleaner may set it"
            )
        if header.record_count <= 0 or header.last_offset_delta != header.record_count - 1:
            raise CorruptRecord(
                f"record batch at byte {pos} has recordCount {header.record_count} but "
                f"lastOffsetDelta {header.last_offset_delta}; a produced batch needs "
                "lastOffsetDelta = recordCount - 1"
            )
        out.append((pos, header))
        pos += size
    return out


def validate_replicated_batches(
    buf: bytes | bytearray | memoryview,
) -> list[tuple[int, BatchHeader]]:
    """Structure and CRC of replicated batches (a follower's fetch from its leader), which
    carry their offsets already: each batch whole, its CRC right, offsets never overlapping
    the batch before. Returns ``(position, header)`` per batch."""
    total = len(buf)
    if total == 0:
        raise InvalidRecord("the request carries no record batch")
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    next_offset = -1
    while pos < total:
        if total - pos < HEADER_SIZE:
            raise CorruptRecord(f"truncated record batch at byte {pos}")
        header = read_header(buf, pos)
        if header.magic != MAGIC:
            raise UnsupportedMessageFormat(header.magic)
        size = header.size
        if size < HEADER_SIZE or pos + size > total or header.last_offset_delta < 0:
            raise CorruptRecord(f"malformed record batch at byte {pos}")
        if compute_crc(buf, pos, size) != header.crc:
            raise CorruptRecord(f"CRC-32C mismatch in record batch at byte {pos}")
        if header.base_offset < next_offset:
            raise InvalidRecord(f"record batch at byte {pos} overlaps the one before it")
        next_offset = header.next_offset
        out.append((pos, header))
        pos += size
    return out


def stamp(buf: bytearray | memoryview, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Assign a batch its offset and leader epoch in place; neither is under the CRC."""
    LOG_OVERHEAD.pack_into(buf, pos, base_offset, LOG_OVERHEAD.unpack_from(buf, pos)[1])
    LEADER_EPOCH.pack_into(buf, pos + 12, leader_epoch)


PRODUCER = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence at byte 43
PRODUCER_OFFSET = 43


def stamp_producer(
    buf: bytearray,
    pos: int,
    producer_id: int,
    epoch: int,
    base_sequence: int,
    *,
    transactional: bool,
) -> None:
    """Give a built batch a producer id, epoch and base sequence (and the transactional
    flag) in place, recomputing the CRC (all are covered by it). For a broker building a
    batch on a stateless caller's behalf (JSON produce inside a transaction)."""
    attributes = ATTRIBUTES.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0]
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes)
    PRODUCER.pack_into(buf, pos + PRODUCER_OFFSET, producer_id, epoch, base_sequence)
    size = LOG_OVERHEAD_SIZE + LOG_OVERHEAD.unpack_from(buf, pos)[1]
    struct.pack_into(">I", buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))


def stamp_log_append_time(buf: bytearray | memoryview, pos: int, size: int, now_ms: int) -> None:
    """Rewrite a batch for ``message.timestamp.type=LogAppendTime``.

    Sets the timestamp-type bit and maxTimestamp (as Kafka does; records keep
    their deltas) and recomputes the CRC, since both fields are covered by it.
    """
    attributes = ATTRIBUTES.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0]
    ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    MAX_TIMESTAMP.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, now_ms)
    struct.pack_into(">I", buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))


def iter_headers(
    buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """Hop from header to header through trusted bytes (already on disk)."""
    limit = len(buf) if end is None else end
    while limit - pos >= HEADER_SIZE:
        header = read_header(buf, pos)
        if pos + header.size > limit:
            return
        yield pos, header
        pos += header.size


def decode_records(
    buf: bytes | bytearray | memoryview, *, skip_control: bool = True, min_offset: int = 0
) -> Iterator[Record]:
    """Decode every record of the whole batches in ``buf`` (a fetch answer).

    Records below ``min_offset`` are skipped: a fetch returns whole batches,
    so the first one may start before the offset asked for. A partial batch
    at the end (a fetch cut by max_bytes) is ignored.
    """
    view = memoryview(buf)
    for pos, header in iter_headers(view):
        if header.last_offset < min_offset or (skip_control and header.is_control):
            continue
        batch = RecordBatchReader(view[pos : pos + header.size])  # read in place, no copy
        for r in batch:
            if r.offset >= min_offset:
                yield Record(r.offset, r.timestamp, r.key, r.value, r.headers)


# Headers of a record that has none (BatchBuilder.extend): the codec only reads it.
_NO_HEADERS: list[tuple[str, bytes | None]] = []


class BatchBuilder:
    """Builds one RecordBatch v2 for clients and tests (offsets start at 0).

    Not safe for concurrent use. ``append`` returns False once the batch would
    exceed ``max_bytes`` (the first record is always accepted).
    """

    def __init__(
        self,
        compression: Compression | str | None = Compression.NONE,
        *,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        max_bytes: int = 1 << 30,
    ) -> None:
        self.compression = Compression.parse(compression)
        self._builder: DefaultRecordBatchBuilderProtocol | None = RecordBatchBuilder(
            magic=MAGIC,
            compression_type=int(self.compression),
            is_transactional=int(transactional),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            batch_size=max_bytes,
        )
        self._count = 0
        # aiokafka's builder compresses its buffer in place on build(), so a second
        # build() would compress the compressed bytes: build once and keep the result.
        self._built: bytes | None = None

    def __len__(self) -> int:
        return self._count

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp: int | None = None,
    ) -> bool:
        if self._built is not None:
            raise InvalidRecord("the batch is already built")
        assert self._builder is not None  # only a prebuilt batch has none, and it is built
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        meta = self._builder.append(self._count, ts, key, value, list(headers))
        if meta is None:
            return False
        self._count += 1
        return True

    def extend(self, rows: Sequence[tuple[bytes | None, bytes | None]], timestamp: int) -> bool:
        """Append ``(key, value)`` records without headers, all stamped ``timestamp``, in
        order: :meth:`append`'s work without its Python frame, checks and headers list
        per record (a JSON produce of 100 records spent more there than in the codec).
        False once the batch is full (``max_bytes``), the records up to it appended."""
        if self._built is not None:
            raise InvalidRecord("the batch is already built")
        assert self._builder is not None
        append = self._builder.append
        n = self._count
        try:
            for key, value in rows:
                # The codec only reads the headers list: one shared empty list serves all.
                if append(n, timestamp, key, value, _NO_HEADERS) is None:
                    return False
                n += 1
        finally:
            self._count = n
        return True

    def size_in_bytes(self) -> int:
        """Uncompressed size so far (an upper bound on the built size, plus header)."""
        if self._builder is None:  # prebuilt
            return len(self._built or b"")
        return int(self._builder.size())

    @classmethod
    def prebuilt(cls, batch: bytes, count: int) -> BatchBuilder:
        """A builder already built: ``batch``, a RecordBatch v2 of ``count`` records made
        elsewhere (app/common/_jsonrecords.c writes the bytes :meth:`extend` and
        :meth:`build` give for plain records)."""
        builder = cls.__new__(cls)
        builder.compression = Compression.NONE
        builder._builder = None
        builder._count = count
        builder._built = batch
        return builder

    def build(self) -> bytes:
        if self._count == 0:
            raise InvalidRecord("a record batch needs at least one record")
        if self._built is None:
            assert self._builder is not None
            self._built = bytes(self._builder.build())
        return self._built


def build_batch(
    records: Iterable[tuple[bytes | None, bytes | None]]
    | Iterable[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int | None]],
    compression: Compression | str | None = Compression.NONE,
    **kwargs: int | bool,
) -> bytes:
    """Build a batch from ``(key, value)`` or ``(key, value, headers, timestamp)`` tuples."""
    builder = BatchBuilder(compression, **kwargs)  # type: ignore[arg-type]
    for rec in records:
        if len(rec) == 2:
            builder.append(rec[1], rec[0])
        else:
            builder.append(rec[1], rec[0], rec[2], rec[3])
    return builder.build()


# -- control batches (transaction markers) -------------------------------------------
#
# A control batch (attributes bit 5, with bit 4 transactional) holds one uncompressed
# record written by the broker for a transaction coordinator, in Kafka's
# ``EndTransactionMarker`` format:
#
#     key:   version int16 (0), type int16 (0 ABORT, 1 COMMIT)   (ControlRecordType)
#     value: version int16 (0), coordinatorEpoch int32
#
# The batch carries the producer id and epoch of the transaction it ends, baseSequence
# -1 (control batches are not sequenced) and lastOffsetDelta 0.
CONTROL_KEY = struct.Struct(">hh")  # version, type
CONTROL_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch
CONTROL_ABORT = 0
CONTROL_COMMIT = 1


class ControlMarker(NamedTuple):
    """A decoded transaction marker: ``commit`` (else abort) and the coordinator's epoch."""

    commit: bool
    coordinator_epoch: int


def _zigzag(n: int) -> bytes:
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CorruptRecord("truncated or overlong varint in a control record")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    coordinator_epoch: int,
    timestamp: int,
) -> bytes:
    """One control batch ending ``producer_id``'s transaction (base offset 0, to be stamped)."""
    key = CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = CONTROL_VALUE.pack(0, coordinator_epoch)
    body = (
        b"\x00"  # record attributes
        + _zigzag(0)  # timestampDelta
        + _zigzag(0)  # offsetDelta
        + _zigzag(len(key))
        + key
        + _zigzag(len(value))
        + value
        + _zigzag(0)  # header count
    )
    record = _zigzag(len(body)) + body
    size = HEADER_SIZE + len(record)
    buf = bytearray(size)
    HEADER.pack_into(
        buf,
        0,
        0,
        size - LOG_OVERHEAD_SIZE,
        NO_PARTITION_LEADER_EPOCH,
        MAGIC,
        0,
        TRANSACTIONAL_MASK | CONTROL_MASK,
        0,
        timestamp,
        timestamp,
        producer_id,
        producer_epoch,
        -1,
        1,
    )
    buf[HEADER_SIZE:] = record
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, size))
    return bytes(buf)


def read_control_marker(buf: bytes | bytearray | memoryview, pos: int = 0) -> ControlMarker:
    """The marker of the control batch at ``pos`` (its first record's key and value).

    Raises :class:`CorruptRecord` if the record does not have Kafka's layout
    (an unknown control type, such as KRaft's, too: Logbus writes only these two).
    """
    p = pos + HEADER_SIZE
    _, p = _read_varint(buf, p)  # record length
    p += 1  # attributes
    _, p = _read_varint(buf, p)  # timestampDelta
    _, p = _read_varint(buf, p)  # offsetDelta
    key_len, p = _read_varint(buf, p)
    if key_len < CONTROL_KEY.size or p + key_len > len(buf):
        raise CorruptRecord(f"control record key of {key_len} bytes")
    _, kind = CONTROL_KEY.unpack_from(buf, p)
    p += key_len
    value_len, p = _read_varint(buf, p)
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise CorruptRecord(f"control record type {kind} is not a transaction marker")
    epoch = -1
    if value_len >= CONTROL_VALUE.size and p + value_len <= len(buf):
        _, epoch = CONTROL_VALUE.unpack_from(buf, p)
    return ControlMarker(kind == CONTROL_COMMIT, epoch)
