"""Log compaction on one log: what survives a pass, what is dropped, and when a log qualifies."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record._crecords import DefaultRecordBatch
from kafka.record import MemoryRecords
from log_helpers import BASE_TS, kafka_python_batches

from app.common.batch import (
    CONTROL_MASK,
    CRC_OFFSET,
    BatchBuilder,
    Record,
    compute_crc,
    decode_records,
    read_header,
    stamp,
    stamp_log_append_time,
)
from app.common.errors import InvalidRecord
from app.core.log import Log, LogConfig
from app.core.log.cleaner import CleanerConfig, LogCleaner, survey
from app.core.log.compact_batch import (
    DELETE_HORIZON_MASK,
    delete_horizon,
    encode_with_horizon,
    rebuild,
)
from app.core.log.offset_map import ENTRY_BYTES, OffsetMap, slot_of
from app.core.log.segment import LogSegment

Pair = tuple[bytes | None, bytes | None]
DAY = 24 * 3600 * 1000


def keyed(pairs: Sequence[Pair], *, timestamp: int = BASE_TS, compression: str = "none") -> bytes:
    builder = BatchBuilder(compression)
    for i, (key, value) in enumerate(pairs):
        builder.append(value, key, headers=[("h", b"%d" % i)], timestamp=timestamp + i)
    return builder.build()


def compacted(tmp_path: Path, clock: list[int], **overrides: object) -> Log:
    config = LogConfig().with_overrides(
        {
            "cleanup.policy": "compact",
            "min.cleanable.dirty.ratio": 0.01,
            "file.delete.delay.ms": 0,
            **overrides,
        }
    )
    return Log(tmp_path / "t-0", config, clock_ms=lambda: clock[0])


def cleaner(tmp_path: Path, log: Log, **config: int) -> LogCleaner:
    return LogCleaner(tmp_path, lambda: [log], CleanerConfig(**config))  # type: ignore[arg-type]


def records(log: Log, offset: int | None = None) -> list[Record]:
    start = log.log_start_offset if offset is None else offset
    fetched = log.read(start, 1 << 30, max_offset=log.log_end_offset)
    return list(decode_records(fetched.read_bytes(), min_offset=start))


def write(log: Log, pairs: Sequence[Pair], model: dict[bytes, tuple[int, bytes | None]]) -> None:
    info = log.append(keyed(pairs, timestamp=log.time_ms()))
    for i, (key, value) in enumerate(pairs):
        assert key is not None
        model[key] = (info.first_offset + i, value)


def check_files(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every .log parses with kafka-python (CRCs checked); offsets strictly increase across files."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for path in sorted(directory.glob("*.log")):
        for base, last, recs in kafka_python_batches(path.read_bytes()):
            assert base >= int(path.stem)
            assert all(base <= r[0] <= last for r in recs)
            out.extend(recs)
    offsets = [r[0] for r in out]
    assert offsets == sorted(set(offsets)), "duplicate or out-of-order offsets"
    return out


def assert_latest_survive(log: Log, model: dict[bytes, tuple[int, bytes | None]]) -> None:
    seen = {r.key: (r.offset, r.value) for r in records(log)}
    for key, latest in model.items():
        if latest[1] is not None:
            assert seen.get(key) == latest, key


# -- the offset map -----------------------------------------------------------------


def test_offset_map_slots_and_capacity() -> None:
    m = OffsetMap(10 * ENTRY_BYTES)
    assert m.capacity == 10
    assert slot_of(b"short") == b"short"
    long_key = b"k" * 40
    assert len(slot_of(long_key)) == 16 and slot_of(long_key) != long_key
    assert m.has_room(100)  # an empty map always takes one batch
    m.put(b"a", 1)
    m.put(long_key, 2)
    m.put(b"a", 5)
    assert (m.get(b"a"), m.get(long_key), m.get(b"zz"), len(m), m.latest_offset) == (5, 2, -1, 2, 5)
    assert m.has_room(8) and not m.has_room(9)
    m.clear()
    assert len(m) == 0 and m.latest_offset == -1


# -- what survives ------------------------------------------------------------------


def test_latest_value_per_key_survives_offsets_kept(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock)
    model: dict[bytes, tuple[int, bytes | None]] = {}
    for i in range(60):
        write(log, [(b"k%d" % ((i * 7 + j) % 13), b"v%d-%d" % (i, j)) for j in range(3)], model)
        if i % 6 == 5:
            log.roll()
    active_base = log.segments[-1].base_offset
    before = log.size_in_bytes
    result = cleaner(tmp_path, log).clean(log)
    assert result is not None and result.completed
    assert result.end_offset == active_base
    assert log.size_in_bytes < before / 3
    assert_latest_survive(log, model)
    # Below the active segment each key appears once: its latest record.
    cleaned = [r for r in records(log) if r.offset < active_base]
    assert len({r.key for r in cleaned}) == len(cleaned)
    for r in cleaned:
        assert model[r.key or b""][0] == r.offset or model[r.key or b""][0] >= active_base
    # Timestamps and headers come through the rebuild unchanged.
    by_offset = {r.offset: r for r in records(log)}
    for offset, value in model.values():
        rec = by_offset[offset]
        assert rec.value == value
        assert rec.timestamp == BASE_TS + int(rec.headers[0][1] or b"0")
    check_files(log.dir)
    log.close()


def test_fetch_from_removed_offset_returns_next_surviving(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock)
    model: dict[bytes, tuple[int, bytes | None]] = {}
    write(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], model)  # 0-2
    write(log, [(b"a", b"2"), (b"b", b"2")], model)  # 3-4
    log.roll()
    write(log, [(b"a", b"3")], model)  # 5
    log.roll()
    write(log, [(b"z", b"active")], model)
    cleaner(tmp_path, log).clean(log)
    assert [(r.offset, r.key, r.value) for r in records(log)] == [
        (2, b"c", b"1"),
        (4, b"b", b"2"),
        (5, b"a", b"3"),
        (6, b"z", b"active"),
    ]
    assert log.log_start_offset == 0
    for offset, first in [(0, 2), (1, 2), (3, 4), (4, 4), (5, 5)]:
        got = records(log, offset)
        assert got and got[0].offset == first, offset
    log.close()


def test_active_segment_never_touched(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock)
    for i in range(5):
        log.append(keyed([(b"k", b"old%d" % i)]))
    log.roll()
    for i in range(5):
        log.append(keyed([(b"k", b"new%d" % i)]))
    active = log.segments[-1]
    data = active.log_path.read_bytes()
    assert cleaner(tmp_path, log).clean(log) is not None
    assert log.segments[-1] is active and active.log_path.read_bytes() == data
    # The map covers only the cleanable part, so old4 stays until the active segment rolls.
    assert [r.value for r in records(log)] == [b"old4"] + [b"new%d" % i for i in range(5)]
    log.close()


def test_tombstones_expire_after_delete_retention(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock, **{"delete.retention.ms": DAY})
    c = cleaner(tmp_path, log)
    log.append(keyed([(b"gone", b"1"), (b"stays", b"1")]))
    log.append(keyed([(b"gone", None)]))
    log.roll()
    log.append(keyed([(b"other", b"x")]))
    assert c.run_once() is not None
    assert [(r.key, r.value) for r in records(log)] == [
        (b"stays", b"1"),
        (b"gone", None),
        (b"other", b"x"),
    ]
    # Not dirty, and the tombstone is not yet delete.retention.ms old.
    clock[0] += DAY
    assert c.run_once() is None
    # One ms later the cleaner comes back for it by itself.
    clock[0] += 1
    result = c.run_once()
    assert result is not None and result.tombstones_dropped == 1
    assert [(r.key, r.value) for r in records(log)] == [(b"stays", b"1"), (b"other", b"x")]
    assert c.run_once() is None
    check_files(log.dir)
    log.close()


def test_tombstone_in_dirty_part_is_kept_even_with_zero_retention(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock, **{"delete.retention.ms": 0})
    c = cleaner(tmp_path, log)
    log.append(keyed([(b"a", b"1")]))
    log.append(keyed([(b"a", None)]))
    log.roll()
    log.append(keyed([(b"x", b"1")]))
    c.run_once()
    assert [(r.key, r.value) for r in records(log)][:1] == [(b"a", None)]
    clock[0] += 1
    c.run_once()
    assert [(r.key, r.value) for r in records(log)] == [(b"x", b"1")]
    log.close()


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock, **{"min.compaction.lag.ms": 10_000})
    c = cleaner(tmp_path, log)
    log.append(keyed([(b"k", b"1"), (b"k", b"2")], timestamp=BASE_TS))
    log.roll()
    log.append(keyed([(b"k", b"3"), (b"k", b"4")], timestamp=BASE_TS + 8_000))
    log.roll()
    log.append(keyed([(b"k", b"5")], timestamp=BASE_TS + 9_000))
    clock[0] = BASE_TS + 10_000
    assert c.survey(log).cleanable_segments == 0
    assert c.run_once() is None
    clock[0] = BASE_TS + 10_001
    found = c.survey(log)
    # The first segment (max ts BASE+1) is old enough now; the second (BASE+8001) is not.
    assert (found.cleanable_segments, found.first_uncleanable) == (1, 2)
    c.run_once()
    assert [r.value for r in records(log)] == [b"2", b"3", b"4", b"5"]
    clock[0] = BASE_TS + 18_001
    c.run_once()
    # 5 is in the active segment, outside the map: 4 is the latest the pass knew of.
    assert [r.value for r in records(log)] == [b"4", b"5"]
    log.close()


def test_min_cleanable_dirty_ratio(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock, **{"min.cleanable.dirty.ratio": 0.5})
    c = cleaner(tmp_path, log)
    for i in range(10):
        log.append(keyed([(b"k%d" % i, b"x" * 200)]))
    log.roll()
    log.append(keyed([(b"active", b"")]))
    assert c.run_once() is not None  # all dirty: ratio 1.0
    log.append(keyed([(b"k0", b"y" * 200)]))
    log.roll()
    found = c.survey(log)
    assert 0 < found.dirty_ratio < 0.5
    assert c.run_once() is None
    assert c.stats()["logs"]["t-0"]["dirty_ratio"] == round(found.dirty_ratio, 4)
    for i in range(1, 10):
        log.append(keyed([(b"k%d" % i, b"y" * 200)]))
    log.roll()
    assert c.survey(log).dirty_ratio >= 0.5
    result = c.run_once()
    assert result is not None
    assert {r.value for r in records(log) if r.key != b"active"} == {b"y" * 200}
    log.close()


def test_compact_delete_also_applies_retention(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock, **{"cleanup.policy": "compact,delete", "retention.ms": 5000})
    log.append(keyed([(b"a", b"1")], timestamp=BASE_TS))
    log.roll()
    log.append(keyed([(b"b", b"1")], timestamp=BASE_TS + 4000))
    log.roll()
    log.append(keyed([(b"c", b"1")], timestamp=BASE_TS + 9000))
    log.roll()
    log.append(keyed([(b"d", b"1")], timestamp=BASE_TS + 9000))
    # Every record is the latest of its key, yet retention takes the expired segment.
    assert log.delete_old_segments(BASE_TS + 6000) == 1
    assert [r.key for r in records(log)] == [b"b", b"c", b"d"]
    assert log.log_start_offset == 1
    cleaner(tmp_path, log).clean(log)
    assert [r.key for r in records(log)] == [b"b", b"c", b"d"]
    # The cleaned (merged) segment is still subject to retention by its max timestamp.
    assert log.delete_old_segments(BASE_TS + 14_000) == 0
    assert log.delete_old_segments(BASE_TS + 14_001) == 1
    assert [r.key for r in records(log)] == [b"d"]
    log.close()


def test_unkeyed_records_rejected_for_compacted_topics(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock)
    with pytest.raises(InvalidRecord, match="Compacted topic cannot accept message without key"):
        log.append(keyed([(b"k", b"1"), (None, b"2")]))
    assert log.log_end_offset == 0
    log.append(keyed([(b"k", b"1"), (b"k", None)]))  # a tombstone has a key
    plain = Log(tmp_path / "p-0", LogConfig())
    plain.append(keyed([(None, b"fine")]))
    plain.close()
    log.close()


def test_keyless_records_of_a_formerly_deleting_topic_are_dropped(tmp_path: Path) -> None:
    clock = [BASE_TS]
    Log(tmp_path / "t-0", LogConfig()).close()
    plain = Log(tmp_path / "t-0", LogConfig(), clean_shutdown=True)
    plain.append(keyed([(None, b"x"), (b"k", b"1")]))
    plain.roll()
    plain.close()
    log = compacted(tmp_path, clock)
    log.append(keyed([(b"z", b"1")]))
    cleaner(tmp_path, log).clean(log)
    assert [(r.offset, r.key) for r in records(log)] == [(1, b"k"), (2, b"z")]
    log.close()


def test_small_map_cleans_in_several_passes(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock)
    model: dict[bytes, tuple[int, bytes | None]] = {}
    for rnd in range(4):
        for k in range(0, 40, 4):
            write(log, [(b"key-%02d" % (k + j), b"r%d" % rnd) for j in range(4)], model)
        log.roll()
    write(log, [(b"tail", b"t")], model)
    c = cleaner(tmp_path, log, dedupe_buffer_bytes=12 * ENTRY_BYTES)
    ends = []
    while (result := c.run_once()) is not None:
        ends.append(result.end_offset)
        assert len(ends) < 50
    assert len(ends) > 3 and ends == sorted(ends)
    assert ends[-1] == log.segments[-1].base_offset
    assert_latest_survive(log, model)
    cleaned = [r for r in records(log) if r.key != b"tail"]
    assert {r.value for r in cleaned} == {b"r3"} and len(cleaned) == 40
    check_files(log.dir)
    log.close()


def test_segments_merge_up_to_segment_bytes(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock, **{"segment.bytes": 4000})
    for i in range(30):
        log.append(keyed([(b"k%d" % i, b"v" * 50)]))
        log.roll()
    assert len(log.segments) == 31
    cleaner(tmp_path, log).clean(log)
    # Nothing was superseded; 30 segments of ~130 bytes fit in one group.
    assert len(log.segments) == 2
    assert [r.key for r in records(log)] == [b"k%d" % i for i in range(30)]
    log.close()


def test_high_watermark_bounds_cleaning(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock)
    log.hw_follows_leo = False
    log.append(keyed([(b"k", b"1")]))
    log.roll()
    log.append(keyed([(b"k", b"2")]))
    log.roll()
    log.append(keyed([(b"k", b"3")]))
    log.high_watermark = 1
    c = cleaner(tmp_path, log)
    assert c.survey(log).cleanable_segments == 1
    c.run_once()
    assert [r.value for r in records(log)] == [b"1", b"2", b"3"]  # 2 is above the HW
    log.high_watermark = 3
    c.run_once()
    assert [r.value for r in records(log)] == [b"2", b"3"]  # 3 is in the active segment
    log.close()


# -- batch identity -----------------------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "gzip", "lz4", "zstd", "snappy"])
def test_rebuilt_batches_keep_their_identity(tmp_path: Path, compression: str) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock)
    builder = BatchBuilder(compression, producer_id=42, producer_epoch=3, base_sequence=0)
    for i in range(6):
        builder.append(b"value-%d" % i * 20, b"k%d" % (i % 3), timestamp=BASE_TS + 10 * i)
    log.append(builder.build(), leader_epoch=5)
    later = BatchBuilder(compression, producer_id=42, producer_epoch=3, base_sequence=6)
    later.append(b"x", b"other", timestamp=BASE_TS + 100)
    log.append(later.build(), leader_epoch=5)
    log.roll()
    log.append(keyed([(b"active", b"1")]))
    before = read_header(log.segments[0].log_path.read_bytes())
    cleaner(tmp_path, log).clean(log)
    data = log.segments[0].log_path.read_bytes()
    after = read_header(data)
    # Records 3, 4, 5 (keys k0, k1, k2) supersede 0, 1, 2.
    assert [(r.offset, r.key, r.timestamp) for r in decode_records(data)] == [
        (3, b"k0", BASE_TS + 30),
        (4, b"k1", BASE_TS + 40),
        (5, b"k2", BASE_TS + 50),
        (6, b"other", BASE_TS + 100),
    ]
    for field in (
        "base_offset",
        "last_offset_delta",
        "partition_leader_epoch",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "max_timestamp",
    ):
        assert getattr(after, field) == getattr(before, field), field
    assert after.record_count == 3
    assert after.compression == before.compression
    check_files(log.dir)
    log.close()


def test_rebuild_keeps_log_append_time() -> None:
    builder = BatchBuilder("none")
    for i in range(3):
        builder.append(b"v%d" % i, b"k%d" % i, timestamp=BASE_TS + i)
    buf = bytearray(builder.build())
    # Stamp as the broker does for message.timestamp.type=LogAppendTime.
    stamp(buf, 0, 100, 1)
    stamp_log_append_time(buf, 0, len(buf), BASE_TS + 999)
    header = read_header(buf)
    kept = [r for r in DefaultRecordBatch(bytes(buf)) if r.key != b"k1"]
    out = rebuild(header, kept)
    new = read_header(out)
    assert (new.base_offset, new.last_offset_delta, new.timestamp_type, new.max_timestamp) == (
        100,
        2,
        1,
        BASE_TS + 999,
    )
    assert [(r.offset, r.timestamp) for r in decode_records(out)] == [
        (100, BASE_TS + 999),
        (102, BASE_TS + 999),
    ]
    assert kafka_python_batches(bytes(out))[0][:2] == (100, 102)


def test_last_batch_of_each_producer_keeps_its_header_not_its_superseded_records(
    tmp_path: Path,
) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock)
    first = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0)
    first.append(b"p1", b"a", timestamp=BASE_TS)
    first.append(b"p1", b"b", timestamp=BASE_TS)
    log.append(first.build())  # 0-1
    second = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=2)
    second.append(b"p2", b"a", timestamp=BASE_TS)
    second.append(b"p2", b"c", timestamp=BASE_TS + 5)
    log.append(second.build())  # 2-3
    log.append(keyed([(b"a", b"plain"), (b"b", b"plain"), (b"c", b"plain")]))  # 4-6
    log.roll()
    log.append(keyed([(b"z", b"1")]))
    cleaner(tmp_path, log).clean(log)
    got = [(r.offset, r.key, r.value) for r in records(log)]
    # Every superseded record is gone, the producer's last batch's too (Kafka's rule).
    assert got == [(4, b"a", b"plain"), (5, b"b", b"plain"), (6, b"c", b"plain"), (7, b"z", b"1")]
    # The last batch stays as an empty batch: the producer's sequence state survives.
    data = log.segments[0].log_path.read_bytes()
    empty = read_header(data)
    assert (empty.base_offset, empty.last_offset_delta, empty.record_count) == (2, 1, 0)
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (7, 0, 2)
    assert empty.max_timestamp == BASE_TS + 5 and empty.crc == compute_crc(data, 0, empty.size)
    assert kafka_python_batches(data)[0] == (2, 3, [])
    log.close()
    # Without snapshots the producer state is rebuilt from the batch headers alone.
    for snapshot in log.dir.glob("*.snapshot"):
        snapshot.unlink()
    reopened = compacted(tmp_path, clock)
    entry = reopened.producer_state.producers.get(7)
    assert entry is not None and (entry.epoch, entry.last_seq) == (0, 3)
    # A retry of that batch is still answered as a duplicate, not written again.
    retry = reopened.append(second.build())
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (2, 3)
    reopened.close()


def test_deleted_key_of_an_idempotent_producer_never_comes_back(tmp_path: Path) -> None:
    """Issue 20.1: the producer's only batch holds the value a tombstone deletes."""
    clock = [BASE_TS]
    log = compacted(tmp_path, clock, **{"delete.retention.ms": 1000, "segment.bytes": 300})
    producer = BatchBuilder(producer_id=42, producer_epoch=0, base_sequence=0)
    producer.append(b"alice@example.com", b"user:42", timestamp=BASE_TS)
    log.append(producer.build())
    log.append(keyed([(b"user:42", None)]))
    for i in range(20):
        log.append(keyed([(b"filler-%d" % (i % 3), b"x" * 40)]))
    clean = cleaner(tmp_path, log)
    for step in range(4):
        clock[0] += 800
        log.append(keyed([(b"filler-%d" % (step % 3), b"y" * 40)]))
        while clean.clean(log) is not None:
            pass
        values = [r.value for r in records(log) if r.key == b"user:42"]
        assert b"alice@example.com" not in values, f"the deleted value is back (step {step})"
    # The tombstone itself went after delete.retention.ms.
    assert not [r for r in records(log) if r.key == b"user:42"]
    log.close()


