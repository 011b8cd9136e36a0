"""The classic group state machine (app/groups/classic.py) against a model of well-behaved
and misbehaving clients: joins (KIP-394's two steps, a static member's restarts), syncs,
heartbeats, leaves and silent members whose sessions run out, in any order, on a clock
the test moves. Invariants: every Stable generation's assignment is the one its leader
synced, and every member has its share; the leader is a member once the generation
formed; the protocol chosen is one every member supports; ids are members or pending,
never both; the static map names members of that instance; a Stable or Empty group is
what its last record says (a reload restores that generation)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from app.common.errors import LogbusError
from app.common.group_errors import (
    FencedInstanceId,
    GroupMaxSizeReached,
    IllegalGeneration,
    MemberIdRequired,
    RebalanceInProgress,
    UnknownMemberId,
)
from app.groups.classic import ClassicGroups, ClassicState, JoinRequest, JoinResult, SyncResult
from app.groups.classic_model import group_record
from app.groups.model import Group, GroupConfig
from app.groups.records import ClassicGroupValue

GROUP = "g"
STABLE_SEEN: list[int] = []  # sizes of the Stable groups checked (the test is not vacuous)
SLOTS = 4  # slot 3 is a static member (instance id "static")
# Each slot's protocols in its order of preference; roundrobin is the only common one.
PROTOCOLS: list[list[str]] = [
    ["range", "roundrobin"],
    ["roundrobin"],
    ["range", "roundrobin"],
    ["roundrobin", "range"],
]


class FakeHandle:
    def __init__(self, when: float, callback: Callable[..., None], args: tuple[Any, ...]):
        self.when, self.callback, self.args = when, callback, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: FakeHandle) -> bool:
        return self.when < other.when


class FakeLoop:
    """call_later on a clock the test moves; futures from a loop that never runs (the
    test reads them with done()/result(), nothing awaits them)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.real = asyncio.new_event_loop()
        self.timers: list[tuple[float, int, FakeHandle]] = []
        self.seq = itertools.count()

    def create_future(self) -> asyncio.Future[Any]:
        return self.real.create_future()

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> FakeHandle:
        handle = FakeHandle(self.now + delay, callback, args)
        heapq.heappush(self.timers, (handle.when, next(self.seq), handle))
        return handle

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        target = self.now + seconds
        while self.timers and self.timers[0][0] <= target:
            when, _, handle = heapq.heappop(self.timers)
            if handle.cancelled:
                continue
            self.now = max(self.now, when)
            handle.callback(*handle.args)
        self.now = target


class FakeRuntime:
    def __init__(self, loop: FakeLoop) -> None:
        self.loop = loop
        self.config = GroupConfig(
            classic_min_session_timeout_ms=1000, classic_initial_rebalance_delay_ms=500
        )
        self.groups: dict[str, Any] = {}
        # The group's last record (app/groups/records.py type 2), as the runtime writes it.
        self.record: ClassicGroupValue | None = None

    def persist_classic(self, group: Group) -> None:
        assert group.classic is not None
        self.record = group_record(group.classic, 0)

    def monotonic(self) -> float:
        return self.loop.now

    def clock_ms(self) -> int:
        return int(self.loop.now * 1000)


@dataclass
class Client:
    slot: int
    member_id: str = ""
    generation: int = -1
    join: asyncio.Future[JoinResult] | None = None
    sync: asyncio.Future[SyncResult] | None = None
    assignment: bytes | None = None
    log: list[str] = field(default_factory=list)

    @property
    def instance_id(self) -> str | None:
        return "static" if self.slot == SLOTS - 1 else None

    def reset(self) -> None:
        self.member_id, self.generation, self.join, self.sync = "", -1, None, None


class ClassicModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = FakeLoop()
        self.groups = ClassicGroups(cast(Any, FakeRuntime(self.loop)))
        self.clients = [Client(i) for i in range(SLOTS)]
        # generation -> slot -> the assignment bytes the leader synced for it
        self.synced: dict[int, dict[int, bytes]] = {}

    # -- client behaviour -----------------------------------------------------------------

    def _join(self, c: Client) -> None:
        if c.join is not None and not c.join.done():
            return  # a client waits for its JoinGroup answer before sending another
        req = JoinRequest(
            member_id=c.member_id,
            protocol_type="consumer",
            protocols=[(p, f"slot{c.slot}".encode()) for p in PROTOCOLS[c.slot]],
            session_timeout_ms=3000,
            rebalance_timeout_ms=5000,
            instance_id=c.instance_id,
        )
        try:
            answer = self.groups._join(GROUP, req)
        except MemberIdRequired as exc:
            # KIP-394: the member joins again with this id, on a later step (meanwhile
            # the group waits for it as pending).
            c.member_id = exc.member_id
            return
        except (UnknownMemberId, FencedInstanceId):
            c.reset()
            return
        c.sync = None
        c.join = answer if isinstance(answer, asyncio.Future) else _done(self.loop, answer)

    def _progress(self) -> None:
        """Each client acts on its answers: a JoinGroup answer leads to a SyncGroup (the
        leader's with an assignment for every member it was told about)."""
        for c in self.clients:
            if c.join is not None and c.join.done():
                fut, c.join = c.join, None
                if fut.exception() is not None:
                    # Removed or fenced: start over; REBALANCE_IN_PROGRESS: join again.
                    if isinstance(fut.exception(), UnknownMemberId | FencedInstanceId):
                        c.reset()
                    continue
                joined = fut.result()
                c.member_id, c.generation = joined.member_id, joined.generation
                assignments: dict[str, bytes] = {}
                if joined.members and not joined.skip_assignment:
                    slots = {m: int(meta.decode()[4:]) for m, _, meta in joined.members}
                    mine = {
                        slots[m]: f"{slots[m]}:{i}:{joined.generation}".encode()
                        for i, m in enumerate(slots)
                    }
                    assignments = {m: mine[slots[m]] for m in slots}
                try:
                    answer = self.groups._sync(
                        GROUP,
                        c.generation,
                        c.member_id,
                        c.instance_id,
                        joined.protocol_type,
                        joined.protocol_name,
                        assignments,
                    )
                except (RebalanceInProgress, IllegalGeneration):
                    continue
                except (UnknownMemberId, FencedInstanceId):
                    c.reset()
                    continue
                if assignments:
                    self.synced[joined.generation] = {
                        int(meta.decode()[4:]): assignments[m] for m, _, meta in joined.members
                    }
                c.sync = answer if isinstance(answer, asyncio.Future) else _done(self.loop, answer)
            if c.sync is not None and c.sync.done():
                fut2, c.sync = c.sync, None
                if fut2.exception() is None:
                    c.assignment = fut2.result().assignment
                elif isinstance(fut2.exception(), UnknownMemberId | FencedInstanceId):
                    c.reset()

    # -- rules ----------------------------------------------------------------------------

    @rule(slot=st.integers(0, SLOTS - 1))
    def join(self, slot: int) -> None:
        self._join(self.clients[slot])
        self._progress()

    @rule(slot=st.integers(0, SLOTS - 1))
    def heartbeat(self, slot: int) -> None:
        c = self.clients[slot]
        if not c.member_id or c.generation < 0:
            return
        try:
            self.groups._heartbeat(GROUP, c.generation, c.member_id, c.instance_id)
        except (RebalanceInProgress, IllegalGeneration):
            self._join(c)
        except (UnknownMemberId, FencedInstanceId):
            c.reset()
        self._progress()

    @rule(slot=st.integers(0, SLOTS - 1))
    def leave(self, slot: int) -> None:
        c = self.clients[slot]
        if not c.member_id:
            return
        self.groups._leave(GROUP, [(c.member_id, c.instance_id)])
        c.reset()
        self._progress()

    @rule()
    def static_restart(self) -> None:
        """The static member's process restarts: it joins without its member id."""
        c = self.clients[SLOTS - 1]
        c.reset()
        self._join(c)
        self._progress()

    @rule(seconds=st.sampled_from([0.1, 0.6, 2.0, 4.0]))
    def tick(self, seconds: float) -> None:
        self.loop.advance(seconds)
        self._progress()

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def stable_generations_carry_their_leaders_assignment(self) -> None:
        group = self.groups.rt.groups.get(GROUP)
        cg = None if group is None else group.classic
        if cg is None:
            return
        assert not set(cg.pending) & set(cg.members)
        assert cg.pending_sync <= set(cg.members)
        for instance, member_id in cg.static.items():
            assert cg.members[member_id].instance_id == instance
        if cg.state in (ClassicState.COMPLETING_REBALANCE, ClassicState.STABLE):
            assert cg.leader in cg.members
            for m in cg.members.values():
                assert cg.protocol_name in {name for name, _ in m.protocols}
        if cg.state == ClassicState.STABLE:
            STABLE_SEEN.append(len(cg.members))
            synced = self.synced[cg.generation]
            for m in cg.members.values():
                slot = int(m.metadata(cg.protocol_name or "").decode()[4:])
                assert m.assignment and m.assignment == synced[slot]
        if cg.state == ClassicState.EMPTY:
            assert not cg.members and cg.leader is None
        record = cast(FakeRuntime, self.groups.rt).record
        if cg.state in (ClassicState.STABLE, ClassicState.EMPTY) and record is not None:
            # What a reload restores is this generation, as it is here.
            assert record == group_record(cg, 0)


