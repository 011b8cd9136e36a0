"""Where ``__consumer_offsets`` lives, for the group coordinator.

The coordinator has one code path; what differs between a lone broker and a
cluster is behind :class:`OffsetsPlacement`:

* :class:`LocalPlacement`: this broker holds and leads every partition of
  every topic. Appends are durable once written (there is nobody to
  replicate to), the topic is created in the local :class:`LogManager`.
* :class:`ClusterPlacement`: a :class:`~app.core.replication.manager.ReplicaManager`
  says which brokers lead which partitions. The coordinator serves the groups
  of the offsets partitions this broker leads; writes go to the leader's log
  and count once every in-sync replica has them (Kafka's acks=all); the topic
  is created in ZooKeeper with ``offsets.topic.replication.factor`` (capped by
  the live brokers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from app.common.errors import UnknownTopicOrPartition

if TYPE_CHECKING:
    from app.core.log.log import AppendInfo, Log
    from app.core.log.manager import LogManager

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIGS: Mapping[str, object] = {"cleanup.policy": "compact"}
# Written by the broker only: clients can neither produce to them nor commit offsets
# for them (Kafka's internal topics).
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})

LeadershipListener = Callable[[str, int, bool], None]
TopicListener = Callable[[str], None]


class ReplicaView(Protocol):
    """The part of a partition replica (:class:`~app.core.replication.partition.Partition`)
    the coordinator uses."""

    @property
    def log(self) -> Log: ...

    def append_as_leader(self, data: bytes, *, acks_all: bool) -> AppendInfo: ...

    async def wait_replicated(self, last_offset: int, timeout_ms: int) -> None: ...


class ClusterView(Protocol):
    """The part of :class:`~app.core.replication.manager.ReplicaManager` the coordinator
    uses (tests stand in a small fake)."""

    @property
    def brokers(self) -> Mapping[int, Any]: ...

    def add_leadership_listener(self, cb: LeadershipListener) -> None: ...

    def add_topic_listener(self, cb: TopicListener) -> None: ...

    def is_leader(self, topic: str, partition: int) -> bool: ...

    def leader_of(self, topic: str, partition: int) -> tuple[int | None, str | None]: ...

    def topics(self) -> list[str]: ...

    def partition_count(self, topic: str) -> int: ...

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int | None,
        configs: Mapping[str, object] = ...,
    ) -> None: ...

    def leader_partition(self, topic: str, partition: int) -> ReplicaView: ...


class OffsetsPlacement(Protocol):
    """What the coordinator asks about topics and ``__consumer_offsets``."""

    @property
    def clustered(self) -> bool: ...

    def topics(self) -> list[str]:
        """Every topic (of the cluster), for regex subscriptions."""
        ...

    def partition_count(self, topic: str) -> int:
        """A topic's partition count (cluster-wide); UnknownTopicOrPartition if none."""
        ...

    def local_log(self, topic: str, partition: int) -> Log | None:
        """This broker's replica of a partition (leader or follower), None if it has none."""
        ...

    def offsets_partitions(self) -> int | None:
        """Partitions of ``__consumer_offsets``; None while the topic does not exist."""
        ...

    async def create_offsets_topic(self, partitions: int) -> None:
        """Create ``__consumer_offsets`` (TopicAlreadyExists if it is there)."""
        ...

    def leads(self, partition: int) -> bool: ...

    def leader_of(self, partition: int) -> tuple[int | None, str | None]:
        """(broker id, url) leading an offsets partition; (None, None) while unknown."""
        ...

    def offsets_log(self, partition: int) -> Log:
        """The local log of an offsets partition this broker leads (to load it)."""
        ...

    def append(self, partition: int, batch: bytes) -> int:
        """Append to an offsets partition this broker leads; the batch's last offset.
        Raises NotLeaderOrFollower (not the leader) or NotEnoughReplicas (ISR below
        min.insync.replicas, nothing written)."""
        ...

    async def replicated(self, partition: int, last_offset: int, timeout_ms: int) -> None:
        """Until every in-sync replica holds ``last_offset``. Raises NotLeaderOrFollower,
        RequestTimedOut or NotEnoughReplicasAfterAppend."""
        ...

    def add_leadership_listener(self, cb: LeadershipListener) -> None: ...

    def add_topic_listener(self, cb: TopicListener) -> None:
        """``cb(topic)`` on the loop whenever a topic is deleted (anywhere in a cluster)."""
        ...


