"""DescribeProducers' partition errors as Kafka answers them, through the ``Topology``
protocol: a partition another broker leads NOT_LEADER_OR_FOLLOWER, one that does not exist
UNKNOWN_TOPIC_OR_PARTITION, the leader's producers for the others (a fake topology: a
cluster's leadership without a cluster)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.errors import ErrorCode

from app.common.errors import NotLeaderOrFollower, UnknownTopicOrPartition
from app.core.log.producer_state import ActiveProducer
from app.kafka.apis import HANDLERS, Context
from app.kafka.versions import DESCRIBE_PRODUCERS

PRODUCER = ActiveProducer(7, 2, 41, 1_700_000_000_000, 3, 120)


class Topology:
    """Leads ``orders-0``; ``orders-1`` is led by broker 2; ``orders`` has two partitions."""

    def leader_partition(self, topic: str, partition: int) -> Any:
        if topic != "orders" or partition not in (0, 1):
            raise UnknownTopicOrPartition(topic, partition)
        if partition == 1:
            raise NotLeaderOrFollower(topic, partition, 2, "http://b2:8080")
        return SimpleNamespace(log=SimpleNamespace(active_producers=lambda: [PRODUCER]))


def test_each_partition_is_answered_as_kafka() -> None:
    ctx = Context(
        SimpleNamespace(topology=Topology()),  # type: ignore[arg-type]
        ("127.0.0.1", 9092),
        lambda: None,
        lambda: None,
    )
    request = DescribeProducersRequest(
        topics=(
            TopicRequest(name="orders", partition_indexes=(0, 1, 9)),  # type: ignore[arg-type]
            TopicRequest(name="nope", partition_indexes=(0,)),  # type: ignore[arg-type]
        )
    )
    answer = asyncio.run(HANDLERS[DESCRIBE_PRODUCERS](ctx, request, 0))
    (orders, nope) = answer.topics
    codes = [(p.partition_index, p.error_code) for p in orders.partitions]
    assert codes == [
        (0, ErrorCode.none),
        (1, ErrorCode.not_leader_or_follower),
        (9, ErrorCode.unknown_topic_or_partition),
    ]
    (state,) = orders.partitions[0].active_producers
    assert (
        state.producer_id,
        state.producer_epoch,
        state.last_sequence,
        state.last_timestamp,
        state.coordinator_epoch,
        state.current_txn_start_offset,
    ) == (7, 2, 41, 1_700_000_000_000, 3, 120)
    assert orders.partitions[1].active_producers == ()
    assert [p.error_code for p in nope.partitions] == [ErrorCode.unknown_topic_or_partition]
