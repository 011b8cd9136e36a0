"""Replaying the offsets committed inside transactions from ``__consumer_offsets``
(:func:`replay_txn_batch`), and applying or dropping them when their transaction ends
(:func:`complete_pending`): pure functions on a dict of groups, shared by the loader
(:mod:`app.groups.runtime`, in a worker thread on a dict of its own) and the live path
(:mod:`app.groups.txn_offsets`, on the event loop). A transactional batch's offsets stay
in the group's ``pending_txn_offsets`` under the producer id until that producer's
COMMIT or ABORT marker is read, so offsets of an aborted (or never ended) transaction
never count after a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from app.common.batch import CONTROL_MASK, BatchHeader, decode_records, read_control_marker
from app.common.errors import CorruptRecord
from app.groups.model import Group
from app.groups.records import OffsetKey, OffsetValue, decode_key, decode_value

log = logging.getLogger(__name__)


def complete_pending(groups: Iterable[Group], producer_id: int, commit: bool) -> int:
    """Apply (``commit``) or drop the offsets ``producer_id`` committed in its transaction;
    the number of groups touched."""
    touched = 0
    for group in groups:
        pending = group.pending_txn_offsets.pop(producer_id, None)
        if not pending:
            continue
        touched += 1
        if commit:
            group.offsets.update(pending)
            latest = max(v.commit_timestamp for v in pending.values())
            group.empty_since_ms = max(group.empty_since_ms, latest)
    return touched


def replay_txn_batch(
    groups: dict[str, Group],
    header: BatchHeader,
    batch: memoryview,
    min_offset: int,
    partition: int,
) -> None:
    """Replay one transactional or control batch of ``__consumer_offsets``."""
    pid = header.producer_id
    if header.attributes & CONTROL_MASK:
        try:
            marker = read_control_marker(batch)
        except CorruptRecord as exc:
            log.warning(
                "skipped control batch at %d of partition %d: %s",
                header.base_offset,
                partition,
                exc,
            )
            return
        complete_pending(groups.values(), pid, marker.commit)
        return
    for record in decode_records(batch, min_offset=min_offset):
        if record.key is None:
            continue
        try:
            key = decode_key(record.key)
            if not isinstance(key, OffsetKey):
                continue
            value = decode_value(key, record.value)
        except CorruptRecord as exc:
            log.warning("skipped offset %d of partition %d: %s", record.offset, partition, exc)
            continue
        if not isinstance(value, OffsetValue):
            continue
        group = groups.get(key.group)
        if group is None:
            group = groups[key.group] = Group(key.group)
        group.pending_txn_offsets.setdefault(pid, {})[(key.topic, key.partition)] = value
