"""Value types shared by the producer, the consumer and the admin client."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where a produced record landed.

    ``offset`` is -1 with ``acks=0`` (the broker answers before saying where).
    ``timestamp`` is the broker's append time for topics with
    ``message.timestamp.type=LogAppendTime``, else the record's own timestamp.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    """One fetched record.

    A tuple whose fields hold only strings, ints, bytes and tuples, so the
    cyclic garbage collector untracks it on its first pass: a poll of a
    hundred thousand records must not make every later collection walk them.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class ConsumerGroupMetadata(NamedTuple):
    """What ``Producer.send_offsets_to_transaction`` needs of the consumer whose input it
    commits (Kafka's ConsumerGroupMetadata, KIP-447): the group, and the member's id and
    epoch, so a member fenced by a rebalance cannot commit offsets in a transaction.
    ``Consumer.group_metadata()`` makes it; ``member_epoch`` -1 skips the member check."""

    group_id: str
    member_id: str = ""
    member_epoch: int = -1