class LocalPlacement:
    """A lone broker: every partition is here and led here."""

    clustered = False

    def __init__(self, manager: LogManager, node_id: int, url: str) -> None:
        self.manager = manager
        self.node_id = node_id
        self.url = url

    def topics(self) -> list[str]:
        return self.manager.topics()

    def partition_count(self, topic: str) -> int:
        return self.manager.partition_count(topic)

    def local_log(self, topic: str, partition: int) -> Log | None:
        try:
            return self.manager.get_log(topic, partition)
        except UnknownTopicOrPartition:
            return None

    def offsets_partitions(self) -> int | None:
        try:
            return self.manager.partition_count(OFFSETS_TOPIC)
        except UnknownTopicOrPartition:
            return None

    async def create_offsets_topic(self, partitions: int) -> None:
        await asyncio.to_thread(
            self.manager.create_topic, OFFSETS_TOPIC, partitions, dict(OFFSETS_TOPIC_CONFIGS)
        )

    def leads(self, partition: int) -> bool:
        return True

    def leader_of(self, partition: int) -> tuple[int | None, str | None]:
        return self.node_id, self.url

    def offsets_log(self, partition: int) -> Log:
        return self.manager.get_log(OFFSETS_TOPIC, partition)

    def append(self, partition: int, batch: bytes) -> int:
        return self.manager.get_log(OFFSETS_TOPIC, partition).append(batch).last_offset

    async def replicated(self, partition: int, last_offset: int, timeout_ms: int) -> None:
        return None

    def add_leadership_listener(self, cb: LeadershipListener) -> None:
        return None  # leadership never moves

    def add_topic_listener(self, cb: TopicListener) -> None:
        # Deletions reach a lone broker through its own DELETE /topics only, which
        # tells the coordinator itself (GroupCoordinator.topic_deleted).
        return None


class ClusterPlacement:
    """Cluster mode: leadership, partition counts and replication from the ReplicaManager."""

    clustered = True

    def __init__(
        self,
        cluster: ClusterView,
        manager: LogManager,
        node_id: int,
        url: str,
        replication_factor: int,
    ) -> None:
        self.cluster = cluster
        self.manager = manager
        self.node_id = node_id
        self.url = url
        self.replication_factor = replication_factor

    def topics(self) -> list[str]:
        return self.cluster.topics()

    def partition_count(self, topic: str) -> int:
        return self.cluster.partition_count(topic)

    def local_log(self, topic: str, partition: int) -> Log | None:
        try:
            return self.manager.get_log(topic, partition)
        except UnknownTopicOrPartition:
            return None

    def offsets_partitions(self) -> int | None:
        try:
            return self.cluster.partition_count(OFFSETS_TOPIC)
        except UnknownTopicOrPartition:
            return None

    async def create_offsets_topic(self, partitions: int) -> None:
        # Kafka caps offsets.topic.replication.factor by the live brokers only while the
        # cluster is young; here it always is (a lone first broker still gets its topic).
        rf = max(1, min(self.replication_factor, len(self.cluster.brokers)))
        await self.cluster.create_topic(OFFSETS_TOPIC, partitions, rf, OFFSETS_TOPIC_CONFIGS)

    def leads(self, partition: int) -> bool:
        return self.cluster.is_leader(OFFSETS_TOPIC, partition)

    def leader_of(self, partition: int) -> tuple[int | None, str | None]:
        try:
            leader, url = self.cluster.leader_of(OFFSETS_TOPIC, partition)
        except UnknownTopicOrPartition:
            return None, None
        if leader == self.node_id:
            url = self.url
        return leader, url

    def offsets_log(self, partition: int) -> Log:
        return self.cluster.leader_partition(OFFSETS_TOPIC, partition).log

    def append(self, partition: int, batch: bytes) -> int:
        replica = self.cluster.leader_partition(OFFSETS_TOPIC, partition)
        return replica.append_as_leader(batch, acks_all=True).last_offset

    async def replicated(self, partition: int, last_offset: int, timeout_ms: int) -> None:
        replica = self.cluster.leader_partition(OFFSETS_TOPIC, partition)
        if replica.log.high_watermark > last_offset:
            return
        await replica.wait_replicated(last_offset, timeout_ms)

    def add_leadership_listener(self, cb: LeadershipListener) -> None:
        self.cluster.add_leadership_listener(cb)

    def add_topic_listener(self, cb: TopicListener) -> None:
        self.cluster.add_topic_listener(cb)
