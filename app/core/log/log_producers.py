"""The producer-state part of :class:`~app.core.log.log.Log` (a base class of it): the
idempotent and transactional producers' state kept beside the segments, loaded and
replayed on open and truncation, snapshotted on roll and close, expired, and the last
stable offset's bound it gives (:mod:`app.core.log.producer_state` is the state itself).

Invariants: after any change to the producer state or the high watermark the log calls
:meth:`LogProducers._update_first_unstable`, so ``_first_unstable`` is the first offset
of the oldest transaction not yet stable (``NO_UNSTABLE`` for none); a load that replayed
markers rewrites the ``.txnindex`` entries from where it replayed.

Concurrency: every method runs under the log's lock (``_lock``), taking it where it is
public; the attributes below are the log's, set by ``Log.__init__``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from app.core.log.producer_state import ActiveProducer, ProducerStateManager, segment_headers
from app.core.log.view import SegmentView

__all__ = ["NO_UNSTABLE", "LogProducers"]

_log = logging.getLogger(__name__)

# ``_first_unstable`` when no transaction is open: above every offset.
NO_UNSTABLE = 1 << 62


class LogProducers:
    """Producer state of one :class:`Log`: load, snapshots, expiry, the LSO bound."""

    topic: str
    partition: int
    _clock: Callable[[], int]
    _lock: threading.RLock
    _view: SegmentView
    _closed: bool
    _log_start_offset: int
    _log_end_offset: int
    _high_watermark: int
    _first_unstable: int
    _producer_state: ProducerStateManager

    def _update_first_unstable(self) -> None:
        """Recompute the LSO bound (under the lock, after any change to producer state or HW)."""
        state = self._producer_state
        state.on_high_watermark(self._high_watermark)
        first = state.first_unstable_offset(self._high_watermark)
        self._first_unstable = NO_UNSTABLE if first is None else first

    @property
    def producer_state(self) -> ProducerStateManager:
        """Read-only use outside the log (tests, metrics); mutated under the log's lock."""
        return self._producer_state

    def next_sequence(self, producer_id: int, producer_epoch: int) -> int:
        """:meth:`ProducerStateManager.next_sequence` under the log's lock: true when
        read, stale once the lock is let go. To number a batch, hand :meth:`append` an
        :class:`UnnumberedBatch`, so that no append of the producer lands between the read
        and the write."""
        with self._lock:
            return self._producer_state.next_sequence(producer_id, producer_epoch)

    def active_producers(self) -> list[ActiveProducer]:
        """The partition's live idempotent and transactional producers, read under the
        log's lock (Kafka's DescribeProducers)."""
        with self._lock:
            return self._producer_state.active()

    def remove_expired_producers(self, now: int | None = None) -> int:
        """Forget producers idle for producer.id.expiration.ms; returns how many."""
        with self._lock:
            if self._closed:
                return 0
            return self._producer_state.remove_expired(self._clock() if now is None else now)

    def _reload_producer_state(
        self, *, clean_shutdown: bool, max_snapshot_offset: int | None = None
    ) -> None:
        view = self._view
        state = self._producer_state
        state.load(
            self._log_start_offset,
            self._log_end_offset,
            lambda start: segment_headers(view.segments, view.bases, start),
            clean_shutdown=clean_shutdown,
            now=self._clock(),
            segment_bases=view.bases,
            max_snapshot_offset=max_snapshot_offset,
        )
        # Recovery may have cut the active segment's .log; its index entries past the end go.
        view.segments[-1].txn_index.truncate_to(self._log_end_offset)
        start = state.replayed_from
        if start is not None:
            # The replay saw every marker from ``start`` on: those entries are rewritten
            # from it (a crash may have lost or torn them; a truncation cut their log).
            for seg in view.from_offset(start):
                seg.txn_index.truncate_to(start)
            for txn in state.aborted_on_load:
                view.segments[view.index_of(txn.last_offset)].txn_index.append(txn)
        self._update_first_unstable()

    def _snapshot_producer_state(self, offset: int, *, closing: bool = False) -> None:
        state = self._producer_state
        try:
            if closing:
                state.snapshot_on_close(offset, self._view.bases, self._log_start_offset)
            else:
                state.take_snapshot(offset, self._view.bases, self._log_start_offset)
        except OSError:
            # The state stays dirty, so the next roll or close writes it again.
            _log.exception(
                "%s-%s: producer snapshot at %d failed", self.topic, self.partition, offset
            )
