"""Sparse offset and time indexes of one segment (``.index``, ``.timeindex``).

Byte layout (big-endian, entries back to back, no header, no checksum: an
index is derived data and is rebuilt from its ``.log`` whenever in doubt)::

    .index       8 bytes per entry
        0  4  relativeOffset u32   base offset of a batch, minus the segment's base offset
        4  4  position       u32   byte position of that batch in the .log file

    .timeindex  12 bytes per entry
        0  8  timestamp      i64   largest batch maxTimestamp from the segment start
                                   up to and including the batch below
        8  4  relativeOffset u32   last offset of that batch, minus the segment's base offset

An entry is added every ``index.interval.bytes`` of log, so lookups are a
binary search followed by a short forward scan of batch headers.

Storage choice: entries are appended to the file with ``pwrite`` and mirrored
in two ``array`` columns in memory, so a lookup is ``bisect`` in C over
native integers. We do not mmap: CPython's ``mmap`` duplicates the file
descriptor it maps, and a log of 10,000 segments would then hold 20,000 extra
descriptors. Because the file only ever grows by whole entries, its length is
exact (no preallocated tail to trim), and a torn write shows up as a length
that is not a multiple of the entry size. ``segment.index.bytes`` caps the
entry count; a full index makes the segment roll, as in Kafka.

The columns of an index whose segment is no longer active are loaded lazily
and dropped again when all such columns together pass a budget
(:data:`SEALED_INDEXES`, 256 MiB); they are reloaded from the file on the
next lookup.

Concurrency: one writer (the log's append lock) and any number of readers.
The writer appends to the key column first and to the value column second,
and readers bound their search by the value column's length, so a reader never
sees half an entry. Loading and unloading take a small per-index lock.
"""

from __future__ import annotations

import bisect
import os
import struct
import sys
import threading
import weakref
from array import array
from itertools import islice
from operator import lt
from pathlib import Path
from typing import ClassVar

# relativeOffset u32, position u32
OFFSET_ENTRY = struct.Struct(">II")
# timestamp i64, relativeOffset u32
TIME_ENTRY = struct.Struct(">qI")

MAX_RELATIVE_OFFSET = (1 << 32) - 1
_LITTLE_ENDIAN = sys.byteorder == "little"


class IndexCorrupt(Exception):
    """An index file failed its sanity check; the caller rebuilds it from the log."""


