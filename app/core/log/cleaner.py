"""Log compaction: keep the latest record of every key, drop the records it supersedes.

Logs whose ``cleanup.policy`` contains ``compact`` are cleaned; with
``compact,delete`` retention (:mod:`app.core.log.retention`) applies as well.

**Which log.** Each log has a *first dirty offset*: everything below it was
compacted by an earlier pass. It is kept per partition in
``<data-dir>/cleaner-offset-checkpoint`` (Kafka's ``topic partition offset``
text format, :class:`~app.core.log.checkpoint.OffsetCheckpointFile`). The
*cleanable* segments are the oldest non-active ones that lie wholly below the
high watermark, up to the first dirty segment with a record newer than
``min.compaction.lag.ms``. Their bytes below the first dirty offset are
*clean*, the rest *dirty*; a log qualifies when dirty / (clean + dirty)
reaches ``min.cleanable.dirty.ratio``, and :meth:`LogCleaner.run_once`
cleans the qualifying log with the highest ratio.

**One pass.**

1. Map: every keyed record of the dirty part, in offset order, goes into an
   :class:`~app.core.log.offset_map.OffsetMap` (key -> latest offset). The
   map has a memory budget; when the next batch might not fit, the map ends
   before it (the *map end*), and the rest waits for the next pass.
2. Recopy: the segments below the map end, from the first one, in groups
   whose sizes add up to at most ``segment.bytes``, into one new segment per
   group named ``<base of the group>.log.cleaned``. A batch is copied as it
   is when all its records stay; it is dropped when none does; otherwise it
   is rewritten with the surviving records only, keeping its identity and
   each record's offset and timestamp (:mod:`app.core.log.compact_batch`).
   Offsets therefore keep their values and gaps appear; a fetch from a
   removed offset gets the next record.
3. Swap each group in (:meth:`Log.replace_segments`), then move the first
   dirty offset to the map end.

**Which records stay** (in a batch below the map end):

* transactions (Kafka's rules; only segments below the last stable offset
  are cleanable, so every transaction there is decided): the records of
  aborted transactions (known from the segments' ``.txnindex``) are
  dropped, and never enter the offset map, so they supersede nothing; a
  COMMIT or ABORT marker stays while any batch of its transaction is left,
  and once none is, it gets a delete horizon (``delete.retention.ms``, as a
  tombstone does) and a later pass after the horizon drops it, unless it is
  its producer's last batch. The ``.txnindex`` entries of a group go to its
  copy unchanged (an entry whose records are gone filters nothing);
* the *header* of the last batch of every producer id in the whole log, so
  that the idempotent-producer state rebuilt from the log (last sequence and
  epoch per producer) survives compaction. Its records are filtered like any
  others; when none survives, the batch stays as an empty one (no records,
  same offsets, producer id, epoch and sequences), as Kafka keeps it. Keeping
  such a batch whole would keep the values it holds after their key was
  overwritten or deleted, and once a tombstone expired a deleted value would
  be the key's latest again;
* a keyed record whose offset is the latest the map knows for its key, or
  whose key the map does not know (its latest is in the clean part);
* a tombstone (null value) under the same rule, until ``delete.retention.ms``
  after the pass that first cleaned it. That pass rewrites its batch with a
  *delete horizon* (now + ``delete.retention.ms``, Kafka's KIP-534 format,
  see :mod:`app.core.log.compact_batch`), and a later pass after the horizon
  drops it. Consumers reading from the start therefore have
  ``delete.retention.ms`` to see a delete. The horizon is per batch rather
  than per segment (Kafka's older rule, the segment's mtime) because merging
  segments would restart a segment's clock on every pass and a busy log would
  keep its tombstones forever. The cleaner remembers the earliest horizon and
  cleans the log again right after it even if it is not dirty (that memory is
  not persisted: after a restart expired tombstones go with the next pass the
  dirty ratio triggers);
* records without a key are dropped (appends to compacted topics refuse them,
  but a topic switched from ``delete`` to ``compact`` may hold some).

**Crash safety.** A group's copy is written as ``.cleaned`` files and
fsynced, even when empty; then, under the log's lock, a marker records where
the group's segments end, the ``.log`` is renamed to ``.swap`` (the commit
point), the old segments are renamed ``.deleted`` and the copy gets the live
names (indexes first, ``.log`` last; an empty copy after the first segment is
then dropped). The loader deletes ``.cleaned`` files (incomplete copies: the
old segments are all still there) and finishes a swap whose ``.log.swap``
exists, deleting every old segment up to the marker's end
(:func:`app.core.log.loader.complete_swaps`).

**Concurrency.** One cleaning at a time (a lock), on the cleaner's thread or
the caller of :meth:`LogCleaner.run_once`. Reads and appends go on while a
log is cleaned: the cleaner reads the old segments through files it holds
(:class:`~app.core.log.fileslice.SegmentFile`), writes its copy beside them, and takes the log's lock only for the swap, which
checks that no truncation happened and that the group's segments are still
in place (retention may have deleted them), else drops the copy. Old segments
are removed ``file.delete.delay.ms`` after the swap; slices handed out before
it stay readable whatever that delay, since they hold their files.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

from app.common.batch import (
    NO_PRODUCER_ID,
    BatchHeader,
    RecordBatchReader,
    compute_crc,
    read_header,
)
from app.common.errors import KafkaStorageError, SegmentClosed
from app.core.log.checkpoint import CheckpointCorrupt, OffsetCheckpointFile
from app.core.log.compact_batch import (
    delete_horizon,
    empty_batch,
    encode_with_horizon,
    iter_segment_batches,
    rebuild,
)
from app.core.log.config import LogConfig
from app.core.log.fileslice import SegmentFile
from app.core.log.index import MAX_RELATIVE_OFFSET
from app.core.log.loader import CLEANED_SUFFIX
from app.core.log.log import Log
from app.core.log.offset_map import OffsetMap
from app.core.log.segment import BatchInfo, LogSegment, segment_name
from app.core.log.txn_index import AbortedTxn

__all__ = ["CLEANER_CHECKPOINT", "CleanResult", "CleanerConfig", "LogCleaner", "Survey", "survey"]

_log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"

# Check for an abort (shutdown, topic deletion) every this many batches.
_ABORT_CHECK_BATCHES = 256


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Broker-wide cleaner settings (Kafka's ``log.cleaner.*``)."""

    enable: bool = True
    # log.cleaner.dedupe.buffer.size: the offset map's memory budget.
    dedupe_buffer_bytes: int = 128 << 20
    # log.cleaner.io.buffer.size: read chunk and write buffer.
    io_buffer_bytes: int = 1 << 20
    # log.cleaner.backoff.ms: sleep when no log needs cleaning (and after a failure).
    backoff_ms: int = 15_000


