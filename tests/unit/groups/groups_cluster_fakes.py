"""A small stand-in for ReplicaManager, for the group coordinator's cluster mode.

It holds what the coordinator asks of a cluster: live brokers, topics with a
cluster-wide partition count, who leads each partition (flipped by the test
with :meth:`FakeCluster.set_leader`, which calls the leadership listeners as
ReplicaManager does), and for partitions led here a replica whose high
watermark moves only when the test says the followers caught up
(:meth:`FakeReplica.replicate`), unless ``auto_replicate``.

Several fakes (one per broker) may share one LogManager: the shared logs are
then a perfectly replicated ``__consumer_offsets``, so a new leader loads what
the old one wrote.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from app.common.errors import (
    NotEnoughReplicas,
    NotLeaderOrFollower,
    OffsetNotAvailable,
    RequestTimedOut,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from app.core.log import LogManager
from app.core.log.log import AppendInfo, Log
from app.core.replication.state import BrokerInfo
from app.core.topology import NewTopic
from app.groups.hashing import partition_for
from app.groups.placement import OFFSETS_TOPIC

URLS = {1: "http://broker-1:8080", 2: "http://broker-2:8080", 3: "http://broker-3:8080"}


class FakeReplica:
    def __init__(self, log: Log, auto_replicate: bool) -> None:
        self.log = log
        self.auto_replicate = auto_replicate
        self.isr_ok = True
        self.waits: list[int] = []
        self._acks: list[tuple[int, asyncio.Future[None]]] = []
        # A leader with followers: the high watermark waits for them.
        log.hw_follows_leo = auto_replicate

    def check_min_isr(self) -> None:
        if not self.isr_ok:
            raise NotEnoughReplicas(f"{self.log.topic}-{self.log.partition}: ISR too small")

    def append_as_leader(self, data: bytes, *, acks_all: bool) -> AppendInfo:
        if acks_all:
            self.check_min_isr()
        return self.log.append(data)

    async def wait_replicated(self, last_offset: int, timeout_ms: int) -> None:
        self.waits.append(last_offset)
        if self.auto_replicate:
            self.replicate()
        if self.log.high_watermark > last_offset:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._acks.append((last_offset, future))
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout_ms / 1000)
        except TimeoutError:
            raise RequestTimedOut(f"offset {last_offset} not replicated") from None

    def replicate(self) -> None:
        """Every follower caught up: the high watermark reaches the log end."""
        self.log.high_watermark = self.log.log_end_offset
        for offset, future in self._acks:
            if offset < self.log.high_watermark and not future.done():
                future.set_result(None)
        self._acks = [(o, f) for o, f in self._acks if not f.done()]

    def resign(self) -> None:
        for _, future in self._acks:
            if not future.done():
                future.set_exception(NotLeaderOrFollower(self.log.topic, self.log.partition))
        self._acks = []
        self.log.hw_follows_leo = True


class FakeCluster:
    leadership_moves = True

    def __init__(
        self,
        manager: LogManager,
        broker_id: int = 1,
        *,
        brokers: tuple[int, ...] = (1, 2, 3),
        leader_for: Callable[[str, int], int | None] = lambda _t, p: 1 + p % 3,
        auto_replicate: bool = True,
    ) -> None:
        self.manager = manager
        self.broker_id = broker_id
        self.brokers = {b: BrokerInfo(b, URLS[b]) for b in brokers}
        self.leader_for = leader_for
        self.auto_replicate = auto_replicate
        self.counts: dict[str, int] = {}
        self.leaders: dict[tuple[str, int], int | None] = {}
        self.replicas: dict[tuple[str, int], FakeReplica] = {}
        self.listeners: list[Callable[[str, int, bool], None]] = []
        self.topic_listeners: list[Callable[[str], None]] = []
        self.created: list[tuple[str, int, int | None, dict[str, object]]] = []
        # Partitions led here since an election too recent for their high watermark to
        # be their end (ReplicaManager.offsets_error answers OFFSET_NOT_AVAILABLE).
        self.catching_up: set[tuple[str, int]] = set()

    # -- what the coordinator uses -------------------------------------------------------

    def add_leadership_listener(self, cb: Callable[[str, int, bool], None]) -> None:
        self.listeners.append(cb)

    def add_topic_listener(self, cb: Callable[[str], None]) -> None:
        self.topic_listeners.append(cb)

    def topics(self) -> list[str]:
        return sorted(self.counts)

    def partition_count(self, topic: str) -> int:
        if topic not in self.counts:
            raise UnknownTopicOrPartition(topic)
        return self.counts[topic]

    def broker_url(self, broker: int) -> str | None:
        info = self.brokers.get(broker)
        return None if info is None else info.url

    def leader_of(self, topic: str, partition: int) -> tuple[int | None, str | None]:
        if not 0 <= partition < self.partition_count(topic):
            raise UnknownTopicOrPartition(topic, partition)
        leader = self.leaders.get((topic, partition))
        if leader is None:
            return None, None
        return leader, self.broker_url(leader)

    def is_leader(self, topic: str, partition: int) -> bool:
        return self.leaders.get((topic, partition)) == self.broker_id

    def offsets_error(self, topic: str, partition: int) -> OffsetNotAvailable | None:
        if (topic, partition) in self.catching_up:
            return OffsetNotAvailable(topic, partition, 0, 5, 2)
        return None

    def leader_partition(self, topic: str, partition: int) -> FakeReplica:
        replica = self.replicas.get((topic, partition))
        if replica is not None and self.is_leader(topic, partition):
            return replica
        leader, url = self.leader_of(topic, partition)
        raise NotLeaderOrFollower(topic, partition, leader, url)

    async def create_topic(self, topic: NewTopic, *, timeout_ms: int = 30_000) -> None:
        name, partitions, replication_factor, configs = (
            topic.name,
            topic.partitions,
            topic.replication_factor,
            topic.configs,
        )
        if name in self.counts:
            raise TopicAlreadyExists(name)
        self.created.append((name, partitions, replication_factor, dict(configs)))
        self.add_topic(name, partitions, dict(configs))
        await asyncio.sleep(0)

    async def stop(self) -> None:
        """The app's lifespan stops the cluster after the coordinator."""

    # -- what the test drives ------------------------------------------------------------

    def add_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, object] = {},
        *,
        hosted: list[int] | None = None,
    ) -> None:
        """A topic as every broker's watch sees it; its local logs on first sight."""
        if name not in self.manager.topics():
            self.manager.create_topic(name, partitions, configs, hosted=hosted)
        self.counts[name] = partitions
        for p in range(partitions):
            self.set_leader(name, p, self.leader_for(name, p))

    def delete_topic(self, name: str) -> None:
        """The topic gone from the cluster, as this broker's watch sees it: listeners told
        (its local logs, shared, go with the first broker told)."""
        for p in range(self.counts.pop(name)):
            self.leaders.pop((name, p), None)
            replica = self.replicas.pop((name, p), None)
            if replica is not None:
                replica.resign()
        if name in self.manager.topics():
            self.manager.delete_topic(name)
        for listener in list(self.topic_listeners):
            listener(name)

    def set_leader(self, topic: str, partition: int, leader: int | None) -> None:
        was = self.is_leader(topic, partition)
        self.leaders[(topic, partition)] = leader
        now = self.is_leader(topic, partition)
        if now and not was:
            self.replicas[(topic, partition)] = FakeReplica(
                self.manager.get_log(topic, partition), self.auto_replicate
            )
        elif was and not now:
            self.replicas.pop((topic, partition)).resign()
        if now != was:
            for listener in list(self.listeners):
                listener(topic, partition, now)


def group_in(partition: int, count: int, prefix: str = "g") -> str:
    """A group id that lives in ``partition`` of a ``count``-partition offsets topic."""
    for i in range(10_000):
        name = f"{prefix}{i}"
        if partition_for(name, count) == partition:
            return name
    raise AssertionError("no such group id")


def two_brokers(
    manager: LogManager, topic: str, partitions: int, offsets_partitions: int
) -> tuple[FakeCluster, FakeCluster]:
    """Brokers 1 and 2 over one log manager, both knowing ``topic`` and an offsets topic of
    ``offsets_partitions`` partitions (partition p led by broker 1 + p % 3)."""
    pair = FakeCluster(manager, 1), FakeCluster(manager, 2)
    for cluster in pair:
        cluster.add_topic(topic, partitions)
        cluster.add_topic(OFFSETS_TOPIC, offsets_partitions)
    return pair
