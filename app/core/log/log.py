"""One partition's log: an ordered list of segments with a single active one.

Offsets: ``log_start_offset`` is the first offset that may be read (retention
moves it), ``log_end_offset`` the offset the next record gets, and
``high_watermark`` the end of what consumers may see. Until replication
exists the high watermark follows the log end offset (``hw_follows_leo``);
it is a separate field so the replication layer can drive it.

Durability: by default a log never fsyncs on the append path
(``flush.messages`` and ``flush.ms`` are "never", as in Kafka). An append is
in the OS page cache when it returns, so it survives a crash of the process
but not of the machine; durability across machines is replication's job. A
rolled segment is fsynced in the background (``flush_rolled``) and the
recovery point advances, so recovery after a crash only scans the active
segment. ``flush.messages=N`` fsyncs on the appending thread every N
messages and ``flush.ms`` from the manager's background thread.

Concurrency: appends, truncation, rolls and retention are serialized by one
lock per log. Reads take no lock: they work from a snapshot of the segment
list (replaced, never mutated, on roll and deletion) and positional reads.
Deleted segments are renamed to ``.deleted`` and removed after
``file.delete.delay.ms``. However short that is, no read touches a closed
descriptor: a segment's file is closed only once the last reader and the
last slice handed out let go of it (:mod:`app.core.log.fileslice`), and a
read whose snapshot holds a segment deleted in the meantime reads again from
the current segments.

Idempotent producers (batches with a producer id, see
:mod:`app.core.log.producer_state`): their sequences are checked under the
append lock before anything is written, an exact retry is answered with the
original offsets and not written again, and the state is snapshotted on roll
and close and rebuilt on load and truncation. A batch the broker writes for a
producer that keeps no sequence (``UnnumberedBatch``) is numbered under the same
lock, in the hold that appends it. Batches without a producer id
cost one integer compare each.

Transactions (KIP-98, the partition's side; :mod:`app.txn` is the coordinator
that drives them): transactional batches (attributes bit 4) of a
producer with an id and epoch are appended like idempotent ones and open the
producer's transaction; :meth:`Log.append_control` writes the COMMIT or
ABORT control batch that closes it (the coordinator's call), and an ABORT
adds an entry to the marker segment's ``.txnindex``
(:mod:`app.core.log.txn_index`). The last stable offset
(:attr:`Log.last_stable_offset`) is the first offset of the oldest open
transaction (or completed one whose marker is not below the high watermark
yet), never above the high watermark; ``read(..., isolation=READ_COMMITTED)``
stops there and lists the aborted transactions overlapping what it read, as
Kafka's fetch does, for the fetch paths to filter. Loading and truncation
rebuild the open transactions and the replayed segments' ``.txnindex``.

Compaction (``cleanup.policy`` with ``compact``, driven by
:mod:`app.core.log.cleaner`) copies segments without the log's lock and takes
it only in :meth:`Log.replace_segments` to swap the copy in; appends to a
compacted topic must carry a key in every record (Kafka's rule).

Where the parts live: this module appends, reads, truncates, flushes and
keeps the offsets; :mod:`app.core.log.view` is the segment snapshot readers
work from (the read loop, the ``.txnindex`` and timestamp lookups);
:mod:`app.core.log.log_cleanup` (a base class of :class:`Log`) removes and
replaces segments (retention, the compaction swap, delayed file deletion);
:mod:`app.core.log.log_producers` (another) keeps the producer state's load,
snapshots, expiry and the last stable offset's bound.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import logging
import os
import threading
from array import array
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from app.common.batch import (
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
    ControlMarker,
    build_control_batch,
    read_control_marker,
    stamp,
    stamp_log_append_time,
    validate_batches,
    validate_replicated_batches,
)
from app.common.errors import (
    InvalidRecord,
    InvalidRequest,
    KafkaStorageError,
    OffsetOutOfRange,
    SegmentClosed,
)
from app.core.log.checkpoint import fsync_dir
from app.core.log.compact_batch import require_keys
from app.core.log.config import LogConfig
from app.core.log.epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from app.core.log.fileslice import FileSlice
from app.core.log.loader import load_segments
from app.core.log.log_cleanup import LogCleanup
from app.core.log.log_producers import NO_UNSTABLE, LogProducers
from app.core.log.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ProducerAppend,
    ProducerStateManager,
    UnnumberedBatch,
    without_duplicates,
)
from app.core.log.results import AppendInfo, FetchInfo, duplicate_info, offsets_of
from app.core.log.segment import BatchInfo, LogSegment, now_ms
from app.core.log.txn_index import AbortedTxn
from app.core.log.view import SegmentView

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "AppendInfo",
    "AppendListener",
    "FetchInfo",
    "FileSlice",
    "Log",
    "parse_log_dir_name",
]

# Fetch isolation levels, Kafka's names.
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"

_log = logging.getLogger(__name__)

AppendListener = Callable[["Log"], None]


def parse_log_dir_name(name: str) -> tuple[str, int]:
    """``orders-3`` -> ``("orders", 3)``; raises ValueError."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory")
    return topic, int(partition)


