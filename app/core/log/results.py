"""What a log hands back: :class:`FetchInfo` for a read, :class:`AppendInfo` for an append.

Both are immutable values, built under the log's lock (appends) or from a snapshot of
its segments (reads), and safe to pass between threads. A ``FetchInfo``'s slices hold
their segment files open (:mod:`app.core.log.fileslice`) for as long as it lives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.common.batch import BatchHeader
from app.core.log.fileslice import FileSlice
from app.core.log.producer_state import BatchMetadata
from app.core.log.txn_index import AbortedTxn


@dataclass(frozen=True, slots=True)
class FetchInfo:
    """The answer to a read: whole batches as file slices, plus the offsets a fetch reports."""

    slices: list[FileSlice]
    size: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    # read_committed reads only (None for read_uncommitted, as Kafka's null list): the
    # LSO the read stopped at, and the aborted transactions overlapping what it covered.
    last_stable_offset: int = -1
    aborted_transactions: tuple[AbortedTxn, ...] | None = None

    def read_bytes(self) -> bytes:
        """The slices' bytes, concatenated (the copy path)."""
        if len(self.slices) == 1:
            return self.slices[0].read()
        return b"".join(s.read() for s in self.slices)


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    log_append_time: int
    log_start_offset: int
    # Idempotent producers. ``duplicate``: every batch of the body was a retry of one
    # already in the log, nothing was written and the fields above describe the original
    # append. ``duplicates``: when any batch was a retry, one item per batch of the body:
    # the original (first, last) offsets of a retry, None for a batch written now (the
    # written ones then hold first_offset .. last_offset, in body order).
    duplicate: bool = False
    duplicates: tuple[tuple[int, int] | None, ...] = ()


def offsets_of(originals: Sequence[BatchMetadata | None]) -> tuple[tuple[int, int] | None, ...]:
    """``AppendInfo.duplicates`` for a body whose batches were these retries (None: new)."""
    return tuple(None if d is None else (d.first_offset, d.last_offset) for d in originals)


def duplicate_info(
    batches: Sequence[tuple[int, BatchHeader]],
    originals: Sequence[BatchMetadata | None],
    log_append_time: bool,
    log_start_offset: int,
) -> AppendInfo:
    """The answer to a body whose every batch was a retry: the original append's offsets."""
    found = [d for d in originals if d is not None]
    return AppendInfo(
        found[0].first_offset,
        found[-1].last_offset,
        sum(h.record_count for _, h in batches),
        max(d.timestamp for d in found),
        found[-1].timestamp if log_append_time else -1,
        log_start_offset,
        duplicate=True,
        duplicates=offsets_of(originals),
    )
