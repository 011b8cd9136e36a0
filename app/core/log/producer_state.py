"""Per-partition state of idempotent producers (Kafka's ``ProducerStateManager``).

The snapshot files (``<offset, 20 digits>.snapshot``, every batch below the
offset is in the state, none at or above it) and the entries they hold are
:mod:`app.core.log.producer_snapshot`'s; this module loads, writes, replays
and prunes them.

Rules, checked per batch from header fields only (``producer_id >= 0``;
control batches are not sequenced):

* same epoch, same first and last sequence as one of the producer's last 5
  batches: a retry of a batch already in the log. It is not written again;
  the caller answers with the original offsets.
* epoch older than the newest seen: ``InvalidProducerEpoch`` (a zombie).
* epoch newer: the batch must start at sequence 0, and the producer's
  window starts afresh; otherwise ``OutOfOrderSequence``.
* same epoch: the first sequence must be the last sequence + 1, wrapping
  from 2^31 - 1 to 0 (Kafka's rule); otherwise ``OutOfOrderSequence``.
* unknown producer: sequence 0 is accepted (a producer's first batch on a
  partition), anything else is ``OutOfOrderSequence``. Kafka 2.5+ accepts
  any sequence here to survive state lost to retention or expiration;
  Logbus keeps producers after their batches are deleted (until
  expiration) and snapshots survive restarts, so an unknown producer with
  sequence > 0 really did lose track, and the error makes it bump its epoch
  (POST /producers with its id) rather than silently risk a duplicate.

Transactions (KIP-98, the partition's side): a transactional batch
(attributes bit 4) opens its producer's transaction at its base offset
unless one is open; a control batch (bit 5) written by
:meth:`Log.append_control <app.core.log.log.Log.append_control>` for the
coordinator closes it (COMMIT or ABORT). Rules: a non-transactional batch
while the producer's transaction is open is ``InvalidTxnState``; a marker
with an older producer epoch is ``ProducerFenced``, with an older
coordinator epoch ``TransactionCoordinatorFenced``; a marker with a newer
producer epoch (the coordinator bumped it to fence a zombie) starts the
producer's new epoch. A marker for a producer with nothing open is written
and changes nothing (a coordinator retrying its markers). The first offset
of every open transaction, and of every completed one whose marker is not
yet below the high watermark, bounds the last stable offset
(:meth:`ProducerStateManager.first_unstable_offset`). Completing an aborted
transaction yields its :class:`~app.core.log.txn_index.AbortedTxn`, which
the log writes to the marker's segment's ``.txnindex``. A producer with an
open transaction never expires.

Invariants: the state equals the newest snapshot plus the producer batches
at or after its offset, and those batches are still in the log. This holds
because a roll snapshots whenever there is any state (so a segment holding
producer batches not covered by the newest snapshot is never below a
roll that did not snapshot), and pruning keeps the newest snapshot at or
below the log start offset. Producers outlive the deletion of their batches
and go only by expiration (``producer_id_expiration_ms`` since their last
append, broker clock). Batches replayed from the log take the load time as
their append time: expiring later is harmless, expiring early is not.

Durability: snapshots on roll are written without fsync (as Kafka 3 does,
off the append's critical path); a torn or missing one fails its CRC or is
absent, and loading falls back to an older one plus a longer replay. The
snapshot at a clean shutdown is fsynced.

Concurrency: not thread-safe on its own. The owning :class:`Log` calls every
method under its append lock; nothing here is on the read path.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.common.batch import (
    CONTROL_MASK,
    HEADER_SIZE,
    TRANSACTIONAL_MASK,
    BatchHeader,
    ControlMarker,
    read_control_marker,
    read_header,
    stamp_producer,
)
from app.common.errors import (
    InvalidProducerEpoch,
    InvalidRecord,
    InvalidTxnState,
    OutOfOrderSequence,
    ProducerFenced,
    TransactionCoordinatorFenced,
)
from app.core.log.producer_snapshot import (
    INT32_MAX,
    NUM_BATCHES_TO_RETAIN,
    SNAPSHOT_FILE,
    SNAPSHOT_SUFFIX,
    BatchMetadata,
    ProducerEntry,
    SnapshotCorrupt,
    find_batch,
    in_sequence,
    last_sequence,
    read_snapshot,
    snapshot_name,
    write_snapshot,
)
from app.core.log.segment import LogSegment
from app.core.log.txn_index import AbortedTxn

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "ProducerAppend",
    "ProducerEntry",
    "ProducerStateManager",
    "SnapshotCorrupt",
    "UnnumberedBatch",
    "in_sequence",
    "last_sequence",
    "read_snapshot",
    "segment_headers",
    "snapshot_name",
    "without_duplicates",
    "write_snapshot",
]

_log = logging.getLogger(__name__)

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 24 * 3600 * 1000  # Kafka's producer.id.expiration.ms

# A control batch's first record starts within this many bytes after its header.
_CONTROL_PEEK = 64
# Replay reads headers in chunks; a header that does not fit is read again at its start.
_REPLAY_CHUNK = 16 << 10


@dataclass(slots=True)
class ProducerAppend:
    """The outcome of checking one append, applied by :meth:`ProducerStateManager.commit`.

    ``updates``: ``(producer id, epoch, batch, transactional)`` for every
    producer batch to write, in log order. ``duplicates``: ``None`` when no batch is a retry;
    else one item per batch of the body, the original batch's metadata for a
    retry and ``None`` for a batch to write.
    """

    updates: list[tuple[int, int, BatchMetadata, bool]]
    duplicates: list[BatchMetadata | None] | None
    append_time: int

    @property
    def all_duplicates(self) -> bool:
        return self.duplicates is not None and all(d is not None for d in self.duplicates)


def without_duplicates(
    buf: bytearray,
    batches: Sequence[tuple[int, BatchHeader]],
    duplicates: Sequence[BatchMetadata | None],
) -> tuple[bytearray, list[tuple[int, BatchHeader]]]:
    """The batches to write when some of a body's are retries: copied into one new buffer.

    Rare (a client resending part of a body), so the copy does not matter.
    """
    out = bytearray()
    kept: list[tuple[int, BatchHeader]] = []
    for (pos, header), original in zip(batches, duplicates, strict=True):
        if original is None:
            kept.append((len(out), header))
            out += buf[pos : pos + header.size]
    return out, kept


def segment_headers(
    segments: Sequence[LogSegment], bases: Sequence[int], from_offset: int
) -> Iterator[tuple[BatchHeader, ControlMarker | None]]:
    """Headers of every batch holding an offset >= ``from_offset``, in log order (trusted bytes),
    each with its transaction marker when it is a control batch (else None).

    ``bases`` are the segments' base offsets. Reads headers only: chunks of
    the file, and one short read per batch too large to share a chunk with
    the next header. Segments before the one holding ``from_offset`` are not
    touched (their indexes stay unloaded).
    """
    first = max(bisect.bisect_right(bases, from_offset) - 1, 0)
    for i in range(first, len(segments)):
        seg = segments[i]
        end = seg.size
        position = 0
        if i == first and from_offset > seg.base_offset:
            found = seg.translate_offset(from_offset, end)
            if found is None:
                continue
            position = found[0]
        f = seg.file
        buf = b""
        buf_pos = position
        while end - position >= HEADER_SIZE:
            off = position - buf_pos
            if off + HEADER_SIZE > len(buf):
                buf = os.pread(f.fd, min(_REPLAY_CHUNK, end - position), position)
                buf_pos, off = position, 0
                if len(buf) < HEADER_SIZE:
                    break
            header = read_header(buf, off)
            if header.size < HEADER_SIZE or position + header.size > end:
                break
            marker = None
            if header.attributes & CONTROL_MASK:
                peek = os.pread(f.fd, min(header.size, HEADER_SIZE + _CONTROL_PEEK), position)
                marker = read_control_marker(peek)
            yield header, marker
            position += header.size


HeaderSource = Callable[[int], Iterable[tuple[BatchHeader, ControlMarker | None]]]


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """What Kafka's DescribeProducers tells of one producer on one partition, copied out
    of its entry (which later appends change): its epoch, the last sequence written
    (-1: none kept), its last append time (broker clock, ms), the coordinator epoch of
    its last marker (-1: none) and the first offset of its open transaction (-1: none)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class UnnumberedBatch:
    """One built RecordBatch v2 (``batch``, a single batch at position 0, without a
    producer) that the log numbers itself: :meth:`Log.append <app.core.log.log.Log.append>`
    stamps it, in place, with ``producer_id``, ``producer_epoch`` and the producer's
    next sequence on that partition (:meth:`ProducerStateManager.next_sequence`), and
    appends it, in one hold of the log's lock. For a broker writing on behalf of a
    producer that keeps no sequence of its own (a JSON produce inside a transaction,
    TxnOffsetCommit): read outside the lock, the sequence could be taken by a
    concurrent append of the producer before this batch lands, which the log then
    refuses (OUT_OF_ORDER_SEQUENCE_NUMBER) or, where the two batches have the same
    sequence range, answers as a retry of the other one, dropping this batch."""

    batch: bytearray
    producer_id: int
    producer_epoch: int
    transactional: bool = True

    def number(self, sequence: int) -> bytearray:
        """The batch, stamped with the producer and ``sequence`` (CRC recomputed)."""
        stamp_producer(
            self.batch,
            0,
            self.producer_id,
            self.producer_epoch,
            sequence,
            transactional=self.transactional,
        )
        return self.batch


