"""Reconciliation as a state machine driven by heartbeats: revoke before assign."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest
from groups_unit_helpers import FakeClock

from app.common.group_errors import FencedMemberEpoch, UnknownMemberId, UnreleasedInstanceId
from app.core.log import LogManager
from app.groups.coordinator import (
    GroupConfig,
    GroupCoordinator,
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommit,
)

TP = tuple[str, int]


def run(
    manager: LogManager,
    clock: FakeClock,
    body: Callable[[GroupCoordinator], Awaitable[None]],
    config: GroupConfig | None = None,
) -> None:
    """``body`` on a lone broker's coordinator that starts by loading the log (each call
    a restart of the broker)."""

    async def main() -> None:
        coord = GroupCoordinator(
            manager,
            config or GroupConfig(offsets_topic_num_partitions=2, session_timeout_ms=10_000),
            clock_ms=clock.wall_ms,
            monotonic=clock.monotonic,
        )
        await coord.start()
        try:
            await body(coord)
        finally:
            await coord.stop()

    asyncio.run(main())


def applied(answer: HeartbeatResponse) -> HeartbeatRequest:
    """The next heartbeat of a member that applied ``answer``: it reports what it holds."""
    return HeartbeatRequest(
        answer.member_id, answer.member_epoch, owned_partitions=answer.assignment
    )


def assert_disjoint(coord: GroupCoordinator, group: str) -> None:
    g = coord.group(group)
    assert g is not None
    seen: dict[TP, str] = {}
    for m in g.members.values():
        for tp in m.assigned | m.revoking:
            assert tp not in seen, f"{tp} held by {seen[tp]} and {m.member_id}"
            seen[tp] = m.member_id


def test_revoke_before_assign(manager: LogManager, clock: FakeClock) -> None:
    manager.create_topic("t", 6)

    async def body(c: GroupCoordinator) -> None:
        a = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
        assert a.assignment == [("t", p) for p in range(6)]
        b = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
        assert b.assignment == []  # everything is still A's
        assert b.member_epoch == a.member_epoch + 1 == 2
        assert_disjoint(c, "g")

        a2 = await c.heartbeat("g", HeartbeatRequest(a.member_id, a.member_epoch))
        assert len(a2.assignment) == 3
        assert a2.member_epoch == a.member_epoch  # revoking keeps the epoch
        b2 = await c.heartbeat("g", HeartbeatRequest(b.member_id, b.member_epoch))
        assert b2.assignment == []  # not released yet
        # A still reports the revoked partitions: nothing moves.
        a3 = await c.heartbeat(
            "g",
            HeartbeatRequest(a.member_id, a2.member_epoch, owned_partitions=a.assignment),
        )
        assert a3.member_epoch == a.member_epoch
        b3 = await c.heartbeat("g", HeartbeatRequest(b.member_id, b2.member_epoch))
        assert b3.assignment == []
        assert_disjoint(c, "g")
        # A releases them: it moves to the new epoch, then B gets them.
        a4 = await c.heartbeat(
            "g",
            HeartbeatRequest(a.member_id, a3.member_epoch, owned_partitions=a2.assignment),
        )
        assert a4.member_epoch == b.member_epoch
        assert a4.assignment == a2.assignment
        b4 = await c.heartbeat("g", HeartbeatRequest(b.member_id, b3.member_epoch))
        assert sorted(a4.assignment + b4.assignment) == [("t", p) for p in range(6)]
        assert c.describe_group("g")["state"] == "Stable"

    run(manager, clock, body)


def test_fencing_leave_and_session_timeout(manager: LogManager, clock: FakeClock) -> None:
    manager.create_topic("t", 4)

    async def body(c: GroupCoordinator) -> None:
        a = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
        try:
            await c.heartbeat("g", HeartbeatRequest(a.member_id, a.member_epoch + 5))
            raise AssertionError("not fenced")
        except FencedMemberEpoch:
            pass
        try:
            await c.heartbeat("g", HeartbeatRequest("nobody", 3))
            raise AssertionError("unknown member accepted")
        except UnknownMemberId:
            pass
        b = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
        clock.now += 6
        await c.heartbeat("g", HeartbeatRequest(b.member_id, b.member_epoch))
        clock.now += 6  # A has been silent for 12 s > 10 s
        assert c.expire_sessions() == 1
        b2 = await c.heartbeat("g", HeartbeatRequest(b.member_id, b.member_epoch))
        b2 = await c.heartbeat("g", HeartbeatRequest(b.member_id, b2.member_epoch))
        assert b2.assignment == [("t", p) for p in range(4)]
        left = await c.heartbeat("g", HeartbeatRequest(b.member_id, -1))
        assert left.member_epoch == -1
        assert c.describe_group("g")["state"] == "Empty"

    run(manager, clock, body)


def test_static_member_keeps_partitions(manager: LogManager, clock: FakeClock) -> None:
    manager.create_topic("t", 4)

    async def body(c: GroupCoordinator) -> None:
        a = await c.heartbeat("g", HeartbeatRequest(instance_id="i-a", subscribed_topics=["t"]))
        b = await c.heartbeat("g", HeartbeatRequest(instance_id="i-b", subscribed_topics=["t"]))
        for _ in range(3):
            a = await c.heartbeat("g", applied(a))
            b = await c.heartbeat("g", applied(b))
        assert len(a.assignment) == len(b.assignment) == 2
        try:
            await c.heartbeat("g", HeartbeatRequest(instance_id="i-a", subscribed_topics=["t"]))
            raise AssertionError("instance id taken twice")
        except UnreleasedInstanceId:
            pass
        await c.heartbeat("g", HeartbeatRequest(a.member_id, -2, instance_id="i-a"))
        epoch = c.group("g").group_epoch  # type: ignore[union-attr]
        a2 = await c.heartbeat("g", HeartbeatRequest(instance_id="i-a", subscribed_topics=["t"]))
        assert a2.member_id != a.member_id
        assert a2.assignment == a.assignment
        assert a2.member_epoch == a.member_epoch
        assert c.group("g").group_epoch == epoch  # type: ignore[union-attr]

    run(manager, clock, body)


def test_random_churn_never_double_assigns(manager: LogManager, clock: FakeClock) -> None:
    manager.create_topic("t", 12)
    manager.create_topic("u", 5)
    rng = random.Random(7)

    async def body(c: GroupCoordinator) -> None:
        live: dict[str, HeartbeatResponse] = {}
        for _ in range(400):
            action = rng.random()
            if action < 0.12 or not live:
                topics = rng.choice([["t"], ["t", "u"], ["u"]])
                r = await c.heartbeat(
                    "g",
                    HeartbeatRequest(
                        subscribed_topics=topics, server_assignor=rng.choice(["uniform", "range"])
                    ),
                )
                live[r.member_id] = r
            elif action < 0.2 and len(live) > 1:
                mid = rng.choice(sorted(live))
                await c.heartbeat("g", HeartbeatRequest(mid, -1))
                del live[mid]
            else:
                mid = rng.choice(sorted(live))
                last = live[mid]
                live[mid] = await c.heartbeat("g", applied(last))
            assert_disjoint(c, "g")
        # Quiet heartbeats converge every member to the target.
        for _ in range(4):
            for mid in sorted(live):
                live[mid] = await c.heartbeat("g", applied(live[mid]))
        g = c.group("g")
        assert g is not None
        assert c.describe_group("g")["state"] == "Stable"
        held = sorted(tp for r in live.values() for tp in r.assignment)
        subscribed = {t for m in g.members.values() for t in m.resolved}
        expected = sorted(
            [("t", p) for p in range(12) if "t" in subscribed]
            + [("u", p) for p in range(5) if "u" in subscribed]
        )
        assert held == expected

    run(manager, clock, body)


def test_member_that_does_not_revoke_is_removed_after_rebalance_timeout(
    manager: LogManager, clock: FakeClock
) -> None:
    manager.create_topic("t", 4)

    async def body(c: GroupCoordinator) -> None:
        a = await c.heartbeat(
            "g", HeartbeatRequest(subscribed_topics=["t"], rebalance_timeout_ms=2000)
        )
        b = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
        owned = a.assignment
        a = await c.heartbeat("g", HeartbeatRequest(a.member_id, a.member_epoch))
        assert len(a.assignment) == 2  # asked to give two up
        for _ in range(3):
            clock.now += 0.9
            # Keeps heartbeating (session alive) but never lets go of the partitions.
            await c.heartbeat(
                "g", HeartbeatRequest(a.member_id, a.member_epoch, owned_partitions=owned)
            )
        assert c.expire_sessions() == 1
        b = await c.heartbeat("g", HeartbeatRequest(b.member_id, b.member_epoch))
        b = await c.heartbeat("g", HeartbeatRequest(b.member_id, b.member_epoch))
        assert b.assignment == [("t", p) for p in range(4)]

    run(manager, clock, body)


def test_cache_is_rebuilt_from_the_topic(manager: LogManager, clock: FakeClock) -> None:
    manager.create_topic("t", 3)
    state: dict[str, object] = {}

    async def first(c: GroupCoordinator) -> None:
        a = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"], instance_id="i"))
        await c.commit_offsets("g", a.member_id, a.member_epoch, [OffsetCommit("t", 1, 9, 2, "x")])
        await c.commit_offsets("gone", "", -1, [OffsetCommit("t", 0, 1)])
        await c.delete_group("gone")
        await c.commit_offsets("plain", "", -1, [OffsetCommit("t", 2, 5)])
        await c.commit_offsets("plain", "", -1, [OffsetCommit("t", 2, 6)])
        state["desc"] = c.describe_group("g")
        state["member"] = a

    async def second(c: GroupCoordinator) -> None:
        assert c.describe_group("g") == state["desc"]
        assert [g["group"] for g in c.list_groups()] == ["g", "plain"]
        got = c.fetch_offsets("plain", ["t"])
        assert [(o.partition, o.offset) for o in got] == [(0, -1), (1, -1), (2, 6)]
        (o,) = c.fetch_offsets("g")
        assert (o.offset, o.leader_epoch, o.metadata) == (9, 2, "x")
        a = state["member"]
        assert isinstance(a, HeartbeatResponse)
        again = await c.heartbeat("g", HeartbeatRequest(a.member_id, a.member_epoch))
        assert again.assignment == a.assignment

    run(manager, clock, first)
    run(manager, clock, second)


def test_revocation_is_cancelled_when_the_target_gives_partitions_back(
    manager: LogManager, clock: FakeClock
) -> None:
    manager.create_topic("t", 6)

    async def body(c: GroupCoordinator) -> None:
        a = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
        everything = a.assignment
        b = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
        a = await c.heartbeat("g", HeartbeatRequest(a.member_id, a.member_epoch))
        assert len(a.assignment) == 3
        # B leaves before A has let anything go: A keeps all six, at the newest epoch.
        await c.heartbeat("g", HeartbeatRequest(b.member_id, -1))
        a = await c.heartbeat(
            "g", HeartbeatRequest(a.member_id, a.member_epoch, owned_partitions=everything)
        )
        assert a.assignment == everything
        assert a.member_epoch == c.group("g").group_epoch  # type: ignore[union-attr]
        assert c.describe_group("g")["state"] == "Stable"

    run(manager, clock, body)


def test_a_heartbeat_without_owned_partitions_releases_nothing(
    manager: LogManager, clock: FakeClock
) -> None:
    """Kafka's meaning of a missing owned list: unchanged since last reported. The answer
    that revoked partitions may have been lost, so only an explicit list without them
    releases them; until then nobody else is handed them."""
    manager.create_topic("t", 4)

    async def body(c: GroupCoordinator) -> None:
        a = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
        everything = a.assignment
        b = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
        revoking = await c.heartbeat("g", HeartbeatRequest(a.member_id, a.member_epoch))
        assert len(revoking.assignment) == 2  # this answer is lost on its way to A
        for _ in range(3):
            a = await c.heartbeat("g", HeartbeatRequest(a.member_id, a.member_epoch))
            b = await c.heartbeat("g", HeartbeatRequest(b.member_id, b.member_epoch))
            assert b.assignment == []
            assert_disjoint(c, "g")
        group = c.group("g")
        assert group is not None and group.members[a.member_id].revoking
        # A reports what it holds (everything, it never saw the revocation): still nothing.
        a = await c.heartbeat(
            "g", HeartbeatRequest(a.member_id, a.member_epoch, owned_partitions=everything)
        )
        b = await c.heartbeat("g", HeartbeatRequest(b.member_id, b.member_epoch))
        assert b.assignment == []
        # Once A's list leaves them out they are released and B gets them.
        a = await c.heartbeat(
            "g",
            HeartbeatRequest(a.member_id, a.member_epoch, owned_partitions=a.assignment),
        )
        b = await c.heartbeat("g", HeartbeatRequest(b.member_id, b.member_epoch))
        assert len(b.assignment) == 2 and not set(b.assignment) & set(a.assignment)
        assert_disjoint(c, "g")

    run(manager, clock, body)


def test_a_static_members_temporary_leave_survives_a_restart(
    manager: LogManager, clock: FakeClock
) -> None:
    manager.create_topic("t", 2)
    seen: dict[str, HeartbeatResponse] = {}

    async def before(c: GroupCoordinator) -> None:
        a = await c.heartbeat("g", HeartbeatRequest(instance_id="i-a", subscribed_topics=["t"]))
        await c.heartbeat("g", HeartbeatRequest(a.member_id, -2, instance_id="i-a"))
        with pytest.raises(UnknownMemberId):
            await c.commit_offsets("g", a.member_id, a.member_epoch, [OffsetCommit("t", 0, 1)])
        seen["a"] = a

    async def after(c: GroupCoordinator) -> None:
        a = seen["a"]
        # The id that left stays out: no heartbeat, no commit.
        with pytest.raises(UnknownMemberId):
            await c.heartbeat("g", HeartbeatRequest(a.member_id, a.member_epoch))
        with pytest.raises(UnknownMemberId):
            await c.commit_offsets("g", a.member_id, a.member_epoch, [OffsetCommit("t", 0, 1)])
        # The instance comes back under a new id and takes its partitions over.
        back = await c.heartbeat("g", HeartbeatRequest(instance_id="i-a", subscribed_topics=["t"]))
        assert back.member_id != a.member_id
        assert back.assignment == a.assignment and back.member_epoch == a.member_epoch
        await c.commit_offsets("g", back.member_id, back.member_epoch, [OffsetCommit("t", 0, 1)])

    run(manager, clock, before)
    run(manager, clock, after)


def test_a_restart_keeps_the_offsets_retention_clock_of_an_empty_group(
    manager: LogManager, clock: FakeClock
) -> None:
    """Retention counts from when the group became empty, also across a restart."""
    manager.create_topic("t", 1)
    config = GroupConfig(offsets_topic_num_partitions=2, offsets_retention_ms=60_000)
    t0 = clock.wall_ms()

    async def with_coordinator(body: Callable[[GroupCoordinator], Awaitable[None]]) -> None:
        coord = GroupCoordinator(manager, config, clock_ms=clock.wall_ms, monotonic=clock.monotonic)
        await coord.start()
        try:
            await body(coord)
        finally:
            await coord.stop()

    async def before(c: GroupCoordinator) -> None:
        a = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
        await c.commit_offsets("g", a.member_id, a.member_epoch, [OffsetCommit("t", 0, 3)])
        clock.now += 40
        await c.heartbeat("g", HeartbeatRequest(a.member_id, -1))

    async def after(c: GroupCoordinator) -> None:
        assert c.expire_offsets(t0 + 61_000) == 0
        assert c.expire_offsets(t0 + 99_000) == 0
        assert c.expire_offsets(t0 + 100_000) == 1

    asyncio.run(with_coordinator(before))
    clock.now += 5
    asyncio.run(with_coordinator(after))