def _check_client_transactional(attributes: int, producer_id: int) -> None:
    if attributes & CONTROL_MASK:
        # Kafka's rule: control batches come from the broker (append_control), never a client.
        raise InvalidRecord("control batches (attribute bit 5) are written by the broker only")
    if producer_id < 0:
        raise InvalidRecord("a transactional batch (attribute bit 4) needs a producer id")


class Log(LogCleanup, LogProducers):
    """One partition's log; see the module docstring for durability and concurrency."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig | None = None,
        *,
        topic: str | None = None,
        partition: int | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        clock_ms: Callable[[], int] = now_ms,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.dir = Path(directory)
        if topic is None or partition is None:
            topic, partition = parse_log_dir_name(self.dir.name)
        self.topic = topic
        self.partition = partition
        self.config = config if config is not None else LogConfig()
        self._clock = clock_ms
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._listeners: tuple[AppendListener, ...] = ()
        self._closed = False
        self._offline = False
        self._truncations = 0
        loaded = load_segments(
            self.dir,
            self.config,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            clean_shutdown=clean_shutdown,
        )
        self.truncated_bytes_on_load = loaded.truncated_bytes
        self.recovered_segments_on_load = loaded.recovered_segments
        self._view = SegmentView.of(loaded.segments)
        self._log_start_offset = loaded.log_start_offset
        self._log_end_offset = loaded.segments[-1].next_offset
        self._high_watermark = self._log_end_offset
        self.hw_follows_leo = True
        # The epoch stamped on appended batches; replication sets it on a leader change.
        self.leader_epoch = 0
        self.recovery_point = loaded.recovery_point
        self._unflushed_messages = 0
        self._last_flush_ms = self._clock()
        self.leader_epoch_cache = LeaderEpochCache(
            self.dir / LEADER_EPOCH_CHECKPOINT, lambda: self._log_end_offset
        )
        self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self._producer_state = ProducerStateManager(
            self.dir, self.topic, self.partition, expiration_ms=producer_id_expiration_ms
        )
        # First offset of an open (or unreplicated completed) transaction, or a sentinel
        # past any offset: the LSO is min(this, HW), read without the lock.
        self._first_unstable = NO_UNSTABLE
        self._reload_producer_state(
            clean_shutdown=clean_shutdown,
            # Recovery scanned the segments from the recovery point: replay from there so
            # their .txnindex entries are rebuilt.
            max_snapshot_offset=None if clean_shutdown else recovery_point,
        )

    # -- offsets -----------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        with self._lock:
            self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)
            self._update_first_unstable()

    @property
    def last_stable_offset(self) -> int:
        """The LSO: no open transaction's record is below it; never above the high watermark."""
        return min(self._first_unstable, self._high_watermark)

    @property
    def segments(self) -> list[LogSegment]:
        """A snapshot of the segments, oldest first."""
        return list(self._view.segments)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._view.segments)

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self._log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._view.segments)})"
        )

    # -- appending ---------------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview | UnnumberedBatch,
        *,
        leader_epoch: int | None = None,
    ) -> AppendInfo:
        """Validate, assign offsets, stamp and write one or more batches from a producer.

        Batches are stamped with ``leader_epoch``, by default :attr:`leader_epoch`
        (the epoch replication made this broker leader in; 0 for a lone broker).

        A ``bytearray`` is stamped in place (no copy); other buffers are copied once. An
        :class:`UnnumberedBatch` is given its producer's next sequence here
        (:meth:`next_sequence`) and appended under the same hold of the lock.
        Raises the errors of :func:`app.common.batch.validate_batches`.

        Lock order: the flush that ``flush.messages`` asks for and the append listeners
        run after the log's lock is let go (:meth:`flush` takes its flush lock and then
        the log's lock; taken the other way round, two flushers deadlock).
        """
        if isinstance(data, UnnumberedBatch):
            with self._lock:  # reentrant: _append takes it again
                sequence = self._producer_state.next_sequence(data.producer_id, data.producer_epoch)
                info, written = self._append(data.number(sequence), leader_epoch)
        else:
            info, written = self._append(data, leader_epoch)
        if written:
            self._after_append(info.record_count)
        return info

    def _append(
        self, data: bytes | bytearray | memoryview, leader_epoch: int | None
    ) -> tuple[AppendInfo, bool]:
        """:meth:`append` up to the write, without the flush and the listeners (the caller
        runs them once it holds the log's lock no more); also whether anything was
        written (False: every batch was a retry)."""
        if leader_epoch is None:
            leader_epoch = self.leader_epoch
        batches = validate_batches(data, self.config.max_message_bytes)
        for _, header in batches:
            if header.attributes & (CONTROL_MASK | TRANSACTIONAL_MASK):
                _check_client_transactional(header.attributes, header.producer_id)
        if self.config.compact:
            require_keys(data, batches, self.topic, self.partition)
        buf = data if isinstance(data, bytearray) else bytearray(data)
        log_append_time = self.config.message_timestamp_type == "LogAppendTime"
        records = 0
        with self._lock:
            self._check_open()
            now = self._clock()
            first = offset = self._log_end_offset
            plan: ProducerAppend | None = None
            for _, header in batches:
                # The only cost for batches without a producer id: one compare each.
                if header.producer_id >= 0:
                    plan = self._producer_state.check(batches, first, now, log_append_time)
                    if plan.duplicates is not None:
                        if plan.all_duplicates:
                            info = duplicate_info(
                                batches, plan.duplicates, log_append_time, self._log_start_offset
                            )
                            return info, False
                        buf, batches = without_duplicates(buf, batches, plan.duplicates)
                    break
            infos: list[BatchInfo] = []
            max_ts = -1
            for pos, header in batches:
                stamp(buf, pos, offset, leader_epoch)
                ts = header.max_timestamp
                if log_append_time:
                    stamp_log_append_time(buf, pos, header.size, now)
                    ts = now
                last = offset + header.last_offset_delta
                infos.append(BatchInfo(pos, header.size, offset, last, ts))
                max_ts = max(max_ts, ts)
                records += header.record_count
                offset = last + 1
            # The epoch's start is recorded before its first batch is written (as Kafka
            # does): a crash in between leaves an entry past the log end, dropped on load,
            # never a batch whose epoch the cache does not know.
            if leader_epoch >= 0 and self.leader_epoch_cache.latest_epoch != leader_epoch:
                self.leader_epoch_cache.assign(leader_epoch, first)
            self._write(buf, infos, now, first)
            if plan is not None:
                self._producer_state.commit(plan)
                self._update_first_unstable()
            info = AppendInfo(
                first,
                offset - 1,
                records,
                max_ts,
                now if log_append_time else -1,
                self._log_start_offset,
            )
            if plan is not None and plan.duplicates is not None:
                info = dataclasses.replace(info, duplicates=offsets_of(plan.duplicates))
        return info, True

    def append_as_follower(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        """Append replicated batches verbatim: offsets and epochs are already assigned."""
        batches = validate_replicated_batches(data)
        records = sum(h.record_count for _, h in batches)
        with self._lock:
            self._check_open()
            first = batches[0][1].base_offset
            if first < self._log_end_offset:
                raise InvalidRecord(
                    f"replicated batch at offset {first} is below the log end offset "
                    f"{self._log_end_offset} of {self.topic}-{self.partition}"
                )
            infos = [
                BatchInfo(pos, h.size, h.base_offset, h.last_offset, h.max_timestamp)
                for pos, h in batches
            ]
            for _, h in batches:  # epochs first, as in append
                latest = self.leader_epoch_cache.latest_epoch
                if h.partition_leader_epoch >= 0 and (
                    latest is None or h.partition_leader_epoch > latest
                ):
                    self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
            self._write(data, infos, self._clock(), first)
            for pos, h in batches:
                if h.producer_id >= 0:
                    marker = read_control_marker(data, pos) if h.attributes & CONTROL_MASK else None
                    aborted = self._producer_state.replay(h, self._clock(), marker)
                    if aborted is not None:
                        self._view.segments[-1].txn_index.append(aborted)
            self._update_first_unstable()
            info = AppendInfo(
                first,
                infos[-1].last_offset,
                records,
                max(b.max_timestamp for b in infos),
                -1,
                self._log_start_offset,
            )
        self._after_append(records)
        return info

    def append_control(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        coordinator_epoch: int,
        leader_epoch: int | None = None,
    ) -> AppendInfo:
        """Write the COMMIT or ABORT marker ending ``producer_id``'s transaction (the
        transaction coordinator's call, KIP-98's WriteTxnMarkers).

        The control batch has Kafka's format (:func:`app.common.batch.build_control_batch`).
        An ABORT that ends an open transaction adds its entry to the ``.txnindex`` of
        the segment the marker lands in; either marker moves the LSO past the
        transaction once the marker is below the high watermark. Raises
        ProducerFenced (older producer epoch), TransactionCoordinatorFenced (older
        coordinator epoch) or InvalidRecord (no producer id or epoch).
        """
        if leader_epoch is None:
            leader_epoch = self.leader_epoch
        with self._lock:
            self._check_open()
            state = self._producer_state
            state.check_marker(producer_id, producer_epoch, coordinator_epoch)
            now = self._clock()
            buf = bytearray(
                build_control_batch(
                    producer_id,
                    producer_epoch,
                    commit=commit,
                    coordinator_epoch=coordinator_epoch,
                    timestamp=now,
                )
            )
            offset = self._log_end_offset
            stamp(buf, 0, offset, leader_epoch)
            if leader_epoch >= 0 and self.leader_epoch_cache.latest_epoch != leader_epoch:
                self.leader_epoch_cache.assign(leader_epoch, offset)
            self._write(buf, [BatchInfo(0, len(buf), offset, offset, now)], now, offset)
            aborted = state.complete_txn(
                producer_id,
                producer_epoch,
                ControlMarker(commit, coordinator_epoch),
                offset,
                now,
            )
            if aborted is not None:
                self._view.segments[-1].txn_index.append(aborted)
            self._update_first_unstable()
            info = AppendInfo(offset, offset, 1, now, -1, self._log_start_offset)
        self._after_append(1)
        return info

    def _write(
        self, data: bytes | bytearray | memoryview, infos: Sequence[BatchInfo], now: int, first: int
    ) -> None:
        active = self._view.segments[-1]
        if active.should_roll(
            len(data), infos[-1].last_offset, now, self.config.segment_bytes, self.config.segment_ms
        ):
            active = self._roll(first)
        active.append(data, infos, now)
        self._log_end_offset = infos[-1].last_offset + 1
        if self.hw_follows_leo:
            self._high_watermark = self._log_end_offset
            # Markers now below the HW no longer bound the LSO.
            self._producer_state.on_high_watermark(self._high_watermark)

    def _after_append(self, records: int) -> None:
        with self._lock:
            self._unflushed_messages += records
            flush = self._unflushed_messages >= self.config.flush_messages
        if flush:
            self.flush()
        for listener in self._listeners:
            try:
                listener(self)
            except Exception:
                _log.exception("append listener of %s-%s failed", self.topic, self.partition)

    def roll(self) -> LogSegment:
        """Start a new active segment now (no-op when the active one is empty)."""
        with self._lock:
            return self._roll(self._log_end_offset)

    def _roll(self, base_offset: int) -> LogSegment:
        view = self._view
        active = view.segments[-1]
        if active.size == 0:
            if active.base_offset == base_offset:
                return active
            # An empty active segment with the wrong base (a follower's offset gap): replace it.
            self._set_view(view.bases[:-1], view.segments[:-1])
            active.delete_files()
        else:
            active.seal()
        seg = LogSegment.open(self.dir, base_offset, self.config, create=True)
        view = self._view
        self._set_view(view.bases + array("q", [base_offset]), [*view.segments, seg])
        if self._producer_state.wants_snapshot():
            self._snapshot_producer_state(base_offset)
        return seg

    # -- listeners ---------------------------------------------------------------

    def add_append_listener(self, cb: AppendListener) -> None:
        with self._lock:
            self._listeners = (*self._listeners, cb)

    def remove_append_listener(self, cb: AppendListener) -> None:
        with self._lock:
            self._listeners = tuple(x for x in self._listeners if x is not cb)

    # -- reading -----------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        isolation: str = READ_UNCOMMITTED,
    ) -> FetchInfo:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least one).

        Only batches entirely below ``max_offset`` (default: the high
        watermark) are returned. With ``isolation=READ_COMMITTED`` the bound
        is also the last stable offset, and the answer's
        ``aborted_transactions`` lists every aborted transaction overlapping
        ``[offset, bound)`` (Kafka's FetchResponse AbortedTransactions: the
        reader drops the records of those producers from each first offset up
        to the ABORT marker). Raises :class:`OffsetOutOfRange` unless
        ``log_start_offset <= offset <= log_end_offset``.
        """
        committed = isolation == READ_COMMITTED
        if not committed and isolation != READ_UNCOMMITTED:
            raise InvalidRequest(
                f"unknown isolation level {isolation!r}; use {READ_UNCOMMITTED} or {READ_COMMITTED}"
            )
        while True:
            view = self._view
            try:
                if committed:
                    return self._read_committed(offset, max_bytes, max_offset)
                return self._read(offset, max_bytes, max_offset)
            except SegmentClosed:
                self._after_closed_segment(view)

    def _after_closed_segment(self, view: SegmentView) -> None:
        """A read met a segment closed under it: go on once the segments changed.

        Every deletion happens under the log's lock with the view change, so
        taking the lock waits for the one under way. Raises when the log is
        closed, or (never expected) when a live segment was closed.
        """
        with self._lock:
            if self._closed:
                raise SegmentClosed(f"log {self.topic}-{self.partition} is closed")
            if self._view is view:
                raise KafkaStorageError(
                    f"{self.topic}-{self.partition}: a live segment is closed; restart the broker"
                )

    def _read(self, offset: int, max_bytes: int, max_offset: int | None) -> FetchInfo:
        # Order matters: the end offset first, then the segments (which then
        # hold everything below it), then the start (which only grows).
        end = self._log_end_offset
        hw = self._high_watermark
        view = self._view
        start = self._log_start_offset
        if offset < start or offset > end:
            raise OffsetOutOfRange(self.topic, self.partition, offset, start, end)
        limit = hw if max_offset is None else max_offset
        slices, total = view.read(offset, max_bytes, limit)
        return FetchInfo(slices, total, hw, start, end, min(self._first_unstable, hw))

    def _read_committed(self, offset: int, max_bytes: int, max_offset: int | None) -> FetchInfo:
        # The LSO before the segments: everything below it is in the view read next.
        lso = self.last_stable_offset
        bound = lso if max_offset is None else min(lso, max_offset)
        info = self._read(offset, max_bytes, bound)
        return dataclasses.replace(
            info,
            last_stable_offset=lso,
            aborted_transactions=tuple(self.aborted_transactions(offset, bound)),
        )

    def aborted_transactions(self, start: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start, upper_bound)``, oldest marker first
        (:meth:`SegmentView.aborted_transactions <app.core.log.view.SegmentView.aborted_transactions>`)."""
        return self._view.aborted_transactions(start, upper_bound)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >= ``timestamp_ms``.

        ``None`` when every record is older (Kafka answers the log end offset then).
        """
        while True:
            view = self._view
            try:
                return self._offset_for_timestamp(timestamp_ms)
            except SegmentClosed:
                self._after_closed_segment(view)

    def _offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        hw = self._high_watermark
        start = self._log_start_offset
        return self._view.offset_for_timestamp(timestamp_ms, start, hw)

    # -- truncation --------------------------------------------------------------

    @property
    def truncations(self) -> int:
        """How often the log was cut back (a follower matching a new leader): whoever
        caches its bytes by offset compares this, since offsets get reused after a cut."""
        return self._truncations

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset`` (a batch holding ``offset`` goes whole)."""
        with self._lock:
            self._check_open()
            if offset >= self._log_end_offset:
                # No batch to cut, but an epoch begun at the log end without a batch yet
                # (a term that took no write) goes, as it would with batches.
                self.leader_epoch_cache.truncate_from_end(offset)
                return
            self._truncations += 1
            view = self._view
            if offset < view.bases[0]:
                self._truncate_fully_and_start_at(max(offset, 0))
                return
            keep = bisect.bisect_right(view.bases, offset)
            doomed = view.segments[keep:]
            target = view.segments[keep - 1]
            self._set_view(view.bases[:keep], view.segments[:keep])
            target.truncate_to(offset)
            target.make_active()
            self._schedule_delete(doomed)
            self._log_end_offset = target.next_offset
            self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
            self._high_watermark = min(self._high_watermark, self._log_end_offset)
            self.recovery_point = min(self.recovery_point, self._log_end_offset)
            self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
            self._reload_producer_state(clean_shutdown=False)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything and continue empty at ``offset`` (a follower whose leader's log
        starts past this log's end, after retention there)."""
        with self._lock:
            self._check_open()
            self._truncate_fully_and_start_at(offset)

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        self._truncations += 1
        doomed = self._view.segments
        # Rename first: the new segment may reuse a doomed segment's name.
        self._schedule_delete(doomed)
        seg = LogSegment.open(self.dir, offset, self.config, create=True)
        self._set_view(array("q", [offset]), [seg])
        self._log_start_offset = self._log_end_offset = self._high_watermark = offset
        self.recovery_point = offset
        self.leader_epoch_cache.clear()
        self._producer_state.truncate_fully()
        self._update_first_unstable()

    # -- flushing ----------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to`` (default: the end) and move the recovery point."""
        with self._flush_lock:
            if self._closed or self._offline:
                return
            target = self._log_end_offset if up_to is None else min(up_to, self._log_end_offset)
            if up_to is None:
                self._unflushed_messages = 0
                self._last_flush_ms = self._clock()
            if target <= self.recovery_point:
                return
            view = self._view
            first = view.index_of(self.recovery_point)
            last = bisect.bisect_left(view.bases, target)
            for seg in view.segments[first:last]:
                seg.flush()
            fsync_dir(self.dir)
            with self._lock:
                if target <= self._log_end_offset:
                    self.recovery_point = max(self.recovery_point, target)

    def flush_rolled(self) -> None:
        """fsync segments that were rolled since the last flush (from the background thread)."""
        active_base = self._view.bases[-1]
        if self.recovery_point < active_base:
            self.flush(active_base)

    def maybe_flush(self, now: int | None = None) -> bool:
        """Apply ``flush.ms``; returns True if it flushed."""
        now = self._clock() if now is None else now
        if self._unflushed_messages and now - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    # -- lifecycle ---------------------------------------------------------------

    def mark_offline(self) -> None:
        """Refuse further writes but keep files open for in-flight reads (topic deletion)."""
        with self._lock:
            self._offline = True

    def close(self) -> None:
        """Seal the active segment's indexes, close every file, run pending deletes."""
        with self._lock:
            if self._closed:
                return
            if not self._offline:
                self._snapshot_producer_state(self._log_end_offset, closing=True)
            self._closed = True
            for seg in self._view.segments:
                seg.close()
        self.delete_expired_files(now=1 << 62)

    def delete(self) -> None:
        """Close and remove the whole directory (the topic was deleted)."""
        self.close()
        for path in sorted(self.dir.iterdir(), reverse=True):
            if path.is_file():
                path.unlink(missing_ok=True)
        os.rmdir(self.dir)


def close_logs(logs: Iterable[Log | None]) -> None:
    """Close each of ``logs`` (None: a partition not hosted), every one even when one
    fails: the descriptors of the rest are wanted by the broker."""
    for log in logs:
        if log is not None:
            with contextlib.suppress(Exception):
                log.close()
