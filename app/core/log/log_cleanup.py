"""Removing and replacing a log's segments: retention, the compaction swap, and the
delayed deletion of their files (the part of :class:`~app.core.log.log.Log`
that rewrites its segment list other than by appending, rolling and truncating).

Format on disk: a removed segment's files are renamed with the ``.deleted``
suffix at once and unlinked ``file.delete.delay.ms`` later
(:meth:`LogCleanup.delete_expired_files`); a compaction swap goes through
``<base>.log.cleaned``, the ``.swap`` names and a ``<base>.replaced-<end>.swap``
marker (:mod:`app.core.log.loader` finishes a swap a crash interrupted).

Invariants: the log start offset moves before the view drops a segment, so a
reader holding the old view still finds its data; a swap changes nothing
unless its old segments are still a run of non-active segments and no
truncation happened since the cleaner read them.

Concurrency: every method here that changes the segment list runs under the
log's lock (``_lock``); the pending deletes have their own lock
(``_pending_lock``) so the background thread that removes them never waits
for an append. The attributes below are the log's, set by ``Log.__init__``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path

from app.common.errors import KafkaStorageError, OffsetOutOfRange, PolicyViolation
from app.core.log.checkpoint import fsync_dir
from app.core.log.config import LogConfig
from app.core.log.epoch import LeaderEpochCache
from app.core.log.fileslice import SegmentFile
from app.core.log.loader import CLEANED_SUFFIX, SWAP_SUFFIX, swap_marker, write_swap_marker
from app.core.log.producer_state import ProducerStateManager
from app.core.log.retention import deletable_prefix
from app.core.log.segment import LogSegment
from app.core.log.view import SegmentView

__all__ = ["LogCleanup"]

_log = logging.getLogger(__name__)


class LogCleanup:
    """Retention, the compaction swap and delayed file deletion of one :class:`Log`."""

    dir: Path
    topic: str
    partition: int
    config: LogConfig
    recovery_point: int
    leader_epoch_cache: LeaderEpochCache
    _clock: Callable[[], int]
    _lock: threading.RLock
    _pending_lock: threading.Lock
    _pending_deletes: list[tuple[int, LogSegment]]
    _view: SegmentView
    _closed: bool
    _offline: bool
    _truncations: int
    _log_start_offset: int
    _high_watermark: int
    _producer_state: ProducerStateManager

    def _set_view(self, bases: array[int], segments: list[LogSegment]) -> None:
        """Publish a new view (under the lock; readers pick it up without one)."""
        self._view = SegmentView(bases, segments)

    def _check_open(self) -> None:
        if self._closed or self._offline:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")

    # -- retention ---------------------------------------------------------------

    def delete_old_segments(self, now: int | None = None) -> int:
        """Apply retention (see :mod:`app.core.log.retention`); returns the number of segments deleted.

        The log start offset moves to the first remaining segment; the files
        are renamed ``.deleted`` and removed after ``file.delete.delay.ms``.
        """
        with self._lock:
            if self._closed:
                return 0
            view = self._view
            segments = view.segments
            count = deletable_prefix(
                segments,
                view.bases,
                self.config,
                now=self._clock() if now is None else now,
                high_watermark=self._high_watermark,
                log_start_offset=self._log_start_offset,
            )
            if count == 0:
                return 0
            doomed = segments[:count]
            new_start = max(self._log_start_offset, view.bases[count])
            # Start offset first: a reader holding the old view then still finds its data.
            self._log_start_offset = new_start
            self._set_view(view.bases[count:], segments[count:])
            self.recovery_point = max(self.recovery_point, new_start)
            self.leader_epoch_cache.truncate_from_start(new_start)
            self._producer_state.prune(self._view.bases, new_start)
            self._schedule_delete(doomed)
            _log.info(
                "%s-%s: retention deleted %d segment(s), log start offset now %d",
                self.topic,
                self.partition,
                count,
                new_start,
            )
            return count

    def check_records_deletable(self) -> None:
        """PolicyViolation unless the topic's ``cleanup.policy`` includes ``delete``: a
        client's DeleteRecords on a compacted-only topic is refused, as Kafka's leader
        refuses it (``Partition.deleteRecordsOnLeader``). Not for a follower following
        its leader's start, which moves whatever the policy is now."""
        if not self.config.delete:
            raise PolicyViolation(
                f"records of {self.topic}-{self.partition} cannot be deleted: its "
                "cleanup.policy does not include delete"
            )

    def delete_records(self, offset: int) -> int:
        """Kafka's DeleteRecords on the leader: the log start offset moves up to ``offset``
        (-1: the high watermark), so nothing below it is served again; the segments wholly
        below it go now, as retention removes them (their files after
        ``file.delete.delay.ms``). The new log start offset (unchanged for an offset at or
        below it). OffsetOutOfRange above the high watermark. Producer state is kept:
        an idempotent producer's next batch still follows its sequence (as Kafka since
        KIP-360)."""
        with self._lock:
            self._check_open()
            high = self._high_watermark
            target = high if offset == -1 else offset
            if not 0 <= target <= high:
                raise OffsetOutOfRange(
                    self.topic, self.partition, offset, self._log_start_offset, high
                )
            if target > self._log_start_offset:
                self._log_start_offset = target
                self.leader_epoch_cache.truncate_from_start(target)
                _log.info(
                    "%s-%s: records deleted, log start offset now %d",
                    self.topic,
                    self.partition,
                    target,
                )
            start = self._log_start_offset
        self.delete_old_segments()
        return start

    def _schedule_delete(self, segments: Sequence[LogSegment]) -> None:
        if not segments:
            return
        for seg in segments:
            seg.rename_to_deleted()
        delay = self.config.file_delete_delay_ms
        if delay <= 0:
            for seg in segments:
                seg.delete_files()
            return
        due = self._clock() + delay
        with self._pending_lock:
            self._pending_deletes.extend((due, seg) for seg in segments)

    def delete_expired_files(self, now: int | None = None) -> int:
        """Remove ``.deleted`` segments whose delay is over; returns how many."""
        now = self._clock() if now is None else now
        with self._pending_lock:
            due = [seg for when, seg in self._pending_deletes if when <= now]
            self._pending_deletes = [(w, s) for w, s in self._pending_deletes if w > now]
        for seg in due:
            seg.delete_files()
        return len(due)

    @property
    def online(self) -> bool:
        """False once closed or taken offline (topic deletion, a failed swap)."""
        return not (self._closed or self._offline)

    def time_ms(self) -> int:
        """The log's clock (injectable for tests); compaction ages records by it."""
        return self._clock()

    def compaction_snapshot(self) -> tuple[list[LogSegment], list[SegmentFile], int]:
        """Segments, each one's open ``.log``, and the truncation count, atomically.

        The cleaner reads through the files it holds, so that a retention
        delete under it leaves them readable. Raises :class:`KafkaStorageError`
        if closed.
        """
        with self._lock:
            self._check_open()
            segments = list(self._view.segments)
            return segments, [seg.file for seg in segments], self._truncations

    def replace_segments(
        self, old: Sequence[LogSegment], new: LogSegment, *, truncations: int
    ) -> bool:
        """Swap a compacted copy (files named ``<base>.log.cleaned``, fsynced) in for ``old``.

        ``old`` must still be a run of non-active segments of this log and no
        truncation may have happened since ``truncations`` was read; otherwise
        nothing changes and the answer is False (the caller drops its copy).
        An empty ``new`` removes ``old`` outright unless ``old`` starts the log
        (the first segment holds the log start offset).

        The steps, each a rename that a crash can stop after: the marker
        ``<base>.replaced-<end>.swap`` records where the run of old segments
        ends (a copy may end far before it, or be empty), the copy becomes ``.swap``
        (the commit point: recovery finishes the swap from here, see
        :mod:`app.core.log.loader`), the old segments become ``.deleted`` one
        by one (their files stay open for ``file.delete.delay.ms`` and for as
        long as a reader holds them), the copy's indexes and then its ``.log``
        get the live names, the marker goes. If a step after the commit point
        fails the log goes offline: the files are ahead of the view, and the
        next start finishes the swap.
        """
        with self._lock:
            view = self._view
            segments = view.segments
            if self._closed or self._offline or truncations != self._truncations or not old:
                return False
            first = next((i for i, s in enumerate(segments) if s is old[0]), -1)
            end = first + len(old)
            if (
                first < 0
                or end >= len(segments)
                or any(a is not b for a, b in zip(segments[first:end], old, strict=True))
            ):
                return False
            marker = swap_marker(self.dir, new.base_offset, segments[end].base_offset)
            write_swap_marker(self.dir, new.base_offset, segments[end].base_offset)
            try:
                new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
            except BaseException:
                # Before the commit point (the .log is renamed last): the log is as it was.
                with contextlib.suppress(OSError):
                    marker.unlink()
                raise
            try:
                fsync_dir(self.dir)
                self._schedule_delete(old)
                new.change_file_suffixes(SWAP_SUFFIX, "")
                fsync_dir(self.dir)
            except BaseException:
                self._offline = True
                _log.exception(
                    "%s-%s: compaction swap failed; offline until restart finishes it",
                    self.topic,
                    self.partition,
                )
                raise
            with contextlib.suppress(OSError):
                # A marker left behind is harmless: a start removes it, a swap replaces it.
                marker.unlink()
            keep_new = new.size > 0 or first == 0
            if not keep_new:
                # Live and empty between two segments, it is what a start removes as well.
                new.delete_files()
            kept = [*segments[:first], *([new] if keep_new else []), *segments[end:]]
            self._view = SegmentView.of(kept)
            return True
