"""The group coordinator in cluster mode, against a fake ReplicaManager.

Three offsets partitions; by default partition p is led by broker 1 + p % 3,
so broker 1 (the coordinator under test) leads partition 0 only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson
import pytest
from groups_cluster_fakes import URLS, FakeCluster, group_in, two_brokers
from groups_unit_helpers import FakeClock

from app.api.ws.group import GroupMember
from app.common.batch import build_batch
from app.common.errors import InvalidRequest, NotCoordinator, OffsetNotAvailable
from app.common.group_errors import (
    CoordinatorLoadInProgress,
    CoordinatorNotAvailable,
    GroupIdNotFound,
)
from app.core.log import LogManager
from app.groups.coordinator import (
    OFFSETS_TOPIC,
    GroupConfig,
    GroupCoordinator,
    HeartbeatRequest,
    OffsetCommit,
)
from app.groups.hashing import partition_for
from app.groups.records import OffsetKey, OffsetValue, encode_key, encode_value

N = 3
MINE = group_in(0, N)  # partition 0: broker 1
THEIRS = group_in(1, N)  # partition 1: broker 2


def config(broker: int = 1, **overrides: int) -> GroupConfig:
    values: dict[str, int] = {
        "offsets_topic_num_partitions": N,
        "session_timeout_ms": 10_000,
        "offsets_topic_replication_factor": 3,
        "offsets_commit_timeout_ms": 2_000,
    }
    values.update(overrides)
    return GroupConfig(**values, node_id=broker, url=URLS[broker])  # type: ignore[arg-type]


def coordinator(
    manager: LogManager, cluster: FakeCluster, clock: FakeClock, **overrides: int
) -> GroupCoordinator:
    return GroupCoordinator(
        manager,
        config(cluster.broker_id, **overrides),
        cluster=cluster,
        clock_ms=clock.wall_ms,
        monotonic=clock.monotonic,
    )


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 20))


async def settle(*coordinators: GroupCoordinator) -> None:
    """Until the loads started by leadership changes finish (worker thread + loop)."""
    await asyncio.sleep(0)
    while any(c.loading for c in coordinators):
        await asyncio.sleep(0.001)


def test_find_coordinator_creates_the_topic_and_names_the_leader(
    manager: LogManager, clock: FakeClock
) -> None:
    cluster = FakeCluster(manager, brokers=(1, 2))

    async def body() -> None:
        c = coordinator(manager, cluster, clock)
        await c.start()
        try:
            info = await c.find_coordinator(THEIRS)
            assert (info.node_id, info.url, info.partition) == (2, URLS[2], 1)
            # Kafka's replication factor, capped by the live brokers; compacted.
            assert cluster.created == [(OFFSETS_TOPIC, N, 2, {"cleanup.policy": "compact"})]
            mine = await c.find_coordinator(MINE)
            assert (mine.node_id, mine.url, mine.partition) == (1, URLS[1], 0)
            assert len(cluster.created) == 1  # created once
            cluster.set_leader(OFFSETS_TOPIC, 1, None)  # election under way
            with pytest.raises(CoordinatorNotAvailable) as exc:
                await c.find_coordinator(THEIRS)
            assert exc.value.retriable
        finally:
            await c.stop()

    run(body)


def test_find_coordinator_with_a_topic_another_broker_created(
    manager: LogManager, clock: FakeClock
) -> None:
    cluster = FakeCluster(manager)
    cluster.add_topic(OFFSETS_TOPIC, 5)  # another broker's setting: 5 partitions

    async def body() -> None:
        c = coordinator(manager, cluster, clock)
        await c.start()
        try:
            info = await c.find_coordinator("some-group")
            p = partition_for("some-group", 5)
            assert info.partition == p and info.node_id == 1 + p % 3
            assert cluster.created == []
        finally:
            await c.stop()

    run(body)


def test_requests_for_groups_led_elsewhere_answer_not_coordinator(
    manager: LogManager, clock: FakeClock
) -> None:
    cluster = FakeCluster(manager)
    cluster.add_topic("t", 2)

    async def body() -> None:
        c = coordinator(manager, cluster, clock)
        await c.start()
        try:
            joined = await c.heartbeat(MINE, HeartbeatRequest(subscribed_topics=["t"]))
            assert joined.assignment == [("t", 0), ("t", 1)]
            calls: list[Callable[[], Awaitable[object]]] = [
                lambda: c.heartbeat(THEIRS, HeartbeatRequest(subscribed_topics=["t"])),
                lambda: c.commit_offsets(THEIRS, "", -1, [OffsetCommit("t", 0, 1)]),
                lambda: c.fetch_committed_offsets(THEIRS),
                lambda: c.delete_group(THEIRS),
                lambda: c.reset_offsets(THEIRS, "t", "earliest"),
            ]
            for call in calls:
                with pytest.raises(NotCoordinator) as exc:
                    await call()
                assert exc.value.fields() == {
                    "group": THEIRS,
                    "coordinator": 2,
                    "coordinator_url": URLS[2],
                }
                assert exc.value.retriable
            for sync_call in (
                lambda: c.describe_group(THEIRS),
                lambda: c.fetch_offsets(THEIRS),
            ):
                with pytest.raises(NotCoordinator):
                    sync_call()
            # The list is this broker's groups only.
            assert [g["group"] for g in c.list_groups()] == [MINE]
            # No leader at all: NOT_COORDINATOR without one (the client finds it again).
            cluster.set_leader(OFFSETS_TOPIC, 1, None)
            with pytest.raises(NotCoordinator) as exc:
                c.describe_group(THEIRS)
            assert exc.value.coordinator is None and exc.value.coordinator_url is None
        finally:
            await c.stop()

    run(body)


def test_leadership_moves_groups_between_coordinators(
    manager: LogManager, clock: FakeClock
) -> None:
    """Broker 1 coordinates a group; its offsets partition moves to broker 2, which loads
    it (load in progress meanwhile) and serves it with the same members and offsets;
    broker 1 forgets it and points at broker 2. Then it moves back."""
    one, two = two_brokers(manager, "t", 2, N)

    def move(partition: int, leader: int) -> None:
        for cluster in (one, two):  # both brokers hear of the new state
            cluster.set_leader(OFFSETS_TOPIC, partition, leader)

    async def body() -> None:
        a = coordinator(manager, one, clock)
        b = coordinator(manager, two, clock)
        await a.start()
        await b.start()
        await settle(a, b)
        try:
            m = await a.heartbeat(MINE, HeartbeatRequest(subscribed_topics=["t"]))
            await a.commit_offsets(
                MINE, m.member_id, m.member_epoch, [OffsetCommit("t", 1, 42, 3, "meta")]
            )
            group = a.group(MINE)
            assert group is not None
            member = group.members[m.member_id]
            assert member.timer is not None
            described = a.describe_group(MINE)

            clock.now += 9  # the member's session is nearly over on broker 1
            move(0, 2)
            # Broker 1 dropped the group and its timers at once.
            assert a.group(MINE) is None and member.timer is None
            with pytest.raises(NotCoordinator) as exc:
                await a.heartbeat(MINE, HeartbeatRequest(m.member_id, m.member_epoch))
            assert (exc.value.coordinator, exc.value.coordinator_url) == (2, URLS[2])
            # Broker 2 is loading: retriable, not "unknown member".
            with pytest.raises(CoordinatorLoadInProgress):
                await b.heartbeat(MINE, HeartbeatRequest(m.member_id, m.member_epoch))
            with pytest.raises(CoordinatorLoadInProgress):
                b.list_groups()
            await settle(b)

            assert b.describe_group(MINE) == {
                **described,
                "coordinator": {"node_id": 2, "url": URLS[2], "partition": 0},
            }
            (committed,) = await b.fetch_committed_offsets(MINE)
            assert (committed.offset, committed.leader_epoch, committed.metadata) == (
                42,
                3,
                "meta",
            )
            moved = b.group(MINE)
            assert moved is not None
            # A fresh session on the new coordinator: not expired by broker 1's clock.
            clock.now += 5
            assert b.expire_sessions() == 0
            again = await b.heartbeat(MINE, HeartbeatRequest(m.member_id, m.member_epoch))
            assert again.member_epoch == m.member_epoch and again.assignment == m.assignment
            await b.commit_offsets(MINE, m.member_id, m.member_epoch, [OffsetCommit("t", 0, 7)])

            move(0, 1)  # and back: broker 1 reloads, seeing broker 2's commit
            await settle(a)
            assert b.group(MINE) is None
            got = {(o.topic, o.partition): o.offset for o in a.fetch_offsets(MINE)}
            assert got == {("t", 0): 7, ("t", 1): 42}
        finally:
            await a.stop()
            await b.stop()

    run(body)


def test_start_loads_the_partitions_led_already(manager: LogManager, clock: FakeClock) -> None:
    cluster = FakeCluster(manager)
    cluster.add_topic("t", 1)
    cluster.add_topic(OFFSETS_TOPIC, N)

    async def body() -> None:
        first = coordinator(manager, cluster, clock)
        await first.start()
        await settle(first)
        await first.commit_offsets(MINE, "", -1, [OffsetCommit("t", 0, 5)])
        await first.stop()

        again = FakeCluster(manager)  # the broker restarted, still leading partition 0
        again.add_topic("t", 1)
        again.add_topic(OFFSETS_TOPIC, N)
        second = coordinator(manager, again, clock)
        await second.start()
        try:
            with pytest.raises(CoordinatorLoadInProgress):
                second.fetch_offsets(MINE)
            assert second.loading == [0]
            await settle(second)
            assert second.coordinated_partitions == [0]
            assert [o.offset for o in second.fetch_offsets(MINE)] == [5]
        finally:
            await second.stop()

    run(body)


def test_commits_are_answered_once_replicated(manager: LogManager, clock: FakeClock) -> None:
    cluster = FakeCluster(manager, auto_replicate=False)
    cluster.add_topic("t", 1)
    cluster.add_topic(OFFSETS_TOPIC, N)

    async def body() -> None:
        c = coordinator(manager, cluster, clock, offsets_commit_timeout_ms=300)
        await c.start()
        await settle(c)
        try:
            replica = cluster.leader_partition(OFFSETS_TOPIC, 0)
            commit = asyncio.create_task(c.commit_offsets(MINE, "", -1, [OffsetCommit("t", 0, 3)]))
            await asyncio.sleep(0.05)
            assert not commit.done()  # on the leader, not yet on the followers
            assert replica.waits == [replica.log.log_end_offset - 1]
            # A read waits for what it reads to be replicated too.
            fetch = asyncio.create_task(c.fetch_committed_offsets(MINE))
            await asyncio.sleep(0.05)
            assert not fetch.done()
            replica.replicate()
            (done,) = await commit
            assert done.offset == 3
            assert [o.offset for o in await fetch] == [3]

            # Followers that never catch up: COORDINATOR_NOT_AVAILABLE (retriable).
            with pytest.raises(CoordinatorNotAvailable) as exc:
                await c.commit_offsets(MINE, "", -1, [OffsetCommit("t", 0, 4)])
            assert exc.value.retriable
            replica.replicate()

            # ISR below min.insync.replicas: nothing is written.
            replica.isr_ok = False
            end = replica.log.log_end_offset
            with pytest.raises(CoordinatorNotAvailable):
                await c.commit_offsets(MINE, "", -1, [OffsetCommit("t", 0, 5)])
            assert replica.log.log_end_offset == end
            assert [o.offset for o in c.fetch_offsets(MINE)] == [4]
            replica.isr_ok = True

            # Leadership moves while the commit waits: NOT_COORDINATOR naming the new one.
            commit = asyncio.create_task(c.commit_offsets(MINE, "", -1, [OffsetCommit("t", 0, 6)]))
            await asyncio.sleep(0.05)
            cluster.set_leader(OFFSETS_TOPIC, 0, 3)
            with pytest.raises(NotCoordinator) as moved:
                await commit
            assert (moved.value.coordinator, moved.value.coordinator_url) == (3, URLS[3])
            assert c.group(MINE) is None
        finally:
            await c.stop()

    run(body)


def test_heartbeats_wait_for_their_writes(manager: LogManager, clock: FakeClock) -> None:
    cluster = FakeCluster(manager, auto_replicate=False)
    cluster.add_topic("t", 2)
    cluster.add_topic(OFFSETS_TOPIC, N)

    async def body() -> None:
        c = coordinator(manager, cluster, clock)
        await c.start()
        await settle(c)
        try:
            replica = cluster.leader_partition(OFFSETS_TOPIC, 0)
            join = asyncio.create_task(c.heartbeat(MINE, HeartbeatRequest(subscribed_topics=["t"])))
            await asyncio.sleep(0.05)
            assert not join.done()
            replica.replicate()
            joined = await join
            # Nothing new to write: answered at once.
            steady = await c.heartbeat(MINE, HeartbeatRequest(joined.member_id, 1))
            assert steady.assignment == [("t", 0), ("t", 1)]
        finally:
            await c.stop()

    run(body)


def test_offset_descriptions_of_partitions_held_elsewhere(
    manager: LogManager, clock: FakeClock
) -> None:
    cluster = FakeCluster(manager)
    cluster.add_topic("t", 3, hosted=[0])  # partitions 1 and 2 have no replica here
    cluster.add_topic(OFFSETS_TOPIC, N)

    async def body() -> None:
        c = coordinator(manager, cluster, clock)
        await c.start()
        await settle(c)
        try:
            await c.commit_offsets(
                MINE, "", -1, [OffsetCommit("t", 0, 0), OffsetCommit("t", 2, 10)]
            )
            offsets = c.describe_group(MINE)["offsets"]
            assert [(o["partition"], o["high_watermark"], o["lag"]) for o in offsets] == [
                (0, 0, 0),
                (2, None, None),
            ]
            # Every partition of the topic counts (cluster-wide count), not just local ones.
            got = c.fetch_offsets(MINE, ["t"])
            assert [(o.partition, o.offset) for o in got] == [(0, 0), (1, -1), (2, 10)]
            with pytest.raises(InvalidRequest, match="no replica on this broker"):
                await c.reset_offsets(MINE, "t", "earliest")
            done = await c.reset_offsets(MINE, "t", "latest", partitions=[0])
            assert [(o.partition, o.offset) for o in done] == [(0, 0)]
            await c.delete_group(MINE)
            with pytest.raises(GroupIdNotFound):
                c.describe_group(MINE)
        finally:
            await c.stop()

    run(body)


def test_a_partition_led_here_since_a_recent_election_has_no_end_yet(
    manager: LogManager, clock: FakeClock
) -> None:
    """Its high watermark may trail its records (OFFSET_NOT_AVAILABLE to ListOffsets): a
    reset bounded by the end refuses, retriably and before writing anything; earliest
    is answered; the lag is not known (null) rather than counted to the stale mark."""
    cluster = FakeCluster(manager)
    cluster.add_topic("t", 2, hosted=[0, 1])
    cluster.add_topic(OFFSETS_TOPIC, N)

    async def body() -> None:
        c = coordinator(manager, cluster, clock)
        await c.start()
        await settle(c)
        try:
            await c.commit_offsets(MINE, "", -1, [OffsetCommit("t", 0, 0), OffsetCommit("t", 1, 0)])
            cluster.catching_up.add(("t", 1))
            offsets = c.describe_group(MINE)["offsets"]
            assert [(o["partition"], o["high_watermark"], o["lag"]) for o in offsets] == [
                (0, 0, 0),
                (1, None, None),
            ]
            for to, value in (("latest", None), ("offset", 3), ("timestamp", 0)):
                with pytest.raises(OffsetNotAvailable) as refused:
                    await c.reset_offsets(MINE, "t", to, value=value)
                assert refused.value.retriable
            got = c.fetch_offsets(MINE, ["t"])
            assert [(o.partition, o.offset) for o in got] == [(0, 0), (1, 0)]
            done = await c.reset_offsets(MINE, "t", "earliest")
            assert [(o.partition, o.offset) for o in done] == [(0, 0), (1, 0)]
            cluster.catching_up.clear()
            done = await c.reset_offsets(MINE, "t", "latest")
            assert [(o.partition, o.offset) for o in done] == [(0, 0), (1, 0)]
        finally:
            await c.stop()

    run(body)


def test_a_lone_broker_needs_no_cluster(manager: LogManager, clock: FakeClock) -> None:
    """Without a cluster the coordinator answers for every group and never waits."""
    manager.create_topic("t", 1)

    async def body() -> None:
        c = GroupCoordinator(manager, config(1), clock_ms=clock.wall_ms)
        await c.start()
        try:
            for group in (MINE, THEIRS):
                info = await c.find_coordinator(group)
                assert (info.node_id, info.url) == (1, URLS[1])
                await c.commit_offsets(group, "", -1, [OffsetCommit("t", 0, 1)])
            assert [g["group"] for g in c.list_groups()] == sorted((MINE, THEIRS))
        finally:
            await c.stop()

    run(body)


class RecordingHost:
    """A WebSocket subscription's side of a group member (app.api.ws.group.Host)."""

    def __init__(self) -> None:
        self.owned: set[tuple[str, int]] = set()
        self.frames: list[dict[str, object]] = []
        self.failures: list[Exception] = []

    def add_partition(self, topic: str, partition: int, position: int) -> dict[str, object]:
        self.owned.add((topic, partition))
        return {"topic": topic, "partition": partition, "position": position}

    def drop_partition(self, topic: str, partition: int) -> None:
        self.owned.discard((topic, partition))

    def offsets_error(self, topic: str, partition: int) -> OffsetNotAvailable | None:
        return None

    def positions(self) -> dict[tuple[str, int], int]:
        return dict.fromkeys(self.owned, 0)

    async def send_frame(self, text: str) -> None:
        self.frames.append(orjson.loads(text))

    async def send_failure(self, exc: Exception) -> None:
        self.failures.append(exc)


