"""The compaction cleaner's key -> latest-offset map, within a memory budget.

Kafka's cleaner keeps a fixed array of MD5 digests and offsets (its
``SkimpyOffsetMap``). Here a ``dict`` does the same job: a key shorter than
16 bytes is stored as it is (cheaper than hashing it, and it cannot collide
with a digest, which is always 16 bytes long), a longer key as its 16-byte
MD5 digest. Two distinct long keys share a slot with probability about
2^-128 per pair; like Kafka we accept that (the record of one of them would be
taken for superseded).

Memory: a dict entry with its key and offset objects costs about
:data:`ENTRY_BYTES`; the capacity is the budget divided by that. The cleaner
stops adding batches once the next one might not fit and cleans in several
passes instead.

Concurrency: owned by one cleaning at a time; not thread-safe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Protocol

__all__ = ["ENTRY_BYTES", "KeyedRecord", "OffsetMap", "slot_of"]

# dict slot and hash (~40 B at the usual load), a 16-byte bytes object (49 B) and an
# int beyond the small-int cache (32 B), rounded up for dict growth spikes.
ENTRY_BYTES = 160
_RAW_KEY_LIMIT = 16


class KeyedRecord(Protocol):
    """What the bulk methods read from a decoded record (aiokafka's records qualify)."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def offset(self) -> int: ...


def slot_of(key: bytes) -> bytes:
    """What a key is stored under: itself when short, else its 16-byte MD5 digest."""
    if len(key) < _RAW_KEY_LIMIT:
        return key
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Key -> offset of its latest record, for at most ``capacity`` keys.

    ``put`` overwrites (records are fed in offset order, so the last write is
    the latest); ``get`` answers -1 for an absent key. The map never refuses a
    ``put``: callers check :meth:`has_room` before a batch, so a single batch
    may overshoot the capacity by its own record count.
    """

    __slots__ = ("_entries", "capacity", "latest_offset")

    def __init__(self, memory_bytes: int) -> None:
        self.capacity = max(1, memory_bytes // ENTRY_BYTES)
        self._entries: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._entries)

    def has_room(self, records: int) -> bool:
        """Whether ``records`` more keys fit (an empty map always takes one batch)."""
        return not self._entries or len(self._entries) + records <= self.capacity

    def put(self, key: bytes, offset: int) -> None:
        self._entries[slot_of(key)] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        return self._entries.get(slot_of(key), -1)

    # The bulk forms keep the per-record work in one loop without method calls: the
    # cleaner spends most of its time here.

    def put_records(self, records: Iterable[KeyedRecord]) -> None:
        """``put`` every keyed record, in order (records without a key are skipped)."""
        entries = self._entries
        md5 = hashlib.md5
        latest = self.latest_offset
        for r in records:
            key = r.key
            if key is not None:
                offset = r.offset
                entries[
                    key if len(key) < _RAW_KEY_LIMIT else md5(key, usedforsecurity=False).digest()
                ] = offset
                if offset > latest:
                    latest = offset
        self.latest_offset = latest

    def latest_of(self, records: Sequence[KeyedRecord]) -> list[int]:
        """For each record, the latest offset of its key (-1: unknown key or no key)."""
        get = self._entries.get
        md5 = hashlib.md5
        out: list[int] = []
        append = out.append
        for r in records:
            key = r.key
            if key is None:
                append(-1)
            else:
                append(
                    get(
                        key
                        if len(key) < _RAW_KEY_LIMIT
                        else md5(key, usedforsecurity=False).digest(),
                        -1,
                    )
                )
        return out

    def clear(self) -> None:
        self._entries.clear()
        self.latest_offset = -1
