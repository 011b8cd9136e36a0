"""Partition (one replica of a partition on this broker) over a real Log in tmp_path.

The state writer and notify are fakes; each test drives the partition inside
``asyncio.run`` like the broker's event loop does. Time is the module's ``_now_ms``,
replaced by a settable clock where lag matters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from app.common.batch import BatchBuilder, read_header
from app.common.errors import (
    FencedLeaderEpoch,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    OffsetNotAvailable,
    PolicyViolation,
    RequestTimedOut,
    UnknownLeaderEpoch,
)
from app.core.log import Log, LogConfig
from app.core.replication import partition as partition_mod
from app.core.replication.partition import FOLLOWER, LEADER, OFFLINE, Partition
from app.core.replication.state import NO_LEADER, PartitionState
from app.core.topology import list_offset

T = TypeVar("T")
ME = 1


def batch(count: int) -> bytes:
    builder = BatchBuilder()
    for i in range(count):
        builder.append(b"v%d" % i, None, timestamp=1_700_000_000_000 + i)
    return builder.build()


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Harness:
    """A Partition with a fake compare-and-set state writer and a notify counter."""

    def __init__(
        self,
        tmp_path: Path,
        replicas: tuple[int, ...] = (1, 2, 3),
        *,
        lag_ms: int = 10_000,
        min_isr: int = 1,
    ) -> None:
        config = LogConfig().with_overrides({"min.insync.replicas": min_isr})
        self.log = Log(tmp_path / "t-0", config)
        self.writes: list[tuple[PartitionState, int]] = []
        self.cas_ok = True
        self.gate: asyncio.Event | None = None
        self.notified = 0
        self.followed = 0
        self.registered = set(replicas)
        self.part = Partition(
            self.log,
            replicas,
            ME,
            write_state=self.write_state,
            notify=self.notify,
            lag_time_max_ms=lag_ms,
            registered=lambda broker: broker in self.registered,
        )
        self.part.on_follow = self.on_follow

    async def write_state(self, state: PartitionState, expected: int) -> int | None:
        self.writes.append((state, expected))
        if self.gate is not None:
            await self.gate.wait()
        return expected + 1 if self.cas_ok else None

    def notify(self, log: Log) -> None:
        assert log is self.log
        self.notified += 1

    def on_follow(self, part: Partition) -> None:
        assert part is self.part
        self.followed += 1

    def lead(self, isr: tuple[int, ...] = (1, 2, 3), epoch: int = 3, version: int = 7) -> None:
        self.part.apply(PartitionState(ME, epoch, isr, 2), version)

    def isr(self) -> tuple[int, ...]:
        """The partition's local ISR (a call, so that type checkers do not narrow it)."""
        return self.part.isr

    def append(self, count: int) -> int:
        """Append ``count`` records; the last offset."""
        return self.log.append(batch(count)).last_offset

    def epochs_on_disk(self) -> list[tuple[int, int]]:
        fetched = self.log.read(0, 1 << 20, max_offset=self.log.log_end_offset)
        out = []
        data = fetched.read_bytes()
        pos = 0
        while pos < len(data):
            h = read_header(data, pos)
            out.append((h.base_offset, h.partition_leader_epoch))
            pos += h.size
        return out


async def settle() -> None:
    """Let the partition's ISR-write task run to completion."""
    for _ in range(5):
        await asyncio.sleep(0)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(partition_mod, "_now_ms", c)
    return c


# -- roles ------------------------------------------------------------------------------


