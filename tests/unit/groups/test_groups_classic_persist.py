"""A classic group's membership in ``__consumer_offsets`` (issue 19): written when a
generation's assignment is stored and when the group becomes empty, tombstoned when it is
deleted or taken over by the consumer protocol, and restored by a coordinator that loads
the partition (a restart, a failover), whose members go on in their generation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from groups_cluster_fakes import group_in, two_brokers
from groups_unit_helpers import FakeClock
from test_groups_cluster import MINE, N, coordinator, run, settle
from test_groups_reconcile import run as run_lone
from test_groups_txn_load import _hold_replay, _until

from app.common.batch import build_batch
from app.common.errors import LogbusError, NotCoordinator, NotEnoughReplicas, NotLeaderOrFollower
from app.common.group_errors import (
    CoordinatorNotAvailable,
    IllegalGeneration,
    InconsistentGroupProtocol,
    RebalanceInProgress,
    UnknownMemberId,
)
from app.core.log import LogManager
from app.groups.classic import ClassicState, JoinRequest, JoinResult
from app.groups.classic_model import ClassicGroup
from app.groups.coordinator import (
    OFFSETS_TOPIC,
    GroupConfig,
    GroupCoordinator,
    HeartbeatRequest,
    OffsetCommit,
)
from app.groups.records import ClassicGroupKey, ClassicGroupValue, encode_key, encode_value
from app.kafka.apis.groups import encode_assignment, encode_subscription

SESSION_MS = 200
ASSIGNED = {"a": encode_assignment([("t", 0)]), "b": encode_assignment([("t", 1)])}


def _request(member_id: str = "", instance_id: str | None = None) -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        protocol_type="consumer",
        protocols=[("range", encode_subscription(["t"])), ("roundrobin", b"rr")],
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=5_000,
        instance_id=instance_id,
        client_id="rdkafka",
        client_host="/127.0.0.1",
        require_known_member_id=False,
    )


def _config() -> GroupConfig:
    return GroupConfig(
        offsets_topic_num_partitions=2,
        classic_initial_rebalance_delay_ms=0,
        classic_min_session_timeout_ms=100,
    )


def _run(
    manager: LogManager, clock: FakeClock, body: Callable[[GroupCoordinator], Awaitable[None]]
) -> None:
    """``body`` on a lone broker's coordinator that loads the log (a restart each call)."""
    run_lone(manager, clock, body, _config())


async def _form(c: GroupCoordinator, group: str) -> tuple[str, str]:
    """A dynamic member (the leader) and a static one ("i-b") in generation 2, synced:
    their member ids."""
    first = await c.classic.join(group, _request())
    a = first.member_id
    await c.classic.sync(group, 1, a, None, "consumer", "range", {a: ASSIGNED["a"]})
    b_join = asyncio.ensure_future(c.classic.join(group, _request(instance_id="i-b")))
    await asyncio.sleep(0)
    a_join = await c.classic.join(group, _request(a))
    b = (await b_join).member_id
    assert a_join.generation == 2 and a_join.leader == a
    b_sync = asyncio.ensure_future(c.classic.sync(group, 2, b, "i-b", "consumer", "range", {}))
    await asyncio.sleep(0)
    assignments = {a: ASSIGNED["a"], b: ASSIGNED["b"]}
    synced = await c.classic.sync(group, 2, a, None, "consumer", "range", assignments)
    assert synced.assignment == ASSIGNED["a"] and (await b_sync).assignment == ASSIGNED["b"]
    return a, b


def _classic(c: GroupCoordinator, group: str) -> ClassicGroup:
    g = c.group(group)
    assert g is not None and g.classic is not None
    return g.classic


