"""Retention by time and by size: whole old segments, delayed file deletion, log start offset."""

from __future__ import annotations

from pathlib import Path

from log_helpers import BASE_TS, check_log_dir, value_batch

from app.common.batch import decode_records
from app.core.log import Log, LogConfig


def _filled_log(tmp_path: Path, clock: list[int], **overrides: object) -> Log:
    config = LogConfig().with_overrides({"segment.bytes": 1000, **overrides})
    log = Log(tmp_path / "t-0", config, clock_ms=lambda: clock[0])
    # 10 segments of 3 batches; segment k holds timestamps around BASE + 1000 k.
    for i in range(30):
        log.append(value_batch(i * 2, 2, timestamp=BASE_TS + (i // 3) * 1000, size=100))
    assert [s.base_offset for s in log.segments] == list(range(0, 60, 6))
    return log


def test_retention_ms_deletes_expired_segments(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = _filled_log(tmp_path, clock, **{"retention.ms": 5000, "file.delete.delay.ms": 1000})
    # Segment k's max timestamp is BASE + 1000 k + 1. At BASE + 8001 segment 3 is exactly
    # 5000 ms old, which is not *more* than retention.ms: only segments 0-2 go.
    now = BASE_TS + 8001
    assert log.delete_old_segments(now) == 3
    assert log.log_start_offset == 18
    assert [s.base_offset for s in log.segments] == list(range(18, 60, 6))
    # Renamed, not gone yet: in-flight slices keep working.
    deleted = sorted(p.name for p in log.dir.glob("*.deleted"))
    assert deleted == [
        f"{b:020d}.{ext}.deleted" for b in (0, 6, 12) for ext in ("index", "log", "timeindex")
    ]
    assert log.delete_old_segments(now) == 0
    log.close()


def test_in_flight_slice_survives_until_the_delete_delay(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = _filled_log(tmp_path, clock, **{"retention.ms": 1, "file.delete.delay.ms": 1000})
    fetched = log.read(0, 1 << 20)
    clock[0] = BASE_TS + 100_000
    assert log.delete_old_segments() == 9  # all but the active one
    assert [r.offset for r in decode_records(fetched.read_bytes())][:3] == [0, 1, 2]
    assert log.delete_expired_files(clock[0] + 999) == 0
    assert log.delete_expired_files(clock[0] + 1000) == 9
    assert list(log.dir.glob("*.deleted")) == []
    assert [p.name for p in sorted(log.dir.glob("*.log"))] == [f"{54:020d}.log"]
    log.close()


def test_retention_never_deletes_the_active_segment(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = _filled_log(
        tmp_path, clock, **{"retention.ms": 0, "retention.bytes": 0, "file.delete.delay.ms": 0}
    )
    assert log.delete_old_segments(BASE_TS * 2) == 9
    assert log.delete_old_segments(BASE_TS * 2) == 0
    assert [s.base_offset for s in log.segments] == [54]
    assert (log.log_start_offset, log.log_end_offset) == (54, 60)
    assert check_log_dir(log.dir, start=54)[0] == (54, b"v54" + b"." * 97)
    # The log keeps working.
    assert log.append(value_batch(60, 1)).first_offset == 60
    log.close()


def test_retention_bytes(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = _filled_log(tmp_path, clock, **{"retention.bytes": 3000, "file.delete.delay.ms": 0})
    seg_size = log.segments[0].size
    total = log.size_in_bytes
    assert total == 10 * seg_size
    # Delete the oldest segments while what remains stays >= 3000 bytes.
    expected = 0
    while total - seg_size >= 3000:
        total -= seg_size
        expected += 1
    assert log.delete_old_segments(clock[0]) == expected
    assert log.size_in_bytes == total >= 3000
    assert log.log_start_offset == expected * 6
    log.close()


def test_retention_stops_at_the_high_watermark(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = _filled_log(tmp_path, clock, **{"retention.ms": 0, "file.delete.delay.ms": 0})
    log.hw_follows_leo = False
    log.high_watermark = 13
    # Only segments entirely below offset 13: [0, 6) and [6, 12).
    assert log.delete_old_segments(BASE_TS * 2) == 2
    assert log.log_start_offset == 12
    log.close()


def test_compact_only_topics_are_not_deleted_by_retention(tmp_path: Path) -> None:
    clock = [BASE_TS]
    # Filled under "delete": a compacted topic refuses these keyless records.
    _filled_log(tmp_path, clock, **{"retention.ms": 0}).close()
    config = LogConfig().with_overrides({"retention.ms": 0, "cleanup.policy": "compact"})
    log = Log(tmp_path / "t-0", config, clean_shutdown=True)
    assert log.delete_old_segments(BASE_TS * 2) == 0
    log.close()


def test_start_offset_survives_reopen(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = _filled_log(tmp_path, clock, **{"retention.bytes": 0, "file.delete.delay.ms": 0})
    log.delete_old_segments(clock[0])
    start, end = log.log_start_offset, log.log_end_offset
    log.close()
    reopened = Log(tmp_path / "t-0", log.config, log_start_offset=start, clean_shutdown=True)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (start, end)
    reopened.close()
