"""Loading a partition directory on start, and recovering it after a crash.

A start without ``.clean_shutdown`` recovers: every segment from the one
holding the recovery point onwards is scanned batch by batch (structure,
offsets, CRC-32C); the first short or damaged batch ends the log, the file is
truncated there and every later segment is deleted. Indexes of the scanned
segments are rebuilt on the way; indexes of the other segments are checked
when first used and rebuilt if they fail (see :mod:`app.core.log.segment`).

Why this keeps data: a batch is written with one ``pwrite`` and only counts
once ``size`` moved past it, so a crash leaves at worst one torn batch at the
tail of the active segment. Everything before it was complete and passes its
CRC; everything at and after it is cut. Nothing damaged is ever served
because nothing past the cut survives.

Stray files of unfinished operations are removed first: ``.tmp`` (a
checkpoint written but not renamed), ``.deleted`` (a delayed delete that did
not run), ``.cleaned`` and ``.swap`` (an unfinished compaction; compaction
restarts from the original segments, which are still in place).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import NamedTuple

from app.core.log.config import LogConfig
from app.core.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)

_log = logging.getLogger(__name__)

STRAY_SUFFIXES = (".tmp", ".cleaned", ".swap", DELETED_SUFFIX)
_SEGMENT_FILE = re.compile(r"(\d{20})(\.log|\.index|\.timeindex)")


class LoadedLog(NamedTuple):
    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    truncated_bytes: int  # bytes cut by recovery (0 after a clean shutdown)
    recovered_segments: int  # segments scanned


def remove_stray_files(directory: Path) -> list[str]:
    """Delete leftovers of unfinished operations and index files without a log."""
    removed: list[str] = []
    entries = list(directory.iterdir())
    logs = {p.name[: -len(LOG_SUFFIX)] for p in entries if p.name.endswith(LOG_SUFFIX)}
    for path in entries:
        name = path.name
        orphan = False
        m = _SEGMENT_FILE.fullmatch(name)
        if m and m.group(2) in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and m.group(1) not in logs:
            orphan = True
        if (orphan or name.endswith(STRAY_SUFFIXES)) and path.is_file():
            path.unlink(missing_ok=True)
            removed.append(name)
    if removed:
        _log.info("%s: removed stray files %s", directory.name, sorted(removed))
    return removed


def load_segments(
    directory: Path,
    config: LogConfig,
    *,
    recovery_point: int,
    log_start_offset: int,
    clean_shutdown: bool,
) -> LoadedLog:
    """Open (and if needed recover) every segment of ``directory``; the last one is made active."""
    directory.mkdir(parents=True, exist_ok=True)
    remove_stray_files(directory)
    bases = sorted(
        int(p.name[:20])
        for p in directory.iterdir()
        if (m := _SEGMENT_FILE.fullmatch(p.name)) and m.group(2) == LOG_SUFFIX
    )
    kwargs = {
        "index_interval_bytes": config.index_interval_bytes,
        "max_index_bytes": config.segment_index_bytes,
    }
    segments = [LogSegment.open(directory, base, **kwargs) for base in bases]
    truncated = 0
    scanned = 0
    if not clean_shutdown and segments:
        first = 0
        for i, seg in enumerate(segments):
            if seg.base_offset <= recovery_point:
                first = i
        for i in range(first, len(segments)):
            seg = segments[i]
            result = seg.recover()
            scanned += 1
            following = segments[i + 1] if i + 1 < len(segments) else None
            # Offsets run on from segment to segment (a roll starts the next segment at the
            # log end offset), so a segment that ends early lost its tail. Compaction may
            # leave legitimate gaps, so there only torn or failing batches count.
            ends_early = (
                following is not None
                and not config.compact
                and seg.next_offset != following.base_offset
            )
            if result.truncated_bytes or ends_early:
                truncated += result.truncated_bytes
                _log.warning(
                    "%s: log ends at offset %d in segment %d (%d damaged bytes cut%s)",
                    directory.name,
                    seg.next_offset,
                    seg.base_offset,
                    result.truncated_bytes,
                    ", later segments dropped" if following is not None else "",
                )
                for later in segments[i + 1 :]:
                    truncated += later.size
                    later.delete_files()
                del segments[i + 1 :]
                break
        # The scanned bytes survived a crash but perhaps only in the page cache.
        for seg in segments[first:]:
            seg.flush()
    # Empty segments other than the last are leftovers of a crash during a roll.
    for seg in segments[:-1]:
        if seg.size == 0:
            seg.delete_files()
    segments = [s for s in segments[:-1] if s.size] + segments[-1:]
    if segments and segments[-1].next_offset < log_start_offset:
        # Damage cut the log below its start offset: nothing servable is left.
        for seg in segments:
            truncated += seg.size
            seg.delete_files()
        segments = []
    if not segments:
        segments = [LogSegment.create(directory, max(log_start_offset, 0), **kwargs)]
    log_start = max(log_start_offset, segments[0].base_offset)
    segments[-1].make_active()
    log_end = segments[-1].next_offset
    return LoadedLog(segments, log_start, log_end, truncated, scanned)
