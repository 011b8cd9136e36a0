"""ConsumerBase: the consumer's calls and group rules, written once as flows.

A *flow* is a generator that yields the calls it needs made (an
:data:`Op`) and is sent each call's result, or has its error thrown in, as
httpx's auth flows are driven; its return value is the method's. The
blocking shell (:mod:`~app.client.consumer.sync`) drives a flow with plain
calls, the asyncio shell (:mod:`~app.client.consumer.aio`) with ``await``;
neither repeats a rule. The ops:

* :class:`LeaderCall`: an HTTP call at a partition's leader (ListOffsets);
* :class:`GroupCall`: an HTTP call at a group's coordinator (commit, committed);
* :class:`Refresh`: look the metadata of some topics up;
* :class:`BeatNow`: heartbeat at once and wait for the answer (a stale epoch).

The flows: positions to look up, metadata to refresh, committing (with one
retry after a heartbeat when the member epoch was stale), the committed
offsets, and the group tick that applies what the heartbeat learnt
(revocations first: auto-commit, ``on_revoked``, release; then additions:
committed offsets, ``on_assigned``), so the rebalance callbacks run where the
application polls.

A poll never waits out a partition that cannot be placed yet, as Kafka's does not:
a group's committed offsets answered UNSTABLE_OFFSET_COMMIT (a read_committed
consumer, a transaction still open) or a ``latest`` look-up answered
OFFSET_NOT_AVAILABLE (a leader just elected) is asked once per turn, and the
partition waits (``awaiting_committed`` / no position, behind its backoff)
while the poll serves the others and returns at its timeout. ``position()`` and
``committed()`` do wait, up to ``LEADER_CATCH_UP_S``.

Concurrency: as the shell; the membership object is shared with its
heartbeat thread or task and locks its own fields.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from app.client import _http
from app.client._cluster import (
    ASK_COORDINATOR_AGAIN,
    ASK_LEADER_AGAIN,
    LEADER_CATCH_UP_S,
    Route,
    error_code,
    group_route,
    leader_route,
    refresh_route,
)
from app.client.consumer.core import ConsumerCore
from app.client.errors import ClientError
from app.client.group import _Membership, commit_call, committed_call
from app.client.types import ConsumerGroupMetadata, OffsetAndTimestamp, TopicPartition
from app.common.errors import LogbusError
from app.common.group_errors import FencedMemberEpoch, StaleMemberEpoch, UnknownMemberId

log = logging.getLogger(__name__)
RebalanceCallback = Callable[[set[TopicPartition]], None]
# How long a grouped poll waits at most before looking at the heartbeat's news.
GROUP_TICK_S = 0.05
T = TypeVar("T")
G = TypeVar("G", bound=_Membership)


@dataclass(frozen=True, slots=True)
class LeaderCall:
    """Run ``call`` at ``tp``'s leader (found again when it moves); answers the call's result."""

    tp: TopicPartition
    call: _http.Call[Any]
    # A leader that cannot answer yet (OFFSET_NOT_AVAILABLE) is asked again for up to
    # LEADER_CATCH_UP_S; False: its error is thrown in at once (a poll tries next turn).
    catch_up: bool = True


@dataclass(frozen=True, slots=True)
class GroupCall:
    """Run ``call`` at ``group_id``'s coordinator (found again when it moves); its result."""

    group_id: str
    call: _http.Call[Any]
    # As LeaderCall's, for UNSTABLE_OFFSET_COMMIT (and a reset's OFFSET_NOT_AVAILABLE).
    catch_up: bool = True


@dataclass(frozen=True, slots=True)
class Refresh:
    """Look up the metadata of ``topics``; answers None, or throws the LogbusError."""

    topics: list[str]


@dataclass(frozen=True, slots=True)
class BeatNow:
    """Heartbeat at once and wait up to ``timeout_s`` for the answer; answers None."""

    timeout_s: float


Op = LeaderCall | GroupCall | Refresh | BeatNow


Flow = Generator[Op, Any, T]


def offsets_result(found: tuple[int, int]) -> OffsetAndTimestamp | None:
    """A ListOffsets answer (offset, timestamp) as ``offsets_for_times`` gives it: None for -1."""
    offset, timestamp = found
    return None if offset < 0 else OffsetAndTimestamp(offset, timestamp)


