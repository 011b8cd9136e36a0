"""Rendered JSON records of stored batches, kept for the next fetch of the same batches.

A JSON fetch decodes each record of each batch (CRC checked first) and renders it
with orjson: for a small fetch that was a third of the broker's CPU per request, and
consumers polling one partition's tail (many clients, or one client's retries) read
the same few batches again and again. :class:`RenderedBatches` keeps, per batch, each
record's offset and its rendered JSON object (``{"offset":..,"timestamp":..,"key":..,
"value":..,"headers":[..]}``, the bytes ``orjson.dumps`` gives for the record's dict in
the answer), so an answer is its records' bytes joined and spliced into the answer with
``orjson.Fragment``: the same bytes as rendering them anew.

Correctness does not rest on invalidation. A rendering is a pure function of the batch's
bytes (the base offset is in them) and the two formats; an entry is found by the formats,
base offset, CRC and length, and used only when the stored batch bytes equal the batch
read now (one ``memcmp``), so a batch rewritten at the same offsets (truncation and a new
leader's append, compaction) is rendered anew. Typed formats (avro, jsonschema,
protobuf) are kept only for batches whose every record decoded: such a rendering depends
on the batch and on schemas by id, which never change (ids are never reused; like every
deserializer's cache of schemas by id, a kept rendering outlives a permanent delete of
its schema until it is evicted); a batch with a per-record error (an id not registered
yet, the registry not serving) is not kept.

Bounds: ``fetch_render_cache_bytes`` (a setting, ``LOGBUS_FETCH_RENDER_CACHE_BYTES``)
counts the batch bytes, the rendered bytes and a per-record overhead; least recently
used out first; a batch whose entry would exceed an eighth of the bound is rendered
without being kept; 0 turns the cache off. Concurrency: the event loop's alone (a fetch
rendered on a worker thread, over ``INLINE_WORK_BYTES``, does not use it).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

# What one record's entry costs beyond its rendered bytes (a bytes object and an int in
# two lists): counted so a cache of tiny records stays within its bound.
RECORD_OVERHEAD = 96
ENTRY_OVERHEAD = 256


class Rendered(NamedTuple):
    """One batch's records: their offsets (ascending) and rendered JSON objects."""

    raw: bytes
    offsets: list[int]
    records: list[bytes]
    size: int


# (key_format, value_format, base_offset, crc, length)
_Key = tuple[str, str, int, int, int]


class RenderedBatches:
    """Rendered records by stored batch, least recently used out first (see the module)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[_Key, Rendered] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: _Key, batch: bytes) -> Rendered | None:
        """The entry for ``key`` if it was rendered from exactly ``batch``'s bytes
        (bytes, not a memoryview: a memoryview compares item by item, ~10x slower)."""
        entry = self._entries.get(key)
        if entry is None or entry.raw != batch:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        return entry

    def put(self, key: _Key, batch: bytes, offsets: list[int], records: list[bytes]) -> None:
        """Keep a batch's rendering (unless it is too large to keep, or the cache is off)."""
        size = ENTRY_OVERHEAD + len(batch) + sum(map(len, records))
        size += RECORD_OVERHEAD * len(records)
        if size > self.max_bytes >> 3:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.size
        self._entries[key] = Rendered(batch, offsets, records, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.size

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