def test_a_websocket_member_stops_when_its_coordinator_moves(
    manager: LogManager, clock: FakeClock
) -> None:
    cluster = FakeCluster(manager)
    cluster.add_topic("t", 2)
    cluster.add_topic(OFFSETS_TOPIC, N)

    async def body() -> None:
        c = GroupCoordinator(
            manager, config(1, heartbeat_interval_ms=20), cluster=cluster, clock_ms=clock.wall_ms
        )
        await c.start()
        await settle(c)
        try:
            host = RecordingHost()
            theirs = GroupMember(
                host, c, THEIRS, ["t"], instance_id=None, server_assignor=None,
                start="earliest", default="earliest",
            )  # fmt: skip
            with pytest.raises(NotCoordinator):  # the subscribe is refused, naming broker 2
                await theirs.join()
            member = GroupMember(
                host, c, MINE, ["t"], instance_id=None, server_assignor=None,
                start="committed", default="earliest",
            )  # fmt: skip
            await member.join()
            await member.start_loop()
            assert host.owned == {("t", 0), ("t", 1)}
            cluster.set_leader(OFFSETS_TOPIC, 0, 3)
            for _ in range(500):
                if host.failures:
                    break
                await asyncio.sleep(0.01)
            # Everything revoked first, then the error naming the new coordinator.
            assert host.owned == set()
            assert host.frames[-1]["partitions"] == []
            (failure,) = host.failures
            assert isinstance(failure, NotCoordinator) and failure.coordinator == 3
            await member.leave()  # nothing to leave here: no heartbeat, no error
        finally:
            await c.stop()

    run(body)


