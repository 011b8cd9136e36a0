"""One partition's replica on this broker: leader or follower, the ISR, the high watermark.

As leader it tracks each follower's progress from the offsets of the follower's
fetches (a fetch from offset ``o`` says the follower holds everything below
``o``), and from that:

- the high watermark: the smallest log end offset across the ISR, so a
  consumer only ever sees records every in-sync replica holds;
- ISR expansion: a follower that reached the high watermark joins;
- while an ISR write is out, the high watermark counts the proposed members too
  (Kafka's "maximal ISR", KIP-497): once the write lands the controller may elect
  a joining follower, so nothing it does not hold may be acknowledged before;
- ISR shrinking: a follower not caught up for ``replica.lag.time.max.ms``
  leaves (Kafka's rule: caught up = fetched up to the leader's end offset);
- ``acks=all`` waiters, answered when the high watermark passes their batch.

ISR changes are compare-and-set writes to the partition's state znode (the
controller may be writing too); the local view changes only once the write
succeeded, or when the watch delivers the controller's state.

Threads: state changes, ISR and high-watermark bookkeeping run on the broker's
event loop. Appends run on the loop or on worker threads; they and the state
changes meet in the partition's leader/ISR lock (:mod:`.rwlock`, Kafka's
``leaderIsrUpdateLock``): :func:`append_to_leaders` and
:meth:`Partition.append_as_follower` hold it shared and check the role and epoch
under it, :meth:`Partition.apply` and :meth:`Partition.stop` hold it exclusively.
So a leader appends only while it still leads in the epoch the request saw,
stamping that epoch, and a follower only while it follows the leader and epoch
its fetcher serves. A state change waits for the appends in flight (bounded:
one write, maybe an fsync), never the other way round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from app.common.errors import (
    FencedLeaderEpoch,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    OffsetNotAvailable,
    RequestTimedOut,
    UnknownLeaderEpoch,
)
from app.core.log.log import AppendInfo, Log
from app.core.log.producer_state import UnnumberedBatch
from app.core.replication import faults
from app.core.replication.rwlock import ReadWriteLock
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
    # The follower's log start offset as its last fetch said (-1: not said yet); the low
    # watermark DeleteRecords waits for is the smallest over live replicas.
    log_start_offset: int = -1


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
        locate: Callable[[int], str | None] = lambda _: None,
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
        # A broker's URL, to name the new leader when an append finds this one deposed.
        self._locate = locate
        # Shared by appends, exclusive for leadership changes (see the module docstring).
        self._lock = ReadWriteLock()
        self._acks: list[tuple[int, asyncio.Future[None]]] = []
        # DeleteRecords waiting for the low watermark to reach an offset.
        self._low_waiters: list[tuple[int, asyncio.Future[int]]] = []
        self._isr_write: asyncio.Task[None] | None = None
        # The ISR the write in flight proposes (None: no write out). ZooKeeper may hold
        # it already, so the high watermark counts its members too (see maximal_isr).
        self._pending_isr: tuple[int, ...] | None = None
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
        """The state znode changed (or was read): become leader or follower as it says.

        Holds the leader/ISR lock exclusively: waits for the appends in flight, and
        no append starts before the new role and epoch are in place."""
        if version < self.zk_version and state.leader_epoch <= self.leader_epoch:
            return  # an older notification arriving late
        follow = False
        with self._lock.exclusive():
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
                follow = True
            else:
                self.isr = state.isr
        if follow:
            self.on_follow(self)

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
        # The log keeps the epoch this broker led last: it never stamps a batch with an
        # epoch this broker did not lead (a follower's batches carry the leader's stamps).
        self.leader_epoch = state.leader_epoch
        self.isr = state.isr
        self.followers = {}
        # A follower's high watermark comes from its leader's fetch answers.
        self.log.hw_follows_leo = False
        self._fail_acks(self._moved_after_append())
        self._fail_low_waiters()
        if was_leader:
            self._notify(self.log)

    def stop(self) -> None:
        """The partition is no longer hosted here (topic deleted, broker stopping)."""
        with self._lock.exclusive():
            self.role = OFFLINE
        self._fail_acks(NotLeaderOrFollower(self.topic, self.partition))
        self._fail_low_waiters()
        if self._isr_write is not None:
            self._isr_write.cancel()

    def _set_isr(self, isr: tuple[int, ...]) -> None:
        self.isr = isr
        self._hw_mode()
        self.check_low_watermark()  # a dead member that left no longer holds it

    def _hw_mode(self) -> None:
        """The high watermark follows the log end only while no other broker is in the
        maximal ISR; then it is the log end at once."""
        alone = set(self.maximal_isr) <= {self.broker_id}
        self.log.hw_follows_leo = alone
        if alone:
            self.log.high_watermark = self.log.log_end_offset
        self.maybe_advance_hw()

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR plus the members an ISR write in flight adds (Kafka's maximal ISR).

        The high watermark is the smallest log end over these: from the moment the write
        reaches ZooKeeper the controller may elect any of them, before this broker hears
        the write succeeded. Counting only the ISR known here acknowledged records a
        joining follower did not hold yet; that follower, elected after this leader
        stalled (paused past its session timeout), lost them."""
        pending = self._pending_isr
        if pending is None:
            return self.isr
        return self.isr + tuple(r for r in pending if r not in self.isr)

    # -- appends ---------------------------------------------------------------------

    def check_leads(self, epoch: int) -> None:
        """NotLeaderOrFollower unless this broker leads in ``epoch`` (under the lock, for an
        append: then nothing is written). Names the new leader when it is known, so the
        client goes there (307); a term of our own that began since asks for a retry (421)."""
        if self.role == LEADER and self.leader_epoch == epoch:
            return
        leader = None if self.leader in (NO_LEADER, self.broker_id) else self.leader
        raise NotLeaderOrFollower(
            self.topic,
            self.partition,
            leader,
            None if leader is None else self._locate(leader),
            message=f"this broker no longer leads {self.topic}-{self.partition} in epoch "
            f"{epoch} (now {self.role} in epoch {self.leader_epoch}, leader {self.leader}); "
            "nothing was written",
        )

    def append_as_leader(
        self, data: bytes | bytearray | memoryview | UnnumberedBatch, *, acks_all: bool
    ) -> AppendInfo:
        """Append on the event loop in the epoch this broker leads now (the group
        coordinator's writes); see :func:`append_to_leaders`."""
        (info,) = append_to_leaders([(self, self.leader_epoch, data)], acks_all=acks_all)
        return info

    def append_control(
        self, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int
    ) -> AppendInfo:
        """Write a transaction marker as leader, in the epoch this broker leads now, under
        the leader/ISR lock (a deposed leader writes nothing: NotLeaderOrFollower)."""
        with self._lock.shared():
            epoch = self.leader_epoch
            self.check_leads(epoch)
            return self.log.append_control(
                producer_id,
                producer_epoch,
                commit=commit,
                coordinator_epoch=coordinator_epoch,
                leader_epoch=epoch,
            )

    @contextmanager
    def following(self, leader: int, epoch: int) -> Iterator[bool]:
        """Holds the lock shared; yields whether this replica still follows ``leader`` in
        ``epoch``. A fetcher appends or truncates only then: bytes fetched for an epoch
        that ended are not this replica's to keep."""
        with self._lock.shared():
            yield self.role == FOLLOWER and self.leader == leader and self.leader_epoch == epoch

    # -- leader: followers' progress ------------------------------------------------

    def check_epoch(self, epoch: int | None) -> None:
        """A replica's request names the epoch it knows (Kafka's current_leader_epoch)."""
        if epoch is None or epoch < 0 or epoch == self.leader_epoch:
            return
        if epoch < self.leader_epoch:
            raise FencedLeaderEpoch(self.topic, self.partition, epoch, self.leader_epoch)
        raise UnknownLeaderEpoch(self.topic, self.partition, epoch, self.leader_epoch)

    def on_follower_fetch(
        self, replica_id: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None:
        progress = self.followers.get(replica_id)
        if progress is None:
            return  # not a replica of this partition: it may read, but is not tracked
        if log_start_offset > progress.log_start_offset:
            # The follower's own start (Kafka's FetchRequest log_start_offset): it moves
            # only up here, as a follower's start only moves up once written down there.
            progress.log_start_offset = log_start_offset
            self.check_low_watermark()
        leo = self.log.log_end_offset
        if fetch_offset > leo:
            # Past this leader's log end (a diverged follower that has not truncated yet):
            # the read answers out of range, so the position is no progress. Recorded, it
            # would count records the follower does not hold toward the high watermark
            # (Kafka updates a follower's state only after a successful read).
            return
        now = _now_ms()
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

    def offsets_error(self) -> OffsetNotAvailable | None:
        """What a client's ListOffsets ``latest`` (or a timestamp lookup finding nothing
        below the end) must answer instead of an offset now: OffsetNotAvailable while
        this broker leads with a high watermark below the offset its leader epoch began
        at, else None (Kafka's ``Partition.fetchOffsetForTimestamp``).

        Why: a new leader's high watermark is the one it had as a follower, which trails
        the records acknowledged before the election by up to a fetch answer (seen: 0
        for 50 acknowledged records, when the follower's last fetch answer carried the
        watermark from before its own fetch counted). It becomes exact once every ISR
        member has fetched from this leader at or past the epoch's start, and the first
        such fetch moves it to at least that start. Until then ``latest`` would go
        backwards. ``earliest`` needs no such care (the log start is exact), nor does a
        lone broker (its high watermark is its log end) or a follower (it answers no
        client's ListOffsets; the group coordinator reads its replica as it is, as
        documented there). Read on the event loop, where role, epoch and the watermark
        move (an append on a worker thread only raises the watermark)."""
        if not self.is_leader:
            return None
        start = self._epoch_start_offset()
        hw = self.log.high_watermark
        if start <= hw:
            return None
        return OffsetNotAvailable(self.topic, self.partition, hw, start, self.leader_epoch)

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
        # Before the write goes out: from now on ZooKeeper may hold the proposal.
        self._pending_isr = isr
        if self.is_leader:
            # Under the lock: an append (maybe on a worker thread) moves the HW with the
            # log end while hw_follows_leo holds, and must not do so once a member joins.
            with self._lock.exclusive():
                self._hw_mode()

        async def write() -> None:
            try:
                await attempt()
            finally:
                self._pending_isr = None
                if self.is_leader:
                    with self._lock.exclusive():
                        self._hw_mode()

        async def attempt() -> None:
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
                with self._lock.exclusive():  # an acks=all append checks the ISR under it
                    self._set_isr(isr)
                self._check_acks()

        self._isr_write = asyncio.ensure_future(write())

    def maybe_advance_hw(self) -> None:
        if not self.is_leader:
            return
        log = self.log
        leo = log.log_end_offset
        hw = leo
        for r in self.maximal_isr:
            if r == self.broker_id:
                continue
            progress = self.followers.get(r)
            hw = min(hw, progress.log_end_offset if progress is not None else -1)
        if hw > log.high_watermark:
            log.high_watermark = hw
            self._notify(log)
        self._check_acks()

    # -- DeleteRecords ---------------------------------------------------------------

    def delete_records(self, epoch: int, offset: int) -> int:
        """Move the log start offset up to ``offset`` (-1: the high watermark) as leader in
        ``epoch`` (NotLeaderOrFollower, nothing changed, once it is not): the new log
        start offset (:meth:`Log.delete_records`). Holds the leader/ISR lock shared, as an
        append does. Blocking (segment files are renamed): call from a worker thread."""
        with self._lock.shared():
            self.check_leads(epoch)
            self.log.check_records_deletable()  # PolicyViolation: compacted only
            return self.log.delete_records(offset)

    def low_watermark(self) -> int:
        """Kafka's low watermark (``Partition.lowWatermarkIfLeader``): the smallest log
        start offset over this leader, every replica on a live broker, in the ISR or not
        (a live follower that has not said its start yet holds it at -1), and every ISR
        member, live or not. Offsets below it are gone from every replica that may lead
        next; followers move their start up to the leader's from its fetch answers, after
        writing it down (see the fetcher).

        An ISR member whose broker's registration went still counts until the ISR loses
        it: the controller keeps the last ISR of a partition whose members are all dead,
        and elects the first of them to come back, so a DeleteRecords answered without
        it would see the deleted records served again by it."""
        low = self.log.log_start_offset
        for r, progress in self.followers.items():
            if r in self.isr or self._registered(r):
                low = min(low, progress.log_start_offset)
        return low

    async def wait_low_watermark(self, target: int, timeout_ms: int, epoch: int) -> int:
        """Until :meth:`low_watermark` reaches ``target`` (a DeleteRecords' new start): the
        low watermark then. NotLeaderOrFollower once this broker no longer leads in
        ``epoch``; RequestTimedOut after ``timeout_ms`` (the start moved here, and the
        followers still follow it)."""
        if not self.is_leader or self.leader_epoch != epoch:
            raise NotLeaderOrFollower(self.topic, self.partition)
        low = self.low_watermark()
        if low >= target:
            return low
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._low_waiters.append((target, future))
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await asyncio.shield(future)
        except TimeoutError:
            raise RequestTimedOut(
                f"the replicas of {self.topic}-{self.partition} did not all move their log "
                f"start offset to {target} within {timeout_ms} ms (low watermark "
                f"{self.low_watermark()}); the leader's moved, the followers follow it"
            ) from None
        finally:
            self._low_waiters = [(o, f) for o, f in self._low_waiters if f is not future]

    def check_low_watermark(self) -> None:
        """Answer the DeleteRecords waiters the low watermark has reached (after a
        follower's fetch, an ISR change, and on the ISR timer: a broker that died and
        left the ISR no longer counts)."""
        if not self._low_waiters or not self.is_leader:
            return
        low = self.low_watermark()
        for target, future in self._low_waiters:
            if target <= low and not future.done():
                future.set_result(low)

    def _fail_low_waiters(self) -> None:
        for _, future in self._low_waiters:
            if not future.done():
                future.set_exception(NotLeaderOrFollower(self.topic, self.partition))
        self._low_waiters = []

    # -- acks=all --------------------------------------------------------------------

    def check_min_isr(self) -> None:
        """Before an acks=all append: refuse when the ISR is below min.insync.replicas."""
        needed = self.log.config.min_insync_replicas
        if len(self.isr) < needed:
            raise NotEnoughReplicas(
                f"{self.topic}-{self.partition} has {len(self.isr)} in-sync replicas "
                f"({list(self.isr)}), fewer than min.insync.replicas={needed}; nothing was written"
            )

    async def wait_replicated(
        self, last_offset: int, timeout_ms: int, epoch: int | None = None
    ) -> None:
        """Until the high watermark passes ``last_offset`` (every ISR member has it).

        ``epoch``: the one the write was appended in. Once this broker no longer leads
        in it, the high watermark says nothing about the write (a follower may have cut
        it and taken other records at its offsets): NotLeaderOrFollower without a
        leader to go to (421), since the write was made and may survive."""
        if not self.is_leader or (epoch is not None and epoch != self.leader_epoch):
            raise self._moved_after_append()
        if self.log.high_watermark > last_offset:
            self._check_min_isr_after()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._acks.append((last_offset, future))
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation
            # that arrives as the future completes (see app/common/aio.py).
            async with asyncio.timeout(timeout_ms / 1000):
                await asyncio.shield(future)
            self._check_min_isr_after()
        except TimeoutError:
            raise RequestTimedOut(
                f"the in-sync replicas {list(self.isr)} of {self.topic}-{self.partition} did "
                f"not all acknowledge offset {last_offset} within {timeout_ms} ms; the write "
                "is on the leader and may still be replicated"
            ) from None
        finally:
            self._acks = [(o, f) for o, f in self._acks if f is not future]

    def _moved_after_append(self) -> NotLeaderOrFollower:
        # No leader named: a redirect is an invitation to write again, and this write
        # was made (an idempotent producer's retry is recognized as a duplicate).
        return NotLeaderOrFollower(
            self.topic,
            self.partition,
            message=f"leadership of {self.topic}-{self.partition} moved after the write was "
            "appended and before every in-sync replica had it: it may or may not survive",
        )

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


def append_to_leaders(
    work: Sequence[tuple[Partition, int, bytes | bytearray | memoryview | UnnumberedBatch]],
    *,
    acks_all: bool,
) -> list[AppendInfo]:
    """Append each ``(partition, epoch, batches)`` as leader: all of them or none.

    Holds every partition's leader/ISR lock shared (in (topic, partition) order, so two
    requests never wait on each other) while it checks that this broker leads each in
    the epoch the request saw (and, with ``acks_all``, min.insync.replicas), and
    appends, stamping that epoch. A check that fails writes nothing anywhere; an append
    error (a full disk) leaves the partitions before it written.

    Runs on the event loop or on a worker thread.
    """
    if len(work) == 1:  # the common case, without the ordering and the stack
        part, epoch, data = work[0]
        with part._lock.shared():
            part.check_leads(epoch)
            if acks_all:
                part.check_min_isr()
            faults.slow_append()
            return [part.log.append(data, leader_epoch=epoch)]
    order = sorted(work, key=lambda w: (w[0].topic, w[0].partition))
    with ExitStack() as stack:
        for part, _, _ in order:
            stack.enter_context(part._lock.shared())
        for part, epoch, _ in work:
            part.check_leads(epoch)
            if acks_all:
                part.check_min_isr()
        infos = []
        for part, epoch, data in work:
            faults.slow_append()
            infos.append(part.log.append(data, leader_epoch=epoch))
        return infos