@dataclass(slots=True)
class CleanResult:
    """What one pass over one log did."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int  # the map end: the next pass's first dirty offset
    dirty_ratio: float
    started_ms: int
    duration_ms: float = 0.0
    segments_before: int = 0
    segments_after: int = 0
    groups_swapped: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_dropped: int = 0
    completed: bool = False  # False: the log changed under the pass, which stopped early


class Survey(NamedTuple):
    """Where a log's clean, dirty and uncleanable parts are."""

    first_dirty: int
    first_uncleanable: int
    cleanable_segments: int  # how many of the oldest segments may be recopied
    clean_bytes: int
    dirty_bytes: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def _largest_timestamp(seg: LogSegment) -> int:
    ts = seg.max_timestamp
    return ts if ts >= 0 else seg.last_modified_ms()


def survey(
    segments: Sequence[LogSegment],
    *,
    first_dirty: int,
    high_watermark: int,
    config: LogConfig,
    now: int,
) -> Survey:
    """Split ``segments`` (oldest first, the last one active) as the module docstring says.

    A segment straddling the first dirty offset counts in proportion to its
    offsets (no I/O: surveys run over every compacted log on every round).
    """
    lag = config.min_compaction_lag_ms
    count = clean = dirty = 0
    for i in range(len(segments) - 1):
        seg = segments[i]
        next_base = segments[i + 1].base_offset
        if next_base > high_watermark:
            break
        if next_base <= first_dirty:
            clean += seg.size
        else:
            if lag > 0 and _largest_timestamp(seg) > now - lag:
                break
            if seg.base_offset >= first_dirty:
                dirty += seg.size
            else:
                part = seg.size * (next_base - first_dirty) // (next_base - seg.base_offset)
                dirty += part
                clean += seg.size - part
        count += 1
    first_uncleanable = segments[count].base_offset if segments else 0
    return Survey(first_dirty, first_uncleanable, count, clean, dirty)


