"""Which ``__consumer_offsets`` partition (and so which coordinator) owns a group.

Kafka computes ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``.
Matching it exactly keeps a group on the same partition number as in Kafka,
which matters once a cluster spreads those partitions over brokers.
"""

from __future__ import annotations

_INT_MIN = -(1 << 31)


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    wrapping as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except that Integer.MIN_VALUE maps to 0
    (Java's ``Math.abs`` would leave it negative)."""
    return 0 if n == _INT_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    return kafka_abs(java_string_hashcode(group_id)) % num_partitions
