"""The aborted-transaction index of one segment (``.txnindex``, Kafka's ``TransactionIndex``).

Byte layout (big-endian, 34-byte entries back to back, no header, as Kafka's
``AbortedTxn``)::

    offset  size  field
         0     2  version           int16, always 0
         2     8  producerId        int64
        10     8  firstOffset       int64  first offset of the aborted transaction
        18     8  lastOffset        int64  offset of its ABORT marker
        26     8  lastStableOffset  int64  the LSO right after the marker: the first
                                           offset of the oldest transaction still open
                                           then, or lastOffset + 1 if none was

An entry is written to the index of the segment that holds the ABORT marker,
when the marker is appended (or replayed by recovery). A transaction may have
begun in an earlier segment: ``firstOffset`` can be below the segment's base.

Invariants: entries are in marker order, so ``lastOffset`` strictly grows,
and every ``lastOffset`` is an offset of this segment's ``.log``. Truncating
the segment at offset ``o`` drops the entries with ``lastOffset >= o``.

Unlike the offset and time indexes, this one is not derived from its own
``.log``: an entry needs the producer state at the transaction's start.
Below the recovery point the file is trusted (it is fsynced with its
segment); recovery rebuilds the entries of every segment it replays through
the producer state (:mod:`app.core.log.producer_state`). A torn tail (a
length that is not a multiple of 34) is cut when the file is loaded.

Lookups (:meth:`TransactionIndex.collect`) answer a fetch: every aborted
transaction overlapping ``[fetch offset, upper bound)``, and whether the
search is complete (an entry's ``lastStableOffset`` reached the upper bound,
so no later segment can hold another overlapping one), as Kafka's
``collectAbortedTxns``.

Storage: aborts are rare, so there is no open descriptor per index (the
broker's descriptor budget counts ``.log`` files only): an append opens the
file with ``O_APPEND``, writes one entry and closes it; the entries are also
kept in memory, loaded on first use.

Concurrency: one writer (the log's append lock) and any number of readers.
The writer appends to the in-memory list (atomic under the GIL) and replaces
it on truncation; readers work on the list they found. Loading takes a small
per-index lock.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path
from typing import NamedTuple

from app.core.log.checkpoint import fsync_path

__all__ = ["ENTRY", "TXN_INDEX_SUFFIX", "AbortedTxn", "TransactionIndex"]

TXN_INDEX_SUFFIX = ".txnindex"

# version int16, producerId int64, firstOffset int64, lastOffset int64, lastStableOffset int64
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
_VERSION = 0


class AbortedTxn(NamedTuple):
    """One aborted transaction (Kafka's ``AbortedTxn``; a fetch answers the first two fields)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return ENTRY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


class TransactionIndex:
    """The ``.txnindex`` of one segment; see the module docstring."""

    __slots__ = ("_entries", "_lock", "base_offset", "path")

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None
        self._lock = threading.Lock()

    def _load(self) -> list[AbortedTxn]:
        entries = self._entries
        if entries is not None:
            return entries
        with self._lock:
            if self._entries is not None:
                return self._entries
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            whole = len(data) - len(data) % ENTRY_SIZE
            loaded: list[AbortedTxn] = []
            for pos in range(0, whole, ENTRY_SIZE):
                version, *fields = ENTRY.unpack_from(data, pos)
                if version != _VERSION or (loaded and fields[2] <= loaded[-1].last_offset):
                    whole = pos  # damage: keep what came before (recovery rebuilds the rest)
                    break
                loaded.append(AbortedTxn(*fields))
            if whole != len(data):
                os.truncate(self.path, whole)
            self._entries = loaded
            return loaded

    @property
    def entries(self) -> list[AbortedTxn]:
        """A snapshot of the entries, in marker order."""
        return list(self._load())

    def append(self, txn: AbortedTxn) -> None:
        """Add the entry of an ABORT marker just written to this segment."""
        entries = self._load()
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"{self.path.name}: aborted transaction ending at {txn.last_offset} is not "
                f"after the last one ({entries[-1].last_offset})"
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, txn.pack())
        finally:
            os.close(fd)
        entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        entries = self._load()
        kept = [e for e in entries if e.last_offset < offset]
        if len(kept) == len(entries):
            return
        if self.path.exists():
            os.truncate(self.path, len(kept) * ENTRY_SIZE)
        self._entries = kept

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping ``[fetch_offset, upper_bound)``, and whether the search is done."""
        out: list[AbortedTxn] = []
        for e in self._load():
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset >= upper_bound:
                return out, True
        return out, False

    def rename(self, path: Path) -> None:
        """Follow the segment's files (``.deleted``, compaction suffixes); no file, no rename."""
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def flush(self) -> None:
        if self.path.exists():
            fsync_path(self.path)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []

    def reset(self) -> None:
        """Empty the index (a new segment whose name may have had a stale file)."""
        self.path.unlink(missing_ok=True)
        self._entries = []
