"""The coordinator runtime: which ``__consumer_offsets`` partitions this broker serves,
loading them, and the records written to and replayed from them.

Kafka's CoordinatorRuntime and its loader, for the group coordinator:

* **Loading.** A lone broker replays every partition at start (:meth:`load`, in a
  worker thread). In a cluster the broker loads a partition when it becomes its
  leader (:meth:`on_leadership`, the ReplicaManager's listener) and forgets that
  partition's groups when it stops leading it. A partition is ``loading`` then
  ``loaded``; a per-partition generation lets a load started under an older
  leadership notice and give up. Requests for a group are routed (:meth:`route`):
  COORDINATOR_LOAD_IN_PROGRESS while its partition loads, NOT_COORDINATOR naming the
  leader when another broker serves it.
* **Records replayed.** :func:`_replay` applies one record (key and value in
  :mod:`app.groups.records`, Kafka's layout) to the groups being rebuilt: offsets,
  members with their epochs and assignments, group metadata, a classic group's
  generation and members, tombstones. A record it cannot read is skipped: any client
  may produce to the topic.
* **Records written.** :meth:`persist` writes a group's metadata and its changed
  members as one batch; :meth:`persist_classic` a classic group's record;
  :meth:`append` is the one write path (also for offsets).
  Writes go through the placement's append on the loop before a change is
  answered; :meth:`replicated` then waits until every in-sync replica holds them
  (acks=all), so what a client was told survives a failover. Alone, there is
  nothing to wait for.

Ownership: this object holds the group cache (``groups``) that the membership
state machine (:mod:`app.groups.membership`), the offset store
(:mod:`app.groups.offsets`) and the admin operations (:mod:`app.groups.admin`)
read and change; it never decides a group's membership or offsets itself. When a
partition's groups are installed it calls ``on_loaded`` (the facade wires it to
restore the members' sessions, of either protocol, and forget offsets of topics
deleted meanwhile).

Concurrency: everything runs on the event loop, except the replay of a log, which
runs in a worker thread on a dict of its own and is installed on the loop. The replay
in the thread stops at the end the log had when it began; whatever the leader appended
since (the transaction coordinator's markers: they do not wait for the load) is
replayed on the loop right before the groups are installed, with no await between, so
the cache installed is the replay of the whole log (:meth:`_install_partition`).
Placement (:mod:`app.groups.placement`) hides one broker versus a cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.common.batch import (
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
    build_batch,
    decode_records,
    iter_headers,
)
from app.common.errors import (
    CorruptRecord,
    InvalidRequest,
    NotCoordinator,
    NotEnoughReplicas,
    NotLeaderOrFollower,
)
from app.common.group_errors import CoordinatorLoadInProgress, CoordinatorNotAvailable
from app.core.local_topology import LocalTopology
from app.groups.classic_model import group_from_record, group_record
from app.groups.hashing import partition_for
from app.groups.internal_topic import InternalTopicRuntime, read_chunks
from app.groups.model import (
    CoordinatorInfo,
    Group,
    GroupConfig,
    Member,
    cancel_timers,
    validate_group_id,
)
from app.groups.placement import OFFSETS_TOPIC, OffsetsPlacement, TopologyView
from app.groups.records import (
    ClassicGroupKey,
    ClassicGroupValue,
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
from app.groups.txn_replay import replay_txn_batch

if TYPE_CHECKING:
    from app.core.log.log import Log
    from app.core.log.manager import LogManager
    from app.core.log.producer_state import UnnumberedBatch

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ReplayedPartition:
    """What a worker thread replayed of one ``__consumer_offsets`` partition: its groups,
    as the log says up to ``end`` (exclusive), and the log, for the tail the leader
    appended after ``end`` (:meth:`CoordinatorRuntime._install_partition`)."""

    groups: dict[str, Group]
    log: Log
    end: int


class CoordinatorRuntime(InternalTopicRuntime[ReplayedPartition]):
    """The group cache, the offsets partitions it comes from, and the writes to them.

    Partition states, loading on leadership and routing: :mod:`app.groups.internal_topic`."""

    def __init__(
        self,
        manager: LogManager,
        config: GroupConfig,
        cluster: TopologyView | None,
        clock_ms: Callable[[], int],
        monotonic: Callable[[], float],
    ) -> None:
        # ``cluster``: the broker's topology (None: a lone broker's, over ``manager``).
        self.placement: OffsetsPlacement = OffsetsPlacement(
            cluster or LocalTopology(manager, config.node_id, config.url),
            manager,
            config.node_id,
            config.url,
            config.offsets_topic_replication_factor,
        )
        super().__init__(self.placement, config.offsets_topic_num_partitions)
        self.manager = manager
        self.config = config
        self.clock_ms = clock_ms
        self.monotonic = monotonic
        self.groups: dict[str, Group] = {}
        # Set by the owner: called on the loop with the groups of a partition just loaded.
        self.on_loaded: Callable[[Iterable[Group]], None] = lambda groups: None
        self.loaded = False
        # The last offset appended to each partition (answers wait until it is replicated).
        self._written: dict[int, int] = {}

    # -- loading ---------------------------------------------------------------------------

    def load(self) -> None:
        """Replay every ``__consumer_offsets`` partition from its start (blocking)."""
        groups: dict[str, Group] = {}
        count = self.placement.partition_count(OFFSETS_TOPIC)
        for partition in range(count):
            self._replay_log(groups, partition, self.placement.offsets_log(partition))
        self.groups = self._finish_load(groups)
        log.info("loaded %d groups from %s", len(self.groups), OFFSETS_TOPIC)

    def _replay_log(
        self,
        groups: dict[str, Group],
        partition: int,
        part_log: Log,
        start: int | None = None,
        end: int | None = None,
    ) -> None:
        """Replay one partition's log (from ``start`` to ``end``, default all of it) into
        ``groups`` (blocking: run in a worker thread, or on the loop for a short tail)."""
        for buf, offset in read_chunks(part_log, start, end):
            view = memoryview(buf)
            for pos, header in iter_headers(view):
                if header.last_offset < offset:
                    continue
                batch = view[pos : pos + header.size]
                if header.attributes & (TRANSACTIONAL_MASK | CONTROL_MASK):
                    # Offsets committed in a transaction count once its COMMIT marker is
                    # read (app/groups/txn_offsets.py).
                    replay_txn_batch(groups, header, batch, offset, partition)
                    continue
                for record in decode_records(batch, min_offset=offset):
                    if record.key is None:
                        continue
                    try:
                        _replay(groups, record.key, record.value)
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

    def _finish_load(self, groups: dict[str, Group]) -> dict[str, Group]:
        """Derived state of replayed groups (owners, static ids); the groups worth keeping.

        Members' resolved subscriptions and timers are not set here: the membership's
        ``restore`` does that on the loop once the groups are installed (the classic
        protocol's ``restore`` for a classic group's members)."""
        for group in groups.values():
            if group.members and group.classic is not None:
                # Consumer-protocol members are written only once the classic group is
                # empty, with its record's tombstone: a log saying otherwise was forged.
                group.classic = None
            for member in group.members.values():
                if member.instance_id is not None:
                    group.static[member.instance_id] = member.member_id
                for tp in member.assigned | member.revoking:
                    group.owners[tp] = member.member_id
        return {
            gid: g
            for gid, g in groups.items()
            if g.members
            or g.offsets
            or g.has_metadata_record
            or g.pending_txn_offsets
            or g.classic is not None
        }

    # -- cluster mode: leadership of offsets partitions --------------------------------------

    def _reader(self, partition: int) -> Callable[[], ReplayedPartition]:
        part_log = self.placement.offsets_log(partition)

        def replay() -> ReplayedPartition:
            groups: dict[str, Group] = {}
            end = part_log.log_end_offset
            self._replay_log(groups, partition, part_log, end=end)
            return ReplayedPartition(groups, part_log, end)

        return replay

    def _install_partition(self, partition: int, loaded: ReplayedPartition) -> None:
        """Install the groups replayed in the worker thread, after replaying on the loop
        what the leader appended to the log since that replay's end.

        While the partition loads, the coordinator refuses its own writes, but the
        transaction coordinator's COMMIT/ABORT markers are appended regardless (by
        this broker as leader, and reported to :meth:`TxnOffsetStore.completed`, which
        finds no group to complete yet): a marker landing after the thread's end would
        otherwise be lost, leaving a committed transaction's offsets pending for good
        (its records copied again by the next consumer) or an aborted one's applied by
        the producer's next commit. Markers are appended on the loop, so nothing lands
        between this catch-up and the install."""
        if loaded.log.log_end_offset > loaded.end:
            self._replay_log(loaded.groups, partition, loaded.log, start=loaded.end)
        groups = self._finish_load(loaded.groups)
        for gid, group in groups.items():
            old = self.groups.get(gid)
            if old is not None:
                cancel_timers(old)
            self.groups[gid] = group
        self.on_loaded(groups.values())
        log.info(
            "coordinating %d groups of %s-%d (leader now)", len(groups), OFFSETS_TOPIC, partition
        )

    def _load_in_progress(self, key: str, message: str) -> CoordinatorLoadInProgress:
        return CoordinatorLoadInProgress(message, key)

    def _not_coordinator(self, key: str, leader: int | None, url: str | None) -> NotCoordinator:
        return NotCoordinator(key, leader, url)

    def _not_available(self, key: str, message: str) -> CoordinatorNotAvailable:
        return CoordinatorNotAvailable(message, key)

    def _unload(self, partition: int) -> None:
        """Forget the groups of an offsets partition this broker no longer leads."""
        self._written.pop(partition, None)
        count = self.num_partitions()
        gone = [gid for gid in self.groups if partition_for(gid, count) == partition]
        for gid in gone:
            cancel_timers(self.groups.pop(gid))
        if gone:
            log.info(
                "stopped coordinating %d groups of %s-%d (not its leader any more)",
                len(gone),
                OFFSETS_TOPIC,
                partition,
            )

    def route(self, group_id: str) -> int:
        """The group's offsets partition, when this broker serves the group now; else
        NOT_COORDINATOR naming its coordinator (COORDINATOR_LOAD_IN_PROGRESS while loading)."""
        partition = partition_for(group_id, self.num_partitions())
        self._served(
            group_id,
            partition,
            f"loading the groups of {OFFSETS_TOPIC}-{partition} (this broker just became "
            "its leader); retry shortly",
        )
        return partition

    def check_loaded(self) -> None:
        if not self.loaded:
            raise CoordinatorLoadInProgress("the group coordinator is loading __consumer_offsets")

    # -- FindCoordinator -------------------------------------------------------------------

    async def find_coordinator(self, key: str, key_type: str = "group") -> CoordinatorInfo:
        """The broker coordinating ``key``: the leader of its ``__consumer_offsets``
        partition (created on first use in cluster mode; this broker when alone)."""
        if key_type != "group":
            raise InvalidRequest(
                f"key_type {key_type!r} is not supported: only 'group' (no transactions)"
            )
        validate_group_id(key)
        if self.placement.coordinates_every_key:
            return CoordinatorInfo(
                node_id=self.config.node_id,
                url=self.config.url,
                key=key,
                partition=partition_for(key, self.num_partitions()),
            )
        await self.ensure_topic()
        partition = partition_for(key, self.num_partitions())
        leader, url = self.placement.leader_of(partition)
        if leader is None or url is None:
            raise CoordinatorNotAvailable(
                f"{OFFSETS_TOPIC}-{partition}, which holds group {key!r}, has no leader yet "
                "(election under way); retry shortly",
                key,
            )
        return CoordinatorInfo(node_id=leader, url=url, key=key, partition=partition)

    # -- persistence -----------------------------------------------------------------------

    def append(
        self,
        group_id: str,
        records: Sequence[tuple[bytes, bytes | None]],
        *,
        batch: bytes | UnnumberedBatch | None = None,
    ) -> None:
        """Append ``records`` as one batch (or ``batch``, built by the caller: a
        transactional one, which the log numbers) to the group's partition."""
        partition = partition_for(group_id, self.num_partitions())
        try:
            data = build_batch(records) if batch is None else batch
            self._written[partition] = self.placement.append(partition, data)
        except NotLeaderOrFollower as exc:
            raise NotCoordinator(group_id, *self._leader_after(partition, exc)) from None
        except NotEnoughReplicas as exc:
            raise CoordinatorNotAvailable(
                f"group {group_id!r} cannot be written: {exc.message}", group_id
            ) from None

    async def replicated(self, group_id: str, partition: int) -> None:
        """Until every in-sync replica holds what this broker appended to ``partition`` so
        far (Kafka's coordinator writes with acks=all). Nothing to wait for when alone:
        the topology's replica says so (its high watermark is past the write)."""
        last = self._written.get(partition)
        if last is None:
            return
        wait = self.placement.replicated(partition, last, self.config.offsets_commit_timeout_ms)
        await self._acknowledged(group_id, f"group {group_id!r}", partition, wait)

    def _member_value(self, group: Group, m: Member) -> MemberValue:
        fields: dict[str, Any] = {
            record: _copied(getattr(m, attr)) for attr, record in MEMBER_RECORD_FIELDS
        }
        return MemberValue(
            **fields,
            assigned=sorted(m.assigned),
            revoking=sorted(m.revoking),
            target=sorted(group.target.get(m.member_id, ())),
        )

    def persist(self, group: Group) -> None:
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
        if group.classic is None and group.has_classic_record:
            # A consumer-protocol group took an empty classic group's name over.
            records.append((encode_key(ClassicGroupKey(gid)), None))
        for mid in sorted(group.dirty):
            member = group.members.get(mid)
            if member is not None:
                value = encode_value(self._member_value(group, member))
                records.append((encode_key(MemberKey(gid, mid)), value))
        self.append(gid, records)
        group.dirty.clear()
        group.tombstones.clear()
        group.has_metadata_record = True
        group.has_classic_record = group.classic is not None and group.has_classic_record

    def persist_classic(self, group: Group) -> None:
        """Write the classic group's record: its generation and members (Stable), or none
        (Empty: its time is the group's ``empty_since_ms``, the offsets-retention clock)."""
        assert group.classic is not None
        gid = group.group_id
        empty = not group.classic.members
        value = group_record(group.classic, group.empty_since_ms if empty else self.clock_ms())
        self.append(gid, [(encode_key(ClassicGroupKey(gid)), encode_value(value))])
        group.has_classic_record = True