def test_every_coordinator_forgets_the_offsets_of_a_deleted_topic(
    manager: LogManager, clock: FakeClock
) -> None:
    """Each broker sees the deletion through its own watch and tombstones the offsets of the
    groups it coordinates, whichever broker got the DELETE; a partition loading at the time
    forgets them once loaded. Other topics' offsets stay."""
    one = FakeCluster(manager, 1)
    two = FakeCluster(manager, 2)
    clusters = (one, two)
    for cluster in clusters:
        cluster.add_topic("tz", 3)
        cluster.add_topic("keep", 1)
        cluster.add_topic(OFFSETS_TOPIC, N)
    loading = group_in(2, N, prefix="loading")  # partition 2: broker 3, moving to broker 2

    async def body() -> None:
        a = coordinator(manager, one, clock)
        b = coordinator(manager, two, clock)
        await a.start()
        await b.start()
        await settle(a, b)
        try:
            commits = [OffsetCommit("tz", 2, 5), OffsetCommit("keep", 0, 1)]
            await a.commit_offsets(MINE, "", -1, commits)
            await b.commit_offsets(THEIRS, "", -1, commits)
            # Broker 3 (not under test) wrote this group's offsets before it died.
            records = [
                (encode_key(OffsetKey(loading, tp.topic, tp.partition)), encode_value(value))
                for tp, value in (
                    (commits[0], OffsetValue(5)),
                    (commits[1], OffsetValue(1)),
                )
            ]
            manager.get_log(OFFSETS_TOPIC, 2).append(build_batch(records))
            for cluster in clusters:
                cluster.set_leader(OFFSETS_TOPIC, 2, 2)
            assert b.loading == [2]
            for cluster in clusters:  # deleted through any broker: every watch fires
                cluster.delete_topic("tz")
            clock.now += 1
            # Created again before the load ends: the old offsets still go.
            for cluster in clusters:
                cluster.add_topic("tz", 3)
            await settle(a, b)
            for coord, group in ((a, MINE), (b, THEIRS), (b, loading)):
                got = {(o.topic, o.partition): o.offset for o in coord.fetch_offsets(group)}
                assert got == {("keep", 0): 1}, group
            # Its partitions have nothing committed, so the group reads it from its start.
            found = await a.fetch_committed_offsets(MINE, ["tz"])
            assert [o.offset for o in found] == [-1, -1, -1]
            # Commits to the new topic are kept when the partition loads again.
            await b.commit_offsets(loading, "", -1, [OffsetCommit("tz", 0, 2)])
            for cluster in clusters:
                cluster.set_leader(OFFSETS_TOPIC, 2, 1)
            await settle(a, b)
            got = {(o.topic, o.partition): o.offset for o in a.fetch_offsets(loading)}
            assert got == {("keep", 0): 1, ("tz", 0): 2}
        finally:
            await a.stop()
            await b.stop()
        # The tombstones are in __consumer_offsets: a reload does not bring them back.
        alone = FakeCluster(manager, 1, leader_for=lambda _t, _p: 1)
        alone.add_topic(OFFSETS_TOPIC, N)
        alone.add_topic("keep", 1)
        again = coordinator(manager, alone, clock)
        await again.start()
        await settle(again)
        try:
            for group in (MINE, THEIRS):
                got = {(o.topic, o.partition): o.offset for o in again.fetch_offsets(group)}
                assert got == {("keep", 0): 1}, group
        finally:
            await again.stop()

    run(body)
