"""A classic group on the real coordinator: its commits in the one offsets store checked by
generation and member as Kafka checks them, one protocol per group, and the admin
operations (describe, reset, OffsetDelete) treating it like any group."""

from __future__ import annotations

import asyncio

import pytest
from groups_unit_helpers import FakeClock

from app.common.group_errors import (
    FencedInstanceId,
    GroupSubscribedToTopic,
    IllegalGeneration,
    InconsistentGroupProtocol,
    NonEmptyGroup,
    UnknownMemberId,
)
from app.core.log import LogManager
from app.groups.classic import JoinRequest
from app.groups.coordinator import GroupConfig, GroupCoordinator, HeartbeatRequest, OffsetCommit
from app.kafka.apis.groups import encode_assignment, encode_subscription


def _join(member_id: str = "", instance_id: str | None = None) -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        protocol_type="consumer",
        protocols=[("range", encode_subscription(["t"]))],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        instance_id=instance_id,
        require_known_member_id=False,
    )


def test_classic_commits_are_checked_by_generation(manager: LogManager, clock: FakeClock) -> None:
    manager.create_topic("t", 2)

    async def main() -> None:
        c = GroupCoordinator(
            manager,
            GroupConfig(offsets_topic_num_partitions=2, classic_initial_rebalance_delay_ms=0),
            clock_ms=clock.wall_ms,
            monotonic=clock.monotonic,
        )
        await c.start()
        try:
            joined = await c.classic.join("g", _join(instance_id="i-1"))
            assert joined.generation == 1 and joined.leader == joined.member_id
            me = joined.member_id
            synced = await c.classic.sync(
                "g", 1, me, "i-1", "consumer", "range", {me: encode_assignment([("t", 0)])}
            )
            assert synced.assignment == encode_assignment([("t", 0)])
            commit = [OffsetCommit("t", 0, 5)]
            await c.commit_offsets("g", me, 1, commit, "i-1")
            assert c.fetch_offsets("g", ["t"])[0].offset == 5
            with pytest.raises(IllegalGeneration):
                await c.commit_offsets("g", me, 2, commit)
            with pytest.raises(UnknownMemberId):
                await c.commit_offsets("g", "stranger", 1, commit)
            with pytest.raises(UnknownMemberId):  # from outside, while it has members
                await c.commit_offsets("g", "", -1, commit)
            with pytest.raises(FencedInstanceId):
                await c.commit_offsets("g", "an-old-incarnation", 1, commit, "i-1")
            # One protocol per group, both ways.
            with pytest.raises(InconsistentGroupProtocol):
                await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
            await c.heartbeat("h", HeartbeatRequest(subscribed_topics=["t"]))
            with pytest.raises(InconsistentGroupProtocol):
                await c.classic.join("h", _join())
            # Admin: described as classic, not reset, its subscribed topic's offsets kept.
            described = c.describe_group("g")
            assert (described["protocol"], described["state"], described["assignor"]) == (
                "classic",
                "Stable",
                "range",
            )
            (member,) = described["members"]
            assert member["subscribed_topics"] == ["t"]
            assert member["assignment"] == [{"topic": "t", "partitions": [0]}]
            assert described["offsets"][0]["lag"] == 0
            with pytest.raises(NonEmptyGroup):
                await c.reset_offsets("g", "t", "earliest")
            outcome = await c.offsets.delete_offsets("g", [("t", 0)])
            assert isinstance(outcome[("t", 0)], GroupSubscribedToTopic)
            # Empty again: commits from outside the group count, the group may be reset.
            assert await c.classic.leave("g", [("", "i-1")]) == [None]
            assert c.list_groups()[0]["state"] == "Empty"
            await c.commit_offsets("g", "", -1, [OffsetCommit("t", 1, 7)])
            await c.reset_offsets("g", "t", "earliest")
            assert [o.offset for o in c.fetch_offsets("g", ["t"])] == [0, 0]
            # ... and a consumer-protocol member may take the empty group over.
            await c.heartbeat("g", HeartbeatRequest(subscribed_topics=["t"]))
            assert c.describe_group("g")["protocol"] == "consumer"
        finally:
            await c.stop()

    asyncio.run(main())
