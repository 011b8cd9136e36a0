"""What the producer state remembers, and its snapshot file (Kafka's ``ProducerStateEntry``
and the format of its ``.snapshot`` files).

:class:`ProducerEntry`: one producer on one partition, its epoch, its last
(up to 5) batches as :class:`BatchMetadata`, its coordinator epoch and its
open transaction. :func:`write_snapshot` and :func:`read_snapshot` store and
load a list of them.

Snapshot file ``<offset, 20 digits>.snapshot`` in the partition directory,
big-endian; ``offset`` (in the name only) is the log end offset the state
covers: every batch below it is in the state, none at or above it::

    offset  size  field
         0     4  magic                 b"LBPS"
         4     2  version               1
         6     4  crc                   CRC-32C of bytes 10 .. end, unsigned
        10     4  producer count        N
        14     -  N producers, each:
                    8  producer id
                    2  epoch
                    8  last append time  broker clock, ms (what expiration counts from)
                    4  coordinator epoch (version 2 only) of the last marker, -1: none
                    8  txn first offset  (version 2 only) first offset of the producer's
                                         open transaction, -1: none open
                    1  batch count       B, 1..5 (version 2: 0..5), oldest first
                    B x 32 bytes:
                       4  first sequence
                       4  last sequence
                       8  first offset
                       8  last offset
                       8  timestamp      the batch's stored max timestamp

Durability: :func:`write_snapshot` with ``sync=False`` writes a tmp file and
renames it without fsync (a torn file fails its CRC on load, which falls
back to an older snapshot); ``sync=True`` goes through
:func:`app.core.log.checkpoint.write_atomically` (fsynced file and directory).

Concurrency: plain data and pure functions; the owning
:class:`~app.core.log.producer_state.ProducerStateManager` uses them under
its log's lock.
"""

from __future__ import annotations

import os
import re
import struct
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import crc32c

from app.core.log.checkpoint import write_atomically

__all__ = [
    "INT32_MAX",
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOT_FILE",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "ProducerEntry",
    "SnapshotCorrupt",
    "find_batch",
    "in_sequence",
    "last_sequence",
    "read_snapshot",
    "snapshot_name",
    "write_snapshot",
]

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = (1 << 31) - 1
SNAPSHOT_SUFFIX = ".snapshot"

