"""Where ``__consumer_offsets`` lives, for the group coordinator: :class:`OffsetsPlacement`,
over the broker's :class:`~app.core.topology.Topology`.

The coordinator has one code path; the topology says where partitions are:

* a lone broker's (:class:`~app.core.local_topology.LocalTopology`,
  ``clustered`` False): this broker holds and leads every partition of every
  topic, for good. Appends are durable once written (there is nobody to
  replicate to); the topic is created with one replica.
* a cluster's (:class:`~app.core.replication.manager.ReplicaManager`,
  ``clustered`` True): it says which brokers lead which partitions. The
  coordinator serves the groups of the offsets partitions this broker leads;
  writes go to the leader's log and count once every in-sync replica has them
  (Kafka's acks=all); the topic is created in ZooKeeper with
  ``offsets.topic.replication.factor`` (capped by the live brokers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from app.common.errors import OffsetNotAvailable, UnknownTopicOrPartition
from app.core.topology import LeadershipListener, NewTopic, TopicListener

if TYPE_CHECKING:
    from app.core.log.log import AppendInfo, Log
    from app.core.log.manager import LogManager

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIGS: Mapping[str, object] = {"cleanup.policy": "compact"}
# Written by the broker only: clients can neither produce to them nor commit offsets
# for them (Kafka's internal topics).
# (``__transaction_state`` is the transaction coordinator's, app/txn/model.py;
# ``_schemas`` the schema registry's, app/registry/records.py: a forged record there
# would be applied as a registered schema, so only the registry writes it.)
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state", "_schemas"})


class ReplicaView(Protocol):
    """The part of a leader replica (:class:`~app.core.topology.LeaderReplica`) the
    coordinator uses."""

    @property
    def log(self) -> Log: ...

    def append_as_leader(self, data: bytes, *, acks_all: bool) -> AppendInfo: ...

    async def wait_replicated(self, last_offset: int, timeout_ms: int) -> None: ...


class TopologyView(Protocol):
    """The part of the broker's :class:`~app.core.topology.Topology` the coordinator uses
    (tests stand in a small fake cluster)."""

    @property
    def brokers(self) -> Mapping[int, Any]: ...

    @property
    def leadership_moves(self) -> bool: ...

    def add_leadership_listener(self, cb: LeadershipListener) -> None: ...

    def add_topic_listener(self, cb: TopicListener) -> None: ...

    def is_leader(self, topic: str, partition: int) -> bool: ...

    def leader_of(self, topic: str, partition: int) -> tuple[int | None, str | None]: ...

    def topics(self) -> list[str]: ...

    def partition_count(self, topic: str) -> int: ...

    async def create_topic(self, topic: NewTopic) -> None: ...

    def leader_partition(self, topic: str, partition: int) -> ReplicaView: ...

    def offsets_error(self, topic: str, partition: int) -> OffsetNotAvailable | None: ...


class OffsetsPlacement:
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
        self.topology = topology
        self.manager = manager
        self.node_id = node_id
        self.url = url
        self.replication_factor = replication_factor
        # Leadership of the offsets partitions can move (a cluster): the coordinator then
        # loads and drops them as it does.
        self.clustered: bool = topology.leadership_moves

    def topics(self) -> list[str]:
        """Every topic (of the cluster), for regex subscriptions."""
        return self.topology.topics()

    def partition_count(self, topic: str) -> int:
        """A topic's partition count (cluster-wide); UnknownTopicOrPartition if none."""
        return self.topology.partition_count(topic)

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

    def offsets_partitions(self) -> int | None:
        """Partitions of ``__consumer_offsets``; None while the topic does not exist."""
        try:
            return self.topology.partition_count(OFFSETS_TOPIC)
        except UnknownTopicOrPartition:
            return None

    async def create_offsets_topic(self, partitions: int) -> None:
        """Create ``__consumer_offsets`` (TopicAlreadyExists if it is there)."""
        # Kafka caps offsets.topic.replication.factor by the live brokers only while the
        # cluster is young; here it always is (a lone first broker still gets its topic).
        rf = max(1, min(self.replication_factor, len(self.topology.brokers)))
        await self.topology.create_topic(
            NewTopic(OFFSETS_TOPIC, partitions, rf, OFFSETS_TOPIC_CONFIGS)
        )

    def leads(self, partition: int) -> bool:
        return self.topology.is_leader(OFFSETS_TOPIC, partition)

    def leader_of(self, partition: int) -> tuple[int | None, str | None]:
        """(broker id, url) leading an offsets partition; (None, None) while unknown."""
        try:
            leader, url = self.topology.leader_of(OFFSETS_TOPIC, partition)
        except UnknownTopicOrPartition:
            return None, None
        if leader == self.node_id:
            url = self.url
        return leader, url

    def offsets_log(self, partition: int) -> Log:
        """The local log of an offsets partition this broker leads (to load it)."""
        return self.topology.leader_partition(OFFSETS_TOPIC, partition).log

    def append(self, partition: int, batch: bytes) -> int:
        """Append to an offsets partition this broker leads; the batch's last offset.
        Raises NotLeaderOrFollower (not the leader) or NotEnoughReplicas (ISR below
        min.insync.replicas, nothing written)."""
        replica = self.topology.leader_partition(OFFSETS_TOPIC, partition)
        return replica.append_as_leader(batch, acks_all=True).last_offset

    async def replicated(self, partition: int, last_offset: int, timeout_ms: int) -> None:
        """Until every in-sync replica holds ``last_offset``. Raises NotLeaderOrFollower,
        RequestTimedOut or NotEnoughReplicasAfterAppend."""
        replica = self.topology.leader_partition(OFFSETS_TOPIC, partition)
        if replica.log.high_watermark > last_offset:
            return
        await replica.wait_replicated(last_offset, timeout_ms)

    def add_leadership_listener(self, cb: LeadershipListener) -> None:
        self.topology.add_leadership_listener(cb)

    def add_topic_listener(self, cb: TopicListener) -> None:
        """``cb(topic)`` on the loop whenever a topic is deleted (anywhere in a cluster)."""
        self.topology.add_topic_listener(cb)
