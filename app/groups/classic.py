"""Kafka's classic group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

The protocol every Kafka client speaks with ``group.id`` and ``subscribe`` (before
KIP-848): the coordinator only gathers members into generations; the *leader* member
runs the client's own assignor (range, roundrobin, sticky, cooperative-sticky) over the
others' subscriptions and hands the coordinator the assignment in its SyncGroup. Metadata
and assignments are opaque bytes here (the consumer protocol's, for ``protocol_type``
"consumer"); :func:`decode_subscription` and :func:`decode_assignment` read them for
describe only.

States (Kafka's ``ClassicGroupState``) of a :class:`ClassicGroup`::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
      ^                  ^    |                                                 |
      |   join, leave,   |    +--nobody left--> Empty                 leader's SyncGroup
      |   expiry, leader |                                                      v
      +----rejoin--------+------------------------------------------------- Stable

* **PreparingRebalance**: every member must (re)join. The join completes once every
  member awaits a JoinGroup answer and no KIP-394 pending member is left, or when the
  largest rebalance timeout of the members runs out (dynamic members that did not rejoin
  are removed then; static ones stay, with their last metadata). An empty group's first
  rebalance waits ``group.initial.rebalance.delay.ms`` (again after each join, up to the
  rebalance timeout) for more members, as Kafka's InitialDelayedJoin.
* Completing the join starts a generation (``generation`` + 1), picks the protocol
  every member supports that most members list first, keeps the leader if it rejoined
  (else the first member that did), answers every waiting JoinGroup (the leader's with
  every member's metadata for that protocol) and moves to **CompletingRebalance**.
* The leader's SyncGroup stores each member's assignment (none for members it left out),
  answers every waiting SyncGroup, and the group is **Stable**. A SyncGroup in Stable is
  answered with the member's stored assignment. A member that has not synced within the
  rebalance timeout of its generation forming is removed (a rebalance follows), as
  Kafka's pending-sync timeout: a leader that never assigns cannot stall the group.
* A member that leaves, or whose session runs out (no heartbeat, join or sync for its
  ``session_timeout_ms``; a member waiting in JoinGroup or SyncGroup is kept alive, as
  Kafka does), is removed; in Stable or CompletingRebalance that starts a rebalance.
* KIP-394: a dynamic member joining without an id (JoinGroup v4+) is handed one with
  MEMBER_ID_REQUIRED and is *pending* until it joins with it (a rebalance waits for it),
  or its session timeout passes.
* KIP-345 static membership: a member with ``group.instance.id`` that joins without a
  member id takes over its instance's member (new id, same assignment, no rebalance
  while Stable and its protocols are unchanged: the leader is told to skip the
  assignment); requests under the replaced id get FENCED_INSTANCE_ID.

Invariants: every member of a Stable group has an assignment from the leader's SyncGroup
of the current generation (empty bytes when the leader gave it none); ``leader`` is a
member whenever the state is CompletingRebalance or Stable; ``static`` maps each static
member's instance id to its current member id; a member has at most one JoinGroup and one
SyncGroup waiting (a newer one replaces the older, which is answered
REBALANCE_IN_PROGRESS); no member is both pending and a member.

A group is classic or consumer-protocol (KIP-848, :mod:`app.groups.membership`), as in
Kafka with migration disabled: a classic member joining a group with consumer-protocol
members, or the other way round, gets INCONSISTENT_GROUP_PROTOCOL; an empty group changes
kind. The group's committed offsets are the one store every door uses
(:mod:`app.groups.offsets`, which checks a classic member's generation through
:meth:`ClassicGroups.validate_commit`).

Persistence, as Kafka's: the group's record in ``__consumer_offsets`` (type 2 of
:mod:`app.groups.records`, its generation, protocol, leader and each member with its
subscription and assignment) is written when its persisted state changes, never on a
heartbeat: by the leader's SyncGroup before the generation is Stable (a write that fails
answers every waiting SyncGroup with NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE and
starts a rebalance; the clients find the coordinator and rejoin), when a static member's
new incarnation takes its place in a Stable group (undone when the write fails), and when
the group becomes Empty; deleting the group, or a consumer-protocol group taking its name
over, writes its tombstone. SyncGroup and JoinGroup are answered once the partition's
writes are replicated. A coordinator that loads the partition (a restart, a failover)
restores each group Stable with its generation and members, or Empty, and starts every
member's session afresh (:meth:`ClassicGroups.restore`): members that keep heartbeating
go on in their generation without a rebalance; one that does not come back expires.

Concurrency: on the event loop. Each call reads and changes the state without awaiting;
JoinGroup and SyncGroup answers that must wait are futures completed by a later call or
by a timer (``loop.call_later`` handles: one per member for its session, one per group
for the join), so no lock is needed. A caller that goes away (its connection closed)
leaves the future to be completed and dropped.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import replace
from typing import Any, Concatenate, ParamSpec, TypeVar

from app.common.errors import KafkaStorageError, LogbusError, NotCoordinator
from app.common.group_errors import (
    FencedInstanceId,
    GroupMaxSizeReached,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidSessionTimeout,
    MemberIdRequired,
    RebalanceInProgress,
    UnknownMemberId,
)
from app.groups.classic_model import (
    ClassicGroup,
    ClassicMember,
    ClassicState,
    JoinRequest,
    JoinResult,
    SyncResult,
    decode_assignment,
    decode_subscription,
    fail_waiting,
    resolve_future,
)
from app.groups.model import Group, validate_group_id
from app.groups.runtime import CoordinatorRuntime

log = logging.getLogger(__name__)

R = TypeVar("R")
P = ParamSpec("P")


def _routed(
    step: Callable[Concatenate[ClassicGroups, str, P], R | asyncio.Future[R]],
) -> Callable[Concatenate[ClassicGroups, str, P], Coroutine[Any, Any, R]]:
    """A request whose ``step`` changes the group's state with no await between its
    checks and its effects (answered, or a future the group completes), made the async
    request callers await: routed to this coordinator first, answered once the future is
    done and the partition's writes so far are replicated (:meth:`ClassicGroups._answer`)."""

    @functools.wraps(step)
    async def request(self: ClassicGroups, group_id: str, /, *args: P.args, **kw: P.kwargs) -> R:
        partition = await self._route(group_id)
        return await self._answer(group_id, partition, step(self, group_id, *args, **kw))

    return request


