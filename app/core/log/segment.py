"""One segment of a partition's log: a ``.log`` file and its two sparse indexes.

File format: ``<base offset, 20 digits>.log`` holds RecordBatch v2 batches
back to back, exactly as produced and stamped (see :mod:`app.common.batch`
for the 61-byte header). ``.index`` and ``.timeindex`` beside it are described
in :mod:`app.core.log.index`; ``.txnindex`` (aborted transactions whose
ABORT marker is in this segment, present only once there is one) in
:mod:`app.core.log.txn_index`.

Invariants:

* Batches are whole and in offset order: each batch's base offset is at or
  after the previous batch's last offset + 1 (gaps are allowed, overlaps are
  not), and every offset is within 2^32 - 1 of the segment's base offset.
* ``size`` only moves after the bytes below it are written, so anything a
  reader finds below its snapshot of ``size`` is a whole batch.
* Every index entry points at the start of a batch below ``size``.

Concurrency (as Kafka's ``LogSegment``): appends, truncation, rolling and
recovery must be serialized by the caller (the log's lock). Reads
(``translate_offset``, ``read``, ``find_offset_by_timestamp``) are safe
concurrently with appends: they work from a snapshot of ``size`` and use
positional reads only. A read racing a *truncation* may return a slice that
later reads short; truncation happens only on follower divergence.

The ``.log`` is open as one :class:`~app.core.log.fileslice.SegmentFile`,
which every read takes first and holds while it reads, as slices hold it
until sent: closing or deleting a segment only drops the segment's own
reference, and the descriptor closes when the last reader is done. A read
that starts after the close raises :class:`~app.common.errors.SegmentClosed`
(the log then reads from its current segments). A deleted segment never
rebuilds its indexes: its files are going, and its readers move on.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from app.common.batch import (
    HEADER_SIZE,
    MAGIC,
    BatchHeader,
    compute_crc,
    decode_records,
    read_header,
)
from app.common.errors import KafkaStorageError, SegmentClosed
from app.core.log.checkpoint import fsync_path
from app.core.log.config import LogConfig
from app.core.log.fileslice import FileSlice, SegmentFile
from app.core.log.index import MAX_RELATIVE_OFFSET, IndexCorrupt, OffsetIndex, TimeIndex
from app.core.log.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"

# Positions are u32 in the offset index.
MAX_POSITION = (1 << 32) - 1
# Header hops start with small reads (a lookup usually finds its batch within
# one: less page-cache memory touched per lookup) and double them on long hops.
_HOP_CHUNK = 2048
_HOP_CHUNK_MAX = 64 << 10
# Recovery verifies CRCs over chunks this large (one pread per chunk, not per batch).
_RECOVERY_CHUNK = 8 << 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class BatchInfo(NamedTuple):
    """What a segment needs to know about each batch of an append."""

    position: int  # within the appended buffer
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class RecoveryResult(NamedTuple):
    truncated_bytes: int
    batches: int


class LogSegment:
    """A ``.log`` file of whole RecordBatch v2 batches plus its ``.index`` and ``.timeindex``.

    Invariants: batches in offset order without overlap, all offsets within
    2^32 - 1 of ``base_offset``, ``size`` moves only after the bytes below it
    are written, index entries point at batch starts below ``size``.
    Concurrency: writes (append, truncate, recover, seal) serialized by the
    caller; reads safe concurrently with them (see the module docstring).
    """

    # Slots keep a segment in a few cache lines: a lookup in a log of 10,000
    # segments touches one segment cold, and every miss shows in its latency.
    __slots__ = (
        "_bytes_since_index",
        "_file",
        "_indexes_checked",
        "_lock",
        "_max_timestamp",
        "_next_offset",
        "_rolling_base_ms",
        "_size",
        "base_offset",
        "deleted",
        "dir",
        "index_interval_bytes",
        "log_path",
        "offset_index",
        "time_index",
        "txn_index",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        fd: int,
        size: int,
        suffix: str = "",
    ) -> None:
        self.dir = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        name = segment_name(base_offset)
        self.log_path = directory / (name + LOG_SUFFIX + suffix)
        self.offset_index = OffsetIndex(
            directory / (name + INDEX_SUFFIX + suffix), base_offset, max_index_bytes
        )
        self.time_index = TimeIndex(
            directory / (name + TIME_INDEX_SUFFIX + suffix), base_offset, max_index_bytes
        )
        self.txn_index = TransactionIndex(
            directory / (name + TXN_INDEX_SUFFIX + suffix), base_offset
        )
        self._file: SegmentFile | None = SegmentFile(fd)
        self._size = size
        self._next_offset: int | None = base_offset if size == 0 else None
        self._max_timestamp: int | None = -1 if size == 0 else None
        self._bytes_since_index = 0
        self._rolling_base_ms: int | None = None
        self._lock = threading.RLock()
        self._indexes_checked = False
        self.deleted = False

    # -- construction ------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        suffix: str = "",
        create: bool = False,
    ) -> LogSegment:
        """The segment of ``base_offset`` (``suffix`` names its files, e.g. ``.cleaned``),
        indexed as ``config`` says when it opens (a later config change applies to segments
        opened after it, as in Kafka).

        ``create``: a new, empty, writable segment whose indexes start empty (a non-empty
        file in the way is a KafkaStorageError, never truncated); otherwise an existing
        segment whose indexes are loaded (and checked) on first use. One constructor for
        both, as Kafka's ``LogSegment.open`` with its ``fileAlreadyExists``.
        """
        path = directory / (segment_name(base_offset) + LOG_SUFFIX + suffix)
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        size = os.fstat(fd).st_size
        if create and size:
            os.close(fd)
            raise KafkaStorageError(f"cannot create segment {path}: a non-empty file is in the way")
        seg = cls(
            directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_bytes=config.segment_index_bytes,
            fd=fd,
            size=size,
            suffix=suffix,
        )
        if create:
            seg.offset_index.reset()
            seg.time_index.reset()
            seg.txn_index.reset()
            seg._indexes_checked = True
        return seg

    # -- state -------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self._size

    @property
    def next_offset(self) -> int:
        """Last offset + 1 (the base offset when empty)."""
        n = self._next_offset
        return self._compute_once("_next_offset", self._compute_next_offset) if n is None else n

    @property
    def max_timestamp(self) -> int:
        """Largest batch maxTimestamp in the segment, -1 if none."""
        ts = self._max_timestamp
        return (
            self._compute_once("_max_timestamp", self._compute_max_timestamp) if ts is None else ts
        )

    def _compute_once(self, slot: str, compute: Callable[[], int]) -> int:
        """Fill a lazily computed slot (None: not known yet) under the lock: the first reader
        computes, concurrent ones wait for its answer."""
        with self._lock:
            value: int | None = getattr(self, slot)
            if value is None:
                value = compute()
                setattr(self, slot, value)
            return value

    @property
    def file(self) -> SegmentFile:
        """The open ``.log``: hold it (not its ``fd`` number) while reading through it.

        Raises :class:`SegmentClosed` once the segment is closed or deleted.
        """
        f = self._file
        if f is None:
            raise SegmentClosed(f"segment {self.log_path.name} is closed")
        return f

    def last_modified_ms(self) -> int:
        f = self.file
        return os.fstat(f.fd).st_mtime_ns // 1_000_000

    def _offset_index(self) -> OffsetIndex:
        if not (self._indexes_checked and self.offset_index.loaded):
            self._check_indexes()
        return self.offset_index

    def _time_index(self) -> TimeIndex:
        if not (self._indexes_checked and self.time_index.loaded):
            self._check_indexes()
        return self.time_index

    def _check_indexes(self) -> None:
        """Load both indexes, cross-check them with the log, rebuild them if anything is off.

        Runs on first use and again when the sealed-index budget dropped the
        columns of an index (:mod:`app.core.log.index`): its file may have been
        damaged or removed since, and an index is derived data. A deleted
        segment raises :class:`SegmentClosed` instead of rebuilding.
        """
        with self._lock:
            if self._indexes_checked and self.offset_index.loaded and self.time_index.loaded:
                return
            f = self.file
            try:
                self.offset_index.load()
                self.time_index.load()
                offset, position = self.offset_index.last_entry()
                if position:
                    if position + HEADER_SIZE > self._size:
                        raise IndexCorrupt("offset index points beyond the log")
                    header = read_header(os.pread(f.fd, HEADER_SIZE, position))
                    if header.base_offset != offset or header.magic != MAGIC:
                        raise IndexCorrupt("offset index does not point at a batch")
            except IndexCorrupt:
                self.rebuild_indexes()
            self._indexes_checked = True

    def _compute_next_offset(self) -> int:
        end = self._size
        _, position = self._offset_index().last_entry()
        nxt = self.base_offset
        for _, header in self._headers(position, end):
            nxt = header.next_offset
        return nxt

    def _compute_max_timestamp(self) -> int:
        entry = self._time_index().last_entry()
        if entry is None:
            ts, start = -1, self.base_offset
        else:
            ts, start = entry[0], entry[1] + 1
        end = self._size
        _, position = self._offset_index().lookup(start, end)
        for _, header in self._headers(position, end):
            if header.last_offset >= start and header.max_timestamp > ts:
                ts = header.max_timestamp
        return ts

    def rolling_base_ms(self, now: int) -> int:
        """When the segment got its first batch (what segment.ms counts from)."""
        base = self._rolling_base_ms
        if base is None:
            base = now
            if self._size >= HEADER_SIZE:
                f = self.file
                first = read_header(os.pread(f.fd, HEADER_SIZE, 0))
                if 0 <= first.max_timestamp <= now:
                    base = first.max_timestamp
            self._rolling_base_ms = base
        return base

    # -- reading -----------------------------------------------------------------

    def _headers(self, position: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """Headers of the whole batches from ``position`` (a batch start) up to ``end``."""
        f = self.file  # held while the generator lives
        buf = b""
        buf_pos = position
        chunk = _HOP_CHUNK
        while end - position >= HEADER_SIZE:
            off = position - buf_pos
            if off + HEADER_SIZE > len(buf):
                buf = os.pread(f.fd, min(chunk, end - position), position)
                chunk = min(chunk * 2, _HOP_CHUNK_MAX)
                buf_pos, off = position, 0
                if len(buf) < HEADER_SIZE:
                    return
            header = read_header(buf, off)
            size = header.size
            if size < HEADER_SIZE or position + size > end:
                return
            yield position, header
            position += size

    def translate_offset(
        self, offset: int, end: int | None = None
    ) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        limit = self._size if end is None else end
        f = self.file
        _, position = self._offset_index().lookup(offset, limit)
        # The fetch path: one pread usually holds the batch; hop without a generator.
        buf = os.pread(f.fd, min(_HOP_CHUNK, limit - position), position)
        buf_pos = position
        while limit - position >= HEADER_SIZE:
            off = position - buf_pos
            if off + HEADER_SIZE > len(buf):
                break
            header = read_header(buf, off)
            size = header.size
            if size < HEADER_SIZE or position + size > limit:
                return None
            if header.base_offset + header.last_offset_delta >= offset:
                return position, header
            position += size
        for pos, header in self._headers(position, limit):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read(
        self, offset: int, max_bytes: int, max_offset: int, *, min_one: bool
    ) -> FileSlice | None:
        """Whole batches from the one holding ``offset``, below ``max_offset``, within ``max_bytes``.

        With ``min_one`` the first batch is returned even when it alone is
        larger than ``max_bytes``; without it an empty slice says it does not
        fit. ``None`` when no batch here holds ``offset`` or a later one
        below ``max_offset``.
        """
        end = self._size
        f = self.file
        found = self.translate_offset(offset, end)
        if found is None:
            return None
        start, first = found
        if first.last_offset >= max_offset:
            return None
        limit = end
        if max_offset < self.next_offset:
            bound = self.translate_offset(max_offset, end)
            if bound is not None:
                limit = bound[0]
        want_end = start + max_bytes
        if want_end >= limit:
            return FileSlice(f, start, limit - start)
        if start + first.size > want_end:
            # An empty slice tells the caller to stop: skipping this batch for a
            # smaller one further on would leave a hole in the fetch.
            return FileSlice(f, start, first.size if min_one else 0)
        # Index entries are batch starts, so jump to the last one within budget and hop from there.
        _, position = self._offset_index().lookup_position(want_end)
        boundary = max(position, start + first.size)
        for pos, header in self._headers(boundary, limit):
            if pos + header.size > want_end:
                break
            boundary = pos + header.size
        return FileSlice(f, start, boundary - start)

    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >= ``timestamp``."""
        end = self._size
        f = self.file
        entry = self._time_index().lookup_before(timestamp)
        start = self.base_offset if entry is None else entry[1] + 1
        _, position = self._offset_index().lookup(start, end)
        for pos, header in self._headers(position, end):
            if header.max_timestamp < timestamp:
                continue
            # One batch is decoded to find the exact record, as Kafka's ListOffsets does.
            data = os.pread(f.fd, header.size, pos)
            for record in decode_records(data, skip_control=False):
                if record.timestamp >= timestamp:
                    return record.offset, record.timestamp
        return None

    # -- writing (serialized by the caller) ---------------------------------------

    def should_roll(
        self, append_size: int, last_offset: int, now: int, segment_bytes: int, segment_ms: int
    ) -> bool:
        if self._size == 0:
            return False
        return (
            self._size + append_size > segment_bytes
            or self._size + append_size > MAX_POSITION
            or now - self.rolling_base_ms(now) > segment_ms
            or last_offset - self.base_offset > MAX_RELATIVE_OFFSET
            or self._offset_index().is_full
            or self._time_index().is_full
        )

    def append(
        self, data: bytes | bytearray | memoryview, batches: Sequence[BatchInfo], now: int
    ) -> None:
        """Write stamped batches in one ``pwrite`` and index them."""
        start = self._size
        view = memoryview(data)
        written = 0
        f = self.file
        try:
            while written < len(view):
                written += os.pwrite(f.fd, view[written:], start + written)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(f.fd, start)
            raise KafkaStorageError(f"write to {self.log_path} failed: {e}") from e
        if start == 0:
            self._rolling_base_ms = now
        # Publish the bytes before any index entry that points at them.
        self._size = start + written
        self._next_offset = batches[-1].last_offset + 1
        for b in batches:
            self._index_batch(
                start + b.position, b.size, b.base_offset, b.last_offset, b.max_timestamp
            )

    def _index_batch(
        self, position: int, size: int, base_offset: int, last_offset: int, max_timestamp: int
    ) -> None:
        current = self.max_timestamp
        if max_timestamp > current:
            self._max_timestamp = current = max_timestamp
        if self._bytes_since_index >= self.index_interval_bytes:
            if not self.offset_index.is_full:
                self.offset_index.append(base_offset, position)
            if not self.time_index.is_full:
                self.time_index.maybe_append(current, last_offset)
            self._bytes_since_index = 0
        self._bytes_since_index += size

    def seal(self) -> None:
        """The segment stops being active: index its final max timestamp, release index fds."""
        with self._lock:
            self._seal_time_index()
            self.offset_index.seal()
            self.time_index.seal()

    def _seal_time_index(self) -> None:
        ts = self.max_timestamp
        if ts >= 0 and self._size and not self.time_index.is_full:
            was_open = self.time_index.writable
            if not was_open:
                self.time_index.open_for_append()
            self.time_index.maybe_append(ts, self.next_offset - 1)
            if not was_open:
                self.time_index.seal()

    def make_active(self) -> None:
        """Reopen a loaded segment for appends (the last one of a log)."""
        with self._lock:
            self._offset_index()
            self.offset_index.open_for_append()
            self.time_index.open_for_append()
            self._max_timestamp = self.max_timestamp
            self._next_offset = self.next_offset
            _, position = self.offset_index.last_entry()
            self._bytes_since_index = self._size - position

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``; returns bytes removed."""
        with self._lock:
            end = self._size
            found = self.translate_offset(offset, end)
            if found is None:
                return 0
            position, header = found
            self._offset_index()
            self.offset_index.truncate_to_position(position)
            self.time_index.truncate_to_offset(min(header.base_offset, offset))
            f = self.file
            os.ftruncate(f.fd, position)
            self._size = position
            self._next_offset = min(header.base_offset, max(offset, self.base_offset))
            self.txn_index.truncate_to(self._next_offset)
            self._max_timestamp = None
            self._max_timestamp = self._compute_max_timestamp()
            self._bytes_since_index = 0
            if position == 0:
                self._rolling_base_ms = None
            return end - position

    def rebuild_indexes(self) -> None:
        """Recreate both indexes by hopping batch headers (the bytes are trusted)."""
        self._scan(verify=False)

    def recover(self) -> RecoveryResult:
        """Check every batch (CRC, structure, offsets), rebuild the indexes and
        truncate the file at the first short or damaged batch."""
        return self._scan(verify=True)

    def _scan(self, *, verify: bool) -> RecoveryResult:
        with self._lock:
            if self.deleted:
                # Its files are going (or gone): nothing to rebuild indexes for.
                raise SegmentClosed(f"segment {self.log_path.name} is deleted")
            f = self.file
            was_writable = self.offset_index.writable
            file_size = os.fstat(f.fd).st_size
            self.offset_index.reset()
            self.time_index.reset()
            self._max_timestamp = -1
            self._bytes_since_index = 0
            expected = self.base_offset
            position = 0
            batches = 0
            buf = b""
            buf_pos = 0
            chunk = _RECOVERY_CHUNK if verify else _HOP_CHUNK_MAX
            while file_size - position >= HEADER_SIZE:
                off = position - buf_pos
                if off + HEADER_SIZE > len(buf):
                    buf = os.pread(f.fd, min(chunk, file_size - position), position)
                    buf_pos, off = position, 0
                header = read_header(buf, off)
                size = header.size
                if (
                    header.magic != MAGIC
                    or size < HEADER_SIZE
                    or position + size > file_size
                    or header.base_offset < expected
                    or header.last_offset_delta < 0
                    or header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET
                ):
                    break
                if verify:
                    if off + size > len(buf):
                        buf = os.pread(f.fd, min(max(chunk, size), file_size - position), position)
                        buf_pos, off = position, 0
                        if len(buf) < size:
                            break
                    if compute_crc(buf, off, size) != header.crc:
                        break
                self._index_batch(
                    position, size, header.base_offset, header.last_offset, header.max_timestamp
                )
                expected = header.next_offset
                position += size
                batches += 1
            truncated = file_size - position
            if truncated and verify:
                os.ftruncate(f.fd, position)
            self._size = position
            self._next_offset = expected
            self._indexes_checked = True
            if not was_writable:
                self.offset_index.seal()
                self.time_index.seal()
            return RecoveryResult(truncated if verify else 0, batches)

    # -- lifecycle ---------------------------------------------------------------

    def flush(self) -> None:
        """fsync the log and its indexes."""
        with self._lock:
            f = self._file
            if self.deleted or f is None:
                return
            os.fdatasync(f.fd)
            self.txn_index.flush()
            for index in (self.offset_index, self.time_index):
                if index.writable:
                    index.flush()
                elif index.path.exists():
                    fsync_path(index.path)

    def rename_to_deleted(self) -> None:
        """Step one of a delayed delete: the fd stays open for in-flight reads."""
        with self._lock:
            self.offset_index.seal()
            self.time_index.seal()
            new_log = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
            os.replace(self.log_path, new_log)
            self.log_path = new_log
            for index in (self.offset_index, self.time_index):
                if index.path.exists():
                    index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))
            txn = self.txn_index
            txn.rename(txn.path.with_name(txn.path.name + DELETED_SUFFIX))
            self.deleted = True

    def change_file_suffixes(self, old: str, new: str) -> None:
        """Rename the three files from ``<name><old>`` to ``<name><new>`` (compaction's swap).

        The indexes go first and the ``.log`` last: recovery keys on the
        ``.log`` name alone and rebuilds the indexes of a swapped segment.
        """
        with self._lock:
            for index in (self.offset_index, self.time_index):
                if index.path.name.endswith(old) and index.path.exists():
                    index.rename(
                        index.path.with_name(
                            index.path.name[: len(index.path.name) - len(old)] + new
                        )
                    )
            txn = self.txn_index
            if txn.path.name.endswith(old):
                txn.rename(txn.path.with_name(txn.path.name[: len(txn.path.name) - len(old)] + new))
            name = self.log_path.name
            if not name.endswith(old):
                raise KafkaStorageError(f"{self.log_path} does not end with {old!r}")
            new_path = self.log_path.with_name(name[: len(name) - len(old)] + new)
            os.replace(self.log_path, new_path)
            self.log_path = new_path

    def close(self) -> None:
        """Seal the indexes and let go of the ``.log``: it closes once no reader holds it."""
        with self._lock:
            if not self.deleted and self._size and self.offset_index.writable:
                self._seal_time_index()
            self.offset_index.seal()
            self.time_index.seal()
            self._file = None

    def delete_files(self) -> None:
        """Close and remove the files (wherever they were renamed to).

        Readers holding the ``.log`` go on reading it: unlinked, it lives until they are done.
        """
        self.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            path.unlink(missing_ok=True)
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self._size})"