def test_become_leader_stamps_the_epoch_and_records_it_in_the_epoch_cache(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        h = Harness(tmp_path)
        h.append(5)  # before any leadership: epoch 0
        h.lead(isr=(1, 2, 3), epoch=3, version=7)
        p = h.part
        assert (p.role, p.leader, p.leader_epoch, p.isr, p.zk_version) == (
            LEADER,
            ME,
            3,
            (1, 2, 3),
            7,
        )
        assert p.controller_epoch == 2
        assert h.log.leader_epoch == 3
        assert h.log.leader_epoch_cache.entries() == [(0, 0), (3, 5)]
        assert set(p.followers) == {2, 3}
        assert not h.log.hw_follows_leo, "with followers in the ISR the HW waits for them"
        h.append(2)
        assert h.epochs_on_disk() == [(0, 0), (5, 3)]
        assert h.log.leader_epoch_cache.entries() == [(0, 0), (3, 5)]
        # The same state again (a watch re-delivering it) changes nothing.
        h.lead(isr=(1, 2, 3), epoch=3, version=7)
        assert h.log.leader_epoch_cache.entries() == [(0, 0), (3, 5)]
        # A new epoch while leading starts a new cache entry at the log end.
        h.lead(isr=(1, 2, 3), epoch=4, version=8)
        assert h.log.leader_epoch_cache.entries() == [(0, 0), (3, 5), (4, 7)]
        h.log.close()

    run(main())


def test_sole_isr_member_leader_moves_the_hw_with_the_log_end(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path)
        h.log.high_watermark = 0
        h.lead(isr=(ME,))
        assert h.log.hw_follows_leo
        h.append(4)
        assert h.log.high_watermark == 4
        h.log.close()

    run(main())


def test_become_follower_then_offline(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path)
        p = h.part
        p.apply(PartitionState(2, 5, (2, 1), 1), 3)
        assert (p.role, p.leader, p.leader_epoch, p.isr) == (FOLLOWER, 2, 5, (2, 1))
        # The log never takes the new leader's epoch: this broker did not lead it.
        assert h.log.leader_epoch == 0 and not h.log.hw_follows_leo
        assert h.followed == 1 and h.notified == 0
        # Only the ISR changed: still following the same leader, the fetcher keeps going.
        p.apply(PartitionState(2, 5, (2,), 1), 4)
        assert p.isr == (2,) and h.followed == 1
        # A new leader epoch (even of the same leader) restarts the fetcher.
        p.apply(PartitionState(2, 6, (2,), 1), 5)
        assert h.followed == 2 and p.leader_epoch == 6
        # A late, older notification is ignored.
        p.apply(PartitionState(3, 4, (3,), 1), 2)
        assert (p.leader, p.leader_epoch, p.zk_version) == (2, 6, 5)
        p.apply(PartitionState(NO_LEADER, 7, (2,), 1), 6)
        assert (p.role, p.leader, p.leader_epoch) == (OFFLINE, NO_LEADER, 7)
        h.log.close()

    run(main())


def test_resigning_never_stamps_the_new_leaders_epoch(tmp_path: Path) -> None:
    """A deposed leader's log keeps the epoch it led: a batch written through it (as the
    produce path once did after losing leadership) is never stamped with the new leader's
    epoch, and the epoch cache never claims a term this broker did not lead."""

    async def main() -> None:
        h = Harness(tmp_path)
        h.lead(epoch=5)
        h.append(2)
        h.part.apply(PartitionState(2, 6, (2, 3), 2), 8)
        h.append(1)
        assert [epoch for _, epoch in h.epochs_on_disk()] == [5, 5]
        assert h.log.leader_epoch_cache.entries() == [(5, 0)]
        h.log.close()

    run(main())


def test_losing_leadership_fails_waiters_and_notifies(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path)
        h.lead()
        last = h.append(3)
        waiter = asyncio.ensure_future(h.part.wait_replicated(last, 5_000))
        await settle()
        assert not waiter.done()
        h.part.apply(PartitionState(2, 4, (2, 3), 2), 8)
        with pytest.raises(NotLeaderOrFollower):
            await waiter
        assert h.part.role == FOLLOWER and h.part.followers == {}
        assert h.notified == 1
        assert h.part._acks == []
        h.log.close()

    run(main())


# -- high watermark and ISR -------------------------------------------------------------


def test_hw_is_the_smallest_log_end_over_the_isr(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path)
        h.append(10)
        h.log.high_watermark = 0
        h.lead(isr=(1, 2, 3))
        assert h.log.high_watermark == 0
        h.part.on_follower_fetch(2, 10)
        assert h.log.high_watermark == 0, "follower 3 has not fetched yet"
        h.part.on_follower_fetch(3, 4)
        assert h.log.high_watermark == 4 and h.notified == 1
        h.part.on_follower_fetch(3, 7)
        assert h.log.high_watermark == 7 and h.notified == 2
        # A replica that is not one of this partition's is not tracked.
        h.part.on_follower_fetch(9, 10)
        assert 9 not in h.part.followers and h.log.high_watermark == 7
        h.part.on_follower_fetch(3, 10)
        assert h.log.high_watermark == 10
        # The HW never moves back.
        h.part.on_follower_fetch(3, 8)
        assert h.log.high_watermark == 10 and h.notified == 3
        await settle()
        assert h.writes == [], "no ISR change was needed"
        h.log.close()

    run(main())


def test_a_fetch_past_the_log_end_is_no_progress(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path)
        h.append(10)
        h.log.high_watermark = 0
        h.lead(isr=(1, 2, 3))
        h.part.on_follower_fetch(2, 10)
        # Follower 3 asks past this leader's log end (its longer, diverged log is not
        # truncated yet): the read answers out of range, and it holds none of 0-9 here.
        h.part.on_follower_fetch(3, 15)
        assert h.log.high_watermark == 0
        h.append(5)
        h.part.on_follower_fetch(2, 15)
        assert h.log.high_watermark == 0, "follower 3 holds none of this leader's records"
        h.part.on_follower_fetch(3, 15)  # a real position now
        assert h.log.high_watermark == 15
        h.log.close()

    run(main())


def test_isr_expands_once_the_write_succeeds(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path)
        h.append(10)
        h.log.high_watermark = 0
        h.lead(isr=(1, 2), epoch=3, version=7)
        h.part.on_follower_fetch(2, 10)
        assert h.log.high_watermark == 10
        h.part.on_follower_fetch(3, 5)
        await settle()
        assert h.writes == [], "below the HW: not in sync yet"
        h.gate = asyncio.Event()
        h.part.on_follower_fetch(3, 10)
        await settle()
        assert h.writes == [(PartitionState(ME, 3, (1, 2, 3), 2), 7)]
        assert h.part.isr == (1, 2), "the local ISR waits for the write"
        # One write at a time: another fetch meanwhile does not write again.
        h.part.on_follower_fetch(3, 10)
        await settle()
        assert len(h.writes) == 1
        h.gate.set()
        await settle()
        assert (h.isr(), h.part.zk_version) == ((1, 2, 3), 8)
        h.log.close()

    run(main())


def test_hw_waits_for_a_follower_whose_isr_expansion_is_being_written(tmp_path: Path) -> None:
    # The chaos test's loss: ZooKeeper may hold the new ISR before the leader hears back,
    # and the controller may elect the joining follower (this leader paused past its
    # session timeout). Records acknowledged meanwhile must be on that follower too.
    async def main() -> None:
        h = Harness(tmp_path)
        h.append(10)
        h.log.high_watermark = 0
        h.lead(isr=(1, 2), epoch=3, version=7)
        h.part.on_follower_fetch(2, 10)
        h.gate = asyncio.Event()
        h.part.on_follower_fetch(3, 10)  # caught up: the expansion write goes out
        await settle()
        assert h.writes == [(PartitionState(ME, 3, (1, 2, 3), 2), 7)]
        assert h.part.isr == (1, 2), "the local ISR waits for the write"
        last = h.append(10)
        waiter = asyncio.ensure_future(h.part.wait_replicated(last, 5_000, 3))
        h.part.on_follower_fetch(2, 20)
        await settle()
        assert h.log.high_watermark == 10, "follower 3, maybe in the ISR already, lacks 10-19"
        assert not waiter.done()
        h.gate.set()
        await settle()
        assert h.isr() == (1, 2, 3) and h.log.high_watermark == 10 and not waiter.done()
        h.part.on_follower_fetch(3, 20)
        await waiter
        assert h.log.high_watermark == 20
        h.log.close()

    run(main())


def test_a_lone_leader_stops_moving_the_hw_with_its_log_end_while_a_follower_joins(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        h = Harness(tmp_path, min_isr=1)
        h.lead(isr=(1,), epoch=3, version=7)
        h.append(10)
        assert h.log.high_watermark == 10, "alone: the log end"
        h.gate = asyncio.Event()
        h.part.on_follower_fetch(2, 10)
        await settle()
        assert h.writes == [(PartitionState(ME, 3, (1, 2), 2), 7)]
        h.append(10)
        assert h.log.high_watermark == 10, "follower 2 may be in the ISR in ZooKeeper already"
        h.gate.set()
        await settle()
        assert h.isr() == (1, 2) and h.log.high_watermark == 10
        h.part.on_follower_fetch(2, 20)
        assert h.log.high_watermark == 20
        h.log.close()

    run(main())


def test_a_lone_leader_whose_expansion_loses_its_cas_follows_its_log_end_again(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        h = Harness(tmp_path, min_isr=1)
        h.lead(isr=(1,), epoch=3, version=7)
        h.append(10)
        h.cas_ok = False
        h.gate = asyncio.Event()
        h.part.on_follower_fetch(2, 10)
        await settle()
        h.append(10)
        assert h.log.high_watermark == 10
        h.gate.set()
        await settle()
        assert h.isr() == (1,)
        assert h.log.high_watermark == 20, "alone again: the log end"
        h.append(5)
        assert h.log.high_watermark == 25
        h.log.close()

    run(main())


def test_a_follower_not_registered_in_zookeeper_does_not_join(tmp_path: Path) -> None:
    # Its session expired (paused, say): the controller counts it dead until it registers.
    async def main() -> None:
        h = Harness(tmp_path)
        h.append(10)
        h.lead(isr=(1, 2), epoch=3, version=7)
        h.registered.discard(3)
        h.part.on_follower_fetch(3, 10)
        await settle()
        assert h.writes == []
        h.registered.add(3)
        h.part.on_follower_fetch(3, 10)
        await settle()
        assert h.isr() == (1, 2, 3)
        h.log.close()

    run(main())


def test_isr_expansion_that_loses_its_cas_changes_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path)
        h.append(10)
        h.lead(isr=(1, 2), epoch=3, version=7)
        h.part.on_follower_fetch(2, 10)
        h.cas_ok = False
        h.part.on_follower_fetch(3, 10)
        await settle()
        assert h.writes == [(PartitionState(ME, 3, (1, 2, 3), 2), 7)]
        assert h.part.isr == (1, 2) and h.part.zk_version == 7
        # The controller's newer state arrives through the watch instead.
        h.part.apply(PartitionState(ME, 3, (1, 2, 3), 2), 8)
        assert (h.isr(), h.part.zk_version) == ((1, 2, 3), 8)
        h.log.close()

    run(main())


def test_follower_below_the_leaders_epoch_start_does_not_join(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path)
        h.append(10)
        h.log.high_watermark = 4  # a new leader whose HW lags its log end
        h.lead(isr=(1, 2), epoch=3)
        assert h.log.leader_epoch_cache.entries()[-1] == (3, 10)
        h.part.on_follower_fetch(3, 6)  # >= HW, but still before this epoch began
        await settle()
        assert h.writes == [] and h.part.isr == (1, 2)
        h.part.on_follower_fetch(3, 10)
        await settle()
        assert h.isr() == (1, 2, 3), "it joins once it reached this epoch's start"
        h.log.close()

    run(main())


def test_isr_shrinks_after_lag_time_max(tmp_path: Path, clock: Clock) -> None:
    async def main() -> None:
        h = Harness(tmp_path, lag_ms=100)
        h.append(10)
        h.log.high_watermark = 0
        h.lead(isr=(1, 2, 3), version=7)  # every ISR member counts as caught up now
        clock.now += 50
        h.part.on_follower_fetch(2, 10)  # caught up at +50
        clock.now += 50
        h.part.maybe_shrink_isr()  # +100: nobody over the limit yet
        await settle()
        assert h.writes == []
        clock.now += 1
        h.part.maybe_shrink_isr()
        await settle()
        assert h.writes == [(PartitionState(ME, 3, (1, 2), 2), 7)]
        assert h.part.isr == (1, 2) and h.part.zk_version == 8
        # With 3 gone the HW follows follower 2 alone.
        assert h.log.high_watermark == 10
        h.log.close()

    run(main())


def test_a_follower_fetching_but_never_reaching_the_log_end_is_dropped(
    tmp_path: Path, clock: Clock
) -> None:
    async def main() -> None:
        h = Harness(tmp_path, (1, 2), lag_ms=100)
        h.append(10)
        h.lead(isr=(1, 2), version=7)
        fetched = 0
        for _ in range(5):
            clock.now += 40
            h.append(5)  # the leader gains 5 records per step, the follower only 2:
            fetched += 2  # each fetch is behind the leader's end at the previous fetch
            h.part.on_follower_fetch(2, fetched)
            h.part.maybe_shrink_isr()
            await settle()
        assert h.writes == [(PartitionState(ME, 3, (1,), 2), 7)]
        assert h.part.isr == (1,)
        h.log.close()

    run(main())


def test_shrink_with_real_time(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path, lag_ms=30)
        h.lead(isr=(1, 2, 3))
        h.part.maybe_shrink_isr()
        await settle()
        assert h.writes == []
        await asyncio.sleep(0.05)
        h.part.on_follower_fetch(3, 0)  # at the log end: caught up
        h.part.maybe_shrink_isr()
        await settle()
        assert h.part.isr == (1, 3)
        h.log.close()

    run(main())


def test_failed_shrink_cas_leaves_the_isr(tmp_path: Path, clock: Clock) -> None:
    async def main() -> None:
        h = Harness(tmp_path, lag_ms=100)
        h.lead(isr=(1, 2, 3), version=7)
        clock.now += 1000
        h.cas_ok = False
        h.part.maybe_shrink_isr()
        await settle()
        assert h.writes == [(PartitionState(ME, 3, (1,), 2), 7)]
        assert h.part.isr == (1, 2, 3) and h.part.zk_version == 7
        h.log.close()

    run(main())


def test_shrink_is_a_leaders_job(tmp_path: Path, clock: Clock) -> None:
    async def main() -> None:
        h = Harness(tmp_path, lag_ms=100)
        h.part.apply(PartitionState(2, 3, (2, 1, 3), 2), 7)
        clock.now += 1000
        h.part.maybe_shrink_isr()
        await settle()
        assert h.writes == []
        h.log.close()

    run(main())


# -- acks=all ---------------------------------------------------------------------------


def test_wait_replicated_resolves_when_the_hw_passes(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path, (1, 2))
        h.lead(isr=(1, 2))
        last = h.append(5)
        waiter = asyncio.ensure_future(h.part.wait_replicated(last, 5_000))
        await settle()
        h.part.on_follower_fetch(2, last)  # holds everything below `last`: not enough
        await settle()
        assert not waiter.done()
        h.part.on_follower_fetch(2, last + 1)
        await asyncio.wait_for(waiter, 1)
        assert h.part._acks == []
        # Already replicated: answered at once.
        await asyncio.wait_for(h.part.wait_replicated(last, 1), 1)
        h.log.close()

    run(main())


def test_wait_replicated_times_out(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path, (1, 2))
        h.lead(isr=(1, 2))
        last = h.append(5)
        with pytest.raises(RequestTimedOut, match="within 50 ms"):
            await h.part.wait_replicated(last, 50)
        assert h.part._acks == []
        h.log.close()

    run(main())


def test_wait_replicated_on_a_follower_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path, (1, 2))
        h.part.apply(PartitionState(2, 3, (2, 1), 2), 7)
        h.log.append(batch(3))
        h.log.high_watermark = 0
        with pytest.raises(NotLeaderOrFollower):
            await h.part.wait_replicated(2, 1000)
        h.log.close()

    run(main())


def test_wait_replicated_after_append_with_the_isr_below_min_insync(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path, (1, 2), min_isr=2)
        h.lead(isr=(ME,))
        last = h.append(3)
        assert h.log.high_watermark == 3
        with pytest.raises(NotEnoughReplicasAfterAppend):
            await h.part.wait_replicated(last, 1000)
        h.log.close()

    run(main())


def test_waiter_released_by_an_isr_shrink_below_min_insync_is_told_so(
    tmp_path: Path, clock: Clock
) -> None:
    async def main() -> None:
        h = Harness(tmp_path, (1, 2), lag_ms=100, min_isr=2)
        h.lead(isr=(1, 2), version=7)
        h.part.check_min_isr()  # two in sync: the append is allowed
        last = h.append(3)
        waiter = asyncio.ensure_future(h.part.wait_replicated(last, 5_000))
        await settle()
        # Follower 2 stops fetching; the leader drops it and is alone in the ISR.
        clock.now += 1000
        h.part.maybe_shrink_isr()
        await settle()
        assert h.part.isr == (ME,) and h.log.high_watermark == 3
        with pytest.raises(NotEnoughReplicasAfterAppend):
            await asyncio.wait_for(waiter, 1)
        h.log.close()

    run(main())


def test_check_min_isr(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path, min_isr=2)
        h.lead(isr=(1, 2))
        h.part.check_min_isr()
        h.lead(isr=(ME,), version=8)
        with pytest.raises(NotEnoughReplicas, match=r"min\.insync\.replicas=2") as err:
            h.part.check_min_isr()
        assert not isinstance(err.value, NotEnoughReplicasAfterAppend)
        h.log.close()

    run(main())


def test_check_epoch(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path)
        h.lead(epoch=5)
        for ok in (None, -1, 5):
            h.part.check_epoch(ok)
        with pytest.raises(FencedLeaderEpoch):
            h.part.check_epoch(4)
        with pytest.raises(UnknownLeaderEpoch):
            h.part.check_epoch(6)
        h.log.close()

    run(main())


def test_isr_write_finishing_after_a_newer_state_does_not_roll_it_back(
    tmp_path: Path, clock: Clock
) -> None:
    async def main() -> None:
        h = Harness(tmp_path, (1, 2, 3), lag_ms=100)
        h.lead(isr=(1, 2), version=7)
        h.gate = asyncio.Event()
        h.append(10)
        h.part.on_follower_fetch(2, 10)
        h.part.on_follower_fetch(3, 10)  # joins: write of version 8 in flight
        await settle()
        assert h.writes == [(PartitionState(ME, 3, (1, 2, 3), 2), 7)]
        # Our write lands as version 8, then the controller drops dead broker 2 (version 9),
        # and its watch reaches the partition before the write task resumes.
        h.part.apply(PartitionState(ME, 3, (1, 3), 5), 9)
        assert h.part.isr == (1, 3) and h.part.zk_version == 9
        h.gate.set()
        await settle()
        assert (h.part.isr, h.part.zk_version) == ((1, 3), 9)
        h.log.close()

    run(main())


# -- ListOffsets on a new leader (Kafka's OFFSET_NOT_AVAILABLE) -------------------------


def test_a_new_leader_whose_hw_lags_its_epoch_start_answers_no_end(tmp_path: Path) -> None:
    """Kafka's rule: a client's ListOffsets latest on a leader whose high watermark (the
    one it had as a follower) is below the start of its epoch is OFFSET_NOT_AVAILABLE,
    never that watermark; earliest is answered; once the ISR fetched past the epoch's
    start the end is exact."""

    async def main() -> None:
        h = Harness(tmp_path)
        h.append(10)  # taken as a follower; its leader's last answer said HW 3
        h.log.high_watermark = 3
        h.lead(isr=(1, 2, 3), epoch=3)
        err = h.part.offsets_error()
        assert isinstance(err, OffsetNotAvailable) and err.retriable
        assert err.error_code == "OFFSET_NOT_AVAILABLE"
        assert (err.high_watermark, err.epoch_start_offset, err.leader_epoch) == (3, 10, 3)
        for committed in (False, True):
            with pytest.raises(OffsetNotAvailable):
                list_offset(h.log, "latest", read_committed=committed, unavailable=err)
        assert list_offset(h.log, "earliest", read_committed=False, unavailable=err) == (0, -1)
        # One follower's fetch is not enough: the other may hold less.
        h.part.on_follower_fetch(2, 10)
        assert isinstance(h.part.offsets_error(), OffsetNotAvailable)
        h.part.on_follower_fetch(3, 10)
        assert h.log.high_watermark == 10 and h.part.offsets_error() is None
        assert list_offset(h.log, "latest", read_committed=False, unavailable=None) == (10, -1)
        await settle()
        h.log.close()

    run(main())


def test_timestamps_below_a_lagging_hw_are_answered_and_the_rest_refused(
    tmp_path: Path,
) -> None:
    """As Kafka's ReplicaManager: a record found below the high watermark is answered; a
    lookup that finds none there may be missing one above it: OFFSET_NOT_AVAILABLE."""

    async def main() -> None:
        h = Harness(tmp_path)
        h.append(10)  # timestamps 1_700_000_000_000 + i
        h.log.high_watermark = 4
        h.lead(isr=(1, 2, 3), epoch=2)
        err = h.part.offsets_error()
        assert err is not None
        base = 1_700_000_000_000
        assert list_offset(h.log, base + 2, read_committed=False, unavailable=err) == (
            2,
            base + 2,
        )
        with pytest.raises(OffsetNotAvailable):
            list_offset(h.log, base + 7, read_committed=False, unavailable=err)
        # Not lagging: nothing found is (-1, -1), as before.
        h.part.on_follower_fetch(2, 10)
        h.part.on_follower_fetch(3, 10)
        assert h.part.offsets_error() is None
        assert list_offset(h.log, base + 99, read_committed=False, unavailable=None) == (-1, -1)
        await settle()
        h.log.close()

    run(main())


def test_leaders_that_know_their_end_and_followers_raise_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path)
        h.append(10)
        h.log.high_watermark = 0
        h.part.apply(PartitionState(2, 4, (2, 1, 3), 1), 3)
        assert h.part.role == FOLLOWER and h.part.offsets_error() is None
        # A lone leader: its high watermark is its log end at once.
        h.lead(isr=(ME,), epoch=5, version=4)
        assert h.log.high_watermark == 10 and h.part.offsets_error() is None
        h.log.close()

    h2 = Harness(tmp_path / "caught-up")
    h2.append(6)
    h2.log.high_watermark = 6  # its last answer as a follower carried the whole log
    h2.lead(isr=(1, 2, 3), epoch=3)
    assert h2.part.offsets_error() is None
    h2.log.close()
    run(main())


