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

__all__ = ["ENTRY_BYTES", "OffsetMap", "slot_of"]

# dict slot and hash (~40 B at the usual load), a 16-byte bytes object (49 B) and an
# int beyond the small-int cache (32 B), rounded up for dict growth spikes.
ENTRY_BYTES = 160
_RAW_KEY_LIMIT = 16


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

    def clear(self) -> None:
        self._entries.clear()
        self.latest_offset = -1
