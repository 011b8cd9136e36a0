"""The group coordinator: membership, incremental assignment and committed offsets.

The model is Kafka's consumer group protocol of KIP-848, over stateless HTTP:

* A member heartbeats with its epoch. Joining (epoch 0), leaving (-1), a
  static member's temporary leave (-2), a changed subscription, or a change in
  the subscribed topics' partition counts bumps the *group epoch*; the
  assignor then computes the *target assignment* for that epoch at once.
* Each member walks towards its target on its own heartbeats. Partitions it
  must give up are revoked first (its epoch stays); once a heartbeat shows
  they are gone it moves to the target epoch and receives the partitions
  nobody else still owns. A partition another member has not released yet is
  handed over on a later heartbeat. So two members never own one partition,
  and members not touched by a change keep consuming.
* A member silent for the session timeout, or holding partitions to revoke
  past its rebalance timeout, is removed by a per-member timer (one
  ``call_later`` handle, re-armed lazily, not a task per member).
* A heartbeat's ``owned_partitions`` is what the member holds now; without it
  nothing changed since its last report (Kafka's meaning), so a revocation
  counts as done only once a list leaves the partitions out.
* Deleting a topic deletes its committed offsets (tombstones), in every group
  of every coordinator: :meth:`GroupCoordinator.topic_deleted`.
* A static member's temporary leave and a group's empty-since time are written
  with the member and the group (:mod:`app.groups.records`), so a restart
  keeps both.

Everything runs on the event loop of the API: each public method reads and
changes the state without awaiting in between, so no lock is needed. Appends
to ``__consumer_offsets`` go through :meth:`Log.append` before a change is
answered; the in-memory cache is rebuilt from that topic on start.

In cluster mode (a :class:`~app.core.replication.manager.ReplicaManager` handed
in) this broker coordinates the groups of the ``__consumer_offsets`` partitions
it leads, as Kafka's coordinator does: it loads a partition (in a worker
thread) when it becomes its leader, answering COORDINATOR_LOAD_IN_PROGRESS for
its groups meanwhile, and forgets the partition's groups when it stops leading
it; other groups answer NOT_COORDINATOR naming their coordinator. A change is
applied in memory and appended on the event loop as before; the answer then
waits until every in-sync replica holds the records (and every earlier record
of the partition), so whatever a client was told survives a failover.
Placement (:mod:`app.groups.placement`) hides the difference: a lone broker
leads every partition and its appends need no replication.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from app.common.batch import build_batch, decode_records, iter_headers
from app.common.errors import (
    CoordinatorLoadInProgress,
    CoordinatorNotAvailable,
    CorruptRecord,
    FencedMemberEpoch,
    GroupIdNotFound,
    InvalidGroupId,
    InvalidRequest,
    InvalidTopic,
    LogbusError,
    NonEmptyGroup,
    NotCoordinator,
    NotEnoughReplicas,
    NotLeaderOrFollower,
    RequestTimedOut,
    StaleMemberEpoch,
    TopicAlreadyExists,
    UnknownMemberId,
    UnknownTopicOrPartition,
    UnreleasedInstanceId,
)
from app.core.local_topology import LocalTopology
from app.core.patterns import ClientPattern, compile_client_pattern
from app.groups.assignors import DEFAULT_ASSIGNOR, MemberSpec, get_assignor
from app.groups.hashing import partition_for
from app.groups.placement import INTERNAL_TOPICS, OffsetsPlacement, TopologyView
from app.groups.placement import OFFSETS_TOPIC as OFFSETS_TOPIC
from app.groups.records import (
    GroupKey,
    GroupValue,
    MemberKey,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

if TYPE_CHECKING:
    from app.core.log.log import Log
    from app.core.log.manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
DEFAULT_REBALANCE_TIMEOUT_MS = 300_000
# Kafka's offset.metadata.max.bytes
OFFSET_METADATA_MAX_BYTES = 4096
MAX_GROUP_ID_LENGTH = 255
_READ_CHUNK = 1 << 20


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


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: list[TopicPartition]


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int  # -1 when nothing is committed
    leader_epoch: int
    metadata: str
    commit_timestamp: int


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
    # Members whose record must be rewritten, and removed ones to tombstone, at the
    # next _persist: one heartbeat writes what it changed, not the whole group.
    dirty: set[str] = field(default_factory=set)
    tombstones: set[str] = field(default_factory=set)


def group_by_topic(tps: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    """``[{"topic", "partitions": [...]}]``, topics and partitions sorted."""
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by_topic.setdefault(t, []).append(p)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


def validate_group_id(group_id: str) -> None:
    if not group_id or len(group_id) > MAX_GROUP_ID_LENGTH:
        raise InvalidGroupId(
            f"a group id needs 1 to {MAX_GROUP_ID_LENGTH} characters, got {len(group_id)}"
        )


def check_committable(topic: str) -> None:
    """Offsets of internal topics are the broker's business only.

    INVALID_TOPIC_EXCEPTION, not TOPIC_AUTHORIZATION_FAILED: Logbus has no ACLs, so no
    principal could ever be authorized and an authorization error would send a client
    looking for permissions that do not exist; the request is invalid for this topic
    whoever sends it. It is also what Kafka and Logbus answer a produce to an internal
    topic, so a client sees one error for "clients do not write here".
    """
    if topic in INTERNAL_TOPICS:
        raise InvalidTopic(
            topic, "it is internal to the broker; clients cannot commit offsets for it"
        )


def _wall_ms() -> int:
    return int(time.time() * 1000)


# Cluster mode: where an offsets partition led here stands.
_LOADING = "loading"
_LOADED = "loaded"


class GroupCoordinator:
    """Coordinates the groups of the ``__consumer_offsets`` partitions this broker leads:
    all of them for a lone broker; in a cluster (``cluster``: the broker's ReplicaManager)
    the ones whose leadership it holds, loaded as it gains them."""

    def __init__(
        self,
        manager: LogManager,
        config: GroupConfig = GroupConfig(),
        *,
        cluster: TopologyView | None = None,
        clock_ms: Callable[[], int] = _wall_ms,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.manager = manager
        self.config = config
        self.cluster = cluster
        # ``cluster``: the broker's topology (None: a lone broker's, over ``manager``).
        self.placement = OffsetsPlacement(
            cluster or LocalTopology(manager, config.node_id, config.url),
            manager,
            config.node_id,
            config.url,
            config.offsets_topic_replication_factor,
        )
        # Cluster mode: the offsets partitions led here (loading or loaded), a counter per
        # partition that a load started under an older leadership finds changed, the
        # loads under way, and the last offset appended to each partition (answers wait
        # until it is replicated).
        self._partitions: dict[int, str] = {}
        self._generation: dict[int, int] = {}
        self._load_tasks: dict[int, asyncio.Task[None]] = {}
        self._written: dict[int, int] = {}
        self._known_count: int | None = None
        self._running = False
        self._clock_ms = clock_ms
        self._monotonic = monotonic
        self._groups: dict[str, Group] = {}
        self._loaded = False
        self._topic_ready = False
        self._topic_lock: asyncio.Lock | None = None
        self._expire_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watchers: dict[tuple[str, str], Callable[[], None]] = {}
        # Cluster mode: topics seen deleted since start, with the wall-clock ms of the
        # last deletion. Groups of an offsets partition loading at the time (or whose
        # leader could not write the tombstones) forget those offsets once loaded here.
        self._deleted_topics: dict[str, int] = {}

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Rebuild the cache from ``__consumer_offsets`` (if it exists) and arm the timers.

        In cluster mode: listen to leadership changes and load the offsets partitions this
        broker leads already (the rest load as leadership arrives)."""
        self._loop = asyncio.get_running_loop()
        self._running = True
        if self.placement.clustered:
            self.placement.add_leadership_listener(self._on_leadership)
            self.placement.add_topic_listener(self.topic_deleted)
            count = self._offsets_partitions()
            for partition in range(count or 0):
                if self.placement.leads(partition):
                    self._on_leadership(OFFSETS_TOPIC, partition, True)
        else:
            if OFFSETS_TOPIC in self.manager.topics():
                await asyncio.to_thread(self.load)
                self._topic_ready = True
                # Offsets of topics missing now are kept: a topic the log manager could
                # not open at start is missing too, and its offsets must survive that.
            now = self._monotonic()
            for group in self._groups.values():
                for member in group.members.values():
                    # Restored members get a fresh session: the broker was down, not them.
                    member.deadline = now + self.config.session_timeout_ms / 1000
                    self._arm(group, member)
        self._loaded = True
        self._expire_task = asyncio.create_task(self._expire_loop(), name="offsets-expiration")

    async def stop(self) -> None:
        self._loaded = False
        self._running = False
        tasks = [t for t in (self._expire_task, *self._load_tasks.values()) if t is not None]
        self._expire_task = None
        self._load_tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for group in self._groups.values():
            for member in group.members.values():
                if member.timer is not None:
                    member.timer.cancel()
                    member.timer = None

    def load(self) -> None:
        """Replay every ``__consumer_offsets`` partition from its start (blocking)."""
        groups: dict[str, Group] = {}
        count = self.placement.partition_count(OFFSETS_TOPIC)
        for partition in range(count):
            self._replay_log(groups, partition, self.placement.offsets_log(partition))
        self._groups = self._finish_load(groups)
        log.info("loaded %d groups from %s", len(self._groups), OFFSETS_TOPIC)

    def _replay_log(self, groups: dict[str, Group], partition: int, part_log: Log) -> None:
        """Replay one partition's log into ``groups`` (blocking: run in a worker thread)."""
        offset = part_log.log_start_offset
        end = part_log.log_end_offset
        while offset < end:
            buf = part_log.read(offset, _READ_CHUNK, max_offset=end).read_bytes()
            next_offset = offset
            for _, header in iter_headers(buf):
                next_offset = header.next_offset
            if next_offset <= offset:
                break
            for record in decode_records(buf, min_offset=offset):
                if record.key is None:
                    continue
                try:
                    self._replay(groups, record.key, record.value)
                except CorruptRecord as exc:
                    # Nothing stops a client from producing to the topic; a record we
                    # cannot read must not keep the broker from starting.
                    log.warning(
                        "skipped %s-%d offset %d: %s",
                        OFFSETS_TOPIC,
                        partition,
                        record.offset,
                        exc,
                    )
            offset = next_offset

    def _finish_load(self, groups: dict[str, Group]) -> dict[str, Group]:
        """Derived state of replayed groups; the groups worth keeping."""
        for group in groups.values():
            for member in group.members.values():
                if member.instance_id is not None:
                    group.static[member.instance_id] = member.member_id
                for tp in member.assigned | member.revoking:
                    group.owners[tp] = member.member_id
                member.resolved = self._resolve(member, None)
        return {
            gid: g for gid, g in groups.items() if g.members or g.offsets or g.has_metadata_record
        }

    def _replay(self, groups: dict[str, Group], raw_key: bytes, raw_value: bytes | None) -> None:
        key = decode_key(raw_key)
        if key is None:
            return
        value = decode_value(key, raw_value)
        group = groups.get(key.group)
        if group is None:
            group = groups[key.group] = Group(key.group)
        if isinstance(key, OffsetKey):
            tp = (key.topic, key.partition)
            if isinstance(value, OffsetValue):
                group.offsets[tp] = value
                group.empty_since_ms = max(group.empty_since_ms, value.commit_timestamp)
            else:
                group.offsets.pop(tp, None)
            return
        if isinstance(key, MemberKey):
            group.members.pop(key.member_id, None)
            group.target.pop(key.member_id, None)
            if isinstance(value, MemberValue):
                group.members[key.member_id] = Member(
                    member_id=value.member_id,
                    instance_id=value.instance_id,
                    subscribed_topics=list(value.subscribed_topics),
                    subscribed_regex=value.subscribed_topic_regex,
                    server_assignor=value.server_assignor,
                    rebalance_timeout_ms=value.rebalance_timeout_ms,
                    member_epoch=value.member_epoch,
                    previous_epoch=value.previous_member_epoch,
                    assigned=set(value.assigned),
                    revoking=set(value.revoking),
                    left_static=value.left_static,
                )
                group.target[key.member_id] = set(value.target)
            return
        if not isinstance(value, GroupValue):
            # The group was deleted: only later records (offsets, a new incarnation) count.
            groups[key.group] = Group(key.group, offsets=group.offsets)
            return
        group.has_metadata_record = True
        # max: a group written by an older version has only its commits' times.
        group.empty_since_ms = max(group.empty_since_ms, value.empty_since_ms)
        group.group_epoch = value.group_epoch
        group.assignment_epoch = value.assignment_epoch
        group.assignor = value.assignor
        group.topics = dict(value.topics)

    # -- cluster mode: leadership of offsets partitions --------------------------------------

    def _on_leadership(self, topic: str, partition: int, leads: bool) -> None:
        """ReplicaManager's listener (on the loop): load a partition this broker now leads,
        forget the groups of one it no longer leads."""
        if topic != OFFSETS_TOPIC or not self._running or self._loop is None:
            return
        if leads and partition in self._partitions:
            return  # already loading or loaded under this leadership
        self._generation[partition] = generation = self._generation.get(partition, 0) + 1
        task = self._load_tasks.pop(partition, None)
        if task is not None:
            task.cancel()
        if leads:
            self._partitions[partition] = _LOADING
            self._load_tasks[partition] = self._loop.create_task(
                self._load_partition(partition, generation),
                name=f"load-{OFFSETS_TOPIC}-{partition}",
            )
        else:
            self._partitions.pop(partition, None)
            self._unload(partition)

    def _current(self, partition: int, generation: int) -> bool:
        return (
            self._running
            and self._generation.get(partition) == generation
            and self._partitions.get(partition) == _LOADING
        )

    async def _load_partition(self, partition: int, generation: int) -> None:
        delay = 0.1
        while True:
            try:
                part_log = self.placement.offsets_log(partition)
                groups: dict[str, Group] = {}
                await asyncio.to_thread(self._replay_log, groups, partition, part_log)
                break
            except NotLeaderOrFollower:
                return  # leadership went; its listener call unloads
            except Exception:
                log.exception("loading %s-%d failed; retrying", OFFSETS_TOPIC, partition)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            if not self._current(partition, generation):
                return
        if not self._current(partition, generation):
            return  # lost (and maybe regained) leadership meanwhile: a newer load runs
        self._load_tasks.pop(partition, None)
        loaded = self._finish_load(groups)
        now = self._monotonic()
        for gid, group in loaded.items():
            old = self._groups.get(gid)
            if old is not None:
                self._cancel_timers(old)
            self._groups[gid] = group
            for member in group.members.values():
                # Restored members get a fresh session: they were not the ones away.
                member.deadline = now + self.config.session_timeout_ms / 1000
                self._arm(group, member)
        self._partitions[partition] = _LOADED
        # Deletions seen while this partition was loading (or led elsewhere): only names
        # seen deleted, never merely unknown ones (a topic created a moment ago may not
        # have reached this broker's metadata yet). A name created again since keeps the
        # offsets committed after the deletion (those are the new topic's).
        existing = set(self.placement.topics())
        self._forget_topics(
            loaded.values(),
            {t: (at if t in existing else None) for t, at in self._deleted_topics.items()},
        )
        log.info(
            "coordinating %d groups of %s-%d (leader now)", len(loaded), OFFSETS_TOPIC, partition
        )

    def _unload(self, partition: int) -> None:
        """Forget the groups of an offsets partition this broker no longer leads."""
        self._written.pop(partition, None)
        count = self._num_partitions()
        gone = [gid for gid in self._groups if partition_for(gid, count) == partition]
        for gid in gone:
            self._cancel_timers(self._groups.pop(gid))
        if gone:
            log.info(
                "stopped coordinating %d groups of %s-%d (not its leader any more)",
                len(gone),
                OFFSETS_TOPIC,
                partition,
            )

    @staticmethod
    def _cancel_timers(group: Group) -> None:
        for member in group.members.values():
            if member.timer is not None:
                member.timer.cancel()
                member.timer = None

    def _route(self, group_id: str) -> int:
        """The group's offsets partition, when this broker serves the group now; else
        NOT_COORDINATOR naming its coordinator (COORDINATOR_LOAD_IN_PROGRESS while loading)."""
        partition = partition_for(group_id, self._num_partitions())
        if not self.placement.clustered:
            return partition
        status = self._partitions.get(partition)
        if status == _LOADED:
            return partition
        if status == _LOADING:
            raise CoordinatorLoadInProgress(
                f"loading the groups of {OFFSETS_TOPIC}-{partition} (this broker just became "
                "its leader); retry shortly",
                group_id,
            )
        leader, url = self.placement.leader_of(partition)
        if leader == self.config.node_id:
            raise CoordinatorLoadInProgress(
                f"this broker is taking over {OFFSETS_TOPIC}-{partition}; retry shortly",
                group_id,
            )
        raise NotCoordinator(group_id, leader, url)

    def _check_loaded(self) -> None:
        if not self._loaded:
            raise CoordinatorLoadInProgress("the group coordinator is loading __consumer_offsets")

    async def _ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use, as Kafka does."""
        if self._topic_ready:
            return
        if self.placement.clustered and self._offsets_partitions() is not None:
            self._topic_ready = True  # another broker created it
            return
        if self._topic_lock is None:
            self._topic_lock = asyncio.Lock()
        async with self._topic_lock:
            if self._topic_ready:
                return
            with contextlib.suppress(TopicAlreadyExists):
                await self.placement.create_offsets_topic(self.config.offsets_topic_num_partitions)
            self._topic_ready = True
            loads = list(self._load_tasks.values())
            if loads:
                # The new partitions this broker leads load in an instant (they are empty):
                # the request that created the topic need not answer LOAD_IN_PROGRESS.
                await asyncio.wait(loads, timeout=5)

    def _offsets_partitions(self) -> int | None:
        count = self.placement.offsets_partitions()
        if count is not None:
            self._known_count = count
        return count

    def _num_partitions(self) -> int:
        # The topic, once it exists, is the authority: the setting may have changed since.
        if self._topic_ready or self.placement.clustered:
            count = self._offsets_partitions()
            if count is not None:
                return count
        if self._known_count is not None:
            return self._known_count  # the topic went away (deleted): as it was
        return self.config.offsets_topic_num_partitions

    # -- FindCoordinator -------------------------------------------------------------------

    async def find_coordinator(self, key: str, key_type: str = "group") -> CoordinatorInfo:
        """The broker coordinating ``key``: the leader of its ``__consumer_offsets``
        partition (created on first use in cluster mode; this broker when alone)."""
        if key_type != "group":
            raise InvalidRequest(
                f"key_type {key_type!r} is not supported: only 'group' (no transactions)"
            )
        validate_group_id(key)
        if not self.placement.clustered:
            return CoordinatorInfo(
                node_id=self.config.node_id,
                url=self.config.url,
                key=key,
                partition=partition_for(key, self._num_partitions()),
            )
        await self._ensure_topic()
        partition = partition_for(key, self._num_partitions())
        leader, url = self.placement.leader_of(partition)
        if leader is None or url is None:
            raise CoordinatorNotAvailable(
                f"{OFFSETS_TOPIC}-{partition}, which holds group {key!r}, has no leader yet "
                "(election under way); retry shortly",
                key,
            )
        return CoordinatorInfo(node_id=leader, url=url, key=key, partition=partition)

    # -- persistence -----------------------------------------------------------------------

    def _append(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        partition = partition_for(group_id, self._num_partitions())
        try:
            self._written[partition] = self.placement.append(partition, build_batch(records))
        except NotLeaderOrFollower as exc:
            raise self._not_coordinator(group_id, partition, exc) from None
        except NotEnoughReplicas as exc:
            raise CoordinatorNotAvailable(
                f"group {group_id!r} cannot be written: {exc.message}", group_id
            ) from None

    async def _replicated(self, group_id: str, partition: int) -> None:
        """Until every in-sync replica holds what this broker appended to ``partition`` so
        far (Kafka's coordinator writes with acks=all). Nothing to wait for when alone."""
        if not self.placement.clustered:
            return
        last = self._written.get(partition)
        if last is None:
            return
        try:
            await self.placement.replicated(partition, last, self.config.offsets_commit_timeout_ms)
        except NotLeaderOrFollower as exc:
            raise self._not_coordinator(group_id, partition, exc) from None
        except (NotEnoughReplicas, RequestTimedOut) as exc:
            # Kafka answers COORDINATOR_NOT_AVAILABLE too: the client finds the coordinator
            # again and retries. The write is on the leader and may still be replicated.
            raise CoordinatorNotAvailable(
                f"group {group_id!r}: the write to {OFFSETS_TOPIC}-{partition} was not "
                f"acknowledged by every in-sync replica: {exc.message}",
                group_id,
            ) from None

    def _not_coordinator(
        self, group_id: str, partition: int, exc: NotLeaderOrFollower
    ) -> NotCoordinator:
        leader, url = exc.leader, exc.leader_url
        if leader is None:
            leader, url = self.placement.leader_of(partition)
        if leader == self.config.node_id:
            leader, url = None, None
        return NotCoordinator(group_id, leader, url)

    def _member_value(self, group: Group, m: Member) -> MemberValue:
        return MemberValue(
            member_id=m.member_id,
            instance_id=m.instance_id,
            member_epoch=m.member_epoch,
            previous_member_epoch=m.previous_epoch,
            subscribed_topics=list(m.subscribed_topics),
            subscribed_topic_regex=m.subscribed_regex,
            server_assignor=m.server_assignor,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            assigned=sorted(m.assigned),
            revoking=sorted(m.revoking),
            target=sorted(group.target.get(m.member_id, ())),
            left_static=m.left_static,
        )

    def _persist(self, group: Group) -> None:
        """Write the group's epochs and every member changed since the last write, as one
        batch (so a restart never sees half a change)."""
        gid = group.group_id
        meta = GroupValue(
            assignor=group.assignor,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            topics=dict(group.topics),
            empty_since_ms=group.empty_since_ms,
        )
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(GroupKey(gid)), encode_value(meta))
        ]
        for mid in sorted(group.tombstones - group.members.keys()):
            records.append((encode_key(MemberKey(gid, mid)), None))
        for mid in sorted(group.dirty):
            member = group.members.get(mid)
            if member is not None:
                value = encode_value(self._member_value(group, member))
                records.append((encode_key(MemberKey(gid, mid)), value))
        self._append(gid, records)
        group.dirty.clear()
        group.tombstones.clear()
        group.has_metadata_record = True

    # -- membership ------------------------------------------------------------------------

    async def heartbeat(self, group_id: str, req: HeartbeatRequest) -> HeartbeatResponse:
        self._check_loaded()
        validate_group_id(group_id)
        await self._ensure_topic()
        partition = self._route(group_id)
        # No await in here: the state changes are atomic on the loop.
        answer = self._heartbeat(group_id, req)
        # Answered once the partition's writes so far are replicated (even when this
        # heartbeat wrote nothing, it may have read what another one wrote).
        await self._replicated(group_id, partition)
        return answer

    def _heartbeat(self, group_id: str, req: HeartbeatRequest) -> HeartbeatResponse:
        if req.member_epoch == JOIN_EPOCH:
            return self._join(group_id, req)
        group = self._groups.get(group_id)
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
        member.deadline = self._monotonic() + self.config.session_timeout_ms / 1000
        changed = self._update_member(group, member, req)
        return self._settle(group, member, owned, changed)

    def _join(self, group_id: str, req: HeartbeatRequest) -> HeartbeatResponse:
        if req.subscribed_topics is None and req.subscribed_topic_regex is None:
            raise InvalidRequest("joining needs subscribed_topics or subscribed_topic_regex")
        if req.server_assignor is not None:
            get_assignor(req.server_assignor)
        if req.subscribed_topic_regex is not None:
            _compile(req.subscribed_topic_regex)
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = Group(group_id)
        now = self._monotonic()
        member: Member | None = None
        joined = False
        if req.instance_id is not None:
            old_id = group.static.get(req.instance_id)
            old = group.members.get(old_id) if old_id is not None else None
            if old is not None:
                if not old.left_static and old.member_id != req.member_id:
                    raise UnreleasedInstanceId(group_id, req.instance_id)
                member = self._replace_static(group, old, req.member_id or _new_member_id())
        if member is None:
            existing = group.members.get(req.member_id) if req.member_id else None
            if existing is not None:
                # A known member rejoining from scratch (it lost its state): start over.
                self._remove(group, existing, "rejoined with epoch 0")
            member = Member(
                member_id=req.member_id or _new_member_id(),
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
        member.deadline = now + self.config.session_timeout_ms / 1000
        if not self._update_member(group, member, req) and joined:
            group.group_epoch += 1
        self._arm(group, member)
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
        if req.subscribed_topics is not None or req.subscribed_topic_regex is not None:
            topics = list(req.subscribed_topics or [])
            regex = req.subscribed_topic_regex
            if regex is not None:
                _compile(regex)
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

    def _resolve(self, member: Member, all_topics: Sequence[str] | None) -> frozenset[str]:
        names = set(member.subscribed_topics)
        if member.subscribed_regex is not None:
            pattern = _compile(member.subscribed_regex)
            topics = self.placement.topics() if all_topics is None else all_topics
            # Internal topics are never matched by a pattern (Kafka's exclude.internal.topics).
            names.update(t for t in topics if not t.startswith("__") and pattern.fullmatch(t))
        return frozenset(names)

    def _refresh_metadata(self, group: Group) -> bool:
        """Re-resolve subscriptions and partition counts; True when anything moved."""
        changed = False
        needs_regex = any(m.subscribed_regex is not None for m in group.members.values())
        all_topics = self.placement.topics() if needs_regex else None
        union: set[str] = set()
        for member in group.members.values():
            resolved = self._resolve(member, all_topics)
            if resolved != member.resolved:
                member.resolved = resolved
                changed = True
            union |= resolved
        topics: dict[str, int] = {}
        for t in union:
            with contextlib.suppress(UnknownTopicOrPartition):
                topics[t] = self.placement.partition_count(t)
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
            self._persist(group)
            self._notify(group, skip=member.member_id)
        return HeartbeatResponse(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
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
            member.revoke_deadline = self._monotonic() + member.rebalance_timeout_ms / 1000
            self._arm(group, member)
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
            member.deadline = self._monotonic() + self.config.session_timeout_ms / 1000
            self._arm(group, member)
            group.dirty.add(member.member_id)
            self._persist(group)
        else:
            self._remove(group, member, "left the group")
        return HeartbeatResponse(
            member_id=member.member_id,
            member_epoch=epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=[],
        )

    def _remove(self, group: Group, member: Member, reason: str) -> None:
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
            group.empty_since_ms = self._clock_ms()
        self._refresh_metadata(group)
        group.group_epoch += 1
        self._compute_target(group)
        self._persist(group)
        self._notify(group)

    def _arm(self, group: Group, member: Member) -> None:
        loop = self._loop or asyncio.get_running_loop()
        delay = max(0.0, self._due(member) - self._monotonic())
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
        group = self._groups.get(group_id)
        if group is None or group.members.get(member.member_id) is not member:
            return
        now = self._monotonic()
        try:
            if now >= member.deadline:
                self._remove(group, member, "timed out (session)")
            elif member.revoke_deadline is not None and now >= member.revoke_deadline:
                self._remove(group, member, "did not revoke within its rebalance timeout")
            else:
                self._arm(group, member)
        except LogbusError as exc:
            # Not written (leadership just moved, or too few in-sync replicas): the member
            # is gone here; its record goes with the group's next write.
            log.warning("group %s: removing member %s not written: %s", group_id, member_id, exc)

    def expire_sessions(self) -> int:
        """Remove every member past a deadline now (the timers do this on their own)."""
        now = self._monotonic()
        removed = 0
        for group in list(self._groups.values()):
            for member in list(group.members.values()):
                if now >= self._due(member):
                    self._remove(group, member, "timed out")
                    removed += 1
        return removed

    # -- offsets ---------------------------------------------------------------------------

    async def commit_offsets(
        self, group_id: str, member_id: str, member_epoch: int, offsets: Sequence[OffsetCommit]
    ) -> list[CommittedOffset]:
        self._check_loaded()
        validate_group_id(group_id)
        await self._ensure_topic()
        partition = self._route(group_id)
        group = self._groups.get(group_id)
        if member_epoch < 0:
            # Simple consumers and admin tools commit without membership, only while
            # no member could be consuming the same partitions.
            if group is not None and group.members:
                raise UnknownMemberId(group_id, member_id)
        else:
            member = group.members.get(member_id) if group is not None else None
            if member is None or group is None or member.left_static:
                # A static member that left (-2) commits no more under that id: its
                # instance comes back under a new one.
                raise UnknownMemberId(group_id, member_id)
            if member_epoch > member.member_epoch:
                raise FencedMemberEpoch(group_id, member_id, member_epoch, member.member_epoch)
            if member_epoch < member.member_epoch:
                raise StaleMemberEpoch(group_id, member_id, member_epoch, member.member_epoch)
        done = self._write_offsets(group_id, offsets)
        # Acknowledged only once every in-sync replica has it: a commit answered survives
        # a coordinator failover (Kafka commits offsets with acks=all).
        await self._replicated(group_id, partition)
        return done

    def _write_offsets(
        self, group_id: str, offsets: Sequence[OffsetCommit]
    ) -> list[CommittedOffset]:
        if not offsets:
            return []
        for c in offsets:
            check_committable(c.topic)
            if c.partition < 0 or c.partition >= self.placement.partition_count(c.topic):
                raise UnknownTopicOrPartition(c.topic, c.partition)
            if c.offset < 0:
                raise InvalidRequest(f"offset {c.offset} for {c.topic}-{c.partition} is negative")
            if len(c.metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                raise InvalidRequest(
                    f"offset metadata for {c.topic}-{c.partition} is over "
                    f"{OFFSET_METADATA_MAX_BYTES} bytes (OFFSET_METADATA_TOO_LARGE)"
                )
        now = self._clock_ms()
        latest: dict[TopicPartition, OffsetValue] = {}
        for c in offsets:
            latest[(c.topic, c.partition)] = OffsetValue(c.offset, c.leader_epoch, c.metadata, now)
        self._append(
            group_id,
            [
                (encode_key(OffsetKey(group_id, t, p)), encode_value(v))
                for (t, p), v in latest.items()
            ],
        )
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = Group(group_id, empty_since_ms=now)
        group.offsets.update(latest)
        return [
            CommittedOffset(t, p, v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)
            for (t, p), v in latest.items()
        ]

    async def fetch_committed_offsets(
        self, group_id: str, topics: Sequence[str] | None = None
    ) -> list[CommittedOffset]:
        """:meth:`fetch_offsets`, answered once what it read is replicated (in cluster mode
        a commit still waiting for its in-sync replicas is not reported before it counts)."""
        self._check_loaded()
        validate_group_id(group_id)
        partition = self._route(group_id)
        found = self.fetch_offsets(group_id, topics)
        await self._replicated(group_id, partition)
        return found

    def fetch_offsets(
        self, group_id: str, topics: Sequence[str] | None = None
    ) -> list[CommittedOffset]:
        """Committed offsets; for topics named, every partition (-1 where none is committed)."""
        self._check_loaded()
        validate_group_id(group_id)
        self._route(group_id)
        group = self._groups.get(group_id)
        committed = group.offsets if group is not None else {}
        if topics is None:
            wanted = sorted(committed)
        else:
            wanted = []
            for t in dict.fromkeys(topics):
                try:
                    count = self.placement.partition_count(t)
                except UnknownTopicOrPartition:
                    count = 0
                parts = set(range(count)) | {p for (ct, p) in committed if ct == t}
                wanted.extend((t, p) for p in sorted(parts))
        out = []
        for tp in wanted:
            v = committed.get(tp)
            if v is None:
                out.append(CommittedOffset(tp[0], tp[1], -1, -1, "", -1))
            else:
                out.append(
                    CommittedOffset(
                        tp[0], tp[1], v.offset, v.leader_epoch, v.metadata, v.commit_timestamp
                    )
                )
        return out

    # -- topic deletion --------------------------------------------------------------------

    def topic_deleted(self, topic: str) -> None:
        """Forget every committed offset of ``topic``, deleted: tombstones in
        ``__consumer_offsets`` and out of the cache, for every group coordinated here.

        Kafka deletes a topic's offsets with the topic; keeping them would start a
        re-created topic of the same name at the old positions (records below them never
        delivered). Called on the loop: in a cluster by the ReplicaManager's topic
        listener on every broker (each coordinator clears its own groups, whichever
        broker got the DELETE), on a lone broker by the DELETE itself. Members are not
        touched here: their next heartbeat finds the topic gone and the group rebalances.
        """
        if topic == OFFSETS_TOPIC:
            return
        self._deleted_topics[topic] = self._clock_ms()
        self._forget_topics(list(self._groups.values()), {topic: None})

    def _forget_topics(self, groups: Iterable[Group], topics: Mapping[str, int | None]) -> int:
        """Tombstone the offsets of deleted ``topics``: all of them (None), or those
        committed at or before the given wall-clock ms (the topic exists again)."""
        if not topics:
            return 0
        removed = 0
        for group in groups:
            gone = sorted(
                tp
                for tp, v in group.offsets.items()
                if tp[0] in topics and ((at := topics[tp[0]]) is None or v.commit_timestamp <= at)
            )
            if not gone:
                continue
            gid = group.group_id
            try:
                self._append(gid, [(encode_key(OffsetKey(gid, t, p)), None) for t, p in gone])
            except LogbusError as exc:
                # Not written (leadership just moved, too few in-sync replicas): the next
                # leader forgets them when it loads the group, having seen the deletion.
                log.warning("offsets of deleted topics not tombstoned in %s: %s", gid, exc)
            for tp in gone:
                del group.offsets[tp]
            removed += len(gone)
        if removed:
            log.info("forgot %d committed offsets of deleted topics %s", removed, sorted(topics))
        return removed

    async def _expire_loop(self) -> None:
        interval = self.config.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.expire_offsets()
            except Exception:  # a failed round must not end expiration for good
                log.exception("offsets expiration failed")

    def expire_offsets(self, now_ms: int | None = None) -> int:
        """Tombstone offsets of empty groups past ``offsets.retention.minutes``; drop
        groups left with nothing. Returns the number of offsets expired."""
        now = self._clock_ms() if now_ms is None else now_ms
        retention = self.config.offsets_retention_ms
        expired = 0
        for group in list(self._groups.values()):
            if group.members:
                continue
            gone = [
                tp
                for tp, v in group.offsets.items()
                if now - max(v.commit_timestamp, group.empty_since_ms) >= retention
            ]
            try:
                if gone:
                    self._append(
                        group.group_id,
                        [(encode_key(OffsetKey(group.group_id, t, p)), None) for t, p in gone],
                    )
                    for tp in gone:
                        del group.offsets[tp]
                    expired += len(gone)
                if not group.offsets and now - group.empty_since_ms >= retention:
                    self._drop(group)
            except (NotCoordinator, CoordinatorNotAvailable) as exc:
                # This group's partition cannot be written now; the others can.
                log.warning("offsets of group %s not expired: %s", group.group_id, exc)
        return expired

    def _drop(self, group: Group) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetKey(group.group_id, t, p)), None) for t, p in group.offsets
        ]
        records.append((encode_key(GroupKey(group.group_id)), None))
        self._append(group.group_id, records)
        self._groups.pop(group.group_id, None)

    # -- admin -----------------------------------------------------------------------------

    def state_of(self, group: Group) -> GroupState:
        if not group.members:
            return GroupState.EMPTY
        if group.assignment_epoch < group.group_epoch:
            return GroupState.ASSIGNING
        for m in group.members.values():
            if m.member_epoch != group.assignment_epoch or self.member_state(group, m) != (
                MemberState.STABLE
            ):
                return GroupState.RECONCILING
        return GroupState.STABLE

    def list_groups(self) -> list[dict[str, Any]]:
        """The groups this broker coordinates (in a cluster: of the offsets partitions it
        leads; COORDINATOR_LOAD_IN_PROGRESS while one of them is loading, as Kafka)."""
        self._check_loaded()
        loading = self.loading
        if loading:
            raise CoordinatorLoadInProgress(
                f"loading the groups of {OFFSETS_TOPIC} partitions {loading}; retry shortly"
            )
        return [
            {
                "group": g.group_id,
                "state": self.state_of(g).value,
                "protocol_type": "consumer",
                "members": len(g.members),
                "group_epoch": g.group_epoch,
            }
            for g in sorted(self._groups.values(), key=lambda g: g.group_id)
        ]

    def _get(self, group_id: str) -> Group:
        self._check_loaded()
        validate_group_id(group_id)
        self._route(group_id)
        group = self._groups.get(group_id)
        if group is None:
            raise GroupIdNotFound(group_id)
        return group

    def describe_group(self, group_id: str) -> dict[str, Any]:
        group = self._get(group_id)
        offsets = []
        for (t, p), v in sorted(group.offsets.items()):
            # As this broker's replica knows it (in a cluster a follower's may trail its
            # leader's by a fetch); null where this broker holds no replica.
            plog = self.placement.local_log(t, p)
            hw = None if plog is None else plog.high_watermark
            offsets.append(
                {
                    "topic": t,
                    "partition": p,
                    "offset": v.offset,
                    "leader_epoch": v.leader_epoch,
                    "metadata": v.metadata,
                    "commit_timestamp": v.commit_timestamp,
                    "high_watermark": hw,
                    "lag": None if hw is None else max(0, hw - v.offset),
                }
            )
        return {
            "group": group.group_id,
            "state": self.state_of(group).value,
            "protocol_type": "consumer",
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor": group.assignor,
            "coordinator": {
                "node_id": self.config.node_id,
                "url": self.config.url,
                "partition": partition_for(group.group_id, self._num_partitions()),
            },
            "members": [
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "member_epoch": m.member_epoch,
                    "state": self.member_state(group, m).value,
                    "subscribed_topics": m.subscribed_topics,
                    "subscribed_topic_regex": m.subscribed_regex,
                    "server_assignor": m.server_assignor,
                    "assignment": group_by_topic(m.assigned),
                    "pending_revocation": group_by_topic(m.revoking),
                    "target_assignment": group_by_topic(group.target.get(m.member_id, ())),
                }
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ],
            "offsets": offsets,
        }

    async def delete_group(self, group_id: str) -> None:
        group = self._get(group_id)
        await self._ensure_topic()
        # Checked after the await: a member may have joined (or leadership moved) meanwhile.
        partition = self._route(group_id)
        if self._groups.get(group_id) is not group:
            raise GroupIdNotFound(group_id)
        if group.members:
            raise NonEmptyGroup(group_id, len(group.members), "deleting it")
        self._drop(group)
        await self._replicated(group_id, partition)

    async def reset_offsets(
        self,
        group_id: str,
        topic: str,
        to: str,
        *,
        partitions: Sequence[int] | None = None,
        value: int | None = None,
    ) -> list[CommittedOffset]:
        """Set an empty group's offsets on ``topic`` to earliest, latest, the first offset
        at or after a timestamp (``value`` ms), or ``value`` clamped to the log's range."""
        self._check_loaded()
        validate_group_id(group_id)
        if to not in ("earliest", "latest", "timestamp", "offset"):
            raise InvalidRequest(f"to must be earliest, latest, timestamp or offset, not {to!r}")
        if to in ("timestamp", "offset") and value is None:
            raise InvalidRequest(f"resetting to {to} needs a value")
        check_committable(topic)
        count = self.placement.partition_count(topic)
        parts = sorted(set(range(count) if partitions is None else partitions))
        for p in parts:
            if not 0 <= p < count:
                raise UnknownTopicOrPartition(topic, p)
        await self._ensure_topic()
        partition = self._route(group_id)
        group = self._groups.get(group_id)
        if group is not None and group.members:
            raise NonEmptyGroup(group_id, len(group.members), "resetting offsets")
        commits = []
        for p in parts:
            plog = self.placement.local_log(topic, p)
            if plog is None:
                # Cluster mode: the offsets of a partition held elsewhere are its leader's.
                raise InvalidRequest(
                    f"{topic}-{p} has no replica on this broker (the group's coordinator), "
                    "so its offsets are not known here: look them up at its leader "
                    f"(GET /topics/{topic}/partitions/{p}/offsets) and commit them with "
                    "member_epoch -1"
                )
            if to == "earliest":
                offset = plog.log_start_offset
            elif to == "latest":
                offset = plog.high_watermark
            elif to == "timestamp":
                assert value is not None
                found = plog.offset_for_timestamp(value)
                offset = plog.high_watermark if found is None else found[0]
            else:
                assert value is not None
                offset = min(max(value, plog.log_start_offset), plog.high_watermark)
            commits.append(OffsetCommit(topic, p, offset))
        done = self._write_offsets(group_id, commits)
        await self._replicated(group_id, partition)
        return done

    # -- introspection for tests and the API ------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    @property
    def loaded(self) -> bool:
        return self._loaded

    @property
    def loading(self) -> list[int]:
        """Cluster mode: the offsets partitions this broker leads and is still loading."""
        return sorted(p for p, status in self._partitions.items() if status == _LOADING)

    @property
    def coordinated_partitions(self) -> list[int]:
        """The offsets partitions whose groups this broker serves (cluster mode)."""
        return sorted(p for p, status in self._partitions.items() if status == _LOADED)

    def groups(self) -> Mapping[str, Group]:
        return self._groups


_PATTERNS: dict[str, ClientPattern] = {}


def _compile(regex: str) -> ClientPattern:
    pattern = _PATTERNS.get(regex)
    if pattern is None:
        # A client's pattern runs under RE2 (linear time), never Python's re.
        pattern = compile_client_pattern(regex, "subscribed_topic_regex")
        if len(_PATTERNS) < 1024:
            _PATTERNS[regex] = pattern
    return pattern


def _new_member_id() -> str:
    return uuid.uuid4().hex
