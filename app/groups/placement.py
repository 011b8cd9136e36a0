"""Where ``__consumer_offsets`` lives, for the group coordinator: :class:`OffsetsPlacement`,
over the broker's :class:`~app.core.topology.Topology`.

The coordinator has one code path; the topology says where partitions are (a lone
broker's or a cluster's), through the placement every internal topic shares
(:class:`~app.core.internal_topic.InternalTopicPlacement`: who leads a partition,
creating the topic, appends with acks=all and the wait for the in-sync replicas). In a
cluster the coordinator serves the groups of the offsets partitions this broker leads;
the topic is created with ``offsets.topic.replication.factor`` (capped by the live
brokers). This module adds what only the group coordinator asks: every topic (regex
subscriptions), this broker's replica of any partition, the offsets topic's log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from app.common.errors import OffsetNotAvailable, UnknownTopicOrPartition
from app.core.internal_topic import InternalTopicPlacement
from app.core.internal_topic import TopologyView as PlacementTopology
from app.core.topology import TopicListener

if TYPE_CHECKING:
    from app.core.log.log import Log
    from app.core.log.manager import LogManager

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIGS: Mapping[str, object] = {"cleanup.policy": "compact"}
# Written by the broker only: clients can neither produce to them nor commit offsets
# for them (Kafka's internal topics).
# (``__transaction_state`` is the transaction coordinator's, app/txn/model.py;
# ``_schemas`` the schema registry's, app/registry/records.py: a forged record there
# would be applied as a registered schema, so only the registry writes it.)
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state", "_schemas"})


class TopologyView(PlacementTopology, Protocol):
    """The part of the broker's :class:`~app.core.topology.Topology` the group
    coordinator uses (tests stand in a small fake cluster)."""

    def add_topic_listener(self, cb: TopicListener) -> None: ...

    def topics(self) -> list[str]: ...

    def offsets_error(self, topic: str, partition: int) -> OffsetNotAvailable | None: ...


class OffsetsPlacement(InternalTopicPlacement[TopologyView]):
    """What the coordinator asks about topics and ``__consumer_offsets``, answered by the
    broker's topology (see the module docstring)."""

    def __init__(
        self,
        topology: TopologyView,
        manager: LogManager,
        node_id: int,
        url: str,
        replication_factor: int,
    ) -> None:
        super().__init__(
            topology, OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS, node_id, url, replication_factor
        )
        self.manager = manager

    def topics(self) -> list[str]:
        """Every topic (of the cluster), for regex subscriptions."""
        return self.topology.topics()

    def local_log(self, topic: str, partition: int) -> Log | None:
        """This broker's replica of a partition (leader or follower), None if it has none."""
        try:
            return self.manager.get_log(topic, partition)
        except UnknownTopicOrPartition:
            return None

    def offsets_error(self, topic: str, partition: int) -> OffsetNotAvailable | None:
        """OffsetNotAvailable while this broker's replica leads with a high watermark
        still below its epoch's start (it cannot say where its log ends yet; Kafka's
        ListOffsets rule, :func:`app.core.topology.list_offset`), else None."""
        return self.topology.offsets_error(topic, partition)

    def offsets_log(self, partition: int) -> Log:
        """The local log of an offsets partition this broker leads (to load it)."""
        return self.topology.leader_partition(OFFSETS_TOPIC, partition).log

    def add_topic_listener(self, cb: TopicListener) -> None:
        """``cb(topic)`` on the loop whenever a topic is deleted (anywhere in a cluster)."""
        self.topology.add_topic_listener(cb)