class ConsumerBase(ConsumerCore, Generic[G]):
    """The shared rules of both shells; ``G`` is the shell's group membership class."""

    def __init__(self, url: Any, **settings: Any) -> None:
        super().__init__(url, **settings)
        self._group: G | None = None
        self._on_assigned: RebalanceCallback | None = None
        self._on_revoked: RebalanceCallback | None = None
        self._auto_commit_s: float | None = None
        self._next_auto_commit = 0.0

    def _join(self, group_id: str, settings: dict[str, Any]) -> G:
        """The shell's membership of ``group_id`` (``settings``: its keyword arguments), heartbeating."""
        raise NotImplementedError

    def _route(self, op: LeaderCall | GroupCall | Refresh) -> Route[Any]:
        """The route (:mod:`app.client._cluster`) that makes ``op``'s call: at the partition's
        leader, at the group's coordinator (each found again when it moves) or at any
        broker; the shells run it, blocking or awaited (:class:`BeatNow` is the
        membership's, not a call)."""
        if isinstance(op, Refresh):
            return refresh_route(self.cluster, op.topics)
        # A leader or coordinator that cannot answer yet is asked again for up to
        # LEADER_CATCH_UP_S; without catch_up its error is thrown into the flow at once.
        catch_up_s = LEADER_CATCH_UP_S if op.catch_up else 0.0
        if isinstance(op, LeaderCall):
            return leader_route(
                self.cluster, op.tp, op.call, self.retry_backoff_s, catch_up_s=catch_up_s
            )
        return group_route(
            self.cluster, op.group_id, op.call, self.retry_backoff_s, catch_up_s=catch_up_s
        )

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing any earlier assignment)."""
        if self._group is not None:
            raise ClientError("the consumer is subscribed to a group: the group assigns")
        self._set_partitions(partitions)

    # ---- consumer groups ----

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern[str] | None = None,
        *,
        group_id: str,
        pattern: str | re.Pattern[str] | None = None,
        on_assigned: RebalanceCallback | None = None,
        on_revoked: RebalanceCallback | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        group_instance_id: str | None = None,
        server_assignor: str | None = None,
        rebalance_timeout_ms: int | None = None,
    ) -> None:
        """Join ``group_id``; the group's coordinator decides which partitions ``poll`` reads.

        ``topics`` is a list of names (a single name or a compiled regex also
        work), or ``pattern`` a regex matched against whole topic names.
        A heartbeat thread (:class:`AsyncConsumer`: a task on the running loop,
        so call it from one) keeps the membership; assignment changes are applied
        inside ``poll``: revoked partitions are committed (with auto-commit),
        ``on_revoked`` is called, and only then released to the coordinator;
        new partitions start at the group's committed offset (else
        ``auto_offset_reset``) and ``on_assigned`` is called before records
        of them are returned. A member the coordinator fenced (missed
        heartbeats, an old epoch) loses all its partitions without a commit:
        ``on_revoked`` is called for them (there is no separate ``on_lost``)
        and the consumer rejoins. Auto-commit commits the positions of the
        records already handed out, at the start of ``poll`` once per
        ``auto_commit_interval_ms`` and on ``close``: at-least-once.
        ``group_instance_id`` makes the member static: ``close`` keeps its
        partitions until the session timeout, for a restart with the same id.
        The callbacks are plain functions, called from within ``poll``.
        """
        self._check_open()
        if self._group is not None:
            raise ClientError("already subscribed; close() and use a new consumer to change")
        if self.states:
            raise ClientError("the consumer has assigned partitions: subscribe or assign, not both")
        if isinstance(topics, re.Pattern):
            pattern, topics = topics, None
        names = [topics] if isinstance(topics, str) else None if topics is None else list(topics)
        regex = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._auto_commit_s = auto_commit_interval_ms / 1000 if enable_auto_commit else None
        self._next_auto_commit = time.monotonic() + (self._auto_commit_s or 0)
        self._group = self._join(
            group_id,
            {
                "topics": names,
                "pattern": regex,
                "instance_id": group_instance_id,
                "server_assignor": server_assignor,
                "rebalance_timeout_ms": rebalance_timeout_ms,
                "request_timeout_ms": self._request_timeout_ms,
                "retry_backoff_ms": self._retry_backoff_ms,
            },
        )

    @property
    def group_id(self) -> str | None:
        return None if self._group is None else self._group.group_id

    def member(self) -> tuple[str, int]:
        """(member id, member epoch) as the coordinator last answered; ("", 0) before joining."""
        return ("", 0) if self._group is None else self._group.identity()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group and this member's id and epoch, for
        ``Producer.send_offsets_to_transaction`` (KIP-447: a member fenced by a rebalance
        cannot commit its input's offsets in a transaction)."""
        group = self._membership()
        member_id, epoch = group.identity()
        return ConsumerGroupMetadata(group.group_id, member_id, epoch)

    def _membership(self) -> G:
        if self._group is None:
            raise ClientError("subscribe(group_id=...) first: commits belong to a group")
        return self._group

    def _commit_flow(self, offsets: Mapping[TopicPartition, int] | None) -> Flow[None]:
        self._check_open()
        group = self._membership()
        wanted = dict(offsets) if offsets is not None else self._positions(self.states)
        if wanted:
            yield from self._commit_to(group, wanted)

    def _commit_to(self, group: G, offsets: dict[TopicPartition, int]) -> Flow[None]:
        for attempt in range(2):
            member_id, epoch = group.identity()
            try:
                yield GroupCall(
                    group.group_id, commit_call(group.group_id, member_id, epoch, offsets)
                )
                return
            except StaleMemberEpoch:
                if attempt:
                    raise
                yield BeatNow(self._request_timeout_ms / 1000)
            except (FencedMemberEpoch, UnknownMemberId) as exc:
                group.mark_lost(exc)
                raise

    def _committed_flow(
        self, partitions: Iterable[TopicPartition], catch_up: bool = True
    ) -> Flow[dict[TopicPartition, int | None]]:
        self._check_open()
        group = self._membership()
        wanted = list(partitions)
        if not wanted:
            return {}
        found = yield GroupCall(
            group.group_id,
            # A read_committed consumer starts where the last ended transaction left the
            # group, never before an open one's offsets (KIP-447's require_stable).
            committed_call(
                group.group_id, (tp.topic for tp in wanted), require_stable=self.read_committed
            ),
            catch_up,
        )
        return {tp: found.get(tp) for tp in wanted}

    def _group_tick(self) -> Flow[None]:
        """Apply what the heartbeat learnt; auto-commit when due."""
        group = self._group
        if group is None:
            return
        lost, target = group.take()
        if lost:
            dropped = set(self.states)
            self._set_partitions([])
            group.set_owned((), after_loss=True)
            if dropped and self._on_revoked is not None:
                self._on_revoked(dropped)
        if target is not None:
            current = set(self.states)
            revoked = current - target
            if revoked:
                if self._auto_commit_s is not None:
                    yield from self._auto_commit(self._positions(revoked))
                if self._on_revoked is not None:
                    self._on_revoked(revoked)
                current -= revoked
                self._set_partitions(sorted(current))
                group.set_owned(current)
            added = target - current
            if added:
                yield from self._take_over(group, added)
        if self._auto_commit_due():
            yield from self._auto_commit(self._positions(self.states))

    def _take_over(self, group: G, added: set[TopicPartition]) -> Flow[None]:
        self._set_partitions(sorted(set(self.states) | added))
        for tp in added:
            self.states[tp].awaiting_committed = True
        try:
            yield from self._resolve_committed(in_poll=True)
        finally:
            group.set_owned(self.states)
            if self._on_assigned is not None:
                self._on_assigned(added)

    def _resolve_committed(self, *, in_poll: bool) -> Flow[None]:
        """Start the partitions awaiting the group's committed offsets (those without one
        are looked up per ``auto_offset_reset``). In a poll, offsets not stable yet leave
        them waiting behind a backoff (module docstring)."""
        now = time.monotonic()
        waiting = [
            st
            for st in self.states.values()
            if st.awaiting_committed and (not in_poll or st.backoff_until <= now)
        ]
        if not waiting:
            return
        try:
            committed = yield from self._committed_flow(
                [st.tp for st in waiting], catch_up=not in_poll
            )
        except LogbusError as exc:
            if not in_poll or error_code(exc) not in ASK_COORDINATOR_AGAIN:
                raise
            for st in waiting:
                st.backoff_until = now + self.retry_backoff_s
            return
        for st in waiting:
            st.awaiting_committed = False
            offset = committed.get(st.tp)
            if offset is not None:
                st.set_position(offset)

    def _auto_commit_due(self) -> bool:
        if self._auto_commit_s is None or time.monotonic() < self._next_auto_commit:
            return False
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        return True

    def _auto_commit(self, offsets: dict[TopicPartition, int]) -> Flow[None]:
        if not offsets or self._group is None:
            return
        try:
            yield from self._commit_to(self._group, offsets)
        except LogbusError as exc:
            # Not fatal: the next commit covers these positions, and a lost member
            # was marked for rejoining by _commit_to.
            log.warning("auto-commit to group %s failed: %s", self._group.group_id, exc)

    def _closing(self, group: G) -> Flow[None]:
        """Before leaving: a final auto-commit, then ``on_revoked`` (a static member keeps all)."""
        if self._auto_commit_s is not None:
            yield from self._auto_commit(self._positions(self.states))
        if self.states and self._on_revoked is not None and group.instance_id is None:
            self._on_revoked(set(self.states))

    # ---- positions and offsets ----

    def _list_offset(
        self, tp: TopicPartition, at: str | int, catch_up: bool = True
    ) -> Flow[tuple[int, int]]:
        found: tuple[int, int] = yield LeaderCall(
            tp, _http.list_offset_call(tp.topic, tp.partition, at, self.isolation_level), catch_up
        )
        return found

    def _lookup_positions(self, *, in_poll: bool = False) -> Flow[None]:
        """Look up the positions of partitions without one (``auto_offset_reset``); in a
        poll, a leader that cannot answer yet leaves its partition for a later turn."""
        now = time.monotonic()
        for st in self._needs_lookup():
            if in_poll and st.backoff_until > now:
                continue
            assert st.reset is not None
            try:
                offset, _ = yield from self._list_offset(st.tp, st.reset, catch_up=not in_poll)
            except LogbusError as exc:
                if not in_poll or error_code(exc) not in ASK_LEADER_AGAIN:
                    raise
                st.backoff_until = now + self.retry_backoff_s
                continue
            st.set_position(offset)

    def _refresh(self) -> Flow[None]:
        topics = self._refresh_topics()
        if topics is not None:
            try:
                yield Refresh(topics)
            except LogbusError as exc:
                self._refresh_failed(exc)

    def _before_fetch(self) -> Flow[None]:
        """Each turn of a poll: the group's news, the metadata, the positions to look up."""
        yield from self._group_tick()
        yield from self._refresh()
        yield from self._resolve_committed(in_poll=True)
        yield from self._lookup_positions(in_poll=True)

    def _position_flow(self, tp: TopicPartition) -> Flow[int]:
        self._check_open()
        st = self._state(tp)
        if st.awaiting_committed:
            yield from self._resolve_committed(in_poll=False)
        if st.position is None:
            yield from self._lookup_positions()
        assert st.position is not None
        return st.position

    def _offsets_for_times_flow(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> Flow[dict[TopicPartition, OffsetAndTimestamp | None]]:
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, ts in timestamps.items():
            out[tp] = offsets_result((yield from self._list_offset(tp, ts)))
        return out

    def _offsets_flow(
        self, partitions: Iterable[TopicPartition], at: str
    ) -> Flow[dict[TopicPartition, int]]:
        out: dict[TopicPartition, int] = {}
        for tp in partitions:
            out[tp] = (yield from self._list_offset(tp, at))[0]
        return out

    def _wait_s(self, remaining: float) -> float:
        """How long a poll with nothing to hand out waits before its next turn."""
        wait = self._idle_wait_s(remaining)
        return wait if self._group is None else min(wait, GROUP_TICK_S)
