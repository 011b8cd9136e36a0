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
not run) and ``.cleaned`` (a compacted copy not yet complete: the original
segments are all still in place, and compaction starts over).

A ``<base>.log.swap`` is a compacted copy that was complete and fsynced
before it got that name (see :mod:`app.core.log.cleaner`), so an interrupted
swap is finished, never undone: the live segments it replaces are deleted and
the copy is renamed live, with indexes rebuilt. Which segments it replaces is
written down before the commit point, in the name of an empty marker file
``<base>.replaced-<end>.swap`` (both 20 digits: every segment with a base
offset from ``<base>`` up to ``<end>`` goes; a name needs only a directory
fsync to be durable, no data). The copy's own offsets cannot say it: a
copy may end well before the segments it replaces (all their records were
superseded), even be empty. Without a marker (a swap of an older version) the
copy's offset range is used. Only if the copy fails its own check and the
first segment it replaces is still there is the copy dropped instead.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import NamedTuple

from app.core.log.checkpoint import fsync_dir
from app.core.log.config import LogConfig
from app.core.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_name,
)
from app.core.log.txn_index import TXN_INDEX_SUFFIX

_log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
# <base>.replaced-<end>.swap: where the run of segments a compacted copy replaces ends.
_SWAP_MARKER = re.compile(r"(\d{20})\.replaced-(\d{20})\.swap")
STRAY_SUFFIXES = (".tmp", CLEANED_SUFFIX, DELETED_SUFFIX)
_SEGMENT_FILE = re.compile(r"(\d{20})(\.log|\.index|\.timeindex|\.txnindex)")


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
        if (
            m
            and m.group(2) in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
            and m.group(1) not in logs
        ):
            orphan = True
        if (orphan or name.endswith(STRAY_SUFFIXES)) and path.is_file():
            path.unlink(missing_ok=True)
            removed.append(name)
    if removed:
        _log.info("%s: removed stray files %s", directory.name, sorted(removed))
    return removed


def swap_marker(directory: Path, base_offset: int, replaced_end: int) -> Path:
    """The marker saying the copy at ``base_offset`` replaces the segments below ``replaced_end``."""
    return directory / f"{segment_name(base_offset)}.replaced-{segment_name(replaced_end)}.swap"


def write_swap_marker(directory: Path, base_offset: int, replaced_end: int) -> None:
    """Create the marker durably, before the copy's commit point."""
    os.close(os.open(swap_marker(directory, base_offset, replaced_end), os.O_WRONLY | os.O_CREAT))
    fsync_dir(directory)


def _replaced_end(directory: Path, base_offset: int) -> int | None:
    # A marker of an earlier swap at the same base (its removal failed) names an end
    # no later than this swap's: the old segments then ran on from there.
    ends = [
        int(m.group(2))
        for p in directory.glob(f"{segment_name(base_offset)}.replaced-*.swap")
        if (m := _SWAP_MARKER.fullmatch(p.name))
    ]
    return max(ends) if ends else None


def complete_swaps(directory: Path, config: LogConfig) -> list[int]:
    """Finish compaction swaps a crash interrupted; returns the base offsets swapped in."""
    swapped: list[int] = []
    suffix = LOG_SUFFIX + SWAP_SUFFIX
    for path in sorted(directory.glob("*" + suffix)):
        stem = path.name[: -len(suffix)]
        if not (len(stem) == 20 and stem.isdigit()):
            continue
        base = int(stem)
        seg = LogSegment.open(directory, base, config, suffix=SWAP_SUFFIX)
        # Fsynced before it was named .swap, so damage here means the disk lied.
        result = seg.recover()
        first_old = directory / (segment_name(base) + LOG_SUFFIX)
        if result.truncated_bytes and first_old.exists():
            _log.warning("%s: dropping damaged compacted copy %s", directory.name, path.name)
            seg.delete_files()
            continue
        end = max(seg.next_offset, _replaced_end(directory, base) or 0)
        for old in directory.iterdir():
            m = _SEGMENT_FILE.fullmatch(old.name)
            if m and base <= int(m.group(1)) < max(end, base + 1):
                old.unlink()
        seg.change_file_suffixes(SWAP_SUFFIX, "")
        seg.close()
        swapped.append(base)
        _log.info("%s: finished an interrupted compaction swap at offset %d", directory.name, base)
    # Index files renamed ahead of their .log are rebuilt above, and markers are done
    # with (or belong to a swap that never reached its commit point): leftovers are stale.
    for path in directory.glob("*" + SWAP_SUFFIX):
        path.unlink(missing_ok=True)
    if swapped:
        fsync_dir(directory)
    return swapped


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
    complete_swaps(directory, config)
    bases = sorted(
        int(p.name[:20])
        for p in directory.iterdir()
        if (m := _SEGMENT_FILE.fullmatch(p.name)) and m.group(2) == LOG_SUFFIX
    )
    segments = [LogSegment.open(directory, base, config) for base in bases]
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
    # Empty segments between the first and the last are leftovers of a crash during a
    # roll. An empty first one is compaction's (all it held was superseded): it keeps
    # the log start where it was, so consumers inside the range still get the next record.
    for seg in segments[1:-1]:
        if seg.size == 0:
            seg.delete_files()
    if len(segments) > 2:
        segments = [segments[0], *(s for s in segments[1:-1] if s.size), segments[-1]]
    if segments and segments[-1].next_offset < log_start_offset:
        # Damage cut the log below its start offset: nothing servable is left.
        for seg in segments:
            truncated += seg.size
            seg.delete_files()
        segments = []
    if not segments:
        segments = [LogSegment.open(directory, max(log_start_offset, 0), config, create=True)]
    log_start = max(log_start_offset, segments[0].base_offset)
    segments[-1].make_active()
    log_end = segments[-1].next_offset
    return LoadedLog(segments, log_start, log_end, truncated, scanned)
