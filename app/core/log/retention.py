"""Retention: which of a log's oldest segments may be deleted now.

Kafka's rules (``cleanup.policy`` containing ``delete``): a segment goes when
its largest timestamp is more than ``retention.ms`` old (the file's mtime
stands in when it has no timestamps), when the log without it is still at
least ``retention.bytes``, or when it lies wholly below the log start offset.
Deletion takes whole segments, oldest first, stops at the first segment that
may stay, never takes the active segment, and never takes data at or above
the high watermark (not yet committed).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.core.log.config import LogConfig
from app.core.log.segment import LogSegment


def deletable_prefix(
    segments: Sequence[LogSegment],
    bases: Sequence[int],
    config: LogConfig,
    *,
    now: int,
    high_watermark: int,
    log_start_offset: int,
) -> int:
    """How many of the oldest ``segments`` retention deletes now (0 for compact-only logs)."""
    if not config.delete:
        return 0
    retention_ms = config.retention_ms
    retention_bytes = config.retention_bytes
    excess = sum(s.size for s in segments) - retention_bytes if retention_bytes >= 0 else -1
    count = 0
    # Each candidate is judged by where the next segment starts: everything in it is below that.
    while count < len(segments) - 1 and bases[count + 1] <= high_watermark:
        seg = segments[count]
        below_start = bases[count + 1] <= log_start_offset
        expired = False
        if retention_ms >= 0:
            ts = seg.max_timestamp
            if ts < 0:
                ts = seg.last_modified_ms()
            expired = now - ts > retention_ms
        too_big = retention_bytes >= 0 and excess - seg.size >= 0
        if not (below_start or expired or too_big):
            break
        excess -= seg.size
        count += 1
    return count