class SealedIndexBudget:
    """Bounds the memory held by the columns of sealed (no longer active) indexes.

    A sealed index is loaded on its first lookup. Once the loaded ones pass
    ``budget_bytes`` together, those loaded longest ago are dropped (first in,
    first out: no bookkeeping on the lookup path) and reload from their file
    when next used. Held weakly, so closed segments need no deregistration.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._lock = threading.Lock()
        self._loaded: weakref.WeakKeyDictionary[_SparseIndex, int] = weakref.WeakKeyDictionary()
        # Running total; entries that vanish with their index leave it high until
        # the next time it passes the budget and is recounted.
        self._total = 0

    @property
    def used_bytes(self) -> int:
        with self._lock:
            return sum(self._loaded.values())

    def track(self, index: _SparseIndex, nbytes: int) -> None:
        with self._lock:
            self._total += nbytes - self._loaded.pop(index, 0)
            self._loaded[index] = nbytes
            victims = []
            if self._total > self.budget_bytes:
                self._total = sum(self._loaded.values())
                for other, size in list(self._loaded.items()):
                    if self._total <= self.budget_bytes or other is index:
                        break
                    victims.append(other)
                    self._total -= size
                    del self._loaded[other]
        # Outside our lock: unloading takes the index's own lock.
        for victim in victims:
            victim.drop_columns()

    def forget(self, index: _SparseIndex) -> None:
        with self._lock:
            self._total -= self._loaded.pop(index, 0)


def _strictly_increasing(column: array[int]) -> bool:
    return all(map(lt, column, islice(column, 1, None)))


def _non_decreasing(column: array[int]) -> bool:
    return not any(map(lt, islice(column, 1, None), column))


class _SparseIndex:
    """Shared machinery: an append-only file of fixed-size entries and two columns."""

    ENTRY: ClassVar[struct.Struct]
    KEY_TYPE: ClassVar[str]
    VALUE_TYPE: ClassVar[str]
    __slots__ = (
        "__weakref__",
        "_fd",
        "_keys",
        "_lock",
        "_values",
        "base_offset",
        "max_entries",
        "path",
    )

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.ENTRY.size)
        self._lock = threading.RLock()
        self._keys: array[int] | None = None
        self._values: array[int] | None = None
        self._fd = -1  # open only while the index is writable

    # -- loading ---------------------------------------------------------------

    def _decode(self, data: bytes) -> tuple[array[int], array[int]]:
        raise NotImplementedError

    def _check(self, keys: array[int], values: array[int]) -> None:
        raise NotImplementedError

    def _columns(self) -> tuple[array[int], array[int]]:
        keys, values = self._keys, self._values
        if keys is not None and values is not None:
            return keys, values
        with self._lock:
            keys, values = self._keys, self._values
            loaded_now = keys is None or values is None
            if keys is None or values is None:
                keys, values = self._keys, self._values = self._load()
            sealed = self._fd < 0
        if loaded_now and sealed:
            SEALED_INDEXES.track(self, len(values) * self.ENTRY.size)
        return keys, values

    def _load(self) -> tuple[array[int], array[int]]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise IndexCorrupt(f"{self.path.name} is missing") from None
        if len(data) % self.ENTRY.size:
            raise IndexCorrupt(
                f"{self.path.name} is {len(data)} bytes, not a multiple of {self.ENTRY.size}"
            )
        if len(data) // self.ENTRY.size > self.max_entries:
            raise IndexCorrupt(f"{self.path.name} holds more entries than segment.index.bytes")
        keys, values = self._decode(data)
        self._check(keys, values)
        return keys, values

    def load(self) -> None:
        """Load and sanity-check now; raises :class:`IndexCorrupt`."""
        self._columns()

    def open_for_append(self) -> None:
        """Make the index writable (the active segment's); loads it first."""
        with self._lock:
            self._columns()
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        SEALED_INDEXES.forget(self)

    def seal(self) -> None:
        """The segment stopped being active: release the file descriptor."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            values = self._values
            if values is not None:
                SEALED_INDEXES.track(self, len(values) * self.ENTRY.size)

    def unload(self) -> None:
        """Drop the in-memory columns of a sealed index (reloaded on demand)."""
        with self._lock:
            if self._fd < 0:
                self._keys = self._values = None
        SEALED_INDEXES.forget(self)

    def drop_columns(self) -> None:
        with self._lock:
            if self._fd < 0:
                self._keys = self._values = None

    @property
    def writable(self) -> bool:
        return self._fd >= 0

    @property
    def loaded(self) -> bool:
        return self._values is not None

    def reset(self) -> None:
        """Empty the index (before a rebuild); leaves it writable."""
        with self._lock:
            self.seal()
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            self._keys, self._values = array(self.KEY_TYPE), array(self.VALUE_TYPE)

    def rename(self, path: Path) -> None:
        with self._lock:
            os.replace(self.path, path)
            self.path = path

    def delete(self) -> None:
        self.seal()
        SEALED_INDEXES.forget(self)
        self.path.unlink(missing_ok=True)

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    # -- common queries --------------------------------------------------------

    def __len__(self) -> int:
        return len(self._columns()[1])

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    def _write(self, entry: bytes, count: int) -> None:
        written = os.pwrite(self._fd, entry, count * self.ENTRY.size)
        if written != len(entry):  # pragma: no cover - regular files write whole entries
            raise OSError(f"short write to {self.path}")

    def _truncate(self, count: int) -> None:
        """Keep the first ``count`` entries."""
        # Under the lock, so that a sealed index cannot be dropped and reloaded
        # from the file between the two steps.
        with self._lock:
            keys, values = self._columns()
            if count >= len(values):
                return
            # Shrink the value column first: readers bound their search by its length.
            del values[count:]
            del keys[count:]
            if self._fd >= 0:
                os.ftruncate(self._fd, count * self.ENTRY.size)
            else:
                os.truncate(self.path, count * self.ENTRY.size)


# Sealed indexes of every log share one budget (~2.3 MiB per 1 GiB segment at the defaults).
SEALED_INDEXES = SealedIndexBudget(256 << 20)


class OffsetIndex(_SparseIndex):
    """``.index``: base offset of a batch -> its byte position in the segment's ``.log``.

    Format: 8-byte entries ``relativeOffset u32, position u32`` (big-endian).
    Invariants: both columns strictly increasing; every position is the start
    of a batch below the log's size. Concurrency: one appender (under the
    log's lock), lock-free concurrent lookups.
    """

    __slots__ = ()
    ENTRY = OFFSET_ENTRY
    KEY_TYPE = "I"
    VALUE_TYPE = "I"

    def _decode(self, data: bytes) -> tuple[array[int], array[int]]:
        both = array("I")
        both.frombytes(data)
        if _LITTLE_ENDIAN:
            both.byteswap()
        return both[0::2], both[1::2]

    def _check(self, keys: array[int], values: array[int]) -> None:
        if not _strictly_increasing(keys) or not _strictly_increasing(values):
            raise IndexCorrupt(f"{self.path.name} entries are not increasing")

    def append(self, offset: int, position: int) -> None:
        """Index the batch whose base offset is ``offset`` at ``position``."""
        keys, values = self._columns()
        relative = offset - self.base_offset
        count = len(values)
        if count and (relative <= keys[count - 1] or position <= values[count - 1]):
            raise ValueError(
                f"index entry ({offset}, {position}) is not after the last one in {self.path.name}"
            )
        self._write(OFFSET_ENTRY.pack(relative, position), count)
        keys.append(relative)
        values.append(position)

    def lookup(self, offset: int, max_position: int | None = None) -> tuple[int, int]:
        """``(offset, position)`` of the largest entry with offset <= ``offset``.

        ``(base_offset, 0)`` when there is none. ``max_position`` ignores
        entries at or beyond it (a reader's snapshot of the log size).
        """
        keys, values = self._columns()
        hi = len(values)
        i = bisect.bisect_right(keys, offset - self.base_offset, 0, hi) - 1
        if max_position is not None:
            while i >= 0 and values[i] >= max_position:
                i -= 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + keys[i], values[i]

    def lookup_position(self, position: int) -> tuple[int, int]:
        """``(offset, position)`` of the largest entry with position <= ``position``."""
        keys, values = self._columns()
        i = bisect.bisect_right(values, position, 0, len(values)) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + keys[i], values[i]

    def last_entry(self) -> tuple[int, int]:
        keys, values = self._columns()
        if not values:
            return self.base_offset, 0
        return self.base_offset + keys[len(values) - 1], values[len(values) - 1]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches starting at or after ``offset``."""
        keys, _ = self._columns()
        self._truncate(bisect.bisect_left(keys, offset - self.base_offset))

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or beyond ``position``."""
        _, values = self._columns()
        self._truncate(bisect.bisect_left(values, position))


class TimeIndex(_SparseIndex):
    """``.timeindex``: running max timestamp -> last offset of the batch that reached it.

    Format: 12-byte entries ``timestamp i64, relativeOffset u32`` (big-endian).
    Invariants: timestamps strictly increasing, offsets non-decreasing; an
    entry ``(T, O)`` means every batch up to offset ``O`` has maxTimestamp <= T.
    Concurrency: one appender (under the log's lock), lock-free concurrent lookups.
    """

    __slots__ = ()
    ENTRY = TIME_ENTRY
    KEY_TYPE = "q"
    VALUE_TYPE = "I"

    def _decode(self, data: bytes) -> tuple[array[int], array[int]]:
        keys, values = array("q"), array("I")
        for ts, rel in TIME_ENTRY.iter_unpack(data):
            keys.append(ts)
            values.append(rel)
        return keys, values

    def _check(self, keys: array[int], values: array[int]) -> None:
        if not _strictly_increasing(keys) or not _non_decreasing(values):
            raise IndexCorrupt(f"{self.path.name} entries are not increasing")

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add ``(timestamp, offset)`` if it raises the largest timestamp indexed."""
        keys, values = self._columns()
        count = len(values)
        relative = offset - self.base_offset
        if count and (timestamp <= keys[count - 1] or relative < values[count - 1]):
            return False
        self._write(TIME_ENTRY.pack(timestamp, relative), count)
        keys.append(timestamp)
        values.append(relative)
        return True

    def lookup_before(self, timestamp: int) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the largest entry with timestamp < ``timestamp``.

        Every batch up to and including ``offset`` has maxTimestamp below the
        target, so a search for the first batch at or after the target may
        start at ``offset + 1``.
        """
        keys, values = self._columns()
        hi = len(values)
        i = bisect.bisect_left(keys, timestamp, 0, hi) - 1
        if i < 0:
            return None
        return keys[i], self.base_offset + values[i]

    def last_entry(self) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the last entry, reading only that entry if unloaded."""
        keys, values = self._keys, self._values
        if keys is not None and values is not None:
            n = len(values)
            return (keys[n - 1], self.base_offset + values[n - 1]) if n else None
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < TIME_ENTRY.size or size % TIME_ENTRY.size:
                    return None if size == 0 else self._loaded_last_entry()
                f.seek(size - TIME_ENTRY.size)
                ts, rel = TIME_ENTRY.unpack(f.read(TIME_ENTRY.size))
        except FileNotFoundError:
            return self._loaded_last_entry()
        return ts, self.base_offset + rel

    def _loaded_last_entry(self) -> tuple[int, int] | None:
        keys, values = self._columns()  # raises IndexCorrupt for the caller to rebuild
        n = len(values)
        return (keys[n - 1], self.base_offset + values[n - 1]) if n else None

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is at or after ``offset``."""
        _, values = self._columns()
        self._truncate(bisect.bisect_left(values, offset - self.base_offset))
