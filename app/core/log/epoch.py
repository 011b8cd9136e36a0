"""The leader-epoch cache of one partition, persisted in ``leader-epoch-checkpoint``.

File format (Kafka's ``LeaderEpochCheckpointFile``)::

    0                  version
    2                  number of entries
    0 0                epoch startOffset: the first offset written in that epoch
    3 1200

Entries are strictly increasing in both epoch and start offset. Every change is
written to ``leader-epoch-checkpoint.tmp``, fsynced and renamed over the file,
so it costs an fsync only when the epoch changes, never per append.

Thread-safe: every method takes the cache's own lock.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from app.core.log.checkpoint import (
    CheckpointCorrupt,
    format_entries,
    parse_entries,
    write_atomically,
)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1

_log = logging.getLogger(__name__)


class LeaderEpochCache:
    """``epoch -> start offset`` of one partition, persisted in ``leader-epoch-checkpoint``.

    Format: Kafka's text checkpoint (version, count, ``epoch startOffset``
    lines). Invariants: epochs and start offsets strictly increasing.
    Thread-safe: every method takes the cache's lock.
    """

    def __init__(self, path: Path, log_end_offset: Callable[[], int]) -> None:
        self.path = path
        self._log_end_offset = log_end_offset
        self._lock = threading.Lock()
        self._epochs: list[int] = []
        self._starts: list[int] = []
        if path.exists():
            try:
                for epoch, start in parse_entries(path, 2):
                    self._epochs.append(int(epoch))
                    self._starts.append(int(start))
            except (CheckpointCorrupt, ValueError) as e:
                # The cache only narrows follower truncation; losing it is safe.
                _log.warning("ignoring damaged %s: %s", path, e)
                self._epochs, self._starts = [], []

    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int | None:
        with self._lock:
            return self._epochs[-1] if self._epochs else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` began at ``start_offset`` (a no-op if already known)."""
        if epoch < 0:
            return
        with self._lock:
            if self._epochs and self._epochs[-1] == epoch and self._starts[-1] <= start_offset:
                return
            # A new entry supersedes any entry it conflicts with (as in Kafka).
            keep = 0
            while (
                keep < len(self._epochs)
                and self._epochs[keep] < epoch
                and self._starts[keep] < start_offset
            ):
                keep += 1
            del self._epochs[keep:], self._starts[keep:]
            self._epochs.append(epoch)
            self._starts.append(start_offset)
            self._persist()

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """``(epoch, end offset)``: the largest epoch <= ``epoch`` and where it ended.

        The end is the next epoch's start offset, or the log end offset for
        the latest epoch; ``(-1, -1)`` when ``epoch`` is unknown or above the
        latest (Kafka's ``OffsetsForLeaderEpoch`` answer).
        """
        with self._lock:
            if epoch == UNDEFINED_EPOCH or not self._epochs:
                return UNDEFINED_EPOCH, UNDEFINED_OFFSET
            if epoch == self._epochs[-1]:
                return epoch, self._log_end_offset()
            higher = bisect.bisect_right(self._epochs, epoch)
            if higher == len(self._epochs):
                return UNDEFINED_EPOCH, UNDEFINED_OFFSET
            if higher == 0:
                return epoch, self._starts[0]
            return self._epochs[higher - 1], self._starts[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: forget epochs that start at or after it."""
        with self._lock:
            keep = bisect.bisect_left(self._starts, end_offset)
            if keep < len(self._starts):
                del self._epochs[keep:], self._starts[keep:]
                self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved to ``start_offset``: the epoch holding it now starts there."""
        with self._lock:
            i = bisect.bisect_right(self._starts, start_offset) - 1
            if i < 0 or (i == 0 and self._starts[0] == start_offset):
                return
            del self._epochs[:i], self._starts[:i]
            self._starts[0] = start_offset
            self._persist()

    def clear(self) -> None:
        with self._lock:
            self._epochs, self._starts = [], []
            self._persist()

    def _persist(self) -> None:
        lines = [f"{e} {s}" for e, s in zip(self._epochs, self._starts, strict=True)]
        write_atomically(self.path, format_entries(lines))
