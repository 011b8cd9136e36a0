"""The topic operations of a cluster (Kafka's ``ZkAdminManager``): create a topic, grow
it, change its configs, delete its records or the topic, each through ZooKeeper.

Each is a write to the topic's ZooKeeper assignment (created, or changed by
compare-and-set bound to the topic's identity, so a change meant for a topic deleted and
created again under its name meanwhile changes nothing), which every broker then applies
from its watch (:meth:`ReplicaManager._apply_assignment
<app.core.replication.manager.ReplicaManager>`); an operation answers once this broker
has applied it and, where Kafka waits for them, the partitions have leaders, within the
request's ``timeout_ms`` (RequestTimedOut after it, the change made; 0 or below: at once
after the write, as Kafka).

:class:`TopicAdmin` is mixed into :class:`~app.core.replication.manager.ReplicaManager`,
whose cluster view it reads (the attributes declared on it); its own state is none.
Concurrency: the event loop; ZooKeeper and the log manager are called in worker threads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from app.common.errors import (
    InvalidPartitions,
    InvalidTopic,
    LeaderNotAvailable,
    LogbusError,
    RequestTimedOut,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
    ZooKeeperUnavailable,
)
from app.core.log.partition_metadata import new_kafka_id
from app.core.log.topic_rules import (
    MAX_PARTITIONS,
    ConfigChange,
    changed_overrides,
    check_new_topic,
    collision_key,
)
from app.core.replication.placement import assign_replicas
from app.core.replication.state import NO_LEADER, BrokerInfo, PartitionState, TopicAssignment

if TYPE_CHECKING:
    from app.core.log.manager import LogManager
    from app.core.replication.config import ReplicaConfig
    from app.core.replication.controller import Controller
    from app.core.replication.partition import Partition
    from app.core.replication.zk import ZkStore
    from app.core.topology import NewTopic


def replaced(name: str) -> UnknownTopicOrPartition:
    """A change for a topic that is gone from ZooKeeper, or was deleted and created again
    under its name since the request came: nothing of the topic there now is changed."""
    err = UnknownTopicOrPartition(name)
    LogbusError.__init__(
        err,
        f"topic {name!r} does not exist (deleted, or deleted and created again under its "
        "name, while this change was made): nothing was changed; send the request again "
        "for the topic of that name now",
        topic=name,
        partition=None,
    )
    return err


class TopicAdmin:
    """The topic operations (module docstring), over the cluster view of the replica
    manager they are mixed into."""

    # The replica manager's, read here (app/core/replication/manager.py says what each is).
    settings: ReplicaConfig
    logs: LogManager
    broker_id: int
    store: ZkStore
    controller: Controller
    brokers: dict[int, BrokerInfo]
    assignments: dict[str, TopicAssignment]
    states: dict[tuple[str, int], tuple[PartitionState, int]]

    async def wait_changed(self, timeout_s: float) -> None:
        raise NotImplementedError  # the replica manager's: until its view changes

    def leader_partition(self, topic: str, partition: int) -> Partition:
        raise NotImplementedError  # the replica manager's

    async def create_topic(self, topic: NewTopic, *, timeout_ms: int = 30_000) -> None:
        """Write the topic's assignment to ZooKeeper and wait until every partition has a
        leader, as Kafka within ``timeout_ms`` (else RequestTimedOut: the topic is created
        and its partitions get leaders later; 0 or below: at once after the write). Raises
        InvalidTopic, InvalidPartitions, InvalidConfig, InvalidReplicationFactor,
        PartitionLimitExceeded or TopicAlreadyExists, nothing written."""
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        name, partitions = topic.name, topic.partitions
        # Only the per-topic limit: each broker checks the rest as it creates its replicas.
        self.logs.partition_budget.check_per_topic(name, partitions)
        _, normalized = check_new_topic(name, partitions, topic.configs, self.logs.default_config)
        rf = topic.replication_factor or self.settings.default_replication_factor
        replicas = assign_replicas(partitions, rf, sorted(self.brokers))
        topic_id = new_kafka_id()
        if name in self.assignments:
            raise TopicAlreadyExists(name)
        clash = next((t for t in self.assignments if collision_key(t) == collision_key(name)), None)
        if clash is not None:
            raise InvalidTopic(name, f"collides with existing topic {clash!r} ('.' and '_' clash)")
        # This broker's own share, checked before anything is written (as a lone broker
        # does); the others check theirs as they create their replicas (_sync_topics).
        here = sum(1 for r in replicas if self.broker_id in r)
        await asyncio.to_thread(self.logs.check_can_host, name, here)
        if topic.validate_only:
            return
        await asyncio.to_thread(
            self.store.create_topic, name, TopicAssignment(topic_id, tuple(replicas), normalized)
        )
        self.controller.kick()
        if timeout_ms <= 0:
            return
        await self._leaders_by(
            name,
            deadline,
            f"topic {name!r} was created (it stays) but not every partition had a "
            f"leader within timeout_ms={timeout_ms}; they will: do not create it again",
        )

    async def _change_assignment(
        self,
        name: str,
        topic_id: str,
        change: Callable[[TopicAssignment], Awaitable[TopicAssignment | None]],
    ) -> TopicAssignment | None:
        """Compare-and-set ``change(current)`` as the assignment of the topic ``name`` of
        id ``topic_id`` (the one the request was for, as this broker knew it when the
        request came) in ZooKeeper, reading again when another broker wrote first;
        ``change`` returning None writes nothing (validate_only). The write checks the
        topic's identity (:meth:`ZkStore.set_topic`), so a topic deleted and created
        again under the name meanwhile is not changed: UnknownTopicOrPartition. The
        assignment written (None: nothing). Every broker, this one included, applies it
        from its watch (:meth:`_apply_assignment`)."""
        for _ in range(50):
            found = await asyncio.to_thread(self.store.get_topic_versioned, name)
            if found is None or found[0].topic_id != topic_id:
                raise replaced(name)
            current, version = found
            new = await change(current)
            if new is None:
                return None
            assert new.topic_id == topic_id, "a change keeps the topic's id"
            if await asyncio.to_thread(self.store.set_topic, name, new, version):
                return new
        raise ZooKeeperUnavailable(f"changing topic {name!r}: too many concurrent writers")

    def _topic_id_of(self, name: str) -> str:
        """The id of the topic ``name`` in this broker's view (UnknownTopicOrPartition)."""
        known = self.assignments.get(name)
        if known is None:
            raise UnknownTopicOrPartition(name)
        return known.topic_id

    async def _wait_applied(
        self,
        name: str,
        topic_id: str,
        applied: Callable[[TopicAssignment], bool],
        deadline: float,
        timeout_ms: int,
    ) -> None:
        """Until this broker's view of ``name`` (the topic of id ``topic_id``) satisfies
        ``applied`` (its own watch has delivered the write), so the next request here sees
        the change; RequestTimedOut at ``deadline`` (monotonic), the change made."""
        while True:
            known = self.assignments.get(name)
            if known is None or known.topic_id != topic_id:
                raise replaced(name)
            if applied(known):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimedOut(
                    f"topic {name!r} was changed in ZooKeeper (the change is made and stays) "
                    f"but this broker had not applied it within timeout_ms={timeout_ms}; it "
                    "will: do not send the change again"
                )
            await self.wait_changed(min(remaining, 0.5))

    async def alter_topic_config(
        self,
        name: str,
        overrides: ConfigChange,
        *,
        validate_only: bool = False,
        timeout_ms: int = 30_000,
    ) -> None:
        """Replace the topic's config overrides (those not named return to the broker's
        default), or, given a function (IncrementalAlterConfigs), with what it makes of
        the assignment's current ones, read inside the compare-and-set (this broker's
        view may not have a change made through another broker yet: building on it
        would undo that change): checked as a create checks them (InvalidConfig, nothing
        written), written to the topic's
        ZooKeeper assignment (``configs``, by compare-and-set), and applied by every broker
        from its watch of that znode, so each broker's replicas (and DescribeConfigs,
        ``GET /topics/{t}``) take them: retention and cleanup run with them, a leader
        checks ``min.insync.replicas`` with them, the controller reads
        ``unclean.leader.election.enable`` there. Returns once this broker applied them
        (RequestTimedOut after ``timeout_ms``, the change made; 0: at once after the
        write, as Kafka answers a timeout of 0); the others follow within a watch's
        delay."""
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        topic_id = self._topic_id_of(name)  # UnknownTopicOrPartition first, as a lone broker
        default = self.logs.default_config
        if not callable(overrides):
            check_new_topic(name, 1, overrides, default)  # before ZooKeeper is read

        async def change(current: TopicAssignment) -> TopicAssignment | None:
            wanted = changed_overrides(overrides, current.configs)
            _, normalized = check_new_topic(name, 1, wanted, default)
            return None if validate_only else dataclasses.replace(current, configs=normalized)

        written = await self._change_assignment(name, topic_id, change)
        if written is not None and timeout_ms > 0:
            await self._wait_applied(
                name, topic_id, lambda a: a.configs == written.configs, deadline, timeout_ms
            )

    async def delete_records(
        self, topic: str, partition: int, offset: int, *, timeout_ms: int = 30_000
    ) -> int:
        """Kafka's DeleteRecords in a cluster: the leader moves its log start offset up to
        ``offset`` (-1: its high watermark) and writes it down (the start offset
        checkpoint), its fetch answers carry it (``Logbus-Log-Start-Offset``) and each
        follower moves its own start there (never past its own high watermark), writes it
        down and says so in its next fetch. Answers the low watermark (the smallest start
        over the leader, the replicas on live brokers, Kafka's, and the ISR members, live
        or not: :meth:`Partition.low_watermark`) once it reaches the new start: every
        replica that may lead next has then dropped the records durably, so no failover
        brings them back. Raises NotLeaderOrFollower, UnknownTopicOrPartition,
        OffsetOutOfRange (above the high watermark), RequestTimedOut after
        ``timeout_ms`` (the leader's start moved; the followers still follow it)."""
        part = self.leader_partition(topic, partition)
        epoch = part.leader_epoch
        start = await asyncio.to_thread(part.delete_records, epoch, offset)
        await asyncio.to_thread(self.logs.checkpoint)
        return await part.wait_low_watermark(start, timeout_ms, epoch)

    async def create_partitions(
        self, name: str, count: int, *, validate_only: bool = False, timeout_ms: int = 30_000
    ) -> None:
        """Grow a topic to ``count`` partitions: the new partitions' replicas are placed
        over the live brokers (Kafka's rack-unaware assignment, the topic's replication
        factor, leaders continuing round the brokers after the existing partitions), the
        assignment is extended in ZooKeeper by compare-and-set (existing partitions never
        move), every broker creates its new replicas from its watch, and the controller
        elects their leaders. Returns once every partition has a leader, as Kafka within
        ``timeout_ms`` (else RequestTimedOut: the partitions are made and get leaders
        later; 0: at once after the write). Raises
        UnknownTopicOrPartition, InvalidPartitions (the count does not grow, or above the
        limit), InvalidReplicationFactor (fewer live brokers than the replication factor),
        PartitionLimitExceeded (this broker's share does not fit)."""
        topic_id = self._topic_id_of(name)
        deadline = time.monotonic() + max(0, timeout_ms) / 1000

        async def change(current: TopicAssignment) -> TopicAssignment | None:
            have = current.partitions
            if isinstance(count, bool) or not have < count <= MAX_PARTITIONS:
                raise InvalidPartitions(
                    f"topic {name!r} has {have} partitions: a new count must be above it "
                    f"and at most {MAX_PARTITIONS}, not {count!r}"
                )
            self.logs.partition_budget.check_per_topic(name, count)
            brokers = sorted(self.brokers)
            first = current.replicas[0][0]
            start = (brokers.index(first) if first in brokers else 0) + have
            added = assign_replicas(count - have, len(current.replicas[0]), brokers, start=start)
            here = sum(1 for r in added if self.broker_id in r)
            # It takes the log manager's lock, which a worker thread may hold through
            # fsyncs: never on the loop.
            await asyncio.to_thread(self.logs.check_can_host, name, here)
            if validate_only:
                return None
            return dataclasses.replace(current, replicas=current.replicas + tuple(added))

        written = await self._change_assignment(name, topic_id, change)
        if written is None:
            return
        self.controller.kick()
        if timeout_ms <= 0:
            return
        await self._wait_applied(
            name, topic_id, lambda a: a.partitions >= count, deadline, timeout_ms
        )
        await self._leaders_by(
            name,
            deadline,
            f"topic {name!r} has {count} partitions (the change is made and stays) but "
            f"not every one had a leader within timeout_ms={timeout_ms}; they will: do "
            "not send the change again",
        )

    async def _leaders_by(self, name: str, deadline: float, timed_out: str) -> None:
        """:meth:`wait_for_leaders` until ``deadline`` (monotonic), then RequestTimedOut
        saying ``timed_out`` (the change is made either way)."""
        try:
            await self.wait_for_leaders(name, max(0.0, deadline - time.monotonic()))
        except LeaderNotAvailable:
            raise RequestTimedOut(timed_out) from None

    async def wait_for_leaders(self, name: str, wait_s: float) -> None:
        """Until this broker has seen a leader for every partition of ``name``."""
        deadline = time.monotonic() + wait_s
        while True:
            assignment = self.assignments.get(name)
            if assignment is not None and all(
                (s := self.states.get((name, p))) is not None and s[0].leader != NO_LEADER
                for p in range(assignment.partitions)
            ):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LeaderNotAvailable(
                    f"topic {name} was created but not every partition has a leader yet"
                )
            await self.wait_changed(min(remaining, 0.5))

    async def delete_topic(self, name: str) -> None:
        if not await asyncio.to_thread(self.store.delete_topic, name):
            raise UnknownTopicOrPartition(name)
        deadline = time.monotonic() + 10
        while name in self.assignments and time.monotonic() < deadline:
            await self.wait_changed(0.5)
