"""Where a produced record goes: Kafka's key hash, and a sticky choice for null keys.

A keyed record lands on ``toPositive(murmur2(key)) % numPartitions``, the
formula of Kafka's Java producer (``Utils.murmur2`` with seed ``0x9747b28c``),
so the same serialized key maps to the same partition number in Logbus and in
any Kafka client. Records without a key use a sticky partitioner: every
record of one produce request (one batch per partition is the unit of work)
goes to the same partition, and the next request sticks to another one. That
keeps null-key produce to one batch per request instead of one tiny batch per
partition, which is what Kafka's sticky partitioner (KIP-480) is for.
"""

from __future__ import annotations

import random
import struct
from functools import lru_cache

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's 32-bit murmur2 of ``data`` as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length >> 2
    # One unpack for every 4-byte little-endian word instead of indexing byte by byte.
    for k in struct.unpack_from(f"<{words}I", data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = length & ~3
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows on MIN_VALUE)."""
    return number & 0x7FFFFFFF


@lru_cache(maxsize=16384)
def _hash(key: bytes) -> int:
    return to_positive(murmur2(key))


# ``partition_for_key(key, n) == key_hash(key) % n`` for a key of type ``bytes``: for
# loops over many keys (JSON produce), without a Python frame and a ``bytes()`` per key.
key_hash = _hash


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null serialized key."""
    # Real key spaces repeat (user ids, order ids): the cache turns the pure-Python
    # hash into one dict lookup for hot keys.
    return _hash(bytes(key)) % num_partitions


class StickyPartitioner:
    """Per-topic sticky partition for records without a key.

    ``next_partition`` is called once per produce request (the batch): it
    returns a partition other than the one the previous request of the topic
    used, chosen at random like Kafka's ``BuiltInPartitioner``, so load
    spreads across partitions over requests while each request stays one
    batch. Safe within one event loop; under threads a race only costs an
    uneven choice, never a wrong answer.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._last: dict[str, int] = {}

    def next_partition(self, topic: str, num_partitions: int) -> int:
        if num_partitions <= 1:
            choice = 0
        else:
            last = self._last.get(topic)
            if last is None or last >= num_partitions:
                choice = self._rng.randrange(num_partitions)
            else:
                # Uniform over the other partitions: draw from n-1 and skip the previous one.
                choice = self._rng.randrange(num_partitions - 1)
                if choice >= last:
                    choice += 1
        self._last[topic] = choice
        return choice

    def forget(self, topic: str) -> None:
        """Drop a deleted topic's state (a recreated topic may have fewer partitions)."""
        self._last.pop(topic, None)
