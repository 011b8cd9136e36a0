"""Where a broker-written internal topic lives (``__consumer_offsets``,
``__transaction_state``, ``_schemas``): :class:`InternalTopicPlacement`, over the
broker's :class:`~app.core.topology.Topology`, shared by the group coordinator
(``app/groups/placement.py``), the transaction coordinator (``app/txn/placement.py``) and
the schema registry (``app/registry/storage.py``).

One code path for a lone broker and a cluster; the topology says where partitions are:

* a lone broker's (:class:`~app.core.local_topology.LocalTopology`): this broker holds
  and leads every partition for good, so it coordinates every key
  (:attr:`InternalTopicPlacement.coordinates_every_key`) and has no leadership to follow
  (:meth:`InternalTopicPlacement.follow_leadership` answers False). Appends are durable
  once written (nobody to replicate to); the topic gets one replica.
* a cluster's (:class:`~app.core.replication.manager.ReplicaManager`): a partition's
  leader coordinates its keys, and leadership moves; writes go to the leader's log and
  count once every in-sync replica has them (Kafka's acks=all for its internal topics).
  The topic is created in ZooKeeper with the owner's replication factor, capped by the
  live brokers (Kafka caps ``offsets.topic.replication.factor`` only while the cluster
  is young; here it always is, so a lone first broker still gets its topic).

Concurrency: event loop only, except :meth:`InternalTopicPlacement.append`, which the
topology allows on a worker thread too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from app.common.errors import UnknownTopicOrPartition
from app.core.topology import LeadershipListener, NewTopic

if TYPE_CHECKING:
    from app.core.log.log import AppendInfo, Log
    from app.core.log.producer_state import UnnumberedBatch


class ReplicaView(Protocol):
    """The part of a leader replica (:class:`~app.core.topology.LeaderReplica`) a
    placement uses."""

    @property
    def log(self) -> Log: ...

    def append_as_leader(self, data: bytes | UnnumberedBatch, *, acks_all: bool) -> AppendInfo: ...

    async def wait_replicated(self, last_offset: int, timeout_ms: int) -> None: ...


class TopologyView(Protocol):
    """The part of the broker's :class:`~app.core.topology.Topology` a placement uses
    (tests stand in a small fake cluster)."""

    @property
    def brokers(self) -> Mapping[int, Any]: ...

    @property
    def leadership_moves(self) -> bool: ...

    def add_leadership_listener(self, cb: LeadershipListener) -> None: ...

    def is_leader(self, topic: str, partition: int) -> bool: ...

    def leader_of(self, topic: str, partition: int) -> tuple[int | None, str | None]: ...

    def partition_count(self, topic: str) -> int: ...

    async def create_topic(self, topic: NewTopic) -> None: ...

    def leader_partition(self, topic: str, partition: int) -> ReplicaView: ...


TopologyT = TypeVar("TopologyT", bound=TopologyView)


@dataclass(eq=False)
class InternalTopicPlacement(Generic[TopologyT]):
    """``topic`` (created with ``configs``) as its owner sees it; see the module
    docstring. ``url`` is this broker's own, named when it leads a partition."""

    topology: TopologyT
    topic: str
    configs: Mapping[str, object]
    node_id: int
    url: str
    replication_factor: int

    @property
    def coordinates_every_key(self) -> bool:
        """Whether this broker leads every partition of the topic for good (a lone broker),
        and so coordinates every key (group id, transactional id): it loads them all at
        start and routes no key elsewhere. False where leadership moves (a cluster): a
        key's coordinator is its partition's leader, loaded here only while it leads."""
        return not self.topology.leadership_moves

    def follow_leadership(self, cb: LeadershipListener) -> bool:
        """Where leadership moves: ``cb(topic, partition, leads)`` on every later change,
        and ``cb(topic, partition, True)`` now for each partition led here already;
        True. A lone broker has no leadership to follow: nothing, False (the owner loads
        every partition itself)."""
        if self.coordinates_every_key:
            return False
        self.topology.add_leadership_listener(cb)
        self.replay_leadership(cb)
        return True

    def replay_leadership(self, cb: LeadershipListener) -> None:
        """Where leadership moves: ``cb(topic, partition, True)`` for each partition led
        here now (after creating the topic: its new partitions); nothing alone."""
        if self.coordinates_every_key:
            return
        for partition in range(self.partitions() or 0):
            if self.leads(partition):
                cb(self.topic, partition, True)

    def partitions(self) -> int | None:
        """Partitions of the topic; None while it does not exist."""
        try:
            return self.topology.partition_count(self.topic)
        except UnknownTopicOrPartition:
            return None

    def partition_count(self, topic: str) -> int:
        """Any topic's partition count (cluster-wide); UnknownTopicOrPartition if none."""
        return self.topology.partition_count(topic)

    async def create(self, partitions: int) -> None:
        """Create the topic (TopicAlreadyExists if it is there), with the replication
        factor capped by the live brokers."""
        rf = max(1, min(self.replication_factor, len(self.topology.brokers)))
        await self.topology.create_topic(NewTopic(self.topic, partitions, rf, self.configs))

    def leads(self, partition: int) -> bool:
        return self.topology.is_leader(self.topic, partition)

    def leader_of(self, partition: int) -> tuple[int | None, str | None]:
        """(broker id, url) leading a partition of the topic, this broker's own url when
        it leads; (None, None) while unknown (no leader, or no topic)."""
        try:
            leader, url = self.topology.leader_of(self.topic, partition)
        except UnknownTopicOrPartition:
            return None, None
        if leader == self.node_id:
            url = self.url
        return leader, url

    def append(self, partition: int, batch: bytes | UnnumberedBatch) -> int:
        """Append a RecordBatch (or one the log numbers: TxnOffsetCommit's) to a
        partition this broker leads, acks=all; its last offset. Raises NotLeaderOrFollower (not the leader, naming it) or
        NotEnoughReplicas (ISR below min.insync.replicas, nothing written)."""
        replica = self.topology.leader_partition(self.topic, partition)
        return replica.append_as_leader(batch, acks_all=True).last_offset

    async def replicated(self, partition: int, last_offset: int, timeout_ms: int) -> None:
        """Until every in-sync replica holds ``last_offset`` (at once alone). Raises
        NotLeaderOrFollower, RequestTimedOut or NotEnoughReplicasAfterAppend."""
        replica = self.topology.leader_partition(self.topic, partition)
        if replica.log.high_watermark > last_offset:
            return
        await replica.wait_replicated(last_offset, timeout_ms)
