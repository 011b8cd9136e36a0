"""Decoding fetched batches into what ``poll`` and ``poll_columns`` hand out.

Two forms of the same rows: :class:`ConsumerRecord` tuples (``poll``) and
:class:`RecordColumns`, parallel lists per partition run (``poll_columns``).
A batch is decoded whole (aiokafka's codec through :mod:`app.common.batch`),
keeping only records at or after the partition's position; a batch handed
out partly in one form is converted when the caller switches flavours.

Speed: decoding runs with the cyclic GC paused (~1.5 M records/s with
collections inside the loop, ~4 M without, on this project's machine);
``ConsumerRecord`` is built with ``tuple.__new__`` (no ``__new__`` call per
record). Nothing here does I/O or keeps state between calls.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

from app.client.types import ConsumerRecord
from app.common.batch import BatchHeader, RecordBatchReader

_new_tuple = tuple.__new__


def decode_records(
    topic: str, partition: int, data: bytes | memoryview, header: BatchHeader, min_offset: int
) -> list[ConsumerRecord]:
    """Every record of one batch at or after ``min_offset`` (decompressed as needed)."""
    ts_type = header.timestamp_type
    batch = RecordBatchReader(data)
    cr = ConsumerRecord
    enabled = gc.isenabled()
    gc.disable()
    try:
        return [
            _new_tuple(
                cr,
                (
                    topic,
                    partition,
                    r.offset,
                    r.timestamp,
                    ts_type,
                    r.key,
                    r.value,
                    tuple(h) if (h := r.headers) else (),
                ),
            )
            for r in batch
            if r.offset >= min_offset
        ]
    finally:
        if enabled:
            gc.enable()


@dataclass(slots=True)
class RecordColumns:
    """Records of one partition as parallel lists: the bulk form :meth:`Consumer.poll_columns` returns.

    No object per record, so neither building nor collecting them costs per
    record: about twice the rate of :class:`ConsumerRecord` tuples. Row ``i``
    is ``offsets[i], timestamps[i], keys[i], values[i], headers[i]``; offsets
    increase. ``timestamp_type`` holds for every row (a change starts a new
    ``RecordColumns``).
    """

    topic: str
    partition: int
    timestamp_type: int
    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[tuple[tuple[str, bytes | None], ...]]

    def __len__(self) -> int:
        return len(self.offsets)

    def records(self) -> list[ConsumerRecord]:
        """The same rows as :class:`ConsumerRecord` tuples."""
        t, p, tt = self.topic, self.partition, self.timestamp_type
        return [
            ConsumerRecord(t, p, o, ts, tt, k, v, h)
            for o, ts, k, v, h in zip(
                self.offsets, self.timestamps, self.keys, self.values, self.headers, strict=True
            )
        ]

    def _slice(self, start: int, stop: int) -> RecordColumns:
        return RecordColumns(
            self.topic,
            self.partition,
            self.timestamp_type,
            self.offsets[start:stop],
            self.timestamps[start:stop],
            self.keys[start:stop],
            self.values[start:stop],
            self.headers[start:stop],
        )

    def _extend(self, other: RecordColumns) -> None:
        self.offsets += other.offsets
        self.timestamps += other.timestamps
        self.keys += other.keys
        self.values += other.values
        self.headers += other.headers


def decode_columns(
    topic: str, partition: int, data: bytes | memoryview, header: BatchHeader, min_offset: int
) -> RecordColumns:
    """Every record of one batch at or after ``min_offset``, as columns."""
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[tuple[tuple[str, bytes | None], ...]] = []
    add_offset, add_ts = offsets.append, timestamps.append
    add_key, add_value, add_headers = keys.append, values.append, headers.append
    for r in RecordBatchReader(data):
        offset = r.offset
        if offset >= min_offset:
            add_offset(offset)
            add_ts(r.timestamp)
            add_key(r.key)
            add_value(r.value)
            add_headers(tuple(h) if (h := r.headers) else ())
    return RecordColumns(
        topic, partition, header.timestamp_type, offsets, timestamps, keys, values, headers
    )


Decoded = list[ConsumerRecord] | RecordColumns


def offset_at(decoded: Decoded, i: int) -> int:
    return decoded.offsets[i] if isinstance(decoded, RecordColumns) else decoded[i].offset


def convert(decoded: Decoded, columnar: bool) -> Decoded:
    """The other form of a batch half handed out when the caller switches poll flavours."""
    if columnar == isinstance(decoded, RecordColumns):
        return decoded
    if isinstance(decoded, RecordColumns):
        return decoded.records()
    first = decoded[0]
    return RecordColumns(
        first.topic,
        first.partition,
        first.timestamp_type,
        [r.offset for r in decoded],
        [r.timestamp for r in decoded],
        [r.key for r in decoded],
        [r.value for r in decoded],
        [r.headers for r in decoded],
    )


def as_records(pieces: list[Decoded]) -> list[ConsumerRecord]:
    """``poll``'s answer: the pieces of one drain as one list (no copy when there is one)."""
    if len(pieces) == 1 and isinstance(pieces[0], list):
        return pieces[0]
    out: list[ConsumerRecord] = []
    for piece in pieces:
        assert isinstance(piece, list)
        out.extend(piece)
    return out


def as_columns(pieces: list[Decoded]) -> list[RecordColumns]:
    """``poll_columns``' answer: consecutive pieces of one partition run joined."""
    out: list[RecordColumns] = []
    for piece in pieces:
        assert isinstance(piece, RecordColumns)
        last = out[-1] if out else None
        if (
            last is not None
            and last.partition == piece.partition
            and last.topic == piece.topic
            and last.timestamp_type == piece.timestamp_type
        ):
            last._extend(piece)
        else:
            # A copy: the batch it came from may still hand out the rest later.
            out.append(piece._slice(0, len(piece)))
    return out
