"""Offsets committed inside a transaction (Kafka's TxnOffsetCommit, KIP-98 / KIP-447).

A transactional producer that consumes too (consume-transform-produce) commits the
group's offsets in its transaction, so the output and the input positions become visible
together or not at all. As in Kafka:

* the transaction coordinator first adds the group's ``__consumer_offsets`` partition to
  the transaction (AddOffsetsToTxn);
* :meth:`TxnOffsetStore.commit` writes the offsets to that partition as a
  **transactional batch** of the producer (its id, epoch and next sequence there), in
  the ordinary ``OffsetKey``/``OffsetValue`` records, and keeps them in the group's
  ``pending_txn_offsets`` under the producer id: not visible to OffsetFetch;
* the coordinator's COMMIT or ABORT marker in that partition decides:
  :meth:`TxnOffsetStore.completed` (called by the transaction coordinator once the
  marker is written) moves them to the committed offsets or drops them;
* replaying the partition (:func:`app.groups.txn_replay.replay_txn_batch`, from the
  loader) does the same from the log: transactional batches are pending until their producer's marker is read, so
  offsets of an aborted (or never ended) transaction never count after a restart.

Concurrency: on the event loop, as the rest of :mod:`app.groups`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.common.batch import (
    build_batch,
)
from app.common.group_errors import FencedMemberEpoch, UnknownMemberId
from app.core.log.producer_state import UnnumberedBatch
from app.groups.hashing import partition_for
from app.groups.model import Group, validate_group_id
from app.groups.records import OffsetKey, encode_key
from app.groups.records import encode_value as encode_record_value
from app.groups.txn_replay import complete_pending

if TYPE_CHECKING:
    from app.groups.offsets import CommittedOffset, OffsetCommit, OffsetStore
    from app.groups.runtime import CoordinatorRuntime


class TxnOffsetStore:
    """TxnOffsetCommit and the markers that end it, over the runtime's group cache."""

    def __init__(self, runtime: CoordinatorRuntime, offsets: OffsetStore) -> None:
        self.rt = runtime
        self.offsets = offsets

    async def offsets_partition(self, group_id: str) -> int:
        """The group's ``__consumer_offsets`` partition (AddOffsetsToTxn), the topic
        created on first use."""
        validate_group_id(group_id)
        self.rt.check_loaded()
        await self.rt.ensure_topic()
        return partition_for(group_id, self.rt.num_partitions())

    async def commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: Sequence[OffsetCommit],
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> list[CommittedOffset]:
        """Write ``offsets`` in the producer's transaction; pending until its marker.

        ``member_id``/``member_epoch`` (KIP-447): when given, the member must be in the
        group at that epoch (a zombie that lost its partitions cannot commit); -1 skips
        the check, as Kafka's generation -1."""
        from app.groups.offsets import CommittedOffset

        self.rt.check_loaded()
        validate_group_id(group_id)
        await self.rt.ensure_topic()
        partition = self.rt.route(group_id)
        group = self.rt.groups.get(group_id)
        if (
            member_epoch >= 0
            and group is not None
            and group.classic is not None
            and not group.members
        ):
            # A classic group's member (JoinGroup on the Kafka door): its generation.
            from app.groups.classic import ClassicGroups

            ClassicGroups.validate_commit(
                group_id, group.classic, member_id or "", None, member_epoch, transactional=True
            )
        elif member_epoch >= 0:
            member = group.members.get(member_id or "") if group is not None else None
            if member is None:
                raise UnknownMemberId(group_id, member_id or "")
            if member_epoch != member.member_epoch:
                raise FencedMemberEpoch(
                    group_id, member.member_id, member_epoch, member.member_epoch
                )
        latest = self.offsets.checked(offsets)
        if not latest:
            return []
        # The log gives the batch the producer's next sequence there, under its lock, in
        # the same hold as the append (UnnumberedBatch): read here, a concurrent append
        # of the producer could take it first.
        batch = UnnumberedBatch(
            bytearray(
                build_batch(
                    [
                        (encode_key(OffsetKey(group_id, t, p)), encode_record_value(v))
                        for (t, p), v in latest.items()
                    ]
                )
            ),
            producer_id,
            producer_epoch,
        )
        self.rt.append(group_id, [], batch=batch)
        if group is None:
            group = self.rt.groups[group_id] = Group(group_id, empty_since_ms=self.rt.clock_ms())
        group.pending_txn_offsets.setdefault(producer_id, {}).update(latest)
        await self.rt.replicated(group_id, partition)
        return [
            CommittedOffset(t, p, v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)
            for (t, p), v in latest.items()
        ]

    def completed(self, partition: int, producer_id: int, commit: bool) -> None:
        """The transaction coordinator wrote ``producer_id``'s marker to ``partition``."""
        count = self.rt.num_partitions()
        groups = [g for gid, g in self.rt.groups.items() if partition_for(gid, count) == partition]
        complete_pending(groups, producer_id, commit)
