"""A WebSocket group member (app.api.ws.group.GroupMember) over a real coordinator: it
leaves the group on every path, whatever the timing of the cancellation that stops it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.api.server import build_config
from app.api.ws.common import ClientGone
from app.api.ws.group import GroupMember
from app.common.errors import LogbusError, OffsetNotAvailable
from app.config import Settings
from app.core.log import LogManager
from app.groups.coordinator import GroupConfig, GroupCoordinator

TP = tuple[str, int]


class FakeHost:
    """The subscription side: cursors as a dict, frames in a list; ``gone`` makes every
    send fail as a closed socket does."""

    def __init__(self) -> None:
        self.cursors: dict[TP, int] = {}
        self.frames: list[str] = []
        self.gone = False

    def add_partition(self, topic: str, partition: int, position: int) -> dict[str, Any]:
        self.cursors[(topic, partition)] = position
        return {"topic": topic, "partition": partition, "offset": position}

    def drop_partition(self, topic: str, partition: int) -> None:
        self.cursors.pop((topic, partition), None)

    def offsets_error(self, topic: str, partition: int) -> OffsetNotAvailable | None:
        return None  # a lone broker's replicas always know their end

    def positions(self) -> dict[TP, int]:
        return dict(self.cursors)

    async def send_frame(self, text: str) -> None:
        if self.gone:
            raise ClientGone
        self.frames.append(text)

    async def send_failure(self, exc: LogbusError) -> None:
        await self.send_frame(exc.message)


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    m = LogManager(tmp_path / "data")
    m.start()
    m.create_topic("t", 4)
    try:
        yield m
    finally:
        m.shutdown()


async def _member(
    manager: LogManager, host: FakeHost, **config: Any
) -> tuple[GroupCoordinator, GroupMember]:
    coordinator = GroupCoordinator(manager, GroupConfig(offsets_topic_num_partitions=1, **config))
    await coordinator.start()
    member = GroupMember(
        host,
        coordinator,
        "g",
        ["t"],
        instance_id=None,
        server_assignor=None,
        start="earliest",
        default="earliest",
    )
    await member.join()
    await member.start_loop()
    return coordinator, member


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_wakeup_in_the_same_step_as_leave_does_not_keep_the_member(
    manager: LogManager,
) -> None:
    """The heartbeat loop's wait is woken (another member's change) in the very step that
    leave() cancels it: the cancellation must not be lost (asyncio.wait_for on 3.11 drops
    it), or the loop heartbeats forever and leave() never returns."""

    async def main() -> None:
        host = FakeHost()
        coordinator, member = await _member(manager, host, heartbeat_interval_ms=60_000)
        await _settle()  # the loop is waiting for its next heartbeat
        member._due.set()
        leaving = asyncio.ensure_future(member.leave())
        # Bounded only so that the old behaviour fails instead of hanging the suite.
        done, _ = await asyncio.wait({leaving}, timeout=30)
        assert leaving in done, "leave() is stuck behind a heartbeat loop that never stops"
        group = coordinator.group("g")
        assert group is not None and group.members == {}
        await coordinator.stop()

    asyncio.run(main())


def test_a_socket_gone_under_the_heartbeat_loop_leaves_the_group(manager: LogManager) -> None:
    """ClientGone from a frame the loop sends ends the loop and the membership at once;
    nothing swallows it and no later heartbeat keeps the member."""

    async def main() -> None:
        host = FakeHost()
        coordinator, member = await _member(manager, host, heartbeat_interval_ms=60_000)
        assert len(host.cursors) == 4
        # A second member: the first must revoke (an assignment frame it cannot send).
        other = GroupMember(
            FakeHost(),
            coordinator,
            "g",
            ["t"],
            instance_id=None,
            server_assignor=None,
            start="earliest",
            default="earliest",
        )
        host.gone = True
        await other.join()
        assert member._task is not None
        done, _ = await asyncio.wait({member._task}, timeout=30)
        assert member._task in done, "the heartbeat loop goes on after its socket is gone"
        group = coordinator.group("g")
        assert group is not None and set(group.members) == {other.member_id}
        await member.leave()  # what the subscription does next: nothing left to do
        await other.leave()
        await coordinator.stop()

    asyncio.run(main())


def test_a_leave_cancelled_by_its_caller_still_leaves(manager: LogManager) -> None:
    """A broker shutting down cancels the socket's handler while it is leaving: the leave
    heartbeat is still sent, and the cancellation still reaches the caller."""

    async def main() -> None:
        coordinator, member = await _member(manager, FakeHost(), heartbeat_interval_ms=60_000)
        await _settle()
        leaving = asyncio.ensure_future(member.leave())
        await asyncio.sleep(0)  # inside leave(), waiting for the loop to stop
        leaving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leaving
        await _settle()
        group = coordinator.group("g")
        assert group is not None and group.members == {}
        await coordinator.stop()

    asyncio.run(main())


@pytest.mark.parametrize("session_ms", [1500, 3000, 10_000, 45_000, 600_000])
def test_the_served_keepalive_finds_a_frozen_socket_within_the_session_timeout(
    tmp_path: Path, session_ms: int
) -> None:
    """The broker heartbeats for a socket as long as it lives: uvicorn's ping interval plus
    pong timeout bound how long a silent, frozen client keeps its partitions."""
    settings = Settings(data_dir=tmp_path, group_consumer_session_timeout_ms=session_ms)
    config = build_config(settings, zerocopy=False)
    assert config.ws_ping_interval is not None and config.ws_ping_timeout is not None
    assert 0 < config.ws_ping_interval + config.ws_ping_timeout <= session_ms / 1000