def test_a_classic_group_survives_a_restart_and_its_members_go_on(
    manager: LogManager, clock: FakeClock
) -> None:
    manager.create_topic("t", 2)
    ids: dict[str, str] = {}

    async def form(c: GroupCoordinator) -> None:
        ids["a"], ids["b"] = await _form(c, "g")
        await c.commit_offsets("g", ids["a"], 2, [OffsetCommit("t", 0, 5)])
        ids["described"] = repr(c.describe_group("g"))

    async def restored(c: GroupCoordinator) -> None:
        a, b = ids["a"], ids["b"]
        cg = _classic(c, "g")
        assert (cg.state, cg.generation, cg.leader) == (ClassicState.STABLE, 2, a)
        assert (cg.protocol_type, cg.protocol_name) == ("consumer", "range")
        assert list(cg.members) == [a, b] and cg.static == {"i-b": b}
        assert {m: x.assignment for m, x in cg.members.items()} == {
            a: ASSIGNED["a"],
            b: ASSIGNED["b"],
        }
        member_b = cg.members[b]
        assert (member_b.instance_id, member_b.client_id, member_b.client_host) == (
            "i-b",
            "rdkafka",
            "/127.0.0.1",
        )
        assert (member_b.session_timeout_ms, member_b.rebalance_timeout_ms) == (SESSION_MS, 5_000)
        assert member_b.metadata("range") == encode_subscription(["t"])
        assert all(m.timer is not None for m in cg.members.values())  # sessions started
        assert repr(c.describe_group("g")) == ids["described"]
        # The members heartbeat on in their generation; strangers are refused.
        await c.classic.heartbeat("g", 2, a, None)
        await c.classic.heartbeat("g", 2, b, "i-b")
        with pytest.raises(UnknownMemberId):
            await c.classic.heartbeat("g", 2, "stranger", None)
        with pytest.raises(IllegalGeneration):
            await c.classic.heartbeat("g", 1, a, None)
        again = await c.classic.sync("g", 2, b, "i-b", "consumer", "range", {})
        assert again.assignment == ASSIGNED["b"]
        await c.commit_offsets("g", b, 2, [OffsetCommit("t", 1, 6)])
        # One protocol per group after the load too.
        with pytest.raises(InconsistentGroupProtocol):
            await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
        # Members that do not come back expire: the group becomes Empty (written).
        clock.now += 1
        for _ in range(200):
            if cg.state == ClassicState.EMPTY:
                break
            await asyncio.sleep(0.01)
        assert (cg.state, cg.generation) == (ClassicState.EMPTY, 3)
        ids["empty_since"] = str(clock.wall_ms())

    async def empty(c: GroupCoordinator) -> None:
        g = c.group("g")
        assert g is not None and g.classic is not None
        assert (g.classic.state, g.classic.generation, g.classic.members) == (
            ClassicState.EMPTY,
            3,
            {},
        )
        assert g.empty_since_ms == int(ids["empty_since"])
        assert c.list_groups()[0]["state"] == "Empty"
        assert [o.offset for o in c.fetch_offsets("g", ["t"])] == [5, 6]
        # Offsets retention counts from the time it became empty, as before the restart.
        retention = c.config.offsets_retention_ms
        assert c.expire_offsets(g.empty_since_ms + retention - 1) == 0
        assert c.expire_offsets(g.empty_since_ms + retention) == 2
        assert c.group("g") is None

    async def gone(c: GroupCoordinator) -> None:
        assert c.group("g") is None

    _run(manager, clock, form)
    _run(manager, clock, restored)
    _run(manager, clock, empty)
    _run(manager, clock, gone)


def test_deleting_or_taking_over_a_classic_group_writes_its_tombstone(
    manager: LogManager, clock: FakeClock
) -> None:
    """A deleted classic group stays deleted after a restart; one taken over by a
    consumer-protocol member is that group after a restart, not a classic one too."""
    manager.create_topic("t", 2)

    async def form(c: GroupCoordinator) -> None:
        for group in ("deleted", "taken"):
            joined = await c.classic.join(group, _request())
            await c.classic.sync(group, 1, joined.member_id, None, None, None, {})
            assert await c.classic.leave(group, [(joined.member_id, None)]) == [None]
        await c.delete_group("deleted")
        await c.heartbeat("taken", HeartbeatRequest(subscribed_topics=["t"]))

    async def restarted(c: GroupCoordinator) -> None:
        assert c.group("deleted") is None
        taken = c.group("taken")
        assert taken is not None and taken.classic is None and len(taken.members) == 1
        assert c.describe_group("taken")["protocol"] == "consumer"
        with pytest.raises(InconsistentGroupProtocol):
            await c.classic.join("taken", _request())

    _run(manager, clock, form)
    _run(manager, clock, restarted)