class ClassicGroups:
    """The classic protocol over the runtime's group cache (``Group.classic``)."""

    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.rt = runtime

    # -- the four requests -------------------------------------------------------------------
    # ``join`` and ``sync`` are their state steps ``_join`` and ``_sync`` (below), routed
    # and answered once their writes are replicated (``_routed``). Heartbeat and LeaveGroup change nothing a failover
    # must keep, so they answer at once.

    async def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> None:
        await self._route(group_id)
        self._heartbeat(group_id, generation, member_id, instance_id)

    async def leave(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> list[LogbusError | None]:
        """Per leaving member (member id, instance id): None, or why it was refused."""
        await self._route(group_id)
        return self._leave(group_id, members)

    async def _route(self, group_id: str) -> int:
        self.rt.check_loaded()
        validate_group_id(group_id)
        await self.rt.ensure_topic()
        return self.rt.route(group_id)

    async def _answer(self, group_id: str, partition: int, answer: R | asyncio.Future[R]) -> R:
        """The answer, once its future is completed (shielded: a closed connection must
        not cancel the future the group completes) and the partition's writes so far
        are replicated (the generation it names survives a failover)."""
        result = answer if not isinstance(answer, asyncio.Future) else await asyncio.shield(answer)
        await self.rt.replicated(group_id, partition)
        return result

    # -- JoinGroup ---------------------------------------------------------------------------

    def _join(self, group_id: str, req: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        cfg = self.rt.config
        if not (
            cfg.classic_min_session_timeout_ms
            <= req.session_timeout_ms
            <= cfg.classic_max_session_timeout_ms
        ):
            raise InvalidSessionTimeout(
                f"session timeout {req.session_timeout_ms} ms is outside "
                f"{cfg.classic_min_session_timeout_ms}..{cfg.classic_max_session_timeout_ms} ms "
                "(group_min_session_timeout_ms, group_max_session_timeout_ms)",
                group_id,
            )
        if not req.protocol_type or not req.protocols:
            raise InconsistentGroupProtocol(
                "a JoinGroup needs a protocol type and at least one protocol", group_id
            )
        group = self.rt.groups.get(group_id)
        if group is not None and group.members:
            raise InconsistentGroupProtocol(
                f"group {group_id!r} is a consumer-protocol (KIP-848) group with members; "
                "a classic member cannot join it (use group.protocol=consumer)",
                group_id,
            )
        if group is None:
            group = self.rt.groups[group_id] = Group(group_id, empty_since_ms=self.rt.clock_ms())
        if group.classic is None:
            group.classic = ClassicGroup(group_id)
        cg: ClassicGroup = group.classic
        if cg.members and not self._supports(cg, req):
            raise InconsistentGroupProtocol(
                f"protocol type {req.protocol_type!r} with protocols "
                f"{[p for p, _ in req.protocols]} fits no protocol every member of group "
                f"{group_id!r} supports",
                group_id,
            )
        if not req.member_id or req.member_id in cg.pending:
            self._check_size(cg, req)
        if not req.member_id:
            if req.instance_id is not None:
                return self._join_static(group, cg, req)
            # Kafka's form is client id + "-" + UUID.
            member_id = f"{req.client_id}-{uuid.uuid4()}" if req.client_id else str(uuid.uuid4())
            if req.require_known_member_id:
                self._add_pending(cg, member_id, req.session_timeout_ms)
                raise MemberIdRequired(group_id, member_id)
            return self._add_member(group, cg, member_id, req)
        if req.member_id in cg.pending:
            handle = cg.pending.pop(req.member_id)
            if handle is not None:
                handle.cancel()
            return self._add_member(group, cg, req.member_id, req)
        member = self._member(cg, req.member_id, req.instance_id)
        fut = self._update_member(cg, member, req)
        if cg.state == ClassicState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, cg)
            return fut
        changed = member.protocols != list(req.protocols)
        if cg.state == ClassicState.STABLE and (changed or member.member_id == cg.leader):
            member.protocols = list(req.protocols)
            self._prepare_rebalance(group, cg, f"member {member.member_id} rejoined")
            return fut
        if changed:
            member.protocols = list(req.protocols)
            self._prepare_rebalance(group, cg, f"member {member.member_id} changed its protocols")
            return fut
        # CompletingRebalance (its JoinGroup answer was lost) or a follower in Stable with
        # nothing changed: the current generation again, without a rebalance.
        member.join = None
        self._touch(group, cg, member)
        return self._join_result(cg, member)

    def _check_size(self, cg: ClassicGroup, req: JoinRequest) -> None:
        """A new member (or a pending one joining) past ``group_max_size`` is refused; a
        static member's new incarnation takes its old place."""
        if req.instance_id is not None and cg.static.get(req.instance_id) in cg.members:
            return
        size = len(cg.members) + len(cg.pending) - (req.member_id in cg.pending)
        if size >= self.rt.config.classic_max_size:
            raise GroupMaxSizeReached(
                f"group {cg.group_id!r} has {size} members, its maximum (group_max_size)",
                cg.group_id,
            )

    def _supports(self, cg: ClassicGroup, req: JoinRequest) -> bool:
        if req.protocol_type != cg.protocol_type:
            return False
        return bool({name for name, _ in req.protocols} & self._candidates(cg))

    @staticmethod
    def _candidates(cg: ClassicGroup) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in cg.members.values()]
        return set.intersection(*sets) if sets else set()

    def _member(self, cg: ClassicGroup, member_id: str, instance_id: str | None) -> ClassicMember:
        """The member named, or UNKNOWN_MEMBER_ID; FENCED_INSTANCE_ID when its instance id
        belongs to another member id now (Kafka's validateMember)."""
        if instance_id is not None:
            current = cg.static.get(instance_id)
            if current is not None and current != member_id:
                raise FencedInstanceId(cg.group_id, instance_id, member_id)
        member = cg.members.get(member_id)
        if member is None:
            raise UnknownMemberId(cg.group_id, member_id)
        return member

    def _update_member(
        self, cg: ClassicGroup, member: ClassicMember, req: JoinRequest
    ) -> asyncio.Future[JoinResult]:
        """Take the JoinGroup's timeouts, and wait for its answer (replacing an older wait)."""
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if member.join is not None and not member.join.done():
            member.join.set_exception(
                RebalanceInProgress("a newer JoinGroup of this member replaced it", cg.group_id)
            )
        member.join = self._loop().create_future()
        if cg.state == ClassicState.PREPARING_REBALANCE:
            member.protocols = list(req.protocols)
        return member.join

    def _add_member(
        self, group: Group, cg: ClassicGroup, member_id: str, req: JoinRequest
    ) -> asyncio.Future[JoinResult]:
        if not cg.members:
            cg.protocol_type = req.protocol_type
        member = ClassicMember(
            member_id=member_id,
            instance_id=req.instance_id,
            protocol_type=req.protocol_type,
            protocols=list(req.protocols),
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            client_id=req.client_id,
            client_host=req.client_host,
        )
        # Kept here: completing the join below (this member may be the last one awaited)
        # answers the future and clears ``member.join``.
        fut = member.join = self._loop().create_future()
        cg.members[member_id] = member
        if req.instance_id is not None:
            cg.static[req.instance_id] = member_id
        self._touch(group, cg, member)
        if cg.state == ClassicState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, cg)
        else:
            self._prepare_rebalance(group, cg, f"member {member_id} joined")
        return fut

    def _join_static(
        self, group: Group, cg: ClassicGroup, req: JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        """A static member joining without a member id: a new member, or the new
        incarnation of its instance's member (KIP-345)."""
        assert req.instance_id is not None
        old_id = cg.static.get(req.instance_id)
        new_id = f"{req.instance_id}-{uuid.uuid4()}"
        if old_id is None or old_id not in cg.members:
            return self._add_member(group, cg, new_id, req)
        member = cg.members[old_id]
        fail_waiting(member, FencedInstanceId(cg.group_id, req.instance_id, old_id))
        self._rename(cg, member, new_id)
        log.info("group %s: static member %s is now %s", cg.group_id, old_id, new_id)
        changed = member.protocols != list(req.protocols)
        timeouts = member.session_timeout_ms, member.rebalance_timeout_ms
        fut = self._update_member(cg, member, req)
        if cg.state == ClassicState.STABLE and not changed:
            # Same subscription: no rebalance. The leader is told to skip the assignment
            # (its SyncGroup in Stable only reads its own back). The new id is written
            # (a restart must know it); failing that, the old incarnation stays, as Kafka.
            member.join = None
            try:
                self._store(group)
            except LogbusError:
                member.session_timeout_ms, member.rebalance_timeout_ms = timeouts
                self._rename(cg, member, old_id)
                raise
            self._touch(group, cg, member)
            result = self._join_result(cg, member)
            if member.member_id == cg.leader:
                return replace(result, skip_assignment=True)
            return result
        member.protocols = list(req.protocols)
        if cg.state == ClassicState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, cg)
        else:
            self._prepare_rebalance(group, cg, f"static member {new_id} rejoined")
        return fut

    @staticmethod
    def _rename(cg: ClassicGroup, member: ClassicMember, new_id: str) -> None:
        """A static member's new incarnation (or, undone, its old one) under ``new_id``."""
        old_id = member.member_id
        del cg.members[old_id]
        member.member_id = new_id
        cg.members[new_id] = member
        if member.instance_id is not None:
            cg.static[member.instance_id] = new_id
        if cg.leader == old_id:
            cg.leader = new_id
        if old_id in cg.pending_sync:
            cg.pending_sync.discard(old_id)
            cg.pending_sync.add(new_id)

    def _add_pending(self, cg: ClassicGroup, member_id: str, session_timeout_ms: int) -> None:
        def expire() -> None:
            if cg.pending.pop(member_id, 0) != 0:
                log.info("group %s: pending member %s expired", cg.group_id, member_id)
                group = self.rt.groups.get(cg.group_id)
                if group is not None and group.classic is cg:
                    self._maybe_complete_join(group, cg)

        cg.pending[member_id] = self._loop().call_later(session_timeout_ms / 1000, expire)

    # -- rebalances --------------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, cg: ClassicGroup, reason: str) -> None:
        log.info("group %s: preparing to rebalance (%s)", cg.group_id, reason)
        if cg.state == ClassicState.COMPLETING_REBALANCE:
            self._fail_syncs(
                cg, RebalanceInProgress("the group is rebalancing again: rejoin", cg.group_id)
            )
        for member in cg.members.values():
            member.assignment = b""
        cg.pending_sync.clear()
        if cg.sync_timer is not None:
            cg.sync_timer.cancel()
            cg.sync_timer = None
        was_empty = cg.state == ClassicState.EMPTY
        cg.state = ClassicState.PREPARING_REBALANCE
        if cg.join_timer is not None:
            cg.join_timer.cancel()
        now = self.rt.monotonic()
        timeout = self._rebalance_timeout(cg)
        delay = self.rt.config.classic_initial_rebalance_delay_ms / 1000
        if was_empty and delay > 0:
            cg.initial_until = now + timeout
            cg.initial_members = len(cg.members)
            cg.join_timer = self._loop().call_later(
                min(delay, timeout), self._on_initial_delay, cg.group_id, cg
            )
            return
        cg.initial_until = None
        cg.join_timer = self._loop().call_later(timeout, self._on_join_timeout, cg.group_id, cg)
        self._maybe_complete_join(group, cg)

    @staticmethod
    def _fail_syncs(cg: ClassicGroup, exc: LogbusError) -> None:
        for member in cg.members.values():
            waiting, member.sync = member.sync, None
            if waiting is not None and not waiting.done():
                waiting.set_exception(exc)

    @staticmethod
    def _rebalance_timeout(cg: ClassicGroup) -> float:
        return max((m.rebalance_timeout_ms for m in cg.members.values()), default=0) / 1000

    def _on_initial_delay(self, group_id: str, cg: ClassicGroup) -> None:
        cg.join_timer = None
        group = self.rt.groups.get(group_id)
        if group is None or group.classic is not cg:
            return
        now = self.rt.monotonic()
        until = cg.initial_until or now
        if len(cg.members) > cg.initial_members and now < until:
            # Members came during the delay: wait another delay for more (up to the
            # rebalance timeout), as Kafka's InitialDelayedJoin.
            cg.initial_members = len(cg.members)
            delay = self.rt.config.classic_initial_rebalance_delay_ms / 1000
            cg.join_timer = self._loop().call_later(
                min(delay, until - now), self._on_initial_delay, group_id, cg
            )
            return
        cg.initial_until = None
        self._complete_join(group, cg)

    def _on_join_timeout(self, group_id: str, cg: ClassicGroup) -> None:
        cg.join_timer = None
        group = self.rt.groups.get(group_id)
        if group is not None and group.classic is cg:
            self._complete_join(group, cg)

    def _on_sync_timeout(self, group_id: str, cg: ClassicGroup, generation: int) -> None:
        cg.sync_timer = None
        group = self.rt.groups.get(group_id)
        if group is None or group.classic is not cg or cg.generation != generation:
            return
        late = [cg.members[m] for m in sorted(cg.pending_sync) if m in cg.members]
        cg.pending_sync.clear()
        for member in late:
            if cg.members.get(member.member_id) is member:
                self.remove(group, cg, member, "did not sync within the rebalance timeout")

    def _maybe_complete_join(self, group: Group, cg: ClassicGroup) -> None:
        if cg.state != ClassicState.PREPARING_REBALANCE or cg.initial_until is not None:
            return
        if cg.pending:
            return
        if all(m.join is not None for m in cg.members.values()):
            self._complete_join(group, cg)

    def _complete_join(self, group: Group, cg: ClassicGroup) -> None:
        if cg.state != ClassicState.PREPARING_REBALANCE:
            return
        if cg.join_timer is not None:
            cg.join_timer.cancel()
            cg.join_timer = None
        cg.initial_until = None
        for member in list(cg.members.values()):
            if member.join is None and member.instance_id is None:
                self._drop(cg, member, "did not rejoin within the rebalance timeout")
        cg.generation += 1
        if not cg.members:
            cg.state = ClassicState.EMPTY
            cg.protocol_name = cg.leader = None
            group.empty_since_ms = self.rt.clock_ms()
            log.info("group %s: generation %d is empty", cg.group_id, cg.generation)
            try:
                self._store(group)
            except LogbusError as exc:
                # As Kafka: logged; the log keeps the last generation, whose members
                # expire after a reload unless they come back.
                log.warning("group %s: its empty state is not written: %s", cg.group_id, exc)
            return
        cg.protocol_name = self._select_protocol(cg)
        joined = [m for m in cg.members.values() if m.join is not None]
        if cg.leader not in cg.members or (joined and cg.members[cg.leader].join is None):
            cg.leader = (joined or list(cg.members.values()))[0].member_id
        cg.state = ClassicState.COMPLETING_REBALANCE
        # Every member must sync within the rebalance timeout, or it is removed (a leader
        # that never sends the assignment cannot hold the group in CompletingRebalance).
        cg.pending_sync = set(cg.members)
        cg.sync_timer = self._loop().call_later(
            self._rebalance_timeout(cg), self._on_sync_timeout, cg.group_id, cg, cg.generation
        )
        log.info(
            "group %s: generation %d, protocol %s, leader %s, %d members",
            cg.group_id,
            cg.generation,
            cg.protocol_name,
            cg.leader,
            len(cg.members),
        )
        for member in joined:
            fut, member.join = member.join, None
            self._touch(group, cg, member)
            resolve_future(fut, self._join_result(cg, member))

    @staticmethod
    def _select_protocol(cg: ClassicGroup) -> str:
        """The protocol every member supports that most members list first among those
        (ties: the earliest member's preference), as Kafka's selectProtocol."""
        candidates = ClassicGroups._candidates(cg)
        votes: Counter[str] = Counter()
        for m in cg.members.values():
            votes[next(name for name, _ in m.protocols if name in candidates)] += 1
        best = max(votes.values())
        first = next(iter(cg.members.values()))
        return next(n for n, _ in first.protocols if votes.get(n) == best)

    def _join_result(self, cg: ClassicGroup, member: ClassicMember) -> JoinResult:
        assert cg.protocol_type is not None and cg.protocol_name is not None
        assert cg.leader is not None
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == cg.leader:
            members = tuple(
                (m.member_id, m.instance_id, m.metadata(cg.protocol_name))
                for m in cg.members.values()
            )
        return JoinResult(
            generation=cg.generation,
            protocol_type=cg.protocol_type,
            protocol_name=cg.protocol_name,
            leader=cg.leader,
            member_id=member.member_id,
            members=members,
        )

    join = _routed(_join)

    # -- SyncGroup ---------------------------------------------------------------------------

    def _sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult | asyncio.Future[SyncResult]:
        group, cg = self._classic(group_id, member_id)
        member = self._member(cg, member_id, instance_id)
        if generation != cg.generation:
            raise IllegalGeneration(group_id, member_id, generation, cg.generation)
        if (protocol_type is not None and protocol_type != cg.protocol_type) or (
            protocol_name is not None and protocol_name != cg.protocol_name
        ):
            raise InconsistentGroupProtocol(
                f"SyncGroup names protocol {protocol_type}/{protocol_name}, the generation's "
                f"is {cg.protocol_type}/{cg.protocol_name}",
                group_id,
            )
        if cg.state == ClassicState.EMPTY:
            raise UnknownMemberId(group_id, member_id)
        if cg.state == ClassicState.PREPARING_REBALANCE:
            raise RebalanceInProgress("the group is rebalancing: rejoin", group_id)
        self._touch(group, cg, member)
        cg.pending_sync.discard(member_id)
        assert cg.protocol_type is not None and cg.protocol_name is not None
        if cg.state == ClassicState.STABLE:
            return SyncResult(cg.protocol_type, cg.protocol_name, member.assignment)
        if member.sync is not None and not member.sync.done():
            member.sync.set_exception(
                RebalanceInProgress("a newer SyncGroup of this member replaced it", group_id)
            )
        member.sync = None
        if member_id != cg.leader:
            fut: asyncio.Future[SyncResult] = self._loop().create_future()
            member.sync = fut
            return fut
        for m in cg.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        try:
            self._store(group)
        except LogbusError as exc:
            # Kafka's answer to a failed store: every waiting SyncGroup gets the error (the
            # clients find the coordinator again and rejoin) and the group rebalances.
            self._fail_syncs(cg, exc)
            self._prepare_rebalance(group, cg, f"its assignment was not written: {exc}")
            raise
        cg.state = ClassicState.STABLE
        log.info("group %s: generation %d is stable", group_id, cg.generation)
        for m in cg.members.values():
            waiting, m.sync = m.sync, None
            resolve_future(waiting, SyncResult(cg.protocol_type, cg.protocol_name, m.assignment))
        return SyncResult(cg.protocol_type, cg.protocol_name, member.assignment)

    sync = _routed(_sync)

    def _store(self, group: Group) -> None:
        """Write the group's record (:meth:`CoordinatorRuntime.persist_classic`); a storage
        error is NOT_COORDINATOR, as Kafka's storeGroup answers it."""
        try:
            self.rt.persist_classic(group)
        except (KafkaStorageError, OSError) as exc:
            log.warning("group %s: its record is not written: %s", group.group_id, exc)
            raise NotCoordinator(group.group_id) from None

    def _classic(self, group_id: str, member_id: str) -> tuple[Group, ClassicGroup]:
        group = self.rt.groups.get(group_id)
        if group is None or group.classic is None:
            raise UnknownMemberId(group_id, member_id)
        return group, group.classic

    # -- Heartbeat and LeaveGroup ------------------------------------------------------------

    def _heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> None:
        group, cg = self._classic(group_id, member_id)
        member = self._member(cg, member_id, instance_id)
        if cg.state == ClassicState.EMPTY:
            raise UnknownMemberId(group_id, member_id)
        if generation != cg.generation:
            raise IllegalGeneration(group_id, member_id, generation, cg.generation)
        self._touch(group, cg, member)
        if cg.state == ClassicState.PREPARING_REBALANCE:
            raise RebalanceInProgress("the group is rebalancing: rejoin", group_id)

    def _leave(
        self, group_id: str, leaving: Sequence[tuple[str, str | None]]
    ) -> list[LogbusError | None]:
        out: list[LogbusError | None] = []
        group = self.rt.groups.get(group_id)
        cg = group.classic if group is not None else None
        for member_id, instance_id in leaving:
            if group is None or cg is None:
                out.append(UnknownMemberId(group_id, member_id))
                continue
            try:
                if not member_id and instance_id is not None:
                    member_id = cg.static.get(instance_id, "")
                if member_id in cg.pending:
                    handle = cg.pending.pop(member_id)
                    if handle is not None:
                        handle.cancel()
                    self._maybe_complete_join(group, cg)
                    out.append(None)
                    continue
                member = self._member(cg, member_id, instance_id)
            except LogbusError as exc:
                out.append(exc)
                continue
            self.remove(group, cg, member, "left the group")
            out.append(None)
        return out

    # -- removal and sessions ----------------------------------------------------------------

    def _drop(self, cg: ClassicGroup, member: ClassicMember, reason: str) -> None:
        """Take the member out, answering what it waits for with UNKNOWN_MEMBER_ID."""
        log.info("group %s: member %s %s", cg.group_id, member.member_id, reason)
        if member.timer is not None:
            member.timer.cancel()
            member.timer = None
        fail_waiting(member, UnknownMemberId(cg.group_id, member.member_id))
        del cg.members[member.member_id]
        cg.pending_sync.discard(member.member_id)
        if member.instance_id is not None and cg.static.get(member.instance_id) == member.member_id:
            del cg.static[member.instance_id]
        if cg.leader == member.member_id:
            cg.leader = None

    def remove(self, group: Group, cg: ClassicGroup, member: ClassicMember, reason: str) -> None:
        self._drop(cg, member, reason)
        if cg.state in (ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, cg, f"member {member.member_id} {reason}")
        elif cg.state == ClassicState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, cg)

    def _touch(self, group: Group, cg: ClassicGroup, member: ClassicMember) -> None:
        """A sign of life: the member's session runs from now."""
        member.deadline = self.rt.monotonic() + member.session_timeout_ms / 1000
        if member.timer is None:
            member.timer = self._loop().call_later(
                member.session_timeout_ms / 1000, self._on_session, cg.group_id, cg, member
            )

    def _on_session(self, group_id: str, cg: ClassicGroup, member: ClassicMember) -> None:
        member.timer = None
        group = self.rt.groups.get(group_id)
        if (
            group is None
            or group.classic is not cg
            or cg.members.get(member.member_id) is not member
        ):
            return
        now = self.rt.monotonic()
        if member.join is not None or member.sync is not None or now < member.deadline:
            # Waiting in JoinGroup or SyncGroup keeps a member alive (it cannot heartbeat).
            if member.join is not None or member.sync is not None:
                member.deadline = now + member.session_timeout_ms / 1000
            member.timer = self._loop().call_later(
                max(0.0, member.deadline - now), self._on_session, group_id, cg, member
            )
            return
        self.remove(group, cg, member, "timed out (session)")

    def restore(self, groups: Iterable[Group]) -> None:
        """Groups just loaded from their records: every member's session starts now (the
        coordinator was away, not them), so one that heartbeats goes on in its
        generation and one that does not expires."""
        for group in groups:
            cg = group.classic
            if cg is None:
                continue
            for member in cg.members.values():
                member.timer = None
                self._touch(group, cg, member)

    def _loop(self) -> asyncio.AbstractEventLoop:
        return self.rt.loop or asyncio.get_running_loop()

    # -- what the offset store and the admin operations ask -----------------------------------

    @staticmethod
    def validate_commit(
        group_id: str,
        cg: ClassicGroup,
        member_id: str,
        instance_id: str | None,
        generation: int,
        *,
        transactional: bool = False,
    ) -> None:
        """Kafka's checks of an OffsetCommit to a classic group: a commit from outside the
        group (generation < 0) only while it is Empty; else a member of this generation,
        not while the generation waits for its assignment (a TxnOffsetCommit may: it
        counts only once its transaction commits)."""
        if generation < 0 and cg.state == ClassicState.EMPTY:
            return
        if instance_id is not None:
            current = cg.static.get(instance_id)
            if current is not None and current != member_id:
                raise FencedInstanceId(group_id, instance_id, member_id)
        if member_id not in cg.members:
            raise UnknownMemberId(group_id, member_id)
        if generation != cg.generation:
            raise IllegalGeneration(group_id, member_id, generation, cg.generation)
        if cg.state == ClassicState.COMPLETING_REBALANCE and not transactional:
            raise RebalanceInProgress("the generation waits for its assignment", group_id)


__all__ = [
    "ClassicGroup",
    "ClassicGroups",
    "ClassicMember",
    "ClassicState",
    "JoinRequest",
    "JoinResult",
    "SyncResult",
    "decode_assignment",
    "decode_subscription",
]
