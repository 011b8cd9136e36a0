"""One partition's replica on this broker: leader or follower, the ISR, the high watermark.

As leader it tracks each follower's progress from the offsets of the follower's
fetches (a fetch from offset ``o`` says the follower holds everything below
``o``), and from that:

- the high watermark: the smallest log end offset across the ISR, so a
  consumer only ever sees records every in-sync replica holds;
- ISR expansion: a follower that reached the high watermark joins;
- ISR shrinking: a follower not caught up for ``replica.lag.time.max.ms``
  leaves (Kafka's rule: caught up = fetched up to the leader's end offset);
- ``acks=all`` waiters, answered when the high watermark passes their batch.

ISR changes are compare-and-set writes to the partition's state znode (the
controller may be writing too); the local view changes only once the write
succeeded, or when the watch delivers the controller's state.

Not thread-safe: every method runs on the broker's event loop. Appends happen
on other threads; they reach this object through the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.common.errors import (
    FencedLeaderEpoch,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    RequestTimedOut,
    UnknownLeaderEpoch,
)
from app.core.log.log import Log
from app.core.replication.state import NO_LEADER, PartitionState

_log = logging.getLogger(__name__)

LEADER = "leader"
FOLLOWER = "follower"
OFFLINE = "offline"


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows of one follower (Kafka's Replica state)."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


# Writes a new state with compare-and-set: the new znode version, or None if it lost.
StateWriter = Callable[[PartitionState, int], Awaitable[int | None]]


class Partition:
    def __init__(
        self,
        log: Log,
        replicas: tuple[int, ...],
        broker_id: int,
        *,
        write_state: StateWriter,
        notify: Callable[[Log], None],
        lag_time_max_ms: int,
        registered: Callable[[int], bool] = lambda _: True,
    ) -> None:
        self.log = log
        self.topic = log.topic
        self.partition = log.partition
        self.replicas = replicas
        self.broker_id = broker_id
        self.role = OFFLINE
        self.leader = NO_LEADER
        self.leader_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.zk_version = -1
        self.controller_epoch = 0
        self.followers: dict[int, FollowerProgress] = {}
        self._write_state = write_state
        self._notify = notify
        self._lag_time_max_ms = lag_time_max_ms
        # Whether a broker is registered in ZooKeeper. A follower whose session expired
        # keeps fetching, but the controller counts it dead (and takes it out of the ISR)
        # until it registers again: it joins the ISR only then, as in Kafka's KIP-841.
        self._registered = registered
        self._acks: list[tuple[int, asyncio.Future[None]]] = []
        self._isr_write: asyncio.Task[None] | None = None
        # Called with this partition when it becomes a follower (the fetcher starts).
        self.on_follow: Callable[[Partition], None] = lambda _: None

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.partition}, {self.role}, leader={self.leader}, "
            f"epoch={self.leader_epoch}, isr={list(self.isr)}, hw={self.log.high_watermark}, "
            f"leo={self.log.log_end_offset})"
        )

    @property
    def is_leader(self) -> bool:
        return self.role == LEADER

    # -- state changes (from the partition's state znode) ---------------------------

    def apply(self, state: PartitionState, version: int) -> None:
        """The state znode changed (or was read): become leader or follower as it says."""
        if version < self.zk_version and state.leader_epoch <= self.leader_epoch:
            return  # an older notification arriving late
        epoch_changed = state.leader_epoch != self.leader_epoch
        self.zk_version = version
        self.controller_epoch = state.controller_epoch
        if state.leader == self.broker_id:
            if not self.is_leader or epoch_changed:
                self._become_leader(state)
            else:
                self._set_isr(state.isr)
        elif state.leader == NO_LEADER:
            self._resign(OFFLINE, state)
        elif self.role != FOLLOWER or epoch_changed or self.leader != state.leader:
            self._resign(FOLLOWER, state)
            self.on_follow(self)
        else:
            self.isr = state.isr

    def _become_leader(self, state: PartitionState) -> None:
        log = self.log
        self.role = LEADER
        self.leader = self.broker_id
        self.leader_epoch = state.leader_epoch
        log.leader_epoch = state.leader_epoch
        if log.leader_epoch_cache.latest_epoch != state.leader_epoch:
            log.leader_epoch_cache.assign(state.leader_epoch, log.log_end_offset)
        now = _now_ms()
        # Kafka starts every ISR member as caught up now: it was in sync a moment ago.
        self.followers = {
            r: FollowerProgress(last_caught_up_ms=now if r in state.isr else 0)
            for r in self.replicas
            if r != self.broker_id
        }
        self._set_isr(state.isr)
        _log.info("%s-%d: leader in epoch %d", self.topic, self.partition, state.leader_epoch)

    def _resign(self, role: str, state: PartitionState) -> None:
        was_leader = self.is_leader
        self.role = role
        self.leader = state.leader
        self.leader_epoch = state.leader_epoch
        self.log.leader_epoch = state.leader_epoch
        self.isr = state.isr
        self.followers = {}
        # A follower's high watermark comes from its leader's fetch answers.
        self.log.hw_follows_leo = False
        self._fail_acks(
            NotLeaderOrFollower(
                self.topic,
                self.partition,
                message=f"leadership of {self.topic}-{self.partition} moved before the write "
                "was replicated; retry against the new leader",
            )
        )
        if was_leader:
            self._notify(self.log)

    def stop(self) -> None:
        """The partition is no longer hosted here (topic deleted, broker stopping)."""
        self.role = OFFLINE
        self._fail_acks(NotLeaderOrFollower(self.topic, self.partition))
        if self._isr_write is not None:
            self._isr_write.cancel()

    def _set_isr(self, isr: tuple[int, ...]) -> None:
        self.isr = isr
        alone = set(isr) <= {self.broker_id}
        self.log.hw_follows_leo = alone
        if alone:
            self.log.high_watermark = self.log.log_end_offset
        self.maybe_advance_hw()

    # -- leader: followers' progress ------------------------------------------------

    def check_epoch(self, epoch: int | None) -> None:
        """A replica's request names the epoch it knows (Kafka's current_leader_epoch)."""
        if epoch is None or epoch < 0 or epoch == self.leader_epoch:
            return
        if epoch < self.leader_epoch:
            raise FencedLeaderEpoch(self.topic, self.partition, epoch, self.leader_epoch)
        raise UnknownLeaderEpoch(self.topic, self.partition, epoch, self.leader_epoch)

    def on_follower_fetch(self, replica_id: int, fetch_offset: int) -> None:
        progress = self.followers.get(replica_id)
        if progress is None:
            return  # not a replica of this partition: it may read, but is not tracked
        now = _now_ms()
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            progress.last_caught_up_ms = now
        elif fetch_offset >= progress.last_fetch_leader_leo >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_leader_leo = leo
        progress.last_fetch_ms = now
        if (
            replica_id not in self.isr
            and fetch_offset >= self.log.high_watermark
            and self._registered(replica_id)
        ):
            epoch_start = self._epoch_start_offset()
            if fetch_offset >= epoch_start:
                self._change_isr((*self.isr, replica_id), f"replica {replica_id} caught up")
        self.maybe_advance_hw()

    def _epoch_start_offset(self) -> int:
        for epoch, start in reversed(self.log.leader_epoch_cache.entries()):
            if epoch == self.leader_epoch:
                return start
        return 0

    def maybe_shrink_isr(self) -> None:
        """Drop followers that have not caught up for replica.lag.time.max.ms."""
        if not self.is_leader:
            return
        now = _now_ms()
        laggards = [
            r
            for r in self.isr
            if r != self.broker_id
            and now - self.followers.get(r, FollowerProgress()).last_caught_up_ms
            > self._lag_time_max_ms
        ]
        if laggards:
            keep = tuple(r for r in self.isr if r not in laggards)
            self._change_isr(keep, f"replicas {laggards} lag over {self._lag_time_max_ms} ms")

    def _change_isr(self, isr: tuple[int, ...], why: str) -> None:
        if self._isr_write is not None and not self._isr_write.done():
            return  # one write at a time; the next fetch or check tries again
        proposal = PartitionState(self.broker_id, self.leader_epoch, isr, self.controller_epoch)
        expected = self.zk_version

        async def write() -> None:
            version = await self._write_state(proposal, expected)
            if version is None:
                return  # the controller wrote first: its state arrives through the watch
            # A newer state may have arrived through the watch while the write was out;
            # then it (or our own write, also coming through the watch) is the truth.
            if (
                self.is_leader
                and self.leader_epoch == proposal.leader_epoch
                and self.zk_version == expected
            ):
                _log.info(
                    "%s-%d: isr %s -> %s (%s)",
                    self.topic,
                    self.partition,
                    list(self.isr),
                    list(isr),
                    why,
                )
                self.zk_version = version
                self._set_isr(isr)
                self._check_acks()

        self._isr_write = asyncio.ensure_future(write())

    def maybe_advance_hw(self) -> None:
        if not self.is_leader:
            return
        log = self.log
        leo = log.log_end_offset
        hw = leo
        for r in self.isr:
            if r == self.broker_id:
                continue
            progress = self.followers.get(r)
            hw = min(hw, progress.log_end_offset if progress is not None else -1)
        if hw > log.high_watermark:
            log.high_watermark = hw
            self._notify(log)
        self._check_acks()

    # -- acks=all --------------------------------------------------------------------

    def check_min_isr(self) -> None:
        """Before an acks=all append: refuse when the ISR is below min.insync.replicas."""
        needed = self.log.config.min_insync_replicas
        if len(self.isr) < needed:
            raise NotEnoughReplicas(
                f"{self.topic}-{self.partition} has {len(self.isr)} in-sync replicas "
                f"({list(self.isr)}), fewer than min.insync.replicas={needed}; nothing was written"
            )

    async def wait_replicated(self, last_offset: int, timeout_ms: int) -> None:
        """Until the high watermark passes ``last_offset`` (every ISR member has it)."""
        if self.log.high_watermark > last_offset:
            self._check_min_isr_after()
            return
        if not self.is_leader:
            raise NotLeaderOrFollower(self.topic, self.partition)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._acks.append((last_offset, future))
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout_ms / 1000)
            self._check_min_isr_after()
        except TimeoutError:
            raise RequestTimedOut(
                f"the in-sync replicas {list(self.isr)} of {self.topic}-{self.partition} did "
                f"not all acknowledge offset {last_offset} within {timeout_ms} ms; the write "
                "is on the leader and may still be replicated"
            ) from None
        finally:
            self._acks = [(o, f) for o, f in self._acks if f is not future]

    def _check_min_isr_after(self) -> None:
        needed = self.log.config.min_insync_replicas
        if len(self.isr) < needed:
            raise NotEnoughReplicasAfterAppend(
                f"written to {self.topic}-{self.partition}, but its in-sync replicas "
                f"{list(self.isr)} fell below min.insync.replicas={needed}"
            )

    def _check_acks(self) -> None:
        if not self._acks:
            return
        hw = self.log.high_watermark
        for offset, future in self._acks:
            if offset < hw and not future.done():
                future.set_result(None)

    def _fail_acks(self, exc: Exception) -> None:
        for _, future in self._acks:
            if not future.done():
                future.set_exception(exc)
        self._acks = []