# -- DeleteRecords: the low watermark ----------------------------------------------------


def test_delete_records_answers_once_every_live_replica_moved_its_start(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path, (1, 2, 3))
        h.lead(isr=(1, 2, 3), epoch=3)
        h.append(10)
        for r in (2, 3):
            h.part.on_follower_fetch(r, 10, 0)
        assert h.log.high_watermark == 10
        start = h.part.delete_records(3, 6)
        assert start == 6 and h.log.log_start_offset == 6
        assert h.part.low_watermark() == 0  # the followers still start at 0
        waiter = asyncio.ensure_future(h.part.wait_low_watermark(start, 5_000, 3))
        await settle()
        h.part.on_follower_fetch(2, 10, 6)
        await settle()
        assert not waiter.done(), "broker 3 has not moved its start yet"
        # A follower's start never goes down in the leader's view (an older fetch).
        h.part.on_follower_fetch(2, 10, 0)
        assert h.part.followers[2].log_start_offset == 6
        h.part.on_follower_fetch(3, 10, 6)
        assert await asyncio.wait_for(waiter, 1) == 6
        assert h.part._low_waiters == []
        h.log.close()

    run(main())


def test_a_dead_replica_holds_the_low_watermark_until_it_leaves_the_isr(tmp_path: Path) -> None:
    """A dead broker's replica no longer counts once it is out of the ISR (Kafka's live
    replicas); while it is in the ISR it does: the controller keeps the last ISR of a
    partition whose members all died and elects the first to return, which would serve
    the deleted records again."""

    async def main() -> None:
        h = Harness(tmp_path, (1, 2, 3))
        h.lead(isr=(1, 2, 3), epoch=3, version=7)
        h.append(10)
        for r in (2, 3):
            h.part.on_follower_fetch(r, 10, 0)
        h.part.delete_records(3, -1)  # -1: up to the high watermark
        h.part.on_follower_fetch(2, 10, 10)
        waiter = asyncio.ensure_future(h.part.wait_low_watermark(10, 5_000, 3))
        await settle()
        assert not waiter.done()
        h.registered.discard(3)  # broker 3's ZooKeeper registration went
        h.part.check_low_watermark()  # the ISR timer's check
        await settle()
        assert not waiter.done(), "broker 3 is still in the ISR: electable with records 0-9"
        assert h.part.low_watermark() == 0
        # The controller takes the dead broker out of the ISR: answered at once.
        h.part.apply(PartitionState(ME, 3, (1, 2), 2), 8)
        assert await asyncio.wait_for(waiter, 1) == 10
        h.log.close()

    run(main())