# A member's attributes and the MemberValue fields that store them, in both directions
# (the assignments and the target convert between sets and sorted lists on their own).
MEMBER_RECORD_FIELDS = (
    ("member_id", "member_id"),
    ("instance_id", "instance_id"),
    ("member_epoch", "member_epoch"),
    ("previous_epoch", "previous_member_epoch"),
    ("subscribed_topics", "subscribed_topics"),
    ("subscribed_regex", "subscribed_topic_regex"),
    ("server_assignor", "server_assignor"),
    ("rebalance_timeout_ms", "rebalance_timeout_ms"),
    ("left_static", "left_static"),
)


def _copied(value: Any) -> Any:
    """Lists are copied (the subscription), so a member and its record never share one."""
    return list(value) if isinstance(value, list) else value


def _replay(groups: dict[str, Group], raw_key: bytes, raw_value: bytes | None) -> None:
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
    if isinstance(key, ClassicGroupKey):
        if isinstance(value, ClassicGroupValue):
            group.classic = group_from_record(key.group, value)
            if not value.members:
                group.empty_since_ms = max(group.empty_since_ms, value.current_state_timestamp)
        else:
            group.classic = None
        group.has_classic_record = group.classic is not None
        return
    if isinstance(key, MemberKey):
        group.members.pop(key.member_id, None)
        group.target.pop(key.member_id, None)
        if isinstance(value, MemberValue):
            fields = {
                attr: _copied(getattr(value, record)) for attr, record in MEMBER_RECORD_FIELDS
            }
            group.members[key.member_id] = Member(
                **fields, assigned=set(value.assigned), revoking=set(value.revoking)
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