_MAGIC = b"LBPS"
_VERSION = 2  # version 1 (no transaction fields) is still read
_FILE_HEAD = struct.Struct(">4sHII")  # magic, version, crc, producer count
_PREFIX = struct.Struct(">4sHI")  # magic, version, crc: what precedes the CRC-covered part
_COUNT = struct.Struct(">I")
_CRC_START = _PREFIX.size
_PRODUCER_V1 = struct.Struct(">qhqB")
# id, epoch, last append time, coordinator epoch, txn first offset, batch count
_PRODUCER = struct.Struct(">qhqiqB")
_BATCH = struct.Struct(">iiqqq")
# The name of a snapshot file; group 1 is its offset.
SNAPSHOT_FILE = re.compile(r"(\d{20})\.snapshot")


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def last_sequence(first_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record; sequences wrap from 2^31 - 1 to 0."""
    return (first_sequence + last_offset_delta) & INT32_MAX


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` directly follows ``last_seq`` (-1: nothing yet)."""
    return next_seq == (last_seq + 1) & INT32_MAX


class BatchMetadata(NamedTuple):
    """What is remembered of one appended batch, enough to answer its retry."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


def find_batch(
    batches: Iterable[BatchMetadata], first_seq: int, last_seq: int
) -> BatchMetadata | None:
    """The batch with exactly these sequences (a retry of it), else None."""
    for b in batches:
        if b.first_seq == first_seq and b.last_seq == last_seq:
            return b
    return None


class ProducerEntry:
    """One producer on one partition: its epoch and its last (up to 5) batches, oldest first."""

    __slots__ = (
        "batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "epoch",
        "last_timestamp",
        "producer_id",
    )

    def __init__(
        self,
        producer_id: int,
        epoch: int,
        batches: Iterable[BatchMetadata] = (),
        last_timestamp: int = -1,
        *,
        coordinator_epoch: int = -1,
        current_txn_first_offset: int = -1,
    ) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(batches, maxlen=NUM_BATCHES_TO_RETAIN)
        self.last_timestamp = last_timestamp
        self.coordinator_epoch = coordinator_epoch
        # First offset of the producer's open transaction, -1 when none is open.
        self.current_txn_first_offset = current_txn_first_offset

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        return find_batch(self.batches, first_seq, last_seq)

    def add(self, batch: BatchMetadata, append_time: int) -> None:
        self.batches.append(batch)
        self.last_timestamp = max(self.last_timestamp, append_time)

    def copy(self) -> ProducerEntry:
        return ProducerEntry(
            self.producer_id,
            self.epoch,
            self.batches,
            self.last_timestamp,
            coordinator_epoch=self.coordinator_epoch,
            current_txn_first_offset=self.current_txn_first_offset,
        )

    def _key(self) -> tuple[object, ...]:
        return (
            self.producer_id,
            self.epoch,
            list(self.batches),
            self.last_timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProducerEntry) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"ProducerEntry(id={self.producer_id}, epoch={self.epoch}, "
            f"batches={list(self.batches)}, last_timestamp={self.last_timestamp}, "
            f"coordinator_epoch={self.coordinator_epoch}, "
            f"txn_first_offset={self.current_txn_first_offset})"
        )


class SnapshotCorrupt(ValueError):
    """A snapshot file does not parse or fails its CRC; loading skips it."""


def write_snapshot(path: Path, producers: Iterable[ProducerEntry], *, sync: bool) -> None:
    """Write ``producers`` in the module's layout (tmp file, then rename)."""
    body = bytearray()
    count = 0
    for e in producers:
        body += _PRODUCER.pack(
            e.producer_id,
            e.epoch,
            e.last_timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
            len(e.batches),
        )
        for b in e.batches:
            body += _BATCH.pack(*b)
        count += 1
    covered = _COUNT.pack(count) + body
    data = _PREFIX.pack(_MAGIC, _VERSION, crc32c.crc32c(covered)) + covered
    if sync:
        write_atomically(path, data)
        return
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_snapshot(path: Path) -> list[ProducerEntry]:
    """Parse a snapshot; raises :class:`SnapshotCorrupt` (or OSError)."""
    data = path.read_bytes()
    if len(data) < _FILE_HEAD.size:
        raise SnapshotCorrupt(f"{path.name}: {len(data)} bytes, shorter than its header")
    magic, version, crc, count = _FILE_HEAD.unpack_from(data)
    if magic != _MAGIC or version not in (1, _VERSION):
        raise SnapshotCorrupt(f"{path.name}: unknown magic {magic!r} or version {version}")
    if crc32c.crc32c(memoryview(data)[_CRC_START:]) != crc:
        raise SnapshotCorrupt(f"{path.name}: CRC-32C mismatch")
    out: list[ProducerEntry] = []
    pos = _FILE_HEAD.size
    try:
        for _ in range(count):
            if version == 1:
                pid, epoch, last_ts, n = _PRODUCER_V1.unpack_from(data, pos)
                coordinator_epoch, txn_first = -1, -1
                pos += _PRODUCER_V1.size
            else:
                pid, epoch, last_ts, coordinator_epoch, txn_first, n = _PRODUCER.unpack_from(
                    data, pos
                )
                pos += _PRODUCER.size
            if not (1 if version == 1 else 0) <= n <= NUM_BATCHES_TO_RETAIN:
                raise SnapshotCorrupt(f"{path.name}: producer {pid} with {n} batches")
            batches = []
            for _ in range(n):
                batches.append(BatchMetadata._make(_BATCH.unpack_from(data, pos)))
                pos += _BATCH.size
            out.append(
                ProducerEntry(
                    pid,
                    epoch,
                    batches,
                    last_ts,
                    coordinator_epoch=coordinator_epoch,
                    current_txn_first_offset=txn_first,
                )
            )
    except struct.error as e:
        raise SnapshotCorrupt(f"{path.name}: truncated ({e})") from None
    if pos != len(data):
        raise SnapshotCorrupt(f"{path.name}: {len(data) - pos} bytes after the last producer")
    return out
