"""Batch-level pieces of compaction: reading a segment's batches, rewriting one batch.

A rewritten batch keeps its identity (base offset, ``lastOffsetDelta``,
producer id/epoch/base sequence, leader epoch, compression, timestamp type,
transactional flag) and each surviving record keeps its offset, timestamp,
key, value and headers; only records the cleaner dropped are missing. Two
encoders do that:

* :func:`empty_batch` is the header alone (``recordCount`` 0, no compression),
  which Kafka writes for a producer's last batch once none of its records
  survive: the batch's producer id, epoch and sequences outlive its records;
* :func:`rebuild` goes through aiokafka's Cython builder (fast), whose base
  timestamp is the first record's;
* :func:`encode_with_horizon` is our own (per-record Python, used only for
  batches that keep tombstones) and writes Kafka's *delete horizon* (KIP-534):
  attribute bit 6 set and ``baseTimestamp`` = the time after which the
  batch's tombstones may go. Record timestamps are deltas from
  ``baseTimestamp`` in every RecordBatch v2 reader, so they read back
  unchanged (kafka-python and aiokafka ignore bit 6; Kafka itself honours it).

All three keep ``lastOffsetDelta`` from the original batch, as Kafka's
``overrideLastOffset`` does: the producer's last sequence
(``baseSequence + lastOffsetDelta``) must survive for idempotence, and the
segment's next offset stays where it was. ``recordCount`` then says how many
records the batch really holds.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from aiokafka.codec import gzip_encode, lz4_encode, snappy_encode, zstd_encode
from aiokafka.record.util import encode_varint

from app.common.batch import (
    ATTRIBUTES,
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD_SIZE,
    MAGIC,
    MAX_TIMESTAMP,
    MAX_TIMESTAMP_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    Compression,
    RecordBatchBuilder,
    compute_crc,
    decode_records,
    read_header,
    stamp,
)
from app.common.errors import InvalidRecord, KafkaStorageError

__all__ = [
    "DELETE_HORIZON_MASK",
    "delete_horizon",
    "empty_batch",
    "encode_with_horizon",
    "iter_segment_batches",
    "rebuild",
]

_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_OFFSET = 23
_CRC = struct.Struct(">I")
_COMPRESS: dict[int, Callable[[bytes], bytes]] = {
    Compression.GZIP: gzip_encode,
    Compression.SNAPPY: snappy_encode,
    Compression.LZ4: lz4_encode,
    Compression.ZSTD: zstd_encode,
}


def delete_horizon(header: BatchHeader) -> int | None:
    """The batch's delete horizon (ms) if the cleaner set one, else None."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_MASK else None


