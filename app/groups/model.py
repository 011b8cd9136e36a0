"""The state the group coordinator keeps: groups, members, their epochs, and its API types.

A :class:`Group` and its :class:`Member` objects are the in-memory cache of what
``__consumer_offsets`` holds for the group (:mod:`app.groups.records` is the
on-disk form; :mod:`app.groups.runtime` converts between the two). Invariants the
coordinator's modules keep on a group:

* ``owners`` maps every partition some member holds (``assigned`` or ``revoking``)
  to that member: a partition has at most one owner, so two members never consume it.
* ``target`` is the assignor's answer for ``assignment_epoch``; it lags
  ``group_epoch`` only between a change and the next heartbeat (state Assigning).
* ``static`` maps each static member's instance id to its current member id.
* ``dirty`` and ``tombstones`` name the member records the next write must carry.

No locks: every change runs on the event loop without an await in between. Nothing
here does I/O.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from app.common.group_errors import CoordinatorNotAvailable, InvalidGroupId
from app.core.patterns import ClientPattern, compile_client_pattern
from app.groups.assignors import DEFAULT_ASSIGNOR
from app.groups.records import OffsetValue

if TYPE_CHECKING:
    from app.groups.classic_model import ClassicGroup

TopicPartition = tuple[str, int]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
DEFAULT_REBALANCE_TIMEOUT_MS = 300_000
MAX_GROUP_ID_LENGTH = 255


class GroupState(StrEnum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


class MemberState(StrEnum):
    STABLE = "Stable"
    # Must give up partitions before it may move to the target epoch.
    UNREVOKED_PARTITIONS = "UnrevokedPartitions"
    # At the target epoch, waiting for other members to release partitions.
    UNRELEASED_PARTITIONS = "UnreleasedPartitions"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    offsets_topic_num_partitions: int = 50
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    node_id: int = 0
    url: str = ""
    # Cluster mode: offsets.topic.replication.factor (capped by the live brokers) and
    # offsets.commit.timeout.ms (how long a write may wait for the in-sync replicas).
    offsets_topic_replication_factor: int = 3
    offsets_commit_timeout_ms: int = 5_000
    # The classic protocol (app/groups/classic.py): Kafka's group.min/max.session.timeout.ms
    # and group.initial.rebalance.delay.ms.
    classic_min_session_timeout_ms: int = 6_000
    classic_max_session_timeout_ms: int = 1_800_000
    classic_initial_rebalance_delay_ms: int = 3_000
    # Kafka's group.max.size, for classic groups (members and KIP-394 pending ones).
    classic_max_size: int = 1_000


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    member_id: str = ""
    member_epoch: int = JOIN_EPOCH
    instance_id: str | None = None
    subscribed_topics: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    # None: unchanged since the member last reported it (Kafka's meaning). Revoked
    # partitions are released only by a list that leaves them out: the answer that
    # revoked them may never have reached the member.
    owned_partitions: Iterable[TopicPartition] | None = None
    rebalance_timeout_ms: int | None = None
    # Whether the member's principal may DESCRIBE a topic (None: every topic, no
    # authorizer): a regex subscription matches only those, as Kafka filters metadata.
    topic_filter: Callable[[str], bool] | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: list[TopicPartition]


@dataclass(frozen=True, slots=True)
class CoordinatorInfo:
    node_id: int
    url: str
    key: str
    partition: int


@dataclass(eq=False)
class Member:
    member_id: str
    instance_id: str | None
    subscribed_topics: list[str]
    subscribed_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int
    member_epoch: int = 0
    previous_epoch: int = -1
    assigned: set[TopicPartition] = field(default_factory=set)
    revoking: set[TopicPartition] = field(default_factory=set)
    # Topics the subscription resolves to (names that exist, regex matches).
    resolved: frozenset[str] = frozenset()
    deadline: float = 0.0
    revoke_deadline: float | None = None
    left_static: bool = False
    timer: asyncio.TimerHandle | None = None
    # HeartbeatRequest.topic_filter of its latest heartbeat; in memory only (a member
    # loaded from the log has none until it heartbeats to this coordinator).
    topic_filter: Callable[[str], bool] | None = None


@dataclass(eq=False)
class Group:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = DEFAULT_ASSIGNOR
    members: dict[str, Member] = field(default_factory=dict)
    target: dict[str, set[TopicPartition]] = field(default_factory=dict)
    topics: dict[str, int] = field(default_factory=dict)
    owners: dict[TopicPartition, str] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)
    offsets: dict[TopicPartition, OffsetValue] = field(default_factory=dict)
    # Wall-clock ms when the group last became empty: offsets retention counts from here.
    empty_since_ms: int = 0
    has_metadata_record: bool = False
    # Members whose record must be rewritten, and removed ones to tombstone, at the next
    # CoordinatorRuntime.persist: one heartbeat writes what it changed, not the whole group.
    dirty: set[str] = field(default_factory=set)
    tombstones: set[str] = field(default_factory=set)
    # Offsets committed inside open transactions (TxnOffsetCommit), by producer id: they
    # become ``offsets`` when the transaction's COMMIT marker is written, and are dropped
    # on ABORT (app/groups/txn_offsets.py).
    pending_txn_offsets: dict[int, dict[TopicPartition, OffsetValue]] = field(default_factory=dict)
    # A classic-protocol group's membership (JoinGroup/SyncGroup on the Kafka door,
    # app/groups/classic.py; its record is written once per generation and when it
    # becomes empty); None for a consumer-protocol group. A group has classic members or
    # consumer-protocol ``members``, never both.
    classic: ClassicGroup | None = None
    # Whether the log holds a classic record of the group not tombstoned yet (the write
    # that takes the name over for the consumer protocol carries the tombstone).
    has_classic_record: bool = False

    def member_count(self) -> int:
        """Members of either protocol (classic ones and KIP-394 pending ones included)."""
        classic = self.classic
        return len(self.members) + (
            0 if classic is None else len(classic.members) + len(classic.pending)
        )


def validate_group_id(group_id: str) -> None:
    if not group_id or len(group_id) > MAX_GROUP_ID_LENGTH:
        raise InvalidGroupId(
            f"a group id needs 1 to {MAX_GROUP_ID_LENGTH} characters, got {len(group_id)}"
        )


def wall_ms() -> int:
    return int(time.time() * 1000)


def new_member_id() -> str:
    return uuid.uuid4().hex


def cancel_timers(group: Group) -> None:
    """Cancel the session timers of the group's members (the group leaves this broker)."""
    for member in group.members.values():
        if member.timer is not None:
            member.timer.cancel()
            member.timer = None
    if group.classic is not None:
        # Waiting JoinGroup/SyncGroup requests go and find the new coordinator.
        group.classic.close(
            CoordinatorNotAvailable(
                f"group {group.group_id!r} is no longer coordinated here", group.group_id
            )
        )


_PATTERNS: dict[str, ClientPattern] = {}


def compile_pattern(regex: str) -> ClientPattern:
    """A member's ``subscribed_topic_regex``, compiled once (up to 1,024 kept)."""
    pattern = _PATTERNS.get(regex)
    if pattern is None:
        # A client's pattern runs under RE2 (linear time), never Python's re.
        pattern = compile_client_pattern(regex, "subscribed_topic_regex")
        if len(_PATTERNS) < 1024:
            _PATTERNS[regex] = pattern
    return pattern


def resolve_subscription(member: Member, topics: Callable[[], Sequence[str]]) -> frozenset[str]:
    """The topics ``member``'s subscription names: its listed names, and the names of
    ``topics()`` its regex matches (called only when it has one)."""
    names = set(member.subscribed_topics)
    if member.subscribed_regex is not None:
        pattern = compile_pattern(member.subscribed_regex)
        # Internal topics are never matched by a pattern (Kafka's exclude.internal.topics).
        allowed = member.topic_filter
        names.update(
            t
            for t in topics()
            if not t.startswith("__") and pattern.fullmatch(t) and (allowed is None or allowed(t))
        )
    return frozenset(names)