def test_clients_cannot_set_the_delete_horizon_flag(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock)
    batch = bytearray(keyed([(b"gone", None)]))
    attributes = struct.unpack_from(">h", batch, 21)[0] | DELETE_HORIZON_MASK
    struct.pack_into(">h", batch, 21, attributes)
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    with pytest.raises(InvalidRecord, match="delete horizon"):
        log.append(bytes(batch))
    assert log.log_end_offset == 0
    # A follower copies its leader's batches verbatim, cleaned ones included.
    stamp(batch, 0, 0, 0)
    assert log.append_as_follower(bytes(batch)).last_offset == 0
    log.close()


def test_control_batches_are_kept(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock)
    log.append(keyed([(b"a", b"1")]))
    control = bytearray(keyed([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")]))
    attributes = struct.unpack_from(">h", control, 21)[0] | CONTROL_MASK
    struct.pack_into(">h", control, 21, attributes)
    struct.pack_into(">I", control, CRC_OFFSET, compute_crc(control, 0, len(control)))
    struct.pack_into(">q", control, 0, 1)
    log.append_as_follower(control)
    log.append(keyed([(b"a", b"2")]))
    log.roll()
    log.append(keyed([(b"z", b"1")]))
    cleaner(tmp_path, log).clean(log)
    data = log.segments[0].log_path.read_bytes()
    assert read_header(data).is_control and read_header(data).base_offset == 1
    assert [(r.offset, r.value) for r in records(log)] == [(2, b"2"), (3, b"1")]
    log.close()


# -- survey -------------------------------------------------------------------------


def test_survey_splits_clean_dirty_and_uncleanable(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = compacted(tmp_path, clock)
    for _ in range(4):
        log.append(keyed([(b"k", b"x" * 100)] * 10))
        log.roll()
    sizes = [s.size for s in log.segments]
    found = survey(log.segments, first_dirty=20, high_watermark=40, config=log.config, now=clock[0])
    assert (found.first_dirty, found.first_uncleanable, found.cleanable_segments) == (20, 40, 4)
    assert (found.clean_bytes, found.dirty_bytes) == (sizes[0] + sizes[1], sizes[2] + sizes[3])
    assert found.dirty_ratio == pytest.approx(0.5)
    # A first dirty offset inside a segment counts in proportion.
    half = survey(log.segments, first_dirty=25, high_watermark=40, config=log.config, now=0)
    assert half.dirty_bytes == sizes[2] // 2 + sizes[3]
    log.close()


def test_first_clean_stamps_a_delete_horizon_on_tombstone_batches(tmp_path: Path) -> None:
    clock = [BASE_TS + 12345]
    log = compacted(tmp_path, clock, **{"delete.retention.ms": 1000})
    log.append(keyed([(b"a", b"1"), (b"gone", None), (b"b", b"1")], timestamp=BASE_TS))
    log.append(keyed([(b"c", b"1")], timestamp=BASE_TS + 50))
    log.roll()
    log.append(keyed([(b"z", b"1")]))
    cleaner(tmp_path, log).clean(log)
    data = log.segments[0].log_path.read_bytes()
    first = read_header(data)
    # KIP-534: bit 6 set, baseTimestamp = cleaning time + delete.retention.ms.
    assert first.attributes & DELETE_HORIZON_MASK
    assert delete_horizon(first) == BASE_TS + 12345 + 1000
    assert (first.base_offset, first.last_offset_delta, first.max_timestamp) == (0, 2, BASE_TS + 2)
    # A batch without tombstones is left as it was.
    second = read_header(data, first.size)
    assert delete_horizon(second) is None
    # Record timestamps read back unchanged, by our reader and by kafka-python.
    assert [(r.offset, r.timestamp) for r in decode_records(data)] == [
        (0, BASE_TS),
        (1, BASE_TS + 1),
        (2, BASE_TS + 2),
        (3, BASE_TS + 50),
    ]
    assert [r.timestamp for r in kafka_python_records(data)] == [
        BASE_TS,
        BASE_TS + 1,
        BASE_TS + 2,
        BASE_TS + 50,
    ]
    log.close()


def kafka_python_records(data: bytes) -> list[Any]:
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        out.extend(batch)
    return out


@pytest.mark.parametrize("compression", ["none", "gzip", "lz4", "zstd", "snappy"])
@pytest.mark.parametrize("log_append_time", [False, True])
def test_encode_with_horizon_keeps_identity(compression: str, log_append_time: bool) -> None:
    builder = BatchBuilder(compression, producer_id=9, producer_epoch=2, base_sequence=40)
    for i in range(5):
        value = None if i == 3 else b"value-%d" % i * 10
        builder.append(value, b"k%d" % i, headers=[("h", b"%d" % i)], timestamp=BASE_TS + 7 * i)
    buf = bytearray(builder.build())
    stamp(buf, 0, 500, 3)
    if log_append_time:
        stamp_log_append_time(buf, 0, len(buf), BASE_TS + 999)
    header = read_header(buf)
    kept = [r for r in DefaultRecordBatch(bytes(buf)) if r.offset != 501]
    out = encode_with_horizon(header, kept, BASE_TS + 10**6)
    new = read_header(out)
    for field in (
        "base_offset",
        "last_offset_delta",
        "partition_leader_epoch",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "timestamp_type",
        "compression",
        "is_transactional",
    ):
        assert getattr(new, field) == getattr(header, field), field
    assert (new.record_count, delete_horizon(new)) == (4, BASE_TS + 10**6)
    expected_ts = (
        [BASE_TS + 999] * 4 if log_append_time else [BASE_TS + 7 * i for i in (0, 2, 3, 4)]
    )
    assert new.max_timestamp == max(expected_ts)
    got = list(decode_records(out))
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
        (r.offset, r.key, r.value, r.headers) for r in kept
    ]
    assert [r.timestamp for r in got] == expected_ts
    assert [r.timestamp for r in kafka_python_records(bytes(out))] == expected_ts


def test_tombstones_expire_in_a_busy_log(tmp_path: Path) -> None:
    """Passes every half retention, each merging old and new segments: the delete still goes."""
    clock = [BASE_TS]
    retention = 1000
    log = compacted(tmp_path, clock, **{"delete.retention.ms": retention})
    c = cleaner(tmp_path, log)
    log.append(keyed([(b"gone", b"1")]))
    log.append(keyed([(b"gone", None)]))
    log.roll()
    deleted_at = clock[0]
    for i in range(6):
        log.append(keyed([(b"k%d" % i, b"v")]))
        log.roll()
        assert c.run_once() is not None
        keys = [r.key for r in records(log)]
        assert (b"gone" in keys) == (clock[0] - deleted_at <= retention), clock[0] - deleted_at
        clock[0] += retention // 2
    assert len(log.segments) == 2  # everything merged into one segment each time
    log.close()


# -- the log changing under a pass ------------------------------------------------------


def _three_segments(tmp_path: Path, clock: list[int], **overrides: object) -> Log:
    log = compacted(tmp_path, clock, **overrides)
    for i in range(3):
        log.append(keyed([(b"a", b"%d" % i), (b"b", b"%d" % i)], timestamp=BASE_TS + 1000 * i))
        log.roll()
    log.append(keyed([(b"z", b"active")], timestamp=BASE_TS + 5000))
    return log


@pytest.mark.parametrize("change", ["truncation", "retention"])
def test_a_log_changed_under_the_pass_keeps_its_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    clock = [BASE_TS]
    log = _three_segments(tmp_path, clock, **{"cleanup.policy": "compact,delete"})
    before = [(r.offset, r.value) for r in records(log)]
    original = LogSegment.open.__func__  # type: ignore[attr-defined]

    def open_segment(cls: type[LogSegment], *args: object, **kwargs: object) -> LogSegment:
        if kwargs.get("suffix") == ".cleaned" and kwargs.get("create"):
            if change == "truncation":
                log.truncate_to(6)  # a follower truncates while the copy is being made
            else:
                log.delete_old_segments(BASE_TS + 7 * DAY + 2)  # the first segment expires
        return original(cls, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(LogSegment, "open", classmethod(open_segment))
    c = cleaner(tmp_path, log)
    result = c.clean(log)
    assert result is not None and not result.completed and result.groups_swapped == 0
    assert not list(log.dir.glob("*.cleaned")) and not list(log.dir.glob("*.swap"))
    expected = before[:6] if change == "truncation" else before[2:]
    assert [(r.offset, r.value) for r in records(log)] == expected
    assert c.checkpoints() == {}
    monkeypatch.undo()
    assert c.clean(log) is not None
    log.close()


def test_checkpoint_beyond_the_log_end_restarts_from_the_start(tmp_path: Path) -> None:
    clock = [BASE_TS]
    log = _three_segments(tmp_path, clock)
    c = cleaner(tmp_path, log)
    c.clean(log)
    assert c.first_dirty_offset(log) == 6
    log.truncate_to(2)
    assert c.first_dirty_offset(log) == 0
    log.close()


def test_run_once_picks_the_dirtiest_log(tmp_path: Path) -> None:
    clock = [BASE_TS]
    config = LogConfig().with_overrides(
        {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}
    )
    logs = [Log(tmp_path / f"t-{p}", config, clock_ms=lambda: clock[0]) for p in range(3)]
    plain = Log(tmp_path / "plain-0", LogConfig())
    for log in [*logs, plain]:
        log.append(keyed([(b"k%d" % i, b"x" * 100) for i in range(10)]))
        log.roll()
        log.append(keyed([(b"a", b"1")]))
    c = LogCleaner(tmp_path, lambda: [*logs, plain])
    # Clean t-0 and t-2 first, then dirty them a little: t-1 stays the dirtiest.
    for log in (logs[0], logs[2]):
        c.clean(log)
        log.append(keyed([(b"k1", b"y")]))
        log.roll()
    result = c.run_once()
    assert result is not None and (result.topic, result.partition) == ("t", 1)
    assert result.dirty_ratio == 1.0
    picked = [c.run_once() for _ in range(3)]
    assert sorted(r.partition for r in picked if r is not None) == [0, 2]
    assert c.run_once() is None
    assert set(c.stats()["logs"]) == {"t-0", "t-1", "t-2"}
    for log in [*logs, plain]:
        log.close()
