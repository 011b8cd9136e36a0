"""The segment view: what a reader of a :class:`~app.core.log.log.Log` works from.

Format: ``bases`` is an ``array("q")`` of the segments' base offsets, ascending,
for :func:`bisect`; ``segments`` the :class:`~app.core.log.segment.LogSegment`
objects in the same order, the last one active.

Invariants: ``len(bases) == len(segments) >= 1`` and ``bases[i] ==
segments[i].base_offset``. A view is never mutated once the log has published
it: a roll, truncation, retention or compaction swap builds a new one.

Concurrency: the log replaces its view under its lock; readers take the
current one with a single attribute read and no lock, then read the
segments' files positionally. A segment of a view may be closed under a
reader (deleted since); its reads then raise
:class:`~app.common.errors.SegmentClosed` and the log reads again from its
current view.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.core.log.fileslice import FileSlice
from app.core.log.segment import LogSegment
from app.core.log.txn_index import AbortedTxn

__all__ = ["SegmentView"]


@dataclass(slots=True)
class SegmentView:
    """What readers snapshot: base offsets (for bisect) and segments, never mutated."""

    bases: array[int] = field(default_factory=lambda: array("q"))
    segments: list[LogSegment] = field(default_factory=list)

    @classmethod
    def of(cls, segments: list[LogSegment]) -> SegmentView:
        return cls(array("q", [s.base_offset for s in segments]), segments)

    def index_of(self, offset: int) -> int:
        """Index of the segment that holds ``offset`` (the first one for an offset below it)."""
        return max(bisect.bisect_right(self.bases, offset) - 1, 0)

    def from_offset(self, offset: int) -> Sequence[LogSegment]:
        """The segment holding ``offset`` and every later one."""
        return self.segments[self.index_of(offset) :]

    def read(self, offset: int, max_bytes: int, limit: int) -> tuple[list[FileSlice], int]:
        """Slices of whole batches from the one holding ``offset``, entirely below ``limit``,
        up to ``max_bytes`` (at least one batch), and their total length.

        May raise :class:`~app.common.errors.SegmentClosed` (see the module docstring).
        """
        slices: list[FileSlice] = []
        total = 0
        if offset >= limit:
            return slices, total
        bases, segments = self.bases, self.segments
        i = self.index_of(offset)
        budget = max_bytes
        current = offset
        while i < len(segments):
            seg = segments[i]
            piece = seg.read(current, max(budget, 0), limit, min_one=not slices)
            if piece is not None:
                if piece.length == 0:
                    break
                slices.append(piece)
                total += piece.length
                budget -= piece.length
                if budget <= 0 or piece.position + piece.length < seg.size:
                    break
            i += 1
            if i >= len(segments) or bases[i] >= limit:
                break
            current = bases[i]
        return slices, total

    def aborted_transactions(self, start: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start, upper_bound)``, oldest marker first.

        Searches the ``.txnindex`` of the segment holding ``start`` and the later
        ones until an entry's last stable offset reaches ``upper_bound`` (Kafka's
        ``collectAbortedTransactions``): a transaction begun before ``start`` has
        its entry in the segment of its marker, at or after ``start``.
        """
        out: list[AbortedTxn] = []
        if start >= upper_bound:
            return out
        for seg in self.from_offset(start):
            found, complete = seg.txn_index.collect(start, upper_bound)
            out.extend(found)
            if complete:
                break
        return out

    def offset_for_timestamp(
        self, timestamp_ms: int, log_start_offset: int, high_watermark: int
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``log_start_offset`` with
        timestamp >= ``timestamp_ms``; None when there is none below ``high_watermark``."""
        for seg in self.segments:
            if seg.max_timestamp < timestamp_ms:
                continue
            found = seg.find_offset_by_timestamp(timestamp_ms)
            if found is not None and found[0] >= log_start_offset:
                return found if found[0] < high_watermark else None
        return None
