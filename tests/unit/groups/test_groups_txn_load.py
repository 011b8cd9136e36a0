"""Offsets committed in a transaction, when the group's ``__consumer_offsets`` partition
moves to a new coordinator while the transaction ends.

The new leader loads the partition (a replay of its log in a worker thread, up to the end
it had when the replay began) while the transaction coordinator may already write the
transaction's COMMIT or ABORT marker there (a new transaction coordinator completing what
the dead one prepared, elected at the same kill). A marker appended after the replay's end
but before the groups are installed must still end the producer's pending offsets: else a
committed transaction's offsets stay pending (the next consumer re-reads the old position
and copies that transaction's records again: a duplicate) and an aborted one's are applied
by the producer's next commit (records skipped). Kafka serialises the two (the old group
coordinator queued the completion behind the load; the new runtime refuses the marker
until loaded).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from groups_cluster_fakes import FakeCluster, two_brokers
from groups_unit_helpers import FakeClock
from test_groups_cluster import MINE, N, coordinator, run, settle

from app.core.log import LogManager
from app.groups.coordinator import OFFSETS_TOPIC, Group, GroupCoordinator, OffsetCommit

PID = 7


def _hold_replay(target: GroupCoordinator) -> tuple[threading.Event, threading.Event]:
    """Make ``target``'s next partition load stop after its replay of the log (the end
    it read is fixed) until ``go`` is set; ``replayed`` is set when it got there."""
    replayed, go = threading.Event(), threading.Event()
    rt = target.runtime
    original = rt._reader

    def reader(partition: int) -> Callable[[], object]:
        replay = original(partition)

        def held() -> object:
            loaded = replay()
            replayed.set()
            assert go.wait(10), "the test never released the load"
            return loaded

        return held

    rt._reader = reader  # type: ignore[method-assign]
    return replayed, go


async def _until(event: threading.Event) -> None:
    for _ in range(5000):
        if event.is_set():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the load never reached the end of its replay")


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_marker_written_while_the_new_coordinator_loads_ends_the_pending_offsets(
    manager: LogManager, clock: FakeClock, commit: bool
) -> None:
    one, two = two_brokers(manager, "in", 2, N)

    async def body() -> None:
        a = coordinator(manager, one, clock)
        b = coordinator(manager, two, clock)
        await a.start()
        await b.start()
        await settle(a, b)
        try:
            # Broker 1 coordinates the group: the producer's transaction commits offsets.
            await a.txn_commit_offsets(
                MINE, PID, 0, [OffsetCommit("in", 0, 20), OffsetCommit("in", 1, 30)]
            )
            assert [o.offset for o in a.fetch_offsets(MINE, ["in"])] == [-1, -1]

            # Broker 1 dies: broker 2 leads the partition and loads it; its replay has
            # read the log when the transaction's marker is written there (by the leader,
            # broker 2) and reported to it, as the marker route does.
            replayed, go = _hold_replay(b)
            for cluster in (one, two):
                cluster.set_leader(OFFSETS_TOPIC, 0, 2)
            await _until(replayed)
            assert b.loading == [0]
            log = manager.get_log(OFFSETS_TOPIC, 0)
            log.append_control(PID, 0, commit=commit, coordinator_epoch=0)
            b.txn_completed(0, PID, commit)
            go.set()
            await settle(b)

            # Committed: the next consumer starts after the transaction's records.
            got = [o.offset for o in b.fetch_offsets(MINE, ["in"])]
            assert got == ([20, 30] if commit else [-1, -1])
            group = b.group(MINE)  # (an aborted transaction leaves nothing to keep)
            assert group is None or group.pending_txn_offsets == {}, (
                "the marker did not end the transaction"
            )

            # The producer's next transaction commits in-0 only: in-1 keeps what the
            # marker decided (never the aborted transaction's 30).
            await b.txn_commit_offsets(MINE, PID, 1, [OffsetCommit("in", 0, 25)])
            log.append_control(PID, 1, commit=True, coordinator_epoch=0)
            b.txn_completed(0, PID, True)
            got = [o.offset for o in b.fetch_offsets(MINE, ["in"])]
            assert got == ([25, 30] if commit else [25, -1])
            served = b.group(MINE)
            assert served is not None
            await _check_reload(manager, clock, served)
        finally:
            await a.stop()
            await b.stop()

    run(body)


async def _check_reload(manager: LogManager, clock: FakeClock, served: Group) -> None:
    """A coordinator loading the partition afresh agrees with the one that served it."""
    fresh = FakeCluster(manager, 3, leader_for=lambda _t, _p: 3)
    fresh.add_topic("in", 2)
    fresh.add_topic(OFFSETS_TOPIC, N)
    c = coordinator(manager, fresh, clock)
    await c.start()
    try:
        await settle(c)
        group = c.group(MINE)
        assert group is not None
        assert group.offsets == served.offsets and group.pending_txn_offsets == {}
    finally:
        await c.stop()
