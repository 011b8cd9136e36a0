"""The consumer-group state machine of KIP-848: member epochs, target assignment,
incremental reconciliation, and the timers that remove silent members.

* A member heartbeats with its epoch. Joining (epoch 0), leaving (-1), a
  static member's temporary leave (-2), a changed subscription, or a change in
  the subscribed topics' partition counts bumps the *group epoch*; the
  assignor (:mod:`app.groups.assignors`) then computes the *target assignment*
  for that epoch at once.
* Each member walks towards its target on its own heartbeats
  (:meth:`MembershipManager._reconcile`). Partitions it must give up are revoked
  first (its epoch stays); once a heartbeat shows they are gone it moves to the
  target epoch and receives the partitions nobody else still owns. A partition
  another member has not released yet is handed over on a later heartbeat. So two
  members never own one partition, and members not touched by a change keep
  consuming.
* A heartbeat's ``owned_partitions`` is what the member holds now; without it
  nothing changed since its last report (Kafka's meaning), so a revocation
  counts as done only once a list leaves the partitions out.
* A member silent for the session timeout, or holding partitions to revoke past
  its rebalance timeout, is removed by a per-member timer (one ``call_later``
  handle, re-armed lazily, not a task per member). These timers are owned here;
  the offsets retention timer is the offset store's.
* A member that holds a connection (a WebSocket) may :meth:`~MembershipManager.watch`
  its group and heartbeat as soon as another member's change gives it work.

Every change is written (:meth:`CoordinatorRuntime.persist`) before it is answered.
Concurrency: on the event loop; a heartbeat reads and changes the state without
awaiting in between, so no lock is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable

from app.common.errors import InvalidRequest, LogbusError, UnknownTopicOrPartition
from app.common.group_errors import (
    FencedMemberEpoch,
    InconsistentGroupProtocol,
    UnknownMemberId,
    UnreleasedInstanceId,
)
from app.groups.assignors import DEFAULT_ASSIGNOR, MemberSpec, get_assignor
from app.groups.model import (
    DEFAULT_REBALANCE_TIMEOUT_MS,
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Group,
    HeartbeatRequest,
    HeartbeatResponse,
    Member,
    MemberState,
    TopicPartition,
    compile_pattern,
    new_member_id,
    resolve_subscription,
    validate_group_id,
)
from app.groups.runtime import CoordinatorRuntime

log = logging.getLogger(__name__)


class MembershipManager:
    """Heartbeats, joins and leaves of the groups in the runtime's cache (Kafka's
    GroupMetadataManager for the consumer protocol)."""

    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.rt = runtime
        self._watchers: dict[tuple[str, str], Callable[[], None]] = {}

    async def heartbeat(self, group_id: str, req: HeartbeatRequest) -> HeartbeatResponse:
        self.rt.check_loaded()
        validate_group_id(group_id)
        await self.rt.ensure_topic()
        partition = self.rt.route(group_id)
        # No await in here: the state changes are atomic on the loop.
        answer = self._heartbeat(group_id, req)
        # Answered once the partition's writes so far are replicated (even when this
        # heartbeat wrote nothing, it may have read what another one wrote).
        await self.rt.replicated(group_id, partition)
        return answer

    def _heartbeat(self, group_id: str, req: HeartbeatRequest) -> HeartbeatResponse:
        if req.member_epoch == JOIN_EPOCH:
            return self._join(group_id, req)
        group = self.rt.groups.get(group_id)
        member = group.members.get(req.member_id) if group is not None else None
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if group is None or member is None:
                raise UnknownMemberId(group_id, req.member_id)
            return self._leave(group, member, req.member_epoch)
        if req.member_epoch < STATIC_LEAVE_EPOCH:
            raise InvalidRequest(f"member_epoch {req.member_epoch} is not valid")
        if group is None or member is None or member.left_static:
            raise UnknownMemberId(group_id, req.member_id)
        owned = None if req.owned_partitions is None else set(req.owned_partitions)
        if req.member_epoch != member.member_epoch:
            # A lost answer: the member may still be on its previous epoch, as long as
            # it claims nothing beyond what it may hold (Kafka accepts the same).
            lost_answer = req.member_epoch == member.previous_epoch and (
                owned is None or owned <= member.assigned | member.revoking
            )
            if not lost_answer:
                raise FencedMemberEpoch(
                    group_id, member.member_id, req.member_epoch, member.member_epoch
                )
        member.deadline = self.rt.monotonic() + self.rt.config.session_timeout_ms / 1000
        changed = self._update_member(group, member, req)
        return self._settle(group, member, owned, changed)

    def _join(self, group_id: str, req: HeartbeatRequest) -> HeartbeatResponse:
        if req.subscribed_topics is None and req.subscribed_topic_regex is None:
            raise InvalidRequest("joining needs subscribed_topics or subscribed_topic_regex")
        if req.server_assignor is not None:
            get_assignor(req.server_assignor)
        if req.subscribed_topic_regex is not None:
            compile_pattern(req.subscribed_topic_regex)
        group = self.rt.groups.get(group_id)
        if group is None:
            group = self.rt.groups[group_id] = Group(group_id)
        if group.classic is not None:
            if group.classic.active:
                # A group is classic or consumer-protocol (Kafka with migration disabled).
                raise InconsistentGroupProtocol(
                    f"group {group_id!r} is a classic group with members (JoinGroup); a "
                    "consumer-protocol member cannot join it",
                    group_id,
                )
            group.classic = None
        now = self.rt.monotonic()
        member: Member | None = None
        joined = False
        if req.instance_id is not None:
            old_id = group.static.get(req.instance_id)
            old = group.members.get(old_id) if old_id is not None else None
            if old is not None:
                if not old.left_static and old.member_id != req.member_id:
                    raise UnreleasedInstanceId(group_id, req.instance_id)
                member = self._replace_static(group, old, req.member_id or new_member_id())
        if member is None:
            existing = group.members.get(req.member_id) if req.member_id else None
            if existing is not None:
                # A known member rejoining from scratch (it lost its state): start over.
                self.remove(group, existing, "rejoined with epoch 0")
            member = Member(
                member_id=req.member_id or new_member_id(),
                instance_id=req.instance_id,
                subscribed_topics=list(req.subscribed_topics or []),
                subscribed_regex=req.subscribed_topic_regex,
                server_assignor=req.server_assignor,
                rebalance_timeout_ms=req.rebalance_timeout_ms or DEFAULT_REBALANCE_TIMEOUT_MS,
            )
            group.members[member.member_id] = member
            group.dirty.add(member.member_id)
            if member.instance_id is not None:
                group.static[member.instance_id] = member.member_id
            member.resolved = frozenset()
            joined = True
        member.deadline = now + self.rt.config.session_timeout_ms / 1000
        if not self._update_member(group, member, req) and joined:
            group.group_epoch += 1
        self.arm(group, member)
        owned = None if req.owned_partitions is None else set(req.owned_partitions)
        return self._settle(group, member, owned, True)

    def _replace_static(self, group: Group, old: Member, new_id: str) -> Member:
        """The new incarnation of a static member takes over its epoch and assignment."""
        if old.timer is not None:
            old.timer.cancel()
            old.timer = None
        old_id = old.member_id
        del group.members[old_id]
        old.member_id = new_id
        old.left_static = False
        group.members[new_id] = old
        assert old.instance_id is not None
        group.static[old.instance_id] = new_id
        for tp in old.assigned | old.revoking:
            if group.owners.get(tp) == old_id:
                group.owners[tp] = new_id
        if old_id in group.target:
            group.target[new_id] = group.target.pop(old_id)
        if old_id != new_id:
            group.tombstones.add(old_id)
        group.dirty.add(new_id)
        return old

    def _update_member(self, group: Group, member: Member, req: HeartbeatRequest) -> bool:
        """Apply a changed subscription or assignor; True when the group epoch moved."""
        bump = False
        if req.topic_filter is not None:
            member.topic_filter = req.topic_filter
        if req.subscribed_topics is not None or req.subscribed_topic_regex is not None:
            topics = list(req.subscribed_topics or [])
            regex = req.subscribed_topic_regex
            if regex is not None:
                compile_pattern(regex)
            if topics != member.subscribed_topics or regex != member.subscribed_regex:
                member.subscribed_topics = topics
                member.subscribed_regex = regex
                group.dirty.add(member.member_id)
                bump = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            get_assignor(req.server_assignor)
            member.server_assignor = req.server_assignor
            group.dirty.add(member.member_id)
            bump = True
        if (
            req.rebalance_timeout_ms is not None
            and req.rebalance_timeout_ms != member.rebalance_timeout_ms
        ):
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
            group.dirty.add(member.member_id)
        bump |= self._refresh_metadata(group)
        if bump:
            group.group_epoch += 1
        return bump

    def _refresh_metadata(self, group: Group) -> bool:
        """Re-resolve subscriptions and partition counts; True when anything moved."""
        changed = False
        needs_regex = any(m.subscribed_regex is not None for m in group.members.values())
        listed = self.rt.placement.topics() if needs_regex else []
        union: set[str] = set()
        for member in group.members.values():
            resolved = resolve_subscription(member, lambda: listed)
            if resolved != member.resolved:
                member.resolved = resolved
                changed = True
            union |= resolved
        topics: dict[str, int] = {}
        for t in union:
            with contextlib.suppress(UnknownTopicOrPartition):
                topics[t] = self.rt.placement.partition_count(t)
        if topics != group.topics:
            group.topics = topics
            changed = True
        return changed

    def _compute_target(self, group: Group) -> None:
        votes = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        # Kafka picks the assignor most members ask for, else the broker's default.
        group.assignor = votes.most_common(1)[0][0] if votes else DEFAULT_ASSIGNOR
        specs = [
            MemberSpec(
                member_id=m.member_id,
                topics=m.resolved,
                sort_key=m.instance_id or "",
                current=frozenset(group.target.get(m.member_id, ())),
            )
            for m in group.members.values()
        ]
        target = get_assignor(group.assignor).assign(specs, group.topics)
        for mid, tps in target.items():
            if group.target.get(mid) != tps:
                group.dirty.add(mid)
        group.target = target
        group.assignment_epoch = group.group_epoch

    def _settle(
        self, group: Group, member: Member, owned: set[TopicPartition] | None, changed: bool
    ) -> HeartbeatResponse:
        if group.assignment_epoch < group.group_epoch:
            self._compute_target(group)
            changed = True
        if self._reconcile(group, member, owned):
            group.dirty.add(member.member_id)
            changed = True
        if changed:
            self.rt.persist(group)
            self._notify(group, skip=member.member_id)
        return HeartbeatResponse(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.rt.config.heartbeat_interval_ms,
            assignment=sorted(member.assigned),
        )

    def _reconcile(self, group: Group, member: Member, owned: set[TopicPartition] | None) -> bool:
        """One step of the member towards its target; True when its state changed."""
        changed = False
        target = group.target.get(member.member_id, set())
        back = member.revoking & target
        if back:
            # A newer target gives back what the member was still giving up: it keeps them
            # (nobody else was handed them while they were being revoked).
            member.revoking -= back
            member.assigned |= back
            if not member.revoking:
                member.revoke_deadline = None
            changed = True
        if member.revoking:
            # No list: nothing changed since the member's last report, so what it was
            # asked to give up is still its own.
            still_owned = member.revoking if owned is None else member.revoking & owned
            if still_owned:
                return changed
            for tp in member.revoking:
                if group.owners.get(tp) == member.member_id:
                    del group.owners[tp]
            member.revoking = set()
            member.revoke_deadline = None
            changed = True
        if member.member_epoch == group.assignment_epoch and member.assigned == target:
            return changed
        revoke = member.assigned - target
        if revoke:
            # Give up first, at the same epoch; the new partitions come once it has.
            member.assigned -= revoke
            member.revoking = revoke
            member.revoke_deadline = self.rt.monotonic() + member.rebalance_timeout_ms / 1000
            self.arm(group, member)
            return True
        if member.member_epoch != group.assignment_epoch:
            member.previous_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
            changed = True
        for tp in sorted(target - member.assigned):
            owner = group.owners.get(tp)
            if owner is None or owner == member.member_id or owner not in group.members:
                group.owners[tp] = member.member_id
                member.assigned.add(tp)
                changed = True
        return changed

    def watch(self, group_id: str, member_id: str, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` when another member's change gives this member work to do.

        Members normally learn about a rebalance on their next heartbeat. A
        member that holds a connection (a WebSocket) can heartbeat at once
        instead, so partitions move without waiting a heartbeat interval. The
        callback runs synchronously inside the coordinator: it must only
        schedule (set an event), never call back in. None stops watching.
        """
        if callback is None:
            self._watchers.pop((group_id, member_id), None)
        else:
            self._watchers[(group_id, member_id)] = callback

    def _notify(self, group: Group, skip: str | None = None) -> None:
        if not self._watchers:
            return
        for member in list(group.members.values()):
            if member.member_id == skip:
                continue
            callback = self._watchers.get((group.group_id, member.member_id))
            if callback is not None and self._has_work(group, member):
                try:
                    callback()
                except Exception:  # a watcher's bug must not break the group's change
                    log.exception("group watcher failed")

    def _has_work(self, group: Group, member: Member) -> bool:
        """True when a heartbeat now would change the member's assignment or epoch."""
        if member.revoking or member.left_static:
            # The member itself has to act (revocations are acknowledged by it).
            return False
        target = group.target.get(member.member_id, set())
        if member.assigned - target or member.member_epoch != group.assignment_epoch:
            return True
        for tp in target - member.assigned:
            owner = group.owners.get(tp)
            if owner is None or owner not in group.members:
                return True
        return False

    def member_state(self, group: Group, member: Member) -> MemberState:
        if member.revoking:
            return MemberState.UNREVOKED_PARTITIONS
        if member.assigned != group.target.get(member.member_id, set()):
            return MemberState.UNRELEASED_PARTITIONS
        return MemberState.STABLE

    def _leave(self, group: Group, member: Member, epoch: int) -> HeartbeatResponse:
        if epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # A static member going away for a restart keeps its partitions (nobody
            # consumes them meanwhile) until its session times out. Written down: after
            # a restart its instance may still come back under a new id, and the id
            # that left is not accepted again.
            member.left_static = True
            member.deadline = self.rt.monotonic() + self.rt.config.session_timeout_ms / 1000
            self.arm(group, member)
            group.dirty.add(member.member_id)
            self.rt.persist(group)
        else:
            self.remove(group, member, "left the group")
        return HeartbeatResponse(
            member_id=member.member_id,
            member_epoch=epoch,
            heartbeat_interval_ms=self.rt.config.heartbeat_interval_ms,
            assignment=[],
        )

    def remove(self, group: Group, member: Member, reason: str) -> None:
        log.info("group %s: member %s %s", group.group_id, member.member_id, reason)
        if member.timer is not None:
            member.timer.cancel()
            member.timer = None
        group.members.pop(member.member_id, None)
        group.dirty.discard(member.member_id)
        group.tombstones.add(member.member_id)
        if (
            member.instance_id is not None
            and group.static.get(member.instance_id) == member.member_id
        ):
            del group.static[member.instance_id]
        for tp in member.assigned | member.revoking:
            if group.owners.get(tp) == member.member_id:
                del group.owners[tp]
        group.target.pop(member.member_id, None)
        if not group.members:
            group.empty_since_ms = self.rt.clock_ms()
        self._refresh_metadata(group)
        group.group_epoch += 1
        self._compute_target(group)
        self.rt.persist(group)
        self._notify(group)

    # -- timers: session and rebalance timeouts ---------------------------------------------

    def restore(self, groups: Iterable[Group]) -> None:
        """Members of groups just loaded: resolve their subscriptions, give them a fresh
        session (the broker was away, not them) and arm their timers."""
        now = self.rt.monotonic()
        for group in groups:
            for member in group.members.values():
                member.resolved = resolve_subscription(member, self.rt.placement.topics)
                member.deadline = now + self.rt.config.session_timeout_ms / 1000
                self.arm(group, member)

    def arm(self, group: Group, member: Member) -> None:
        """Arm the member's one timer for its earliest deadline (session, or revocation)."""
        loop = self.rt.loop or asyncio.get_running_loop()
        delay = max(0.0, self._due(member) - self.rt.monotonic())
        if member.timer is not None:
            # A later deadline is found when the timer fires; only an earlier one
            # (a revocation's rebalance timeout) needs the timer moved.
            if member.timer.when() <= loop.time() + delay + 0.001:
                return
            member.timer.cancel()
        member.timer = loop.call_later(
            delay, self._on_timer, group.group_id, member.member_id, member
        )

    @staticmethod
    def _due(member: Member) -> float:
        if member.revoke_deadline is not None:
            return min(member.deadline, member.revoke_deadline)
        return member.deadline

    def _on_timer(self, group_id: str, member_id: str, member: Member) -> None:
        member.timer = None
        group = self.rt.groups.get(group_id)
        if group is None or group.members.get(member.member_id) is not member:
            return
        now = self.rt.monotonic()
        try:
            if now >= member.deadline:
                self.remove(group, member, "timed out (session)")
            elif member.revoke_deadline is not None and now >= member.revoke_deadline:
                self.remove(group, member, "did not revoke within its rebalance timeout")
            else:
                self.arm(group, member)
        except LogbusError as exc:
            # Not written (leadership just moved, or too few in-sync replicas): the member
            # is gone here; its record goes with the group's next write.
            log.warning("group %s: removing member %s not written: %s", group_id, member_id, exc)

    def expire_sessions(self) -> int:
        """Remove every member past a deadline now (the timers do this on their own)."""
        now = self.rt.monotonic()
        removed = 0
        for group in list(self.rt.groups.values()):
            for member in list(group.members.values()):
                if now >= self._due(member):
                    self.remove(group, member, "timed out")
                    removed += 1
        return removed
