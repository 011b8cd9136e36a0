"""The offset store: committed offsets of every group, in ``__consumer_offsets``.

What it owns (Kafka's OffsetMetadataManager):

* **Commit** (:meth:`OffsetStore.commit_offsets`): a member commits at its current
  epoch (a newer one is fenced, an older one stale); a simple consumer or an admin
  tool commits with epoch -1 only while the group has no members. Offsets are checked
  (partition exists, not negative, metadata at most 4,096 bytes, not an internal
  topic), written as ``OffsetKey``/``OffsetValue`` records, and answered once every
  in-sync replica holds them.
* **Fetch**: what is committed; for topics named, every partition (-1 where none).
  With ``require_stable`` (KIP-447) a partition whose offsets a transaction committed
  but has not ended yet answers UNSTABLE_OFFSET_COMMIT (retriable) instead: a
  transactional consumer that starts from the committed offsets must not start from
  the ones that transaction is about to replace.
* **Deletion with a topic** (:meth:`OffsetStore.topic_deleted`): tombstones for every
  group coordinated here, also for groups loaded later (``forget_deleted``).
* **Expiration**: offsets of empty groups past ``offsets.retention.ms``, counted from
  the commit or from when the group became empty, whichever is later; a group left
  with nothing is dropped. A task runs it every retention check interval.

The offsets live in each group's ``offsets`` (:class:`app.groups.model.Group`), the
runtime's cache; writes go through :meth:`CoordinatorRuntime.append`.
Concurrency: on the event loop, no await between a check and the change it guards.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from app.common.errors import (
    InvalidRequest,
    InvalidTopic,
    LogbusError,
    NotCoordinator,
    UnknownTopicOrPartition,
)
from app.common.group_errors import (
    CoordinatorNotAvailable,
    FencedMemberEpoch,
    GroupIdNotFound,
    GroupSubscribedToTopic,
    StaleMemberEpoch,
    UnknownMemberId,
    UnstableOffsetCommit,
)
from app.groups.classic import ClassicGroups, decode_subscription
from app.groups.model import Group, TopicPartition, validate_group_id
from app.groups.placement import INTERNAL_TOPICS, OFFSETS_TOPIC
from app.groups.records import (
    ClassicGroupKey,
    GroupKey,
    OffsetKey,
    OffsetValue,
    encode_key,
    encode_value,
)
from app.groups.runtime import CoordinatorRuntime

log = logging.getLogger(__name__)

# Kafka's offset.metadata.max.bytes
OFFSET_METADATA_MAX_BYTES = 4096


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


class OffsetStore:
    """Commit, fetch, delete and expire the offsets of the groups in the runtime's cache."""

    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.rt = runtime
        # Cluster mode: topics seen deleted since start, with the wall-clock ms of the
        # last deletion. Groups of an offsets partition loading at the time (or whose
        # leader could not write the tombstones) forget those offsets once loaded here.
        self._deleted_topics: dict[str, int] = {}

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        offsets: Sequence[OffsetCommit],
        instance_id: str | None = None,
    ) -> list[CommittedOffset]:
        """OffsetCommit: ``member_epoch`` -1 for a commit from outside the group (only
        while it has no members), else the member's current epoch; for a classic group
        (``Group.classic``) the member's generation, checked as Kafka checks it
        (:meth:`ClassicGroups.validate_commit`, ``instance_id`` fencing included)."""
        self.rt.check_loaded()
        validate_group_id(group_id)
        await self.rt.ensure_topic()
        partition = self.rt.route(group_id)
        group = self.rt.groups.get(group_id)
        if group is not None and group.classic is not None and not group.members:
            ClassicGroups.validate_commit(
                group_id, group.classic, member_id, instance_id, member_epoch
            )
        elif member_epoch < 0:
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
        done = self.write_offsets(group_id, offsets)
        # Acknowledged only once every in-sync replica has it: a commit answered survives
        # a coordinator failover (Kafka commits offsets with acks=all).
        await self.rt.replicated(group_id, partition)
        return done

    def write_offsets(
        self, group_id: str, offsets: Sequence[OffsetCommit]
    ) -> list[CommittedOffset]:
        """Check and append ``offsets`` (callers have checked the membership), then
        cache them; the answer waits for replication in the caller."""
        if not offsets:
            return []
        latest = self.checked(offsets)
        self.rt.append(
            group_id,
            [
                (encode_key(OffsetKey(group_id, t, p)), encode_value(v))
                for (t, p), v in latest.items()
            ],
        )
        group = self.rt.groups.get(group_id)
        if group is None:
            group = self.rt.groups[group_id] = Group(group_id, empty_since_ms=self.rt.clock_ms())
        group.offsets.update(latest)
        return [
            CommittedOffset(t, p, v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)
            for (t, p), v in latest.items()
        ]

    def checked(self, offsets: Sequence[OffsetCommit]) -> dict[TopicPartition, OffsetValue]:
        """Check ``offsets`` (not internal, partition exists, not negative, metadata size)
        and stamp them; the last one per partition wins. Shared with TxnOffsetCommit."""
        for c in offsets:
            check_committable(c.topic)
            if c.partition < 0 or c.partition >= self.rt.placement.partition_count(c.topic):
                raise UnknownTopicOrPartition(c.topic, c.partition)
            if c.offset < 0:
                raise InvalidRequest(f"offset {c.offset} for {c.topic}-{c.partition} is negative")
            if len(c.metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                raise InvalidRequest(
                    f"offset metadata for {c.topic}-{c.partition} is over "
                    f"{OFFSET_METADATA_MAX_BYTES} bytes (OFFSET_METADATA_TOO_LARGE)"
                )
        now = self.rt.clock_ms()
        latest: dict[TopicPartition, OffsetValue] = {}
        for c in offsets:
            latest[(c.topic, c.partition)] = OffsetValue(c.offset, c.leader_epoch, c.metadata, now)
        return latest

    async def fetch_committed_offsets(
        self,
        group_id: str,
        topics: Sequence[str] | None = None,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> list[CommittedOffset]:
        """:meth:`fetch_offsets`, answered once what it read is replicated (in cluster mode
        a commit still waiting for its in-sync replicas is not reported before it counts).
        ``require_stable``: UNSTABLE_OFFSET_COMMIT while a transaction's offsets for one
        of the partitions asked about are pending (module docstring). ``member_id`` and
        ``member_epoch`` (Kafka's OffsetFetch v9, KIP-848): a member of a consumer group
        asking for its offsets must be one (UNKNOWN_MEMBER_ID) in its current epoch
        (STALE_MEMBER_EPOCH otherwise, either way, as Kafka's ``validateOffsetFetch``);
        neither given (None, -1) is an admin's or an older client's fetch, never checked,
        and a classic or unknown group checks neither, as Kafka."""
        self.rt.check_loaded()
        validate_group_id(group_id)
        partition = self.rt.route(group_id)
        if member_id is not None or member_epoch >= 0:
            self._validate_fetch(group_id, member_id or "", member_epoch)
        found = self.fetch_offsets(group_id, topics)
        if require_stable:
            self.check_stable(group_id, {(o.topic, o.partition) for o in found}, topics)
        await self.rt.replicated(group_id, partition)
        return found

    def _validate_fetch(self, group_id: str, member_id: str, member_epoch: int) -> None:
        group = self.rt.groups.get(group_id)
        if group is None or not group.members:
            return  # unknown, empty, or classic: nothing to check against (Kafka's)
        member = group.members.get(member_id)
        if member is None or member.left_static:
            raise UnknownMemberId(group_id, member_id)
        if member_epoch != member.member_epoch:
            raise StaleMemberEpoch(group_id, member_id, member_epoch, member.member_epoch)

    def unstable_partitions(self, group_id: str) -> dict[TopicPartition, int]:
        """The partitions whose offsets an open transaction of ``group_id`` committed, each
        with that transaction's producer id (KIP-447: their committed offsets are not
        stable until the transaction ends)."""
        group = self.rt.groups.get(group_id)
        if group is None:
            return {}
        return {tp: pid for pid, offsets in group.pending_txn_offsets.items() for tp in offsets}

    def check_stable(
        self, group_id: str, asked: set[TopicPartition], topics: Sequence[str] | None
    ) -> None:
        """UNSTABLE_OFFSET_COMMIT when an open transaction committed offsets of a partition
        in ``asked`` (or, ``topics`` None: of any partition of the group)."""
        pending = {
            tp: pid
            for tp, pid in self.unstable_partitions(group_id).items()
            if topics is None or tp in asked
        }
        if pending:
            raise UnstableOffsetCommit(
                f"group {group_id!r}: offsets of {len(pending)} partitions were committed in "
                "a transaction that has not ended yet; retry once it has",
                group_id,
                partitions=[
                    {"topic": t, "partition": p, "producer_id": pid}
                    for (t, p), pid in sorted(pending.items())
                ],
            )

    def fetch_offsets(
        self, group_id: str, topics: Sequence[str] | None = None
    ) -> list[CommittedOffset]:
        """Committed offsets; for topics named, every partition (-1 where none is committed)."""
        self.rt.check_loaded()
        validate_group_id(group_id)
        self.rt.route(group_id)
        group = self.rt.groups.get(group_id)
        committed = group.offsets if group is not None else {}
        if topics is None:
            wanted = sorted(committed)
        else:
            wanted = []
            for t in dict.fromkeys(topics):
                try:
                    count = self.rt.placement.partition_count(t)
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

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, LogbusError | None]:
        """OffsetDelete: forget the group's committed offsets of ``partitions`` (a
        tombstone each), except for topics a member is subscribed to now
        (GROUP_SUBSCRIBED_TO_TOPIC, as Kafka). A group that does not exist is
        GROUP_ID_NOT_FOUND; a partition with nothing committed is no error."""
        self.rt.check_loaded()
        validate_group_id(group_id)
        await self.rt.ensure_topic()
        partition = self.rt.route(group_id)
        group = self.rt.groups.get(group_id)
        if group is None:
            raise GroupIdNotFound(group_id)
        subscribed = _subscribed_topics(group)
        out: dict[TopicPartition, LogbusError | None] = {}
        gone: list[TopicPartition] = []
        for tp in partitions:
            if tp[0] in subscribed:
                out[tp] = GroupSubscribedToTopic(
                    f"group {group_id!r} has members subscribed to {tp[0]!r}", group_id
                )
                continue
            out[tp] = None
            if tp in group.offsets:
                gone.append(tp)
        if gone:
            self.rt.append(
                group_id,
                [(encode_key(OffsetKey(group_id, t, p)), None) for t, p in sorted(set(gone))],
            )
            for tp in gone:
                group.offsets.pop(tp, None)
            await self.rt.replicated(group_id, partition)
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
        self._deleted_topics[topic] = self.rt.clock_ms()
        self._forget_topics(list(self.rt.groups.values()), {topic: None})

    def forget_deleted(self, groups: Iterable[Group]) -> None:
        """Groups just loaded: forget offsets of topics deleted while their partition was
        loading (or led elsewhere).

        Only names seen deleted, never merely unknown ones (a topic created a moment ago
        may not have reached this broker's metadata yet). A name created again since
        keeps the offsets committed after the deletion (those are the new topic's)."""
        existing = set(self.rt.placement.topics())
        self._forget_topics(
            groups,
            {t: (at if t in existing else None) for t, at in self._deleted_topics.items()},
        )

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
                self.rt.append(gid, [(encode_key(OffsetKey(gid, t, p)), None) for t, p in gone])
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

    async def expire_loop(self) -> None:
        interval = self.rt.config.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.expire_offsets()
            except Exception:  # a failed round must not end expiration for good
                log.exception("offsets expiration failed")

    def expire_offsets(self, now_ms: int | None = None) -> int:
        """Tombstone offsets of empty groups past ``offsets.retention.minutes``; drop
        groups left with nothing. Returns the number of offsets expired."""
        now = self.rt.clock_ms() if now_ms is None else now_ms
        retention = self.rt.config.offsets_retention_ms
        expired = 0
        for group in list(self.rt.groups.values()):
            if group.member_count():
                continue
            gone = [
                tp
                for tp, v in group.offsets.items()
                if now - max(v.commit_timestamp, group.empty_since_ms) >= retention
            ]
            try:
                if gone:
                    self.rt.append(
                        group.group_id,
                        [(encode_key(OffsetKey(group.group_id, t, p)), None) for t, p in gone],
                    )
                    for tp in gone:
                        del group.offsets[tp]
                    expired += len(gone)
                if not group.offsets and now - group.empty_since_ms >= retention:
                    self.drop(group)
            except (NotCoordinator, CoordinatorNotAvailable) as exc:
                # This group's partition cannot be written now; the others can.
                log.warning("offsets of group %s not expired: %s", group.group_id, exc)
        return expired

    def drop(self, group: Group) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetKey(group.group_id, t, p)), None) for t, p in group.offsets
        ]
        records.append((encode_key(GroupKey(group.group_id)), None))
        if group.has_classic_record:
            records.append((encode_key(ClassicGroupKey(group.group_id)), None))
        self.rt.append(group.group_id, records)
        self.rt.groups.pop(group.group_id, None)


def _subscribed_topics(group: Group) -> set[str]:
    """The topics a member of either protocol subscribes to now."""
    topics: set[str] = set()
    for m in group.members.values():
        topics |= set(m.subscribed_topics) | set(m.resolved)
    classic = group.classic
    if classic is not None and classic.protocol_name is not None:
        for cm in classic.members.values():
            topics.update(decode_subscription(cm.metadata(classic.protocol_name)))
    return topics
