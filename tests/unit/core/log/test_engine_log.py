"""Log: offsets, reads, rolling, timestamps, truncation, listeners, followers."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import pytest
from log_helpers import BASE_TS, check_log_dir, kafka_python_batches, make_batch, value_batch

from app.common.batch import decode_records, read_header
from app.common.errors import CorruptRecord, OffsetOutOfRange, RecordTooLarge, SegmentClosed
from app.core.log import Log, LogConfig
from app.core.log.segment import BatchInfo, LogSegment, segment_name


def _log(tmp_path: Path, clock: list[int] | None = None, **overrides: object) -> Log:
    config = LogConfig().with_overrides(overrides)
    if clock is None:
        return Log(tmp_path / "topic-0", config)
    return Log(tmp_path / "topic-0", config, clock_ms=lambda: clock[0])


def _values(data: bytes, min_offset: int = 0) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in decode_records(data, min_offset=min_offset)]


def test_offsets_are_assigned_contiguously(tmp_path: Path) -> None:
    log = _log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    info = log.append(value_batch(0, 3))
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 2, 3)
    assert info.max_timestamp == BASE_TS + 2 and info.log_append_time == -1
    # Two batches in one append.
    info = log.append(value_batch(3, 2) + value_batch(5, 4))
    assert (info.first_offset, info.last_offset, info.record_count) == (3, 8, 6)
    assert (log.log_end_offset, log.high_watermark) == (9, 9)
    fetched = log.read(0, 1 << 20)
    assert _values(fetched.read_bytes()) == [(i, b"v%d" % i) for i in range(9)]
    assert [read_header(s.read()).base_offset for s in fetched.slices] == [0]
    assert (fetched.log_start_offset, fetched.log_end_offset, fetched.high_watermark) == (0, 9, 9)
    assert check_log_dir(log.dir, start=0) == [(i, b"v%d" % i) for i in range(9)]
    log.close()


def test_read_bounds_and_errors(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(value_batch(0, 5))
    empty = log.read(5, 1000)
    assert (empty.slices, empty.size, empty.log_end_offset) == ([], 0, 5)
    with pytest.raises(OffsetOutOfRange) as err:
        log.read(6, 1000)
    assert (err.value.offset, err.value.log_start_offset, err.value.log_end_offset) == (6, 0, 5)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 1000)
    # A read from inside a batch returns the whole batch; the decoder skips what is below.
    mid = log.read(3, 1000).read_bytes()
    assert [r.offset for r in decode_records(mid)] == [0, 1, 2, 3, 4]
    assert [r.offset for r in decode_records(mid, min_offset=3)] == [3, 4]
    log.close()


def test_read_returns_whole_batches_within_max_bytes(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"index.interval.bytes": 256})
    batches = [value_batch(i * 4, 4, size=50) for i in range(20)]
    for b in batches:
        log.append(b)
    size = len(batches[0])
    assert all(len(b) == size for b in batches)
    # Budget for 2.5 batches -> exactly 2.
    got = log.read(0, size * 5 // 2)
    assert got.size == 2 * size
    assert [r.offset for r in decode_records(got.read_bytes())] == list(range(8))
    # Budget smaller than a batch -> still one whole batch.
    got = log.read(9, 10)
    assert got.size == size
    assert [r.offset for r in decode_records(got.read_bytes())] == [8, 9, 10, 11]
    # Budget exactly 3 batches from the middle.
    got = log.read(40, 3 * size)
    assert [r.offset for r in decode_records(got.read_bytes())] == list(range(40, 52))
    log.close()


def test_reads_span_segments(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.bytes": 1000})
    for i in range(30):
        log.append(value_batch(i * 2, 2, size=100))
    assert len(log.segments) > 5
    got = log.read(0, 1 << 20)
    assert len(got.slices) == len(log.segments)
    assert _values(got.read_bytes()) == [
        (i, b"v%d" % i + b"." * (100 - len(b"v%d" % i))) for i in range(60)
    ]
    assert got.size == sum(s.size for s in log.segments)
    # From a later segment.
    seg = log.segments[3]
    got = log.read(seg.base_offset + 1, 1 << 20)
    assert decode_records(got.read_bytes()).__next__().offset == seg.base_offset
    log.close()


def test_max_offset_and_high_watermark(tmp_path: Path) -> None:
    log = _log(tmp_path)
    for i in range(5):
        log.append(value_batch(i * 3, 3))
    assert [
        r.offset for r in decode_records(log.read(0, 1 << 20, max_offset=9).read_bytes())
    ] == list(range(9))
    # max_offset inside a batch excludes that whole batch.
    assert [
        r.offset for r in decode_records(log.read(0, 1 << 20, max_offset=10).read_bytes())
    ] == list(range(9))
    log.hw_follows_leo = False
    log.high_watermark = 6
    assert log.high_watermark == 6
    got = log.read(0, 1 << 20)
    assert got.high_watermark == 6
    assert [r.offset for r in decode_records(got.read_bytes())] == list(range(6))
    assert log.read(6, 1 << 20).slices == []
    log.append(value_batch(15, 1))
    assert log.high_watermark == 6 and log.log_end_offset == 16
    log.high_watermark = 100  # clamped to the end
    assert log.high_watermark == 16
    log.close()


def test_rolls_on_segment_bytes(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.bytes": 1000})
    size = len(value_batch(0, 2, size=100))
    per_segment = 1000 // size
    for i in range(20):
        log.append(value_batch(i * 2, 2, size=100))
    bases = [s.base_offset for s in log.segments]
    assert bases == list(range(0, 40, per_segment * 2))
    assert sorted(p.name for p in log.dir.glob("*.log")) == [
        segment_name(b) + ".log" for b in bases
    ]
    assert all(s.size <= 1000 for s in log.segments)
    assert check_log_dir(log.dir, start=0)[-1][0] == 39
    log.close()


def test_rolls_on_segment_ms(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = _log(tmp_path, clock, **{"segment.ms": 1000})
    log.append(value_batch(0, 1))
    clock[0] += 1000
    log.append(value_batch(1, 1))
    assert [s.base_offset for s in log.segments] == [0]
    clock[0] += 1
    log.append(value_batch(2, 1))
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_rolls_when_index_is_full(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.index.bytes": 8 * 3, "index.interval.bytes": 0})
    for i in range(10):
        log.append(value_batch(i, 1))
    # Interval 0 indexes every batch: 3 entries fill an index.
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    assert [len(s.offset_index) for s in log.segments] == [3, 3, 3, 1]
    log.close()


def test_log_append_time(tmp_path: Path) -> None:
    clock = [BASE_TS + 5_000]
    log = _log(tmp_path, clock, **{"message.timestamp.type": "LogAppendTime"})
    info = log.append(value_batch(0, 3, timestamp=42))
    assert info.log_append_time == BASE_TS + 5_000 and info.max_timestamp == BASE_TS + 5_000
    data = log.read(0, 1 << 20).read_bytes()
    assert [r.timestamp for r in decode_records(data)] == [BASE_TS + 5_000] * 3
    header = read_header(data)
    assert header.timestamp_type == 1 and header.max_timestamp == BASE_TS + 5_000
    assert kafka_python_batches(data)[0][:2] == (0, 2)  # CRC recomputed
    log.close()


def test_bytearray_is_stamped_in_place(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(value_batch(0, 2))
    buf = bytearray(value_batch(2, 2))
    log.append(buf, leader_epoch=7)
    header = read_header(buf)
    assert (header.base_offset, header.partition_leader_epoch) == (2, 7)
    log.close()


def test_invalid_input_writes_nothing(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"max.message.bytes": 500})
    good = value_batch(0, 2)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecord):
        log.append(good + bytes(bad))
    with pytest.raises(RecordTooLarge):
        log.append(value_batch(0, 1, size=600))
    assert log.log_end_offset == 0 and log.segments[0].size == 0
    log.close()


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.bytes": 2000, "index.interval.bytes": 100})
    # Batch i holds offsets 5i..5i+4 with timestamps BASE + 100*i + (0..4).
    for i in range(40):
        log.append(value_batch(i * 5, 5, timestamp=BASE_TS + 100 * i, size=40))
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(0) == (0, BASE_TS)
    assert log.offset_for_timestamp(BASE_TS + 2) == (2, BASE_TS + 2)
    assert log.offset_for_timestamp(BASE_TS + 5) == (5, BASE_TS + 100)
    assert log.offset_for_timestamp(BASE_TS + 1703) == (88, BASE_TS + 1703)
    assert log.offset_for_timestamp(BASE_TS + 3904) == (199, BASE_TS + 3904)
    assert log.offset_for_timestamp(BASE_TS + 3905) is None
    for ts in range(BASE_TS, BASE_TS + 4000, 37):
        i, j = divmod(ts - BASE_TS, 100)
        expected = (5 * i + j, ts) if j < 5 else (5 * (i + 1), BASE_TS + 100 * (i + 1))
        assert log.offset_for_timestamp(ts) == (expected if expected[0] < 200 else None)
    log.close()


def test_truncate_to(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.bytes": 600})
    for i in range(10):
        log.append(value_batch(i * 3, 3, size=60))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    # Mid-batch: the whole batch holding offset 16 (15..17) goes.
    log.truncate_to(16)
    assert log.log_end_offset == 15 and log.high_watermark == 15
    assert [s.base_offset for s in log.segments] == [b for b in bases if b <= 15]
    assert check_log_dir(log.dir, start=0)[-1][0] == 14
    info = log.append(value_batch(15, 2, size=60))
    assert info.first_offset == 15
    # Into the first segment, at a batch boundary.
    log.truncate_to(3)
    assert log.log_end_offset == 3 and [s.base_offset for s in log.segments] == [0]
    assert log.append(value_batch(3, 1)).first_offset == 3
    assert [v.rstrip(b".") for _, v in check_log_dir(log.dir, start=0) if v] == [
        b"v0",
        b"v1",
        b"v2",
        b"v3",
    ]
    assert log.truncate_to(100) is None and log.log_end_offset == 4
    log.close()


def test_truncate_below_first_segment_starts_over(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.bytes": 300, "retention.bytes": 0, "file.delete.delay.ms": 0})
    for i in range(10):
        log.append(value_batch(i * 2, 2, size=60))
    log.delete_old_segments()
    start = log.log_start_offset
    assert start > 0
    log.truncate_to(start - 1)
    assert (log.log_start_offset, log.log_end_offset) == (start - 1, start - 1)
    assert log.append(value_batch(0, 1)).first_offset == start - 1
    log.close()


def test_append_listeners(tmp_path: Path) -> None:
    log = _log(tmp_path)
    seen: list[int] = []

    def listener(lg: Log) -> None:
        seen.append(lg.log_end_offset)

    def broken(lg: Log) -> None:
        raise RuntimeError("listener bug")

    log.add_append_listener(broken)
    log.add_append_listener(listener)
    log.append(value_batch(0, 2))
    log.append(value_batch(2, 3))
    log.remove_append_listener(listener)
    log.append(value_batch(5, 1))
    assert seen == [2, 5]
    log.close()


def test_flush_messages_moves_the_recovery_point(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"flush.messages": 5})
    log.append(value_batch(0, 3))
    assert log.recovery_point == 0
    log.append(value_batch(3, 3))
    assert log.recovery_point == 6
    log.append(value_batch(6, 1))
    assert log.recovery_point == 6
    log.flush()
    assert log.recovery_point == 7
    log.close()


def test_flush_ms(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = _log(tmp_path, clock, **{"flush.ms": 100})
    log.append(value_batch(0, 3))
    assert not log.maybe_flush(BASE_TS + 99)
    assert log.maybe_flush(BASE_TS + 100) and log.recovery_point == 3
    assert not log.maybe_flush(BASE_TS + 1000)  # nothing new
    log.close()


def test_rolled_segments_are_flushed_in_background(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.bytes": 300})
    for i in range(6):
        log.append(value_batch(i * 2, 2, size=60))
    active = log.segments[-1].base_offset
    assert active > 0 and log.recovery_point == 0
    log.flush_rolled()
    assert log.recovery_point == active
    log.close()


def test_append_as_follower(tmp_path: Path) -> None:
    leader = _log(tmp_path / "leader")
    leader.append(value_batch(0, 3), leader_epoch=1)
    leader.append(value_batch(3, 2), leader_epoch=2)
    data = leader.read(0, 1 << 20).read_bytes()
    follower = _log(tmp_path / "follower")
    info = follower.append_as_follower(data)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 4, 5)
    assert follower.read(0, 1 << 20).read_bytes() == data
    assert follower.leader_epoch_cache.entries() == [(1, 0), (2, 3)]
    with pytest.raises(Exception, match="below the log end offset"):
        follower.append_as_follower(data)
    # A gap (compacted leader) is kept as is.
    gap = bytearray(value_batch(0, 2))
    from app.common.batch import stamp

    stamp(gap, 0, 10, 2)
    follower.append_as_follower(bytes(gap))
    assert follower.log_end_offset == 12
    assert [r.offset for r in decode_records(follower.read(5, 1 << 20).read_bytes())] == [10, 11]
    leader.close()
    follower.close()


def test_leader_epoch_checkpoint(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(value_batch(0, 2), leader_epoch=0)
    log.append(value_batch(2, 2), leader_epoch=0)
    log.append(value_batch(4, 2), leader_epoch=3)
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n3 4\n"
    assert log.leader_epoch_cache.end_offset_for(0) == (0, 4)
    assert log.leader_epoch_cache.end_offset_for(3) == (3, 6)
    log.truncate_to(4)
    assert log.leader_epoch_cache.entries() == [(0, 0)]
    log.close()


def test_reads_concurrent_with_appends(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.bytes": 4000, "index.interval.bytes": 200})
    done = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not done.is_set():
                end = log.log_end_offset
                offset = end // 2
                got = log.read(offset, 3000)
                offsets = [r.offset for r in decode_records(got.read_bytes())]
                if offsets:
                    assert offsets == list(range(offsets[0], offsets[-1] + 1))
                    assert offsets[0] <= offset <= offsets[-1]
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(400):
        log.append(value_batch(i * 2, 2, size=30))
    done.set()
    for t in threads:
        t.join()
    assert errors == []
    assert log.log_end_offset == 800
    assert len(check_log_dir(log.dir, start=0)) == 800
    log.close()


def test_empty_read_budget_zero_still_returns_one_batch(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(make_batch([b"a", b"b"]))
    assert log.read(0, 0).size == len(make_batch([b"a", b"b"]))
    log.close()


def test_a_batch_that_does_not_fit_ends_the_fetch(tmp_path: Path) -> None:
    # Segments of one batch each: 100-ish, 500-ish, 100-ish bytes. A budget that fits the
    # first and the third but not the second must stop after the first.
    log = _log(tmp_path, **{"segment.bytes": 14})
    small = value_batch(0, 1)
    log.append(small)
    big = value_batch(1, 1, size=400)
    log.append(big)
    log.append(value_batch(2, 1))
    assert [s.base_offset for s in log.segments] == [0, 1, 2]
    got = log.read(0, 2 * len(small) + 10)
    assert [r.offset for r in decode_records(got.read_bytes())] == [0]
    got = log.read(0, len(small) + len(big))
    assert [r.offset for r in decode_records(got.read_bytes())] == [0, 1]
    log.close()


def test_a_slice_keeps_a_deleted_segment_readable_and_its_descriptor_closes_with_it(
    tmp_path: Path,
) -> None:
    seg = LogSegment.open(tmp_path, 0, LogConfig(), create=True)
    log = Log(tmp_path / "t-0")
    log.append(value_batch(0, 3))
    data = log.read(0, 1 << 20).read_bytes()
    log.close()
    seg.append(data, [BatchInfo(0, len(data), 0, 2, BASE_TS + 2)], BASE_TS)
    piece = seg.read(0, 1 << 20, 3, min_one=True)
    assert piece is not None
    fd = piece.fd
    seg.rename_to_deleted()
    seg.delete_files()
    assert not list(tmp_path.glob("00000000000000000000.*"))
    # Deleted and closed, the segment refuses new reads; the slice reads what it held.
    with pytest.raises(SegmentClosed):
        seg.read(0, 1 << 20, 3, min_one=True)
    assert piece.read() == data
    os.fstat(fd)
    del piece
    gc.collect()
    # The last holder is gone: so is the descriptor (nothing else opened a file since).
    with pytest.raises(OSError):
        os.fstat(fd)


def _sealed_segment_with_loaded_indexes(tmp_path: Path) -> tuple[Log, LogSegment]:
    log = Log(tmp_path / "t-0", LogConfig().with_overrides({"index.interval.bytes": 1}))
    for i in range(20):
        log.append(value_batch(i, 1))
    log.roll()
    log.append(value_batch(20, 1))
    seg = log.segments[0]
    assert next(r.offset for r in decode_records(log.read(7, 100).read_bytes())) == 7
    assert seg.offset_index.loaded
    return log, seg


def test_a_sealed_index_lost_after_it_was_loaded_is_rebuilt(tmp_path: Path) -> None:
    """Dropped from memory (the sealed-index budget) and its file gone or damaged since: an
    index is derived data, so the next lookup rebuilds it from the .log instead of failing."""
    log, seg = _sealed_segment_with_loaded_indexes(tmp_path)
    seg.offset_index.path.write_bytes(b"\x00" * 3)
    seg.time_index.path.unlink()
    seg.offset_index.drop_columns()
    seg.time_index.drop_columns()
    assert next(r.offset for r in decode_records(log.read(7, 100).read_bytes())) == 7
    assert log.offset_for_timestamp(BASE_TS) == (0, BASE_TS)
    assert seg.offset_index.path.stat().st_size > 3
    log.close()


def test_a_deleted_segment_whose_index_is_gone_sends_its_reader_on(tmp_path: Path) -> None:
    log, seg = _sealed_segment_with_loaded_indexes(tmp_path)
    seg.rename_to_deleted()
    for index in (seg.offset_index, seg.time_index):
        index.path.unlink()
        index.drop_columns()
    # Still open (a reader holds it), but deleted: no index is rebuilt for it.
    with pytest.raises(SegmentClosed):
        seg.read(7, 100, 21, min_one=True)
    assert not list(tmp_path.glob("t-0/*.index*.deleted"))
    log.close()