def iter_segment_batches(fd: int, end: int, chunk: int) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every whole batch of a segment file below ``end``, read ``chunk`` bytes at a time.

    Segment bytes below ``size`` are whole batches; anything else is damage
    and raises :class:`KafkaStorageError`.
    """
    pos = 0
    buf = b""
    buf_pos = 0
    while end - pos >= HEADER_SIZE:
        off = pos - buf_pos
        if off + HEADER_SIZE > len(buf):
            buf, buf_pos, off = os.pread(fd, min(chunk, end - pos), pos), pos, 0
        header = read_header(buf, off) if len(buf) - off >= HEADER_SIZE else None
        if (
            header is None
            or header.magic != MAGIC
            or header.size < HEADER_SIZE
            or pos + header.size > end
        ):
            raise KafkaStorageError(f"malformed record batch at byte {pos} of a segment")
        size = header.size
        if off + size > len(buf):
            buf, buf_pos, off = os.pread(fd, min(max(chunk, size), end - pos), pos), pos, 0
            if len(buf) < size:
                raise KafkaStorageError(f"short read of the record batch at byte {pos}")
        yield header, memoryview(buf)[off : off + size]
        pos += size


def empty_batch(header: BatchHeader) -> bytearray:
    """The batch under ``header`` without records: its identity and offset range only.

    As Kafka's ``writeEmptyHeader``: no compression, base and max timestamp
    both the original's max timestamp, the timestamp type, transactional and
    control bits kept.
    """
    keep = TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK
    buf = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        buf,
        0,
        header.base_offset,
        HEADER_SIZE - LOG_OVERHEAD_SIZE,
        header.partition_leader_epoch,
        MAGIC,
        0,
        header.attributes & keep,
        header.last_offset_delta,
        header.max_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    _CRC.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return buf


def rebuild(header: BatchHeader, records: Sequence[Any]) -> bytearray:
    """A batch of ``records`` (a subset of the batch under ``header``) with its identity kept."""
    builder = RecordBatchBuilder(
        magic=MAGIC,
        compression_type=int(header.compression),
        is_transactional=int(header.is_transactional),
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        batch_size=1 << 31,
    )
    base = header.base_offset
    for r in records:
        builder.append(r.offset - base, r.timestamp, r.key, r.value, r.headers)
    buf = bytearray(builder.build())
    _LAST_OFFSET_DELTA.pack_into(buf, _LAST_OFFSET_DELTA_OFFSET, header.last_offset_delta)
    if header.timestamp_type == 1:
        # LogAppendTime: records carry no own time; the batch's maxTimestamp is it.
        attributes = ATTRIBUTES.unpack_from(buf, ATTRIBUTES_OFFSET)[0]
        ATTRIBUTES.pack_into(buf, ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
        MAX_TIMESTAMP.pack_into(buf, MAX_TIMESTAMP_OFFSET, header.max_timestamp)
    _CRC.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    stamp(buf, 0, base, header.partition_leader_epoch)
    return buf


def _bytes_field(data: bytes | None, out: bytearray) -> None:
    if data is None:
        out.append(1)  # zig-zag -1
    else:
        encode_varint(len(data), out.append)
        out += data


def encode_with_horizon(header: BatchHeader, records: Sequence[Any], horizon: int) -> bytearray:
    """Like :func:`rebuild`, with the delete horizon ``horizon`` (ms) as baseTimestamp."""
    base = header.base_offset
    body = bytearray()
    for r in records:
        rec = bytearray(1)  # record attributes: unused, 0
        encode_varint(r.timestamp - horizon, rec.append)
        encode_varint(r.offset - base, rec.append)
        _bytes_field(r.key, rec)
        _bytes_field(r.value, rec)
        encode_varint(len(r.headers), rec.append)
        for name, value in r.headers:
            _bytes_field(name.encode(), rec)
            _bytes_field(value, rec)
        encode_varint(len(rec), body.append)
        body += rec
    compress = _COMPRESS.get(header.compression)
    payload = compress(bytes(body)) if compress is not None else body
    if header.timestamp_type == 1:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(r.timestamp for r in records)
    buf = bytearray(HEADER_SIZE) + payload
    HEADER.pack_into(
        buf,
        0,
        base,
        len(buf) - LOG_OVERHEAD_SIZE,
        header.partition_leader_epoch,
        MAGIC,
        0,
        header.attributes | DELETE_HORIZON_MASK,
        header.last_offset_delta,
        horizon,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(records),
    )
    _CRC.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return buf


def require_keys(
    data: bytes | bytearray | memoryview,
    batches: Sequence[tuple[int, BatchHeader]],
    topic: str,
    partition: int,
) -> None:
    """Refuse a body with a keyless record for a compacted topic (``InvalidRecord``).

    A keyless record could never be superseded, so compaction could not bound the topic;
    Kafka refuses it at the door rather than in the cleaner.
    """
    view = memoryview(data)
    for pos, header in batches:
        if header.is_control:
            continue
        for record in decode_records(view[pos : pos + header.size]):
            if record.key is None:
                raise InvalidRecord(
                    "Compacted topic cannot accept message without key in topic "
                    f"partition {topic}-{partition}."
                )
