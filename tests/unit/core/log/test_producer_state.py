"""Idempotent producers in the log engine: sequence rules, fencing, the 5-batch window,
snapshots, rebuilding after a restart (clean or not), truncation, retention, expiration,
and the broker's producer id blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from log_helpers import check_log_dir, value_batch

from app.common.batch import BatchBuilder, iter_headers, read_header
from app.common.errors import (
    InvalidProducerEpoch,
    InvalidRecord,
    InvalidRequest,
    KafkaStorageError,
    OutOfOrderSequence,
    UnknownProducerId,
)
from app.core.log import Log, LogConfig
from app.core.log.producer_ids import MAX_EPOCH, ProducerIdManager
from app.core.log.producer_state import (
    INT32_MAX,
    BatchMetadata,
    ProducerEntry,
    SnapshotCorrupt,
    in_sequence,
    last_sequence,
    read_snapshot,
    snapshot_name,
    write_snapshot,
)

PID = 4242
TS = 1_700_000_000_000


class Clock:
    def __init__(self, now: int = TS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def pbatch(seq: int, count: int = 3, *, pid: int = PID, epoch: int = 0, tag: str = "") -> bytes:
    """A batch of ``count`` records numbered by their sequence: ``b"<pid>/<epoch>/<seq><tag>"``."""
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i in range(count):
        b.append(f"{pid}/{epoch}/{(seq + i) & INT32_MAX}{tag}".encode(), timestamp=TS)
    return b.build()


def values(directory: Path) -> list[bytes | None]:
    return [v for _, v in check_log_dir(directory)]


def snapshots(directory: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in directory.glob("*.snapshot"))


def state(log: Log) -> dict[int, ProducerEntry]:
    return {pid: e.copy() for pid, e in log.producer_state.producers.items()}


def windows(log: Log) -> dict[int, tuple[int, list[tuple[int, int, int, int]]]]:
    """Epoch and (first seq, last seq, first offset, last offset) per producer: what a
    restart must bring back (append times differ between live appends and replays)."""
    return {
        pid: (
            e.epoch,
            [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches],
        )
        for pid, e in log.producer_state.producers.items()
    }


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log(tmp_path: Path, clock: Clock) -> Log:
    return Log(tmp_path / "t-0", clock_ms=clock)


# -- sequence arithmetic -------------------------------------------------------------


def test_sequences_wrap_at_int32_max() -> None:
    assert last_sequence(0, 2) == 2
    assert last_sequence(INT32_MAX, 0) == INT32_MAX
    assert last_sequence(INT32_MAX - 1, 3) == 1
    assert in_sequence(-1, 0)
    assert in_sequence(4, 5)
    assert in_sequence(INT32_MAX, 0)
    assert not in_sequence(INT32_MAX, INT32_MAX + 1)
    assert not in_sequence(4, 6)
    assert not in_sequence(4, 4)


# -- the rules -----------------------------------------------------------------------


def test_in_order_batches_append(log: Log) -> None:
    infos = [log.append(pbatch(seq)) for seq in (0, 3, 6)]
    assert [(i.first_offset, i.last_offset, i.duplicate, i.duplicates) for i in infos] == [
        (0, 2, False, ()),
        (3, 5, False, ()),
        (6, 8, False, ()),
    ]
    entry = log.producer_state.producers[PID]
    assert entry.epoch == 0 and entry.last_seq == 8
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] == [
        (0, 2, 0, 2),
        (3, 5, 3, 5),
        (6, 8, 6, 8),
    ]


def test_exact_retry_is_answered_with_the_original_offsets_and_not_written(log: Log) -> None:
    log.append(value_batch(0, 2))  # offsets 0-1 from a producer without an id
    first = log.append(pbatch(0))
    size = log.size_in_bytes
    again = log.append(pbatch(0))
    assert again.duplicate and again.duplicates == ((2, 4),)
    assert (again.first_offset, again.last_offset, again.record_count) == (2, 4, 3)
    assert again.max_timestamp == first.max_timestamp
    assert log.log_end_offset == 5 and log.size_in_bytes == size
    assert values(log.dir)[2:] == [b"4242/0/0", b"4242/0/1", b"4242/0/2"]


def test_every_batch_of_the_last_five_is_recognised_but_not_older_ones(log: Log) -> None:
    for i in range(7):
        log.append(pbatch(i * 2, 2))
    end = log.log_end_offset
    for i in range(2, 7):
        info = log.append(pbatch(i * 2, 2))
        assert info.duplicate and info.duplicates == ((i * 2, i * 2 + 1),)
    # The second batch fell out of the window: a retry of it is no longer known, and
    # it does not follow the last sequence either.
    with pytest.raises(OutOfOrderSequence) as err:
        log.append(pbatch(2, 2))
    assert err.value.fields()["expected_sequence"] == 14
    assert log.log_end_offset == end


def test_a_same_first_sequence_with_another_length_is_not_a_duplicate(log: Log) -> None:
    log.append(pbatch(0, 3))
    with pytest.raises(OutOfOrderSequence):
        log.append(pbatch(0, 2))


def test_a_gap_is_refused_and_the_log_is_unchanged(log: Log) -> None:
    log.append(pbatch(0))
    size = log.size_in_bytes
    with pytest.raises(OutOfOrderSequence) as err:
        log.append(pbatch(4))
    fields = err.value.fields()
    assert fields["sequence"] == 4 and fields["expected_sequence"] == 3
    assert fields["producer_id"] == PID and fields["topic"] == "t" and fields["partition"] == 0
    assert err.value.error_code == "OUT_OF_ORDER_SEQUENCE_NUMBER" and not err.value.retriable
    assert log.log_end_offset == 3 and log.size_in_bytes == size
    assert log.producer_state.producers[PID].last_seq == 2
    log.append(pbatch(3))  # the right sequence still goes in


def test_unknown_producer_must_start_at_zero(log: Log) -> None:
    with pytest.raises(OutOfOrderSequence) as err:
        log.append(pbatch(7))
    assert err.value.fields()["expected_sequence"] == 0
    assert log.log_end_offset == 0 and not log.producer_state.producers
    log.append(pbatch(0))


def test_epochs_fence_and_a_new_epoch_starts_at_zero(log: Log) -> None:
    log.append(pbatch(0, epoch=1))
    log.append(pbatch(3, epoch=1))
    with pytest.raises(InvalidProducerEpoch) as err:
        log.append(pbatch(6, epoch=0))
    assert err.value.fields()["current_epoch"] == 1
    assert err.value.error_code == "INVALID_PRODUCER_EPOCH" and not err.value.retriable
    with pytest.raises(OutOfOrderSequence):
        log.append(pbatch(6, epoch=2))
    info = log.append(pbatch(0, epoch=2))
    assert info.first_offset == 6 and not info.duplicate
    entry = log.producer_state.producers[PID]
    assert entry.epoch == 2 and [b.first_seq for b in entry.batches] == [0]
    # A retry from the fenced epoch is fenced, not answered as a duplicate.
    with pytest.raises(InvalidProducerEpoch):
        log.append(pbatch(3, epoch=1))
    assert log.log_end_offset == 9


def test_sequences_wrap_around(log: Log) -> None:
    # Reaching 2^31 real records would take hours: seed the state through a replay.
    seeded = bytearray(pbatch(INT32_MAX - 4, 3))
    seeded[:8] = (100).to_bytes(8, "big")
    log.producer_state.replay(read_header(seeded), TS)
    assert log.producer_state.producers[PID].last_seq == INT32_MAX - 2
    info = log.append(pbatch(INT32_MAX - 1, 4))  # INT32_MAX - 1, INT32_MAX, 0, 1
    assert log.producer_state.producers[PID].last_seq == 1
    assert log.append(pbatch(INT32_MAX - 1, 4)).duplicates == ((info.first_offset, 3),)
    with pytest.raises(OutOfOrderSequence):
        log.append(pbatch(0))
    log.append(pbatch(2))
    assert log.producer_state.producers[PID].last_seq == 4


def test_producers_are_independent(log: Log) -> None:
    log.append(pbatch(0, pid=1))
    log.append(pbatch(0, pid=2))
    log.append(pbatch(3, pid=1))
    assert log.append(pbatch(0, pid=2)).duplicates == ((3, 5),)
    with pytest.raises(OutOfOrderSequence):
        log.append(pbatch(9, pid=2))
    assert {pid: e.last_seq for pid, e in log.producer_state.producers.items()} == {1: 5, 2: 2}


def test_a_producer_batch_needs_an_epoch_and_a_sequence(log: Log) -> None:
    with pytest.raises(InvalidRecord):
        log.append(pbatch(-1))
    with pytest.raises(InvalidRecord):
        log.append(pbatch(0, epoch=-1))
    assert log.log_end_offset == 0


def test_a_multi_batch_body_is_checked_whole_before_anything_is_written(log: Log) -> None:
    log.append(pbatch(0))
    with pytest.raises(OutOfOrderSequence):
        log.append(pbatch(3) + pbatch(6) + pbatch(10))
    assert log.log_end_offset == 3 and log.producer_state.producers[PID].last_seq == 2
    info = log.append(pbatch(3) + pbatch(6) + value_batch(0, 1) + pbatch(0, pid=7))
    assert (info.first_offset, info.last_offset, info.duplicates) == (3, 12, ())
    assert log.producer_state.producers[PID].last_seq == 8


def test_retries_inside_a_body_are_answered_and_only_new_batches_written(log: Log) -> None:
    log.append(pbatch(0))
    info = log.append(pbatch(0) + pbatch(3) + pbatch(3) + pbatch(6))
    # The retry of batch 0 points at the log, the repeat of batch 3 at this very body.
    assert info.duplicates == ((0, 2), None, (3, 5), None)
    assert (info.first_offset, info.last_offset, info.record_count) == (3, 8, 6)
    assert not info.duplicate
    assert values(log.dir) == [f"4242/0/{i}".encode() for i in range(9)]
    whole = log.append(pbatch(3) + pbatch(6))
    assert whole.duplicate and whole.duplicates == ((3, 5), (6, 8))
    assert (whole.first_offset, whole.last_offset, whole.record_count) == (3, 8, 6)
    assert log.log_end_offset == 9


def test_batches_without_a_producer_id_keep_no_state(log: Log) -> None:
    log.append(value_batch(0, 3))
    log.append(value_batch(3, 3))
    assert not log.producer_state.producers
    log.roll()
    log.close()
    assert snapshots(log.dir) == []


def test_log_append_time_duplicates_answer_the_original_append_time(
    tmp_path: Path, clock: Clock
) -> None:
    config = LogConfig().with_overrides({"message.timestamp.type": "LogAppendTime"})
    log = Log(tmp_path / "t-0", config, clock_ms=clock)
    first = log.append(pbatch(0))
    clock.now += 5000
    again = log.append(pbatch(0))
    assert again.duplicate and again.log_append_time == first.log_append_time == TS
    log.close()


def test_follower_appends_update_the_state(tmp_path: Path, clock: Clock) -> None:
    leader = Log(tmp_path / "t-0", clock_ms=clock)
    follower = Log(tmp_path / "f-0", clock_ms=clock)
    leader.append(pbatch(0))
    leader.append(pbatch(3, epoch=0))
    follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    assert windows(follower) == windows(leader)
    assert follower.append(pbatch(3)).duplicates == ((3, 5),)
    leader.close()
    follower.close()


# -- snapshots -----------------------------------------------------------------------


def test_snapshot_round_trip(tmp_path: Path) -> None:
    entries = [
        ProducerEntry(1, 0, [BatchMetadata(0, 2, 10, 12, TS)], TS + 1),
        ProducerEntry(
            (1 << 62) + 5,
            MAX_EPOCH,
            [BatchMetadata(i * 10, i * 10 + 9, i * 100, i * 100 + 9, TS + i) for i in range(5)],
            TS + 9,
        ),
        ProducerEntry(3, 7, [BatchMetadata(INT32_MAX, 1, 0, 2, -1)], -1),
    ]
    path = tmp_path / snapshot_name(123)
    write_snapshot(path, entries, sync=True)
    assert path.name == "00000000000000000123.snapshot"
    assert read_snapshot(path) == entries
    write_snapshot(path, [], sync=False)
    assert read_snapshot(path) == []


@pytest.mark.parametrize("damage", ["flip", "truncate", "extend", "magic", "empty"])
def test_damaged_snapshots_are_refused(tmp_path: Path, damage: str) -> None:
    path = tmp_path / snapshot_name(0)
    write_snapshot(path, [ProducerEntry(1, 0, [BatchMetadata(0, 2, 0, 2, TS)], TS)], sync=False)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-3] ^= 0x40
    elif damage == "truncate":
        del data[-5:]
    elif damage == "extend":
        data += b"\0"
    elif damage == "magic":
        data[:4] = b"XXXX"
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorrupt):
        read_snapshot(path)


def test_clean_restart_loads_the_snapshot_and_recognises_every_cached_retry(
    tmp_path: Path, clock: Clock
) -> None:
    directory = tmp_path / "t-0"
    log = Log(directory, clock_ms=clock)
    for i in range(6):
        log.append(pbatch(i * 3))
    log.append(pbatch(0, pid=9, epoch=3))
    before = state(log)
    log.close()
    assert snapshots(directory) == [21]
    log = Log(directory, clean_shutdown=True, clock_ms=clock)
    assert state(log) == before and log.producer_state.replayed_on_load == 0
    for i in range(1, 6):
        assert log.append(pbatch(i * 3)).duplicates == ((i * 3, i * 3 + 2),)
    assert log.append(pbatch(0, pid=9, epoch=3)).duplicate
    assert log.append(pbatch(18)).first_offset == 21
    log.close()
    assert values(directory)[-3:] == [b"4242/0/18", b"4242/0/19", b"4242/0/20"]


def test_crash_without_any_snapshot_rebuilds_from_the_log(tmp_path: Path, clock: Clock) -> None:
    directory = tmp_path / "t-0"
    log = Log(directory, clock_ms=clock)
    log.append(value_batch(0, 2))
    for i in range(4):
        log.append(pbatch(i * 3))
    log.append(pbatch(0, pid=9))
    expected = windows(log)
    # A crash: the log is never closed, so nothing is snapshotted.
    assert snapshots(directory) == []
    log2 = Log(directory, clean_shutdown=False, clock_ms=clock)
    assert windows(log2) == expected
    assert log2.producer_state.replayed_on_load == 6  # every batch, with or without an id
    # The rebuilt state was snapshotted, so the next start does not replay it again.
    assert snapshots(directory) == [17]
    assert log2.append(pbatch(9)).duplicates == ((11, 13),)
    with pytest.raises(OutOfOrderSequence):
        log2.append(pbatch(15))
    log2.append(pbatch(12))
    log2.close()
    log.close()


def test_crash_after_rolls_loads_the_last_snapshot_and_replays_the_tail(
    tmp_path: Path, clock: Clock
) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig().with_overrides({"segment.bytes": 600})
    log = Log(directory, config, clock_ms=clock)
    for i in range(20):
        log.append(pbatch(i * 3, tag="x" * 40))
        log.append(pbatch(i, 1, pid=77))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 5
    # One snapshot per roll: at each segment base but the first.
    assert snapshots(directory) == bases[1:]
    expected = windows(log)
    # The rolled segments were flushed (the background flush moves the recovery point to
    # the active segment): recovery scans, and replays the producer state of, only the
    # active segment, from the snapshot at its base.
    log2 = Log(directory, config, clean_shutdown=False, clock_ms=clock, recovery_point=bases[-1])
    assert windows(log2) == expected
    # Only the active segment (after the last roll's snapshot) was replayed.
    active = (directory / f"{bases[-1]:020d}.log").read_bytes()
    assert log2.producer_state.replayed_on_load == len(list(iter_headers(active))) > 0
    log2.close()
    log.close()


def test_a_damaged_latest_snapshot_falls_back_to_an_older_one(tmp_path: Path, clock: Clock) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig().with_overrides({"segment.bytes": 600})
    log = Log(directory, config, clock_ms=clock)
    for i in range(12):
        log.append(pbatch(i * 3, tag="x" * 40))
    expected = windows(log)
    log.close()
    newest = snapshots(directory)[-1]
    (directory / snapshot_name(newest)).write_bytes(b"LBPS torn")
    log = Log(directory, config, clean_shutdown=True, clock_ms=clock)
    assert windows(log) == expected
    assert log.producer_state.replayed_on_load > 0
    assert log.append(pbatch(33)).duplicate
    log.close()


def test_snapshots_above_the_log_end_are_dropped(tmp_path: Path, clock: Clock) -> None:
    directory = tmp_path / "t-0"
    log = Log(directory, clock_ms=clock)
    log.append(pbatch(0))
    log.append(pbatch(3))
    log.close()
    # A snapshot from a future the log no longer has (e.g. a tail lost to a crash).
    write_snapshot(
        directory / snapshot_name(99),
        [ProducerEntry(PID, 0, [BatchMetadata(40, 50, 80, 90, TS)], TS)],
        sync=False,
    )
    log = Log(directory, clean_shutdown=True, clock_ms=clock)
    assert snapshots(directory) == [6]
    assert log.producer_state.producers[PID].last_seq == 5
    log.close()


def test_truncation_drops_later_snapshots_and_rebuilds_the_state(
    tmp_path: Path, clock: Clock
) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig().with_overrides({"segment.bytes": 600})
    log = Log(directory, config, clock_ms=clock)
    for i in range(12):
        log.append(pbatch(i * 3, tag="x" * 40))
    bases = [s.base_offset for s in log.segments]
    cut = bases[2] + 3  # inside the third segment, on a batch boundary
    log.truncate_to(cut)
    assert log.log_end_offset == cut
    assert all(o <= cut for o in snapshots(directory))
    entry = log.producer_state.producers[PID]
    assert entry.last_seq == cut - 1 and entry.batches[-1].last_offset == cut - 1
    # The producer resends what was cut: it follows on and is not mistaken for a retry.
    info = log.append(pbatch(cut, tag="x" * 40))
    assert not info.duplicate and info.first_offset == cut
    with pytest.raises(OutOfOrderSequence):
        log.append(pbatch(cut + 6))
    log.close()
    log = Log(directory, config, clean_shutdown=True, clock_ms=clock)
    assert log.producer_state.producers[PID].last_seq == cut + 2
    log.close()


def test_truncating_everything_forgets_every_producer(tmp_path: Path, clock: Clock) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig().with_overrides({"segment.bytes": 600})
    log = Log(directory, config, clock_ms=clock)
    for i in range(8):
        log.append(pbatch(i * 3, tag="x" * 40))
    log.truncate_to(0)
    assert not log.producer_state.producers and snapshots(directory) == []
    log.append(pbatch(0))
    log.close()


def test_producers_outlive_retention_of_their_batches(tmp_path: Path, clock: Clock) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig().with_overrides({"segment.bytes": 600, "retention.bytes": 700})
    log = Log(directory, config, clock_ms=clock)
    for i in range(4):
        log.append(pbatch(i, 1, pid=5, tag="y" * 60))  # pid 5 stops early
    for i in range(12):
        log.append(pbatch(i * 3, tag="x" * 40))
    assert log.delete_old_segments() > 0
    start = log.log_start_offset
    assert start > 3  # pid 5's batches are gone
    assert log.producer_state.producers[5].last_seq == 3
    kept = snapshots(directory)
    assert len([o for o in kept if o <= start]) == 1
    bases = [s.base_offset for s in log.segments]
    assert all(o in bases or o == kept[-1] for o in kept if o > start)
    log.close()
    for clean in (True, False):
        log = Log(directory, config, clean_shutdown=clean, clock_ms=clock)
        assert log.producer_state.producers[5].last_seq == 3
        assert log.append(pbatch(3, 1, pid=5, tag="y" * 60)).duplicate
        log.close()


def test_idle_producers_expire(tmp_path: Path, clock: Clock) -> None:
    directory = tmp_path / "t-0"
    log = Log(directory, clock_ms=clock, producer_id_expiration_ms=1000)
    log.append(pbatch(0, pid=1))
    clock.now += 600
    log.append(pbatch(0, pid=2))
    clock.now += 500
    assert log.remove_expired_producers() == 1
    assert set(log.producer_state.producers) == {2}
    # Forgotten: its next batch looks like a producer that lost track.
    with pytest.raises(OutOfOrderSequence):
        log.append(pbatch(3, pid=1))
    log.close()
    # The expiration is in the close snapshot: a restart does not bring pid 1 back.
    log = Log(directory, clean_shutdown=True, clock_ms=clock, producer_id_expiration_ms=1000)
    assert set(log.producer_state.producers) == {2}
    log.close()


def test_expiration_counts_from_the_broker_clock_not_record_timestamps(
    tmp_path: Path, clock: Clock
) -> None:
    # A producer replaying old data (CreateTime a year ago) must not expire at once.
    log = Log(tmp_path / "t-0", clock_ms=clock, producer_id_expiration_ms=1000)
    b = BatchBuilder(producer_id=PID, producer_epoch=0, base_sequence=0)
    b.append(b"old", timestamp=TS - 365 * 24 * 3600 * 1000)
    log.append(b.build())
    assert log.remove_expired_producers() == 0
    log.close()


def test_a_restart_replays_with_the_load_time_as_the_append_time(
    tmp_path: Path, clock: Clock
) -> None:
    directory = tmp_path / "t-0"
    log = Log(directory, clock_ms=clock, producer_id_expiration_ms=1000)
    log.append(pbatch(0))
    clock.now += 5000  # the crash kept the broker down longer than the expiration
    log2 = Log(directory, clock_ms=clock, producer_id_expiration_ms=1000)
    assert PID in log2.producer_state.producers
    log2.close()
    log.close()


# -- producer ids --------------------------------------------------------------------


def test_producer_ids_are_unique_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    ids = ProducerIdManager(path, block_size=10)
    ids.load()
    first = [ids.init_producer()[0] for _ in range(15)]
    assert first == list(range(15))
    assert json.loads(path.read_text()) == {"version": 1, "next_block_start": 20}
    again = ProducerIdManager(path, block_size=10)
    again.load()
    # The rest of the block in use at the stop is skipped, never reused.
    assert [again.init_producer()[0] for _ in range(3)] == [20, 21, 22]
    assert again.init_producer() == (23, 0)


def test_epoch_bumps(tmp_path: Path) -> None:
    ids = ProducerIdManager(tmp_path / "producer-id-block")
    ids.load()
    pid, epoch = ids.init_producer()
    assert ids.init_producer(pid, epoch) == (pid, 1)
    assert ids.init_producer(pid, 41) == (pid, 42)
    fresh, e = ids.init_producer(pid, MAX_EPOCH)
    assert fresh != pid and e == 0
    with pytest.raises(UnknownProducerId):
        ids.init_producer(10_000, 0)
    with pytest.raises(UnknownProducerId):
        ids.init_producer(-1, 0)
    with pytest.raises(InvalidRequest):
        ids.init_producer(pid, None)
    with pytest.raises(InvalidRequest):
        ids.init_producer(pid, MAX_EPOCH + 1)


def test_a_damaged_block_file_stops_the_broker(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    path.write_text("{not json")
    with pytest.raises(KafkaStorageError):
        ProducerIdManager(path).load()
    path.write_text('{"version": 1, "next_block_start": -3}')
    with pytest.raises(KafkaStorageError):
        ProducerIdManager(path).load()