class _AbortedRanges:
    """Which transactional batches belong to aborted transactions, walking a log in offset order.

    Built from the segments' ``.txnindex`` entries; :meth:`aborted` must be asked
    in ascending base offset (batches may be skipped).
    """

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._open: dict[int, int] = {}  # producer id -> offset of its ABORT marker

    def aborted(self, header: BatchHeader) -> bool:
        base = header.base_offset
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= base:
            txn = pending[self._next]
            self._open[txn.producer_id] = txn.last_offset
            self._next += 1
        if not header.is_transactional or header.is_control:
            return False
        end = self._open.get(header.producer_id)
        return end is not None and base < end


class _Aborted(Exception):
    """The pass was stopped (shutdown, topic deleted, log closed)."""


class _Pass:
    """State of one pass over one log; see the module docstring for the rules it applies."""

    def __init__(
        self,
        log: Log,
        segments: list[LogSegment],
        files: list[SegmentFile],
        truncations: int,
        found: Survey,
        now: int,
        cleaner: LogCleaner,
    ) -> None:
        self.log = log
        self.config = log.config
        self.segments = segments
        self.files = files
        self.truncations = truncations
        self.survey = found
        self.now = now
        self.cleaner = cleaner
        self.chunk = cleaner.config.io_buffer_bytes
        self.offsets = OffsetMap(cleaner.config.dedupe_buffer_bytes)
        self.map_end = found.first_uncleanable
        self.last_batches: dict[int, int] = {}
        self.aborted_txns = [e for seg in segments for e in seg.txn_index.entries]
        # Producer id -> whether a batch of its current transaction was kept by this pass
        # (its marker must then stay).
        self.txn_kept: dict[int, bool] = {}
        self.tombstone_deadline: int | None = None
        # Set while Log.replace_segments runs: a failure there is the disk's, not an abort.
        self.swapping = False
        self.result = CleanResult(
            log.topic,
            log.partition,
            found.first_dirty,
            found.first_uncleanable,
            round(found.dirty_ratio, 4),
            now,
            segments_before=len(segments),
        )
        self._batches = 0

    def check_abort(self) -> None:
        self._batches += 1
        if self._batches % _ABORT_CHECK_BATCHES == 0 and (
            self.cleaner.stopping or not self.log.online
        ):
            raise _Aborted

    # -- before copying ----------------------------------------------------------

    def scan_producers(self) -> None:
        """The base offset of each producer id's last batch in the whole log (headers only)."""
        last = self.last_batches
        for seg, f in zip(self.segments, self.files, strict=True):
            for header, _ in iter_segment_batches(f.fd, seg.size, self.chunk):
                if header.producer_id != NO_PRODUCER_ID:
                    last[header.producer_id] = header.base_offset
                self.check_abort()

    def build_map(self) -> None:
        """Fill the offset map from the dirty part; set the map end where it stopped."""
        first_dirty = self.survey.first_dirty
        put_records = self.offsets.put_records
        aborted = _AbortedRanges(self.aborted_txns)
        for i in range(self.survey.cleanable_segments):
            seg = self.segments[i]
            if self.segments[i + 1].base_offset <= first_dirty:
                continue
            for header, data in iter_segment_batches(self.files[i].fd, seg.size, self.chunk):
                self.check_abort()
                if header.last_offset < first_dirty or header.is_control or aborted.aborted(header):
                    continue
                if not self.offsets.has_room(header.record_count):
                    self.map_end = header.base_offset
                    self.result.end_offset = self.map_end
                    return
                put_records(RecordBatchReader(bytes(data)))

    def groups(self) -> list[range]:
        """Index ranges of the segments below the map end, grouped up to segment.bytes."""
        segments = self.segments
        limit = self.config.segment_bytes
        out: list[range] = []
        i = 0
        n = self.survey.cleanable_segments
        while i < n and segments[i].base_offset < self.map_end:
            j = i + 1
            size = segments[i].size
            while (
                j < n
                and segments[j].base_offset < self.map_end
                and size + segments[j].size <= limit
                and segments[j + 1].base_offset - 1 - segments[i].base_offset <= MAX_RELATIVE_OFFSET
            ):
                size += segments[j].size
                j += 1
            out.append(range(i, j))
            i = j
        return out

    # -- copying -----------------------------------------------------------------

    def clean_group(self, group: range) -> bool:
        """Copy one group into a ``.cleaned`` segment and swap it in; False if the log changed."""
        log = self.log
        base = self.segments[group.start].base_offset
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            (log.dir / f"{segment_name(base)}{suffix}{CLEANED_SUFFIX}").unlink(missing_ok=True)
        out = LogSegment.open(log.dir, base, self.config, suffix=CLEANED_SUFFIX, create=True)
        committed = False
        try:
            self._copy(group, out)
            # Even an empty copy is swapped in: the swap is what makes the removal of
            # the old segments crash-safe (Log.replace_segments then drops it).
            out.seal()
            out.flush()
            old = self.segments[group.start : group.stop]
            self.swapping = True
            committed = log.replace_segments(old, out, truncations=self.truncations)
            self.swapping = False
            if committed:
                self.result.groups_swapped += 1
            else:
                out.delete_files()
            return committed
        except BaseException:
            if not committed and out.log_path.name.endswith(CLEANED_SUFFIX):
                with contextlib.suppress(OSError):
                    out.delete_files()
            raise

    def _copy(self, group: range, out: LogSegment) -> None:
        """Write the group's surviving batches to ``out``."""
        io_bytes = self.chunk
        pending = bytearray()
        infos: list[BatchInfo] = []
        aborted = _AbortedRanges(self.aborted_txns)
        for i in group:
            for txn in self.segments[i].txn_index.entries:
                out.txn_index.append(txn)
            seg, f = self.segments[i], self.files[i]
            self.result.bytes_read += seg.size
            for header, data in iter_segment_batches(f.fd, seg.size, io_bytes):
                self.check_abort()
                if compute_crc(data, 0, len(data)) != header.crc:
                    raise KafkaStorageError(
                        f"{self.log.topic}-{self.log.partition}: CRC mismatch in the batch at "
                        f"offset {header.base_offset}; not compacting a damaged segment"
                    )
                kept = self._filter(header, data, aborted.aborted(header))
                if header.is_transactional and not header.is_control:
                    kept_any = self.txn_kept.get(header.producer_id, False)
                    self.txn_kept[header.producer_id] = kept_any or kept is not None
                if kept is None:
                    continue
                size = len(kept)
                max_ts = header.max_timestamp if kept is data else read_header(kept).max_timestamp
                infos.append(
                    BatchInfo(len(pending), size, header.base_offset, header.last_offset, max_ts)
                )
                pending += kept
                if len(pending) >= io_bytes:
                    out.append(pending, infos, self.now)
                    self.result.bytes_written += len(pending)
                    pending = bytearray()
                    infos = []
        if infos:
            out.append(pending, infos, self.now)
            self.result.bytes_written += len(pending)

    def _filter(
        self, header: BatchHeader, data: memoryview, aborted: bool = False
    ) -> memoryview | bytearray | None:
        """The batch to write: ``data`` itself, a rewritten batch, or None (nothing survives).

        ``aborted``: the batch belongs to an aborted transaction.
        """
        result = self.result
        result.records_read += header.record_count
        producer_last = (
            header.producer_id != NO_PRODUCER_ID
            and self.last_batches.get(header.producer_id) == header.base_offset
        )
        if header.is_control:
            return self._filter_marker(header, data, producer_last)
        if header.base_offset >= self.map_end:
            result.records_retained += header.record_count
            return data
        if aborted:
            if not producer_last:
                return None
            return data if header.record_count == 0 else empty_batch(header)
        map_end = self.map_end
        now = self.now
        horizon = delete_horizon(header)
        records = list(RecordBatchReader(bytes(data)))
        kept: list[Any] = []
        dropped = False
        tombstones = False
        for r, newest in zip(records, self.offsets.latest_of(records), strict=True):
            offset = r.offset
            if r.key is None:
                dropped = True
                continue
            if newest > offset and offset < map_end:
                dropped = True
                continue
            if r.value is None:
                if horizon is not None and now > horizon:
                    result.tombstones_dropped += 1
                    dropped = True
                    continue
                tombstones = True
            kept.append(r)
        result.records_retained += len(kept)
        if not kept:
            if not producer_last:
                return None
            # The producer's sequence state outlives its records (see the module docstring).
            return data if header.record_count == 0 else empty_batch(header)
        if tombstones:
            if horizon is None:
                # First time cleaned: the tombstones stay delete.retention.ms from now.
                horizon = now + self.config.delete_retention_ms
                self._note_horizon(horizon)
                return encode_with_horizon(header, kept, horizon)
            self._note_horizon(horizon)
            return encode_with_horizon(header, kept, horizon) if dropped else data
        return rebuild(header, kept) if dropped else data

    def _filter_marker(
        self, header: BatchHeader, data: memoryview, producer_last: bool
    ) -> memoryview | bytearray | None:
        """A COMMIT/ABORT marker stays while its transaction has a batch left; after that
        it gets a delete horizon, and goes in a pass after the horizon."""
        # The marker ends the producer's transaction whatever happens to it.
        had_data = self.txn_kept.pop(header.producer_id, False)
        if had_data or producer_last or header.base_offset >= self.map_end:
            self.result.records_retained += header.record_count
            return data
        horizon = delete_horizon(header)
        if horizon is None:
            horizon = self.now + self.config.delete_retention_ms
            self._note_horizon(horizon)
            self.result.records_retained += header.record_count
            return encode_with_horizon(header, list(RecordBatchReader(bytes(data))), horizon)
        if self.now > horizon:
            return None
        self._note_horizon(horizon)
        self.result.records_retained += header.record_count
        return data

    def _note_horizon(self, horizon: int) -> None:
        # The cleaner comes back for the batch as soon as its tombstones may go.
        due = horizon + 1
        if self.tombstone_deadline is None or due < self.tombstone_deadline:
            self.tombstone_deadline = due


