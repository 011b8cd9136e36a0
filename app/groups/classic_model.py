"""The classic group protocol's state: a group's generation and members, the requests'
and answers' types, and the consumer protocol's bytes read for describe.

:class:`ClassicGroup` hangs on :class:`app.groups.model.Group` (``Group.classic``); the
state machine that changes it is :mod:`app.groups.classic` (its docstring states the
states, invariants and concurrency). Nothing here does I/O; the futures are completed on
the coordinator's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import import_module
from typing import Any

from kio.serial import entity_reader

from app.common.errors import LogbusError
from app.groups.records import ClassicGroupValue, ClassicMemberValue


class ClassicState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    protocol_type: str
    protocols: Sequence[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    # JoinGroup v4+ (KIP-394): a new dynamic member is handed an id and rejoins with it.
    require_known_member_id: bool = True


@dataclass(frozen=True, slots=True)
class JoinResult:
    generation: int
    protocol_type: str
    protocol_name: str
    leader: str
    member_id: str
    # The leader's answer only: (member id, instance id, metadata for protocol_name).
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    protocol_type: str
    protocol_name: str
    assignment: bytes


@dataclass(eq=False)
class ClassicMember:
    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    assignment: bytes = b""
    join: asyncio.Future[JoinResult] | None = None
    sync: asyncio.Future[SyncResult] | None = None
    deadline: float = 0.0
    timer: asyncio.TimerHandle | None = None

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: ClassicState = ClassicState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    # Insertion order is join order (the first member to join leads a new group).
    members: dict[str, ClassicMember] = field(default_factory=dict)
    # KIP-394: ids handed out with MEMBER_ID_REQUIRED, with their expiry timers.
    pending: dict[str, asyncio.TimerHandle | None] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)
    join_timer: asyncio.TimerHandle | None = None
    # Members of the current generation that have not sent their SyncGroup yet, and the
    # timer that removes them when the rebalance timeout passes (Kafka's pending sync).
    pending_sync: set[str] = field(default_factory=set)
    sync_timer: asyncio.TimerHandle | None = None
    # The initial delayed join of an empty group: its end, and members seen at its start.
    initial_until: float | None = None
    initial_members: int = 0

    @property
    def active(self) -> bool:
        """Has members (or members-to-be): not changeable into a consumer-protocol group."""
        return bool(self.members or self.pending)

    def close(self, exc: LogbusError) -> None:
        """This coordinator stops serving the group: cancel its timers and answer every
        waiting JoinGroup and SyncGroup with ``exc``."""
        for timer in (self.join_timer, self.sync_timer):
            if timer is not None:
                timer.cancel()
        self.join_timer = self.sync_timer = None
        for handle in self.pending.values():
            if handle is not None:
                handle.cancel()
        for member in self.members.values():
            if member.timer is not None:
                member.timer.cancel()
                member.timer = None
            fail_waiting(member, exc)


# -- the record of a group (app/groups/records.py: type 2, Kafka's GroupMetadata) ------------


# A member's attributes its record keeps under the same names (with them: its
# subscription, the metadata it sent for the generation's protocol).
_RECORD_FIELDS = (
    "member_id",
    "instance_id",
    "client_id",
    "client_host",
    "rebalance_timeout_ms",
    "session_timeout_ms",
    "assignment",
)


def group_record(cg: ClassicGroup, timestamp_ms: int) -> ClassicGroupValue:
    """What ``__consumer_offsets`` keeps of a Stable or Empty group: its generation and
    each member with its subscription to the generation's protocol and its assignment
    (Kafka's GroupMetadataValue; waits, timers and pending members are not kept)."""
    protocol = cg.protocol_name
    return ClassicGroupValue(
        protocol_type=cg.protocol_type or "",
        generation=cg.generation,
        protocol_name=protocol,
        leader=cg.leader,
        current_state_timestamp=timestamp_ms,
        members=tuple(
            ClassicMemberValue(
                **{name: getattr(m, name) for name in _RECORD_FIELDS},
                subscription=m.metadata(protocol) if protocol is not None else b"",
            )
            for m in cg.members.values()
        ),
    )


def group_from_record(group_id: str, value: ClassicGroupValue) -> ClassicGroup:
    """The group a record describes: Stable with its members (each supporting the
    generation's protocol only, as Kafka loads them), or Empty without. The members'
    sessions start when the group is installed (:meth:`ClassicGroups.restore`)."""
    protocol = value.protocol_name
    cg = ClassicGroup(
        group_id,
        state=ClassicState.STABLE if value.members else ClassicState.EMPTY,
        generation=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=protocol if value.members else None,
        leader=value.leader if value.members else None,
    )
    for m in value.members:
        cg.members[m.member_id] = ClassicMember(
            **{name: getattr(m, name) for name in _RECORD_FIELDS},
            protocol_type=value.protocol_type,
            protocols=[(protocol or "", m.subscription)],
        )
        if m.instance_id is not None:
            cg.static[m.instance_id] = m.member_id
    return cg


def fail_waiting(member: ClassicMember, exc: LogbusError) -> None:
    for fut in (member.join, member.sync):
        if fut is not None and not fut.done():
            fut.set_exception(exc)
    member.join = member.sync = None


def resolve_future(fut: asyncio.Future[Any] | None, value: Any) -> None:
    if fut is not None and not fut.done():
        fut.set_result(value)


# -- the consumer protocol's bytes, read for describe -----------------------------------------


def _consumer_protocol(kind: str, data: bytes) -> Any | None:
    """``data`` (int16 version, then the message) read with kio's definition of that
    version (a newer one with the newest known, as Kafka reads it); None when it is not
    the consumer protocol's (another protocol type, or empty)."""
    if len(data) < 2:
        return None
    version = min(int.from_bytes(data[:2], "big", signed=True), 3)
    if version < 0:
        return None
    try:
        module = import_module(f"kio.schema.consumer_protocol_{kind}.v{version}.data")
        cls = getattr(module, f"ConsumerProtocol{kind.capitalize()}")
        value, _ = entity_reader(cls)(memoryview(data), 2)
    except Exception:  # any client's bytes: unreadable ones are shown as nothing
        return None
    return value


def decode_subscription(data: bytes) -> list[str]:
    """The topics a consumer-protocol subscription names ([] when unreadable)."""
    value = _consumer_protocol("subscription", data)
    return [] if value is None else [str(t) for t in value.topics]


def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions a consumer-protocol assignment gives ([] when unreadable)."""
    value = _consumer_protocol("assignment", data)
    if value is None:
        return []
    return [(str(tp.topic), int(p)) for tp in value.assigned_partitions for p in tp.partitions]