def _done(loop: FakeLoop, value: Any) -> asyncio.Future[Any]:
    fut = loop.create_future()
    fut.set_result(value)
    return fut


TestClassicModel = ClassicModel.TestCase
TestClassicModel.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)


def test_the_model_reaches_stable_groups_of_several_members() -> None:
    """The stateful test is not vacuous: a derandomized run of the same machine (its own,
    so neither test order nor a worker's random draw decides) checks Stable groups of two
    or more members."""
    STABLE_SEEN.clear()
    run_state_machine_as_test(
        ClassicModel,
        settings=settings(max_examples=30, stateful_step_count=40, deadline=None, derandomize=True),
    )
    assert STABLE_SEEN and max(STABLE_SEEN) >= 2, sorted(set(STABLE_SEEN))


def test_two_members_form_a_generation_and_a_third_rebalances_it() -> None:
    """The plain path, step by step: KIP-394's id, the initial delay, leader, sync."""
    model = ClassicModel()
    a, b, c = model.clients[:3]
    for client in (a, b):
        model._join(client)  # MEMBER_ID_REQUIRED
        assert client.member_id and client.join is None
        model._join(client)
    assert a.join is not None and not a.join.done()  # the initial delay
    model.tick(0.6)  # b joined during the delay: another delay, for more (InitialDelayedJoin)
    assert a.generation == b.generation == -1
    model.tick(0.6)
    assert a.generation == b.generation == 1 and a.assignment and b.assignment
    cg = model.groups.rt.groups[GROUP].classic
    assert cg.state == ClassicState.STABLE and cg.protocol_name == "roundrobin"
    model._join(c)
    model._join(c)
    assert cg.state == ClassicState.PREPARING_REBALANCE
    model.heartbeat(0)  # REBALANCE_IN_PROGRESS: a rejoins
    model.heartbeat(1)
    assert cg.state == ClassicState.STABLE and cg.generation == 2
    assert {x.generation for x in (a, b, c)} == {2}
    with pytest.raises(IllegalGeneration):
        model.groups._heartbeat(GROUP, 1, a.member_id, None)
    errors: list[LogbusError | None] = model.groups._leave(GROUP, [("nobody", None)])
    assert isinstance(errors[0], UnknownMemberId)


def test_a_group_at_its_maximum_size_refuses_new_members_not_a_static_restart() -> None:
    model = ClassicModel()
    rt = model.groups.rt
    rt.config = GroupConfig(
        classic_min_session_timeout_ms=1000,
        classic_initial_rebalance_delay_ms=500,
        classic_max_size=2,
    )
    a, b, c, static = model.clients
    model._join(a)  # pending (KIP-394) counts
    model._join(static)
    with pytest.raises(GroupMaxSizeReached):
        model._join(b)
    model._join(a)  # the pending member joining is no new member
    model.tick(0.6)  # the initial delay, once more for the member that came during it
    model.tick(0.6)
    assert rt.groups[GROUP].classic.state == ClassicState.STABLE
    model.static_restart()  # its new incarnation takes the old place
    assert static.generation == 1 and c.member_id == ""


def test_a_leader_that_never_syncs_is_removed_at_the_rebalance_timeout() -> None:
    """Kafka's pending-sync timeout: the follower is not held in CompletingRebalance."""
    model = ClassicModel()
    a, b = model.clients[:2]
    for client in (a, b, a, b):
        model._join(client)
    model.loop.advance(1.2)  # the initial delays: the generation forms, nobody syncs yet
    cg = model.groups.rt.groups[GROUP].classic
    assert cg.state == ClassicState.COMPLETING_REBALANCE and cg.generation == 1
    assert a.join is not None and a.join.done() and b.join is not None and b.join.done()
    leader = model.clients[0] if a.join.result().members else model.clients[1]
    follower = b if leader is a else a
    waiting = model.groups._sync(GROUP, 1, follower.join.result().member_id, None, None, None, {})
    assert isinstance(waiting, asyncio.Future)
    leader_id = leader.join.result().member_id
    removed_at = None
    for second in range(7):  # the leader heartbeats (alive) but never syncs
        model.loop.advance(1.0)
        try:
            model.groups._heartbeat(GROUP, 1, leader_id, None)
        except UnknownMemberId:
            removed_at = second
            break
    assert removed_at is not None and removed_at >= 4  # at the 5 s rebalance timeout
    # Removed though it heartbeated every second: for not syncing. The follower waiting in
    # SyncGroup is told to rejoin (a new generation without the leader).
    assert leader_id not in cg.members and cg.generation >= 1
    assert isinstance(waiting.exception(), RebalanceInProgress)