class LogCleaner:
    """Compacts the logs that ``logs()`` yields; see the module docstring.

    File: ``<data_dir>/cleaner-offset-checkpoint`` (first dirty offset per
    partition). Threads: :meth:`start` runs passes on a ``logbus-log-cleaner``
    thread until :meth:`shutdown`; :meth:`run_once` and :meth:`clean` may be
    called from any thread (passes are serialized by a lock).
    """

    def __init__(
        self,
        data_dir: Path,
        logs: Callable[[], Iterable[Log]],
        config: CleanerConfig = CleanerConfig(),
    ) -> None:
        self.data_dir = Path(data_dir)
        self.config = config
        self._logs = logs
        self._checkpoint_file = OffsetCheckpointFile(self.data_dir / CLEANER_CHECKPOINT)
        try:
            self._checkpoints = self._checkpoint_file.read()
        except (CheckpointCorrupt, OSError) as e:
            # Starting over from the log start only costs a full pass.
            _log.warning("ignoring %s: %s", CLEANER_CHECKPOINT, e)
            self._checkpoints = {}
        self._clean_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._tombstone_deadlines: dict[tuple[str, int], int] = {}
        self._failed_until: dict[tuple[str, int], float] = {}
        self._ratios: dict[tuple[str, int], float] = {}
        self._last: dict[tuple[str, int], CleanResult] = {}
        self._totals = {"passes": 0, "bytes_read": 0, "bytes_written": 0, "failures": 0}
        self._last_run_ms = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        if self._thread is not None or not self.config.enable:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="logbus-log-cleaner", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the thread; a pass in progress is abandoned (its copy deleted)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        # Explicit passes (run_once, clean) work again after the thread is gone.
        self._stop.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                result = self.run_once()
            except Exception:
                _log.exception("log cleaner round failed")
                result = None
            if result is None:
                self._stop.wait(self.config.backoff_ms / 1000)

    # -- checkpoints -------------------------------------------------------------

    def first_dirty_offset(self, log: Log) -> int:
        """Where the dirty part starts: the checkpoint if it is within the log, else its start."""
        with self._state_lock:
            offset = self._checkpoints.get((log.topic, log.partition), -1)
        if not log.log_start_offset <= offset <= log.log_end_offset:
            return log.log_start_offset
        return offset

    def checkpoints(self) -> dict[tuple[str, int], int]:
        with self._state_lock:
            return dict(self._checkpoints)

    def forget(self, topic: str) -> None:
        """A topic was deleted: drop its checkpoints (a new topic of that name starts dirty)."""

        def keep(key: tuple[str, int]) -> bool:
            return key[0] != topic

        with self._state_lock:
            self._checkpoints = {k: v for k, v in self._checkpoints.items() if keep(k)}
            self._tombstone_deadlines = {
                k: v for k, v in self._tombstone_deadlines.items() if keep(k)
            }
            self._failed_until = {k: v for k, v in self._failed_until.items() if keep(k)}
            self._ratios = {k: v for k, v in self._ratios.items() if keep(k)}
            self._last = {k: v for k, v in self._last.items() if keep(k)}
            # Written under the lock so that file writes land in the order of the changes.
            self._checkpoint_file.write(self._checkpoints)

    def _advance(self, log: Log, offset: int) -> None:
        with self._state_lock:
            # Under the lock: a topic deletion marks the log offline before forget() runs.
            if not log.online:
                return
            self._checkpoints[(log.topic, log.partition)] = offset
            live = {(lg.topic, lg.partition) for lg in self._logs()}
            snapshot = {k: v for k, v in self._checkpoints.items() if k in live}
            self._checkpoint_file.write(snapshot)

    # -- choosing and cleaning ---------------------------------------------------

    def survey(self, log: Log, now: int | None = None) -> Survey:
        """Where ``log`` stands now (clean, dirty, uncleanable parts)."""
        return survey(
            log.segments,
            first_dirty=self.first_dirty_offset(log),
            # Kafka bounds cleaning by the first unstable offset: an open transaction's
            # fate is unknown, so nothing from its first offset on is cleaned.
            high_watermark=log.last_stable_offset,
            config=log.config,
            now=log.time_ms() if now is None else now,
        )

    def _eligible(self, log: Log, found: Survey, now: int) -> bool:
        key = (log.topic, log.partition)
        if found.dirty_bytes > 0 and found.dirty_ratio >= log.config.min_cleanable_dirty_ratio:
            return True
        with self._state_lock:
            due = self._tombstone_deadlines.get(key)
        return due is not None and now >= due and found.clean_bytes > 0

    def run_once(self, now: int | None = None) -> CleanResult | None:
        """Clean the dirtiest qualifying log, if any; returns what the pass did."""
        self._last_run_ms = int(time.time() * 1000)
        best: tuple[float, Log, int] | None = None
        wall = time.monotonic()
        for log in self._logs():
            if not log.config.compact or not log.online:
                continue
            key = (log.topic, log.partition)
            with self._state_lock:
                backing_off = self._failed_until.get(key, 0.0) > wall
            if backing_off:
                continue
            at = log.time_ms() if now is None else now
            try:
                found = self.survey(log, at)
            except (OSError, KafkaStorageError):
                continue  # a segment went away under the survey; next round
            with self._state_lock:
                self._ratios[key] = round(found.dirty_ratio, 4)
            if self._eligible(log, found, at) and (best is None or found.dirty_ratio > best[0]):
                best = (found.dirty_ratio, log, at)
        if best is None:
            return None
        return self.clean(best[1], best[2], force=True)

    def clean(self, log: Log, now: int | None = None, *, force: bool = False) -> CleanResult | None:
        """Run one pass over ``log`` now. Without ``force`` only if it qualifies (ratio, tombstones).

        None when there is nothing cleanable or the pass was aborted.
        """
        with self._clean_lock:
            key = (log.topic, log.partition)
            at = log.time_ms() if now is None else now
            started = time.perf_counter()
            segments, files, truncations = log.compaction_snapshot()
            state: _Pass | None = None
            try:
                found = survey(
                    segments,
                    first_dirty=self.first_dirty_offset(log),
                    # Kafka bounds cleaning by the first unstable offset: an open transaction's
                    # fate is unknown, so nothing from its first offset on is cleaned.
                    high_watermark=log.last_stable_offset,
                    config=log.config,
                    now=at,
                )
                if found.cleanable_segments == 0 or not (force or self._eligible(log, found, at)):
                    return None
                state = _Pass(log, segments, files, truncations, found, at, self)
                state.scan_producers()
                state.build_map()
                completed = True
                for group in state.groups():
                    if not state.clean_group(group):
                        completed = False
                        break
            except _Aborted:
                _log.info("%s-%s: compaction pass abandoned", log.topic, log.partition)
                return None
            except Exception as e:
                changed = isinstance(e, SegmentClosed)  # retention deleted a segment under us
                if (changed or not log.online or self.stopping) and not (state and state.swapping):
                    # Deleted or closed under the pass (its directory may be gone): not a failure.
                    _log.info("%s-%s: compaction pass abandoned", log.topic, log.partition)
                    return None
                with self._state_lock:
                    self._totals["failures"] += 1
                    self._failed_until[key] = time.monotonic() + self.config.backoff_ms / 1000
                raise
            result = state.result
            result.completed = completed
            result.duration_ms = round((time.perf_counter() - started) * 1000, 3)
            result.segments_after = len(log.segments)
            if completed:
                self._advance(log, state.map_end)
            with self._state_lock:
                if completed and state.tombstone_deadline is not None:
                    self._tombstone_deadlines[key] = state.tombstone_deadline
                elif completed:
                    self._tombstone_deadlines.pop(key, None)
                self._failed_until.pop(key, None)
                self._last[key] = result
                self._totals["passes"] += 1
                self._totals["bytes_read"] += result.bytes_read
                self._totals["bytes_written"] += result.bytes_written
            _log.info(
                "%s-%s: compacted offsets below %d: %d -> %d bytes, %d of %d records kept (%.0f ms)",
                log.topic,
                log.partition,
                state.map_end,
                result.bytes_read,
                result.bytes_written,
                result.records_retained,
                result.records_read,
                result.duration_ms,
            )
            return result

    # -- stats -------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Totals, the last round's time, and per log the dirty ratio and the last pass."""
        with self._state_lock:
            ratios = dict(self._ratios)
            last = dict(self._last)
            checkpoints = dict(self._checkpoints)
            totals = dict(self._totals)
        logs: dict[str, dict[str, Any]] = {}
        for (topic, partition), ratio in sorted(ratios.items()):
            logs[f"{topic}-{partition}"] = {"dirty_ratio": ratio}
        for (topic, partition), result in sorted(last.items()):
            logs.setdefault(f"{topic}-{partition}", {})["last_pass"] = asdict(result)
        for (topic, partition), offset in checkpoints.items():
            logs.setdefault(f"{topic}-{partition}", {})["first_dirty_offset"] = offset
        return {
            **totals,
            "last_run_ms": self._last_run_ms,
            "running": self._thread is not None,
            "logs": logs,
        }