def test_a_dead_replica_out_of_the_isr_does_not_hold_the_low_watermark(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path, (1, 2, 3))
        h.lead(isr=(1, 2), epoch=3)
        h.append(10)
        h.part.on_follower_fetch(2, 10, 0)
        h.registered.discard(3)
        h.part.delete_records(3, 10)
        h.part.on_follower_fetch(2, 10, 10)
        assert await h.part.wait_low_watermark(10, 1_000, 3) == 10
        h.log.close()

    run(main())


def test_delete_records_waits_are_bounded_and_end_with_leadership(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(tmp_path, (1, 2))
        h.lead(isr=(1, 2), epoch=3)
        h.append(10)
        h.part.on_follower_fetch(2, 10, 0)
        h.part.delete_records(3, 4)
        with pytest.raises(RequestTimedOut, match="within 50 ms"):
            await h.part.wait_low_watermark(4, 50, 3)
        waiter = asyncio.ensure_future(h.part.wait_low_watermark(4, 5_000, 3))
        await settle()
        h.part.apply(PartitionState(2, 4, (1, 2), 2), 8)  # broker 2 leads now
        with pytest.raises(NotLeaderOrFollower):
            await asyncio.wait_for(waiter, 1)
        # A deposed leader moves nothing: the epoch it was asked in is over.
        with pytest.raises(NotLeaderOrFollower):
            h.part.delete_records(3, 8)
        assert h.log.log_start_offset == 4
        h.log.close()

    run(main())


def test_delete_records_on_a_compacted_only_topic_is_a_policy_violation(tmp_path: Path) -> None:
    """Kafka's leader refuses DeleteRecords unless cleanup.policy includes delete."""

    async def main() -> None:
        h = Harness(tmp_path, (1, 2))
        h.lead(isr=(1,), epoch=3)
        h.append(10)
        h.log.config = h.log.config.with_overrides({"cleanup.policy": "compact"})
        with pytest.raises(PolicyViolation) as refused:
            h.part.delete_records(3, 4)
        assert refused.value.error_code == "POLICY_VIOLATION"
        assert h.log.log_start_offset == 0
        h.log.config = h.log.config.with_overrides({"cleanup.policy": "compact,delete"})
        assert h.part.delete_records(3, 4) == 4
        h.log.close()

    run(main())