@pytest.mark.parametrize(
    ("failure", "answer"),
    [
        (NotLeaderOrFollower("__consumer_offsets", 0), NotCoordinator),
        (NotEnoughReplicas("too few in-sync replicas"), CoordinatorNotAvailable),
        (OSError(28, "No space left on device"), NotCoordinator),
    ],
    ids=["not-leader", "not-enough-replicas", "storage"],
)
def test_a_sync_whose_record_is_not_written_is_refused_and_the_group_rebalances(
    manager: LogManager, clock: FakeClock, failure: Exception, answer: type[LogbusError]
) -> None:
    """Kafka's answer to a failed store of the assignment: every waiting SyncGroup gets
    NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE (the clients rejoin), no generation is
    Stable that the log does not hold."""

    async def body(c: GroupCoordinator) -> None:
        a = (await c.classic.join("g", _request())).member_id
        await c.classic.sync("g", 1, a, None, None, None, {a: b"x"})
        b_join = asyncio.ensure_future(c.classic.join("g", _request()))
        await asyncio.sleep(0)
        await c.classic.join("g", _request(a))
        b = (await b_join).member_id
        b_sync = asyncio.ensure_future(c.classic.sync("g", 2, b, None, None, None, {}))
        await asyncio.sleep(0)

        def fail(partition: int, batch: bytes) -> int:
            raise failure

        original = c.runtime.placement.append
        c.runtime.placement.append = fail  # type: ignore[method-assign]
        with pytest.raises(answer):
            await c.classic.sync("g", 2, a, None, None, None, {a: b"x", b: b"y"})
        with pytest.raises(answer):
            await b_sync
        c.runtime.placement.append = original  # type: ignore[method-assign]
        cg = _classic(c, "g")
        assert cg.state == ClassicState.PREPARING_REBALANCE
        assert all(m.assignment == b"" for m in cg.members.values())
        with pytest.raises(RebalanceInProgress):
            await c.classic.heartbeat("g", 2, b, None)

    _run(manager, clock, body)


def test_a_static_members_new_incarnation_is_written(manager: LogManager, clock: FakeClock) -> None:
    """A static member rejoining a Stable group under a new id (no rebalance) is written:
    a restart knows the new id; a write that fails keeps the old incarnation."""
    ids: dict[str, str] = {}

    async def form(c: GroupCoordinator) -> None:
        _, b = await _form(c, "g")
        original = c.runtime.placement.append

        def fail(partition: int, batch: bytes) -> int:
            raise NotLeaderOrFollower("__consumer_offsets", 0)

        c.runtime.placement.append = fail  # type: ignore[method-assign]
        with pytest.raises(NotCoordinator):
            await c.classic.join("g", _request(instance_id="i-b"))
        c.runtime.placement.append = original  # type: ignore[method-assign]
        cg = _classic(c, "g")
        assert cg.static == {"i-b": b} and b in cg.members
        await c.classic.heartbeat("g", 2, b, "i-b")
        joined: JoinResult = await c.classic.join("g", _request(instance_id="i-b"))
        assert joined.generation == 2 and joined.member_id != b
        ids["b"] = joined.member_id

    async def restarted(c: GroupCoordinator) -> None:
        cg = _classic(c, "g")
        assert cg.state == ClassicState.STABLE and cg.static == {"i-b": ids["b"]}
        await c.classic.heartbeat("g", 2, ids["b"], "i-b")

    _run(manager, clock, form)
    _run(manager, clock, restarted)


def test_a_new_coordinator_restores_the_group_with_what_its_load_caught_up(
    manager: LogManager, clock: FakeClock
) -> None:
    """Cluster mode: broker 1's group moves to broker 2 with its generation and members
    (heartbeats go on there); a record appended while broker 2's replay ran (its end was
    fixed) is applied by the load's catch-up before the groups are installed."""
    one, two = two_brokers(manager, "t", 2, N)

    async def body() -> None:
        quick = {"classic_initial_rebalance_delay_ms": 0, "classic_min_session_timeout_ms": 100}
        a = coordinator(manager, one, clock, **quick)
        b = coordinator(manager, two, clock, **quick)
        await a.start()
        await b.start()
        await settle(a, b)
        try:
            first, second = await _form(a, MINE)
            replayed, go = _hold_replay(b)
            for cluster in (one, two):
                cluster.set_leader(OFFSETS_TOPIC, 0, 2)
            await _until(replayed)
            with pytest.raises(NotCoordinator):
                await a.classic.heartbeat(MINE, 2, first, None)
            # Appended after the replay's end (its end was fixed): another group's record.
            other = group_in(0, N, "other")
            empty = ClassicGroupValue("consumer", 4, None, None, clock.wall_ms())
            log = manager.get_log(OFFSETS_TOPIC, 0)
            log.append(build_batch([(encode_key(ClassicGroupKey(other)), encode_value(empty))]))
            go.set()
            await settle(b)
            cg = _classic(b, MINE)
            assert (cg.state, cg.generation, list(cg.members)) == (
                ClassicState.STABLE,
                2,
                [first, second],
            )
            await b.classic.heartbeat(MINE, 2, first, None)
            await b.classic.heartbeat(MINE, 2, second, "i-b")
            caught_up = _classic(b, other)
            assert (caught_up.state, caught_up.generation) == (ClassicState.EMPTY, 4)
        finally:
            await a.stop()
            await b.stop()

    run(body)
