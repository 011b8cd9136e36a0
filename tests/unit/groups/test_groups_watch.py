"""GroupCoordinator.watch: a member is told when another member's change gives it work."""

from __future__ import annotations

import asyncio

from groups_unit_helpers import FakeClock

from app.core.log import LogManager
from app.groups.coordinator import GroupConfig, GroupCoordinator, HeartbeatRequest


def test_watchers_hear_of_rebalances_they_must_act_on(
    manager: LogManager, clock: FakeClock
) -> None:
    manager.create_topic("t", 4)

    async def main() -> None:
        c = GroupCoordinator(
            manager,
            GroupConfig(offsets_topic_num_partitions=2),
            clock_ms=clock.wall_ms,
            monotonic=clock.monotonic,
        )
        await c.start()
        try:
            calls: dict[str, int] = {"a": 0, "b": 0}
            a = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
            c.watch("g", a.member_id, lambda: calls.__setitem__("a", calls["a"] + 1))
            b = await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
            c.watch("g", b.member_id, lambda: calls.__setitem__("b", calls["b"] + 1))
            # B's join moved half of A's partitions to B: A must revoke.
            assert calls == {"a": 1, "b": 0} and b.assignment == []
            a2 = await c.heartbeat("g", HeartbeatRequest(a.member_id, a.member_epoch))
            revoked = set(a.assignment) - set(a2.assignment)
            assert len(revoked) == 2 and calls == {"a": 1, "b": 0}  # A itself acts, no call
            await c.heartbeat(
                "g", HeartbeatRequest(a.member_id, a2.member_epoch, owned_partitions=a2.assignment)
            )
            # The acknowledged revocation freed B's partitions: B is told.
            assert calls == {"a": 1, "b": 1}
            b2 = await c.heartbeat("g", HeartbeatRequest(b.member_id, b.member_epoch))
            assert set(b2.assignment) == revoked
            # A steady heartbeat changes nothing and tells nobody.
            await c.heartbeat("g", HeartbeatRequest(b.member_id, b2.member_epoch))
            assert calls == {"a": 1, "b": 1}
            # A leaves: B must take everything; a watcher removed hears nothing.
            c.watch("g", a.member_id, None)
            await c.heartbeat("g", HeartbeatRequest(a.member_id, -1))
            assert calls == {"a": 1, "b": 2}
            b3 = await c.heartbeat("g", HeartbeatRequest(b.member_id, b2.member_epoch))
            assert len(b3.assignment) == 4
        finally:
            await c.stop()

    asyncio.run(main())