class ProducerStateManager:
    """Idempotent-producer state of one partition, plus its snapshot files.

    See the module docstring for the rules, the file layout, the invariants
    and the concurrency contract (the owning log's lock).
    """

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        *,
        expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self.expiration_ms = expiration_ms
        self._producers: dict[int, ProducerEntry] = {}
        # Changed since the last snapshot (an append, a replay, an expiration).
        self._dirty = False
        # Batches read from the log by the last load (what a restart cost, for tests and logs).
        self.replayed_on_load = 0
        # The last load: where its replay started (None: no replay) and the aborted
        # transactions whose markers it replayed (the log rewrites their .txnindex entries).
        self.replayed_from: int | None = None
        self.aborted_on_load: list[AbortedTxn] = []
        # Completed transactions whose marker is not yet below the high watermark,
        # as (first offset, marker offset) in marker order: they still bound the LSO.
        self._unreplicated: list[tuple[int, int]] = []
        # Whether any transactional batch or marker was seen since the last load: until
        # then the LSO questions cost nothing (they run on every append and HW move).
        self._transactional = False

    # -- queries -----------------------------------------------------------------

    @property
    def producers(self) -> Mapping[int, ProducerEntry]:
        """The live entries (read-only use; under the log's lock for a consistent view)."""
        return self._producers

    def active(self) -> list[ActiveProducer]:
        """Every live producer, by id (under the log's lock: the entries are copied)."""
        return [
            ActiveProducer(
                pid,
                e.epoch,
                e.last_seq,
                e.last_timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
            for pid, e in sorted(self._producers.items())
        ]

    def next_sequence(self, producer_id: int, producer_epoch: int) -> int:
        """The base sequence the producer's next batch at ``producer_epoch`` must carry on
        this partition: its last sequence + 1 (wrapping from 2^31 - 1 to 0) in that
        epoch, 0 for a new epoch or an unknown producer (what :meth:`check` accepts). An
        older epoch also answers 0, which :meth:`check` then refuses as a zombie's."""
        entry = self._producers.get(producer_id)
        if entry is None or entry.epoch != producer_epoch or entry.last_seq < 0:
            return 0
        return (entry.last_seq + 1) & INT32_MAX

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an open transaction or of a completed one whose marker is
        at or above ``high_watermark``; None when there is none (the LSO is the HW)."""
        if not self._transactional:
            return None
        firsts = [
            e.current_txn_first_offset
            for e in self._producers.values()
            if e.current_txn_first_offset >= 0
        ]
        firsts.extend(first for first, last in self._unreplicated if last >= high_watermark)
        return min(firsts) if firsts else None

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is now below the high watermark."""
        if self._unreplicated and self._unreplicated[0][1] < high_watermark:
            self._unreplicated = [t for t in self._unreplicated if t[1] >= high_watermark]

    def ongoing_transactions(self) -> dict[int, int]:
        """``producer id -> first offset`` of every open transaction."""
        return {
            pid: e.current_txn_first_offset
            for pid, e in self._producers.items()
            if e.current_txn_first_offset >= 0
        }

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files present, ascending."""
        return sorted(
            int(m.group(1)) for p in self.dir.iterdir() if (m := SNAPSHOT_FILE.fullmatch(p.name))
        )

    # -- appends -----------------------------------------------------------------

    def check(
        self,
        batches: Sequence[tuple[int, BatchHeader]],
        next_offset: int,
        now: int,
        log_append_time: bool,
    ) -> ProducerAppend:
        """Apply the rules to a body's batches in order, as if each were appended in turn.

        ``next_offset`` is the offset the body's first written batch gets.
        Changes nothing (no entry is copied either: the common body is one
        batch); raises OutOfOrderSequence, InvalidProducerEpoch or
        InvalidRecord for the first batch that breaks a rule.
        """
        producers = self._producers
        updates: list[tuple[int, int, BatchMetadata, bool]] = []
        duplicates: list[BatchMetadata | None] = []
        any_duplicate = False
        # Producers seen earlier in this body: (epoch, last sequence, batches written by it,
        # transaction open).
        seen: dict[int, tuple[int, int, list[BatchMetadata], bool]] = {}
        offset = next_offset
        for _, h in batches:
            delta = h.last_offset_delta
            pid = h.producer_id
            if pid < 0 or h.attributes & CONTROL_MASK:
                duplicates.append(None)
                offset += delta + 1
                continue
            epoch = h.producer_epoch
            first_seq = h.base_sequence
            if first_seq < 0 or epoch < 0:
                raise InvalidRecord(
                    f"batch of producer {pid} needs a producer epoch and a base sequence >= 0, "
                    f"got epoch {epoch} and sequence {first_seq}"
                )
            last_seq = (first_seq + delta) & INT32_MAX
            entry = producers.get(pid)
            earlier = seen.get(pid)
            transactional = bool(h.attributes & TRANSACTIONAL_MASK)
            if earlier is not None:
                cur_epoch, cur_last, written, in_txn = earlier
            elif entry is not None:
                cur_epoch, cur_last, written = entry.epoch, entry.last_seq, []
                in_txn = entry.current_txn_first_offset >= 0
            else:
                cur_epoch, cur_last, written, in_txn = -1, -1, [], False
            if cur_epoch == epoch:
                original = find_batch(written, first_seq, last_seq)
                if original is None and entry is not None and entry.epoch == epoch:
                    original = entry.find_duplicate(first_seq, last_seq)
                if original is not None:
                    duplicates.append(original)
                    any_duplicate = True
                    continue
            self._check_sequence(
                entry is not None or earlier is not None, cur_epoch, cur_last, pid, epoch, first_seq
            )
            if in_txn and not transactional:
                raise InvalidTxnState(
                    f"{self.topic}-{self.partition}: producer {pid} has an open transaction; "
                    "a non-transactional batch must wait until it is committed or aborted",
                    topic=self.topic,
                    partition=self.partition,
                    producer_id=pid,
                )
            ts = now if log_append_time else h.max_timestamp
            meta = BatchMetadata(first_seq, last_seq, offset, offset + delta, ts)
            updates.append((pid, epoch, meta, transactional))
            seen[pid] = (
                epoch,
                last_seq,
                [*written, meta] if cur_epoch == epoch else [meta],
                in_txn or transactional,
            )
            duplicates.append(None)
            offset += delta + 1
        return ProducerAppend(updates, duplicates if any_duplicate else None, now)

    def _check_sequence(
        self, known: bool, current_epoch: int, last_seq: int, pid: int, epoch: int, first_seq: int
    ) -> None:
        if not known:
            expected, reason = (
                0,
                "no state for this producer on this partition; a producer starts at 0",
            )
        elif epoch < current_epoch:
            raise InvalidProducerEpoch(self.topic, self.partition, pid, epoch, current_epoch)
        elif epoch > current_epoch:
            expected, reason = 0, f"a new epoch (was {current_epoch}) starts at sequence 0"
        else:
            # in_sequence(): the last sequence + 1, wrapping from 2^31 - 1 to 0.
            expected, reason = (last_seq + 1) & INT32_MAX, "sequence gap"
        if first_seq != expected:
            raise OutOfOrderSequence(
                self.topic, self.partition, pid, epoch, first_seq, expected, reason
            )

    def commit(self, plan: ProducerAppend) -> None:
        """Make a checked append's state current (after its bytes were written)."""
        if not plan.updates:
            return
        for pid, epoch, meta, transactional in plan.updates:
            entry = self._entry_for_epoch(pid, epoch)
            entry.add(meta, plan.append_time)
            if transactional and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = meta.first_offset
                self._transactional = True
        self._dirty = True

    def _entry_for_epoch(self, pid: int, epoch: int) -> ProducerEntry:
        """The producer's entry at ``epoch``: a new epoch starts a fresh sequence window
        (check() made sure it begins at 0) but keeps an open transaction and the
        coordinator epoch (only a marker closes a transaction)."""
        producers = self._producers
        entry = producers.get(pid)
        if entry is None or entry.epoch != epoch:
            old = entry
            entry = producers[pid] = ProducerEntry(pid, epoch)
            if old is not None:
                entry.current_txn_first_offset = old.current_txn_first_offset
                entry.coordinator_epoch = old.coordinator_epoch
                entry.last_timestamp = old.last_timestamp
        return entry

    # -- transaction markers -------------------------------------------------------

    def check_marker(self, pid: int, epoch: int, coordinator_epoch: int) -> None:
        """Raise unless a marker from (``epoch``, ``coordinator_epoch``) may end ``pid``'s
        transaction: ProducerFenced for an older producer epoch,
        TransactionCoordinatorFenced for an older coordinator epoch."""
        if pid < 0 or epoch < 0:
            raise InvalidRecord(
                f"a transaction marker needs a producer id and epoch, got {pid} and {epoch}"
            )
        entry = self._producers.get(pid)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise ProducerFenced(self.topic, self.partition, pid, epoch, entry.epoch)
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFenced(
                f"{self.topic}-{self.partition}: marker for producer {pid} from coordinator "
                f"epoch {coordinator_epoch}, older than {entry.coordinator_epoch}",
                topic=self.topic,
                partition=self.partition,
                producer_id=pid,
                coordinator_epoch=coordinator_epoch,
                current_coordinator_epoch=entry.coordinator_epoch,
            )

    def complete_txn(
        self, pid: int, epoch: int, marker: ControlMarker, offset: int, append_time: int
    ) -> AbortedTxn | None:
        """Apply a marker written at ``offset`` (checked, or replayed from the log).

        Returns the aborted transaction to index when the marker aborts an open one.
        """
        self._transactional = True
        entry = self._entry_for_epoch(pid, epoch)
        entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
        entry.last_timestamp = max(entry.last_timestamp, append_time)
        first = entry.current_txn_first_offset
        self._dirty = True
        if first < 0:
            return None
        entry.current_txn_first_offset = -1
        self._unreplicated.append((first, offset))
        if marker.commit:
            return None
        # The LSO right after the marker (Kafka's AbortedTxn.lastStableOffset): the oldest
        # transaction still open, else the offset after the marker.
        others = [
            e.current_txn_first_offset
            for e in self._producers.values()
            if e.current_txn_first_offset >= 0
        ]
        return AbortedTxn(pid, first, offset, min(others) if others else offset + 1)

    def replay(
        self, h: BatchHeader, append_time: int, marker: ControlMarker | None = None
    ) -> AbortedTxn | None:
        """Update from a batch already in the log (loading, or a follower's append): no checks.

        ``marker``: the transaction marker of a control batch. Returns the aborted
        transaction a replayed ABORT marker completes.
        """
        pid = h.producer_id
        if pid < 0:
            return None
        if h.attributes & CONTROL_MASK:
            if marker is None:
                return None
            return self.complete_txn(pid, h.producer_epoch, marker, h.base_offset, append_time)
        if h.base_sequence < 0:
            return None
        entry = self._entry_for_epoch(pid, h.producer_epoch)
        if h.attributes & TRANSACTIONAL_MASK and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = h.base_offset
            self._transactional = True
        entry.add(
            BatchMetadata(
                h.base_sequence,
                last_sequence(h.base_sequence, h.last_offset_delta),
                h.base_offset,
                h.last_offset,
                h.max_timestamp,
            ),
            append_time,
        )
        self._dirty = True
        return None

    def remove_expired(self, now: int) -> int:
        """Forget producers idle for ``expiration_ms``; returns how many."""
        limit = now - self.expiration_ms
        expired = [
            pid
            for pid, e in self._producers.items()
            if e.last_timestamp <= limit and e.current_txn_first_offset < 0
        ]
        for pid in expired:
            del self._producers[pid]
        if expired:
            self._dirty = True
        return len(expired)

    # -- snapshots ---------------------------------------------------------------

    def load(
        self,
        log_start_offset: int,
        log_end_offset: int,
        headers: HeaderSource,
        *,
        clean_shutdown: bool,
        now: int,
        segment_bases: Sequence[int] = (),
        max_snapshot_offset: int | None = None,
    ) -> None:
        """Rebuild the state for a log holding ``[log_start_offset, log_end_offset)``.

        Snapshots above the end are deleted (their batches are gone), the
        newest readable one at or below it is loaded and the batches from
        there (or from the log start, whichever is later) are replayed. With
        ``clean_shutdown`` and no snapshot at all there was no state to keep
        (a clean close snapshots any state), so nothing is replayed. A load
        that replayed batches snapshots the result at the end offset, so the
        next start does not replay them again.

        ``max_snapshot_offset``: ignore (keep) snapshots above it, so that the
        replay covers every batch from there: recovery passes the recovery
        point, and the replay rebuilds the ``.txnindex`` entries of the
        segments it scanned (:attr:`replayed_from`, :attr:`aborted_on_load`).
        """
        self._producers = {}
        self._unreplicated = []
        self._transactional = False
        self._dirty = False
        self.replayed_on_load = 0
        self.replayed_from = None
        self.aborted_on_load = []
        # Below the log start nothing is replayed anyway, and the snapshot at or below it
        # carries the producers whose batches retention deleted.
        cap = log_end_offset
        if max_snapshot_offset is not None:
            cap = min(log_end_offset, max(max_snapshot_offset, log_start_offset))
        offsets = self.snapshot_offsets()
        for o in offsets:
            if o > log_end_offset:
                self._delete_snapshot(o)
        found: int | None = None
        for o in reversed([o for o in offsets if o <= cap]):
            try:
                entries = read_snapshot(self.dir / snapshot_name(o))
            except (SnapshotCorrupt, OSError) as e:
                _log.warning("%s-%s: ignoring producer snapshot: %s", self.topic, self.partition, e)
                self._delete_snapshot(o)
                continue
            self._producers = {e.producer_id: e for e in entries}
            self._transactional = any(e.current_txn_first_offset >= 0 for e in entries)
            found = o
            break
        if found is None and clean_shutdown and not offsets:
            return
        start = log_start_offset if found is None else max(found, log_start_offset)
        if start < log_end_offset:
            self.replayed_from = start
            for h, marker in headers(start):
                if h.last_offset < start:
                    continue
                if h.base_offset >= log_end_offset:
                    break
                aborted = self.replay(h, now, marker)
                if aborted is not None:
                    self.aborted_on_load.append(aborted)
                self.replayed_on_load += 1
        self.remove_expired(now)
        if start < log_end_offset:
            self.take_snapshot(log_end_offset, segment_bases, log_start_offset)
        else:
            self._dirty = False

    def truncate_fully(self) -> None:
        """The log was emptied: no producer and no snapshot survive."""
        self._producers = {}
        self._unreplicated = []
        self._dirty = False
        for o in self.snapshot_offsets():
            self._delete_snapshot(o)

    def wants_snapshot(self) -> bool:
        """A roll snapshots when there is any state (see the invariants)."""
        return bool(self._producers) or self._dirty

    def take_snapshot(
        self,
        offset: int,
        segment_bases: Sequence[int],
        log_start_offset: int,
        *,
        sync: bool = False,
    ) -> None:
        """Write the state as of ``offset`` (the log end offset) and prune older snapshots."""
        write_snapshot(self.dir / snapshot_name(offset), self._producers.values(), sync=sync)
        self._dirty = False
        self.prune(segment_bases, log_start_offset)

    def snapshot_on_close(
        self, offset: int, segment_bases: Sequence[int], log_start_offset: int
    ) -> None:
        """At a clean close: snapshot (fsynced) when there is state or earlier snapshots exist."""
        offsets = self.snapshot_offsets()
        if not (self._producers or self._dirty or offsets):
            return
        if offsets and offsets[-1] == offset and not self._dirty:
            return
        self.take_snapshot(offset, segment_bases, log_start_offset, sync=True)

    def prune(self, segment_bases: Sequence[int], log_start_offset: int) -> None:
        """Keep the newest snapshot, the newest at or below the log start, and those at segment bases.

        Segment-base snapshots let a truncation reload without replaying from
        the log start; the one at or below the log start carries producers
        whose batches retention deleted.
        """
        offsets = self.snapshot_offsets()
        if not offsets:
            return
        keep = {offsets[-1]}
        below = [o for o in offsets if o <= log_start_offset]
        if below:
            keep.add(below[-1])
        for o in offsets:
            if o in keep or o < log_start_offset:
                continue
            i = bisect.bisect_left(segment_bases, o)
            if i < len(segment_bases) and segment_bases[i] == o:
                keep.add(o)
        for o in offsets:
            if o not in keep:
                self._delete_snapshot(o)

    def _delete_snapshot(self, offset: int) -> None:
        (self.dir / snapshot_name(offset)).unlink(missing_ok=True)
