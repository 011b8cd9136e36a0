"""Transactions on one partition (#16, the storage side): transactional batches, control
batches, the last stable offset, the ``.txnindex``, read_committed reads, recovery and
truncation. Formats are checked against independent references: kafka-python's codec for
the ``.log`` files, ``struct`` layouts written out here for the ``.txnindex``."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from kafka.record import MemoryRecords
from log_helpers import check_log_dir

from app.common.batch import (
    BatchBuilder,
    build_control_batch,
    iter_headers,
    read_control_marker,
    read_header,
)
from app.common.errors import (
    InvalidProducerEpoch,
    InvalidRecord,
    InvalidRequest,
    InvalidTxnState,
    ProducerFenced,
    TransactionCoordinatorFenced,
)
from app.core.log import Log, LogConfig
from app.core.log.log import READ_COMMITTED
from app.core.log.producer_state import read_snapshot, snapshot_name
from app.core.log.txn_index import AbortedTxn

TS = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = TS

    def __call__(self) -> int:
        return self.now


def tbatch(
    pid: int, seq: int, count: int = 2, *, epoch: int = 0, transactional: bool = True
) -> bytes:
    b = BatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=transactional
    )
    for i in range(count):
        b.append(f"p{pid}e{epoch}s{seq + i}".encode(), timestamp=TS)
    return b.build()


def plain(count: int = 1) -> bytes:
    b = BatchBuilder()
    for i in range(count):
        b.append(f"plain{i}".encode(), timestamp=TS)
    return b.build()


def txnindex_bytes(entries: list[tuple[int, int, int, int]]) -> bytes:
    # Kafka's AbortedTxn, written out independently: version int16 (0), producerId int64,
    # firstOffset int64, lastOffset int64, lastStableOffset int64 = 34 bytes.
    return b"".join(struct.pack(">hqqqq", 0, *e) for e in entries)


def kafka_python_view(directory: Path) -> list[tuple[int, bool, bool, int, list[object]]]:
    """Every batch of every .log as kafka-python sees it: (base offset, transactional,
    control, producer id, records as (offset, value) or ('abort'|'commit', offset))."""
    out: list[tuple[int, bool, bool, int, list[object]]] = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        records = MemoryRecords(data)
        while records.has_next():
            batch = records.next_batch()
            assert batch is not None and batch.validate_crc()
            recs: list[object] = []
            for r in batch:
                if batch.is_control_batch:
                    assert r.version == 0
                    recs.append(("commit" if r.commit else "abort", r.offset))
                else:
                    recs.append((r.offset, r.value))
            out.append(
                (
                    batch.base_offset,
                    batch.is_transactional,
                    batch.is_control_batch,
                    batch.producer_id,
                    recs,
                )
            )
        assert records.valid_bytes() == len(data)
    return out


# -- formats -------------------------------------------------------------------


def test_control_batch_is_kafkas_end_transaction_marker() -> None:
    data = build_control_batch(7, 3, commit=True, coordinator_epoch=5, timestamp=TS)
    batch = MemoryRecords(data).next_batch()
    assert batch.is_control_batch and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 3, -1)
    (record,) = list(batch)
    # Key: version int16, type int16 (1 COMMIT); value: version int16, coordinatorEpoch int32.
    assert record.key == struct.pack(">hh", 0, 1) and record.commit
    assert record.value == struct.pack(">hi", 0, 5)
    assert read_control_marker(data) == (True, 5)
    abort = build_control_batch(7, 3, commit=False, coordinator_epoch=0, timestamp=TS)
    (record,) = list(MemoryRecords(abort).next_batch())
    assert record.key == struct.pack(">hh", 0, 0) and record.abort
    assert read_control_marker(abort) == (False, 0)


def test_log_with_transactions_parses_with_kafka_python_and_txnindex_is_kafkas(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "t-0"
    log = Log(directory)
    log.append(tbatch(1, 0))  # 0-1, txn of pid 1
    log.append(plain())  # 2
    log.append(tbatch(2, 0, 3))  # 3-5, txn of pid 2
    log.append_control(1, 0, commit=False, coordinator_epoch=4)  # 6: abort pid 1
    log.append(tbatch(2, 3))  # 7-8
    log.append_control(2, 0, commit=True, coordinator_epoch=4)  # 9: commit pid 2
    log.append(tbatch(1, 2))  # 10-11: pid 1's next transaction
    log.append_control(1, 0, commit=False, coordinator_epoch=4)  # 12
    view = kafka_python_view(directory)
    assert [(b[0], b[1], b[2], b[3]) for b in view] == [
        (0, True, False, 1),
        (2, False, False, -1),
        (3, True, False, 2),
        (6, True, True, 1),
        (7, True, False, 2),
        (9, True, True, 2),
        (10, True, False, 1),
        (12, True, True, 1),
    ]
    assert view[3][4] == [("abort", 6)] and view[5][4] == [("commit", 9)]
    check_log_dir(directory, start=0)
    # Abort of pid 1 at 6: pid 2's transaction (first offset 3) was still open, so the
    # LSO after the marker was 3; the second abort at 12 left nothing open: 13.
    assert (directory / "00000000000000000000.txnindex").read_bytes() == txnindex_bytes(
        [(1, 0, 6, 3), (1, 10, 12, 13)]
    )
    log.close()


# -- rules -----------------------------------------------------------------------


def test_fencing_and_transaction_state_rules(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    log.append(tbatch(1, 0))
    with pytest.raises(InvalidTxnState) as err:
        log.append(tbatch(1, 2, transactional=False))
    assert err.value.error_code == "INVALID_TXN_STATE"
    # A control batch from a client, a transactional batch without a producer id.
    with pytest.raises(InvalidRecord):
        log.append(build_control_batch(1, 0, commit=True, coordinator_epoch=0, timestamp=TS))
    # Also behind a valid producer batch in the same body.
    with pytest.raises(InvalidRecord):
        log.append(
            tbatch(1, 2) + build_control_batch(1, 0, commit=True, coordinator_epoch=0, timestamp=TS)
        )
    b = BatchBuilder(transactional=True)
    b.append(b"x")
    with pytest.raises(InvalidRecord):
        log.append(b.build())
    # The coordinator fences the producer: an ABORT with a bumped epoch.
    log.append_control(1, 1, commit=False, coordinator_epoch=2)
    assert log.last_stable_offset == log.log_end_offset
    with pytest.raises(InvalidProducerEpoch) as epoch_err:
        log.append(tbatch(1, 2, epoch=0))
    assert epoch_err.value.error_code == "INVALID_PRODUCER_EPOCH"
    with pytest.raises(ProducerFenced) as fenced:
        log.append_control(1, 0, commit=True, coordinator_epoch=2)
    assert fenced.value.error_code == "PRODUCER_FENCED"
    with pytest.raises(TransactionCoordinatorFenced):
        log.append_control(1, 1, commit=True, coordinator_epoch=1)
    # The new epoch starts at sequence 0 and may open a transaction again.
    log.append(tbatch(1, 0, epoch=1))
    assert log.last_stable_offset == log.log_end_offset - 2
    # A marker for a producer with nothing open is written and changes nothing.
    end = log.log_end_offset
    log.append_control(9, 0, commit=True, coordinator_epoch=0)
    assert log.log_end_offset == end + 1
    assert log.last_stable_offset == end - 2
    log.close()


def test_lso_is_bounded_by_unreplicated_markers_and_the_high_watermark(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    log.hw_follows_leo = False
    log.append(plain())  # 0
    log.append(tbatch(1, 0))  # 1-2
    log.high_watermark = 3
    assert log.last_stable_offset == 1
    log.append_control(1, 0, commit=True, coordinator_epoch=0)  # 3
    # Committed, but the marker is not below the HW yet: still unstable.
    assert log.last_stable_offset == 1
    log.high_watermark = 4
    assert log.last_stable_offset == 4
    log.append(plain())
    assert log.last_stable_offset == 4  # never above the HW
    log.close()


def test_read_committed_stops_at_the_lso_and_lists_aborted_transactions(tmp_path: Path) -> None:
    config = LogConfig().with_overrides({"segment.bytes": 300})
    log = Log(tmp_path / "t-0", config)
    log.append(tbatch(1, 0))  # 0-1
    log.append(tbatch(2, 0))  # 2-3
    log.append(tbatch(1, 2))  # 4-5
    log.append_control(1, 0, commit=False, coordinator_epoch=0)  # 6
    assert log.last_stable_offset == 2
    info = log.read(0, 1 << 20, isolation=READ_COMMITTED)
    assert info.last_stable_offset == 2
    assert [h.last_offset for _, h in iter_headers(info.read_bytes())] == [1]
    assert info.aborted_transactions == (AbortedTxn(1, 0, 6, 2),)
    uncommitted = log.read(0, 1 << 20)
    assert uncommitted.aborted_transactions is None and uncommitted.last_stable_offset == 2
    log.append_control(2, 0, commit=True, coordinator_epoch=0)  # 7
    log.append(tbatch(3, 0))  # 8-9
    log.append_control(3, 0, commit=False, coordinator_epoch=0)  # 10
    log.append(plain())  # 11
    assert len(log.segments) > 1  # markers and their transactions in different segments
    info = log.read(0, 1 << 20, isolation=READ_COMMITTED)
    assert info.aborted_transactions == (AbortedTxn(1, 0, 6, 2), AbortedTxn(3, 8, 10, 11))
    # From offset 7 on only the second overlaps; past it none does.
    assert log.read(7, 1 << 20, isolation=READ_COMMITTED).aborted_transactions == (
        AbortedTxn(3, 8, 10, 11),
    )
    assert log.read(11, 1 << 20, isolation=READ_COMMITTED).aborted_transactions == ()
    with pytest.raises(InvalidRequest):
        log.read(0, 1 << 20, isolation="read_dirty")
    log.close()


# -- recovery and truncation -----------------------------------------------------------


def build_mixed(directory: Path, config: LogConfig) -> Log:
    log = Log(directory, config)
    log.append(tbatch(1, 0))  # 0-1 aborted
    log.append(tbatch(2, 0))  # 2-3 committed
    log.append(tbatch(3, 0))  # 4-5 left open
    log.append_control(1, 0, commit=False, coordinator_epoch=0)  # 6
    log.append_control(2, 0, commit=True, coordinator_epoch=0)  # 7
    log.append(tbatch(1, 2))  # 8-9 aborted
    log.append_control(1, 0, commit=False, coordinator_epoch=0)  # 10
    log.append(plain())  # 11
    return log


def all_entries(log: Log) -> list[AbortedTxn]:
    return [e for s in log.segments for e in s.txn_index.entries]


EXPECTED = [AbortedTxn(1, 0, 6, 2), AbortedTxn(1, 8, 10, 4)]


@pytest.mark.parametrize("clean", [True, False])
def test_reopen_keeps_open_transactions_and_the_index(tmp_path: Path, clean: bool) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig().with_overrides({"segment.bytes": 250})
    log = build_mixed(directory, config)
    assert log.last_stable_offset == 4 and all_entries(log) == EXPECTED
    if clean:
        log.close()
        # The snapshot carries the open transaction (version 2 layout).
        (entry,) = [e for e in read_snapshot(directory / snapshot_name(12)) if e.producer_id == 3]
        assert entry.current_txn_first_offset == 4
    else:
        # A crash: the files as they are, the index files lost with the page cache.
        crashed = tmp_path / "crash" / "t-0"
        shutil.copytree(directory, crashed)
        log.close()
        for p in crashed.glob("*.txnindex"):
            p.unlink()
        directory = crashed
    log2 = Log(directory, config, clean_shutdown=clean)
    assert log2.last_stable_offset == 4
    assert log2.producer_state.ongoing_transactions() == {3: 4}
    assert all_entries(log2) == EXPECTED
    log2.append_control(3, 0, commit=True, coordinator_epoch=0)
    assert log2.last_stable_offset == log2.log_end_offset
    log2.close()


def test_crash_cutting_an_abort_marker_reopens_its_transaction(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = build_mixed(directory, LogConfig())
    crashed = tmp_path / "crash" / "t-0"
    shutil.copytree(directory, crashed)
    log.close()
    active = crashed / "00000000000000000000.log"
    data = active.read_bytes()
    headers = list(iter_headers(data))
    marker_pos = next(pos for pos, h in headers if h.base_offset == 10)
    # Torn write: half of the marker at 10 and nothing after it.
    with open(active, "r+b") as f:
        f.truncate(marker_pos + 20)
    log2 = Log(crashed, clean_shutdown=False)
    assert log2.log_end_offset == 10
    assert all_entries(log2) == EXPECTED[:1]
    assert log2.producer_state.ongoing_transactions() == {1: 8, 3: 4}
    assert log2.last_stable_offset == 4
    check_log_dir(crashed, start=0)
    log2.close()


def test_truncation_drops_index_entries_and_restores_open_transactions(tmp_path: Path) -> None:
    config = LogConfig().with_overrides({"segment.bytes": 250})
    log = build_mixed(tmp_path / "t-0", config)
    log.truncate_to(7)  # the COMMIT of pid 2 goes, pid 1's first abort stays
    assert all_entries(log) == EXPECTED[:1]
    assert log.producer_state.ongoing_transactions() == {2: 2, 3: 4}
    assert log.last_stable_offset == 2
    log.truncate_to(5)  # inside pid 3's batch 4-5 (it goes whole), and below the abort at 6
    assert all_entries(log) == []
    assert log.producer_state.ongoing_transactions() == {1: 0, 2: 2}
    log.close()


def test_follower_copies_transactions_verbatim(tmp_path: Path) -> None:
    leader = build_mixed(tmp_path / "a-0", LogConfig())
    follower = Log(tmp_path / "b-0")
    follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    assert follower.last_stable_offset == leader.last_stable_offset == 4
    assert all_entries(follower) == all_entries(leader) == EXPECTED
    assert (tmp_path / "b-0" / "00000000000000000000.log").read_bytes() == (
        tmp_path / "a-0" / "00000000000000000000.log"
    ).read_bytes()
    leader.close()
    follower.close()


# -- compaction --------------------------------------------------------------------


def ktxn(pid: int, seq: int, pairs: list[tuple[bytes, bytes]], ts: int) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)
    for key, value in pairs:
        b.append(value, key, timestamp=ts)
    return b.build()


def kplain(pairs: list[tuple[bytes, bytes]], ts: int) -> bytes:
    b = BatchBuilder()
    for key, value in pairs:
        b.append(value, key, timestamp=ts)
    return b.build()


def test_cleaner_drops_aborted_records_then_markers_after_the_horizon(tmp_path: Path) -> None:
    from app.core.log.cleaner import CleanerConfig, LogCleaner

    day = 24 * 3600 * 1000
    clock = Clock()
    config = LogConfig().with_overrides(
        {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01, "file.delete.delay.ms": 0}
    )
    log = Log(tmp_path / "t-0", config, clock_ms=clock)
    now = clock.now
    log.append(ktxn(1, 0, [(b"k1", b"aborted")], now))  # 0
    log.append_control(1, 0, commit=False, coordinator_epoch=0)  # 1
    log.append(ktxn(2, 0, [(b"k1", b"b"), (b"k2", b"b")], now))  # 2-3
    log.append_control(2, 0, commit=True, coordinator_epoch=0)  # 4
    log.append(ktxn(1, 1, [(b"k3", b"x")], now))  # 5
    log.append_control(1, 0, commit=True, coordinator_epoch=0)  # 6
    log.append(kplain([(b"k1", b"c"), (b"k2", b"c")], now))  # 7-8: supersede pid 2's txn
    log.append(ktxn(2, 2, [(b"k4", b"y")], now))  # 9
    log.append_control(2, 0, commit=True, coordinator_epoch=0)  # 10
    # An open transaction at 12 holds the cleaner below it.
    log.append(kplain([(b"k5", b"z")], now))  # 11
    log.roll()
    log.append(ktxn(3, 0, [(b"k1", b"open")], now))  # 12
    log.roll()
    log.append(kplain([(b"k6", b"tail")], now))
    assert log.last_stable_offset == 12

    cleaner = LogCleaner(tmp_path, lambda: [log], CleanerConfig())  # type: ignore[arg-type]
    assert cleaner.clean(log, now=now, force=True) is not None
    view = kafka_python_view(log.dir)
    offsets = [b[0] for b in view]
    # The aborted record at 0 is gone; its ABORT marker (1) waits for the horizon, as
    # does pid 2's first COMMIT (4), whose records 7-8 superseded. The open transaction
    # at 12 and what follows were not cleaned.
    assert 0 not in offsets and {1, 4, 6, 10, 12} <= set(offsets)
    assert [b[4] for b in view if b[0] == 2] == []  # the whole batch 2-3 went
    marker_1 = read_header(bytes(log.read(1, 1 << 20).read_bytes()))
    assert marker_1.base_offset == 1 and marker_1.attributes & 0x40  # delete horizon set
    # After the horizon: the markers of transactions without records left go; the
    # producers' last batches (markers 6 and 10) stay whatever happens.
    assert cleaner.clean(log, now=now + day + 2, force=True) is not None
    offsets = [b[0] for b in kafka_python_view(log.dir)]
    assert 1 not in offsets and 4 not in offsets
    assert {5, 6, 7, 9, 10, 11, 12} <= set(offsets)
    # Still Kafka's format: pid 1's records are the committed k3 only.
    assert [b[4] for b in kafka_python_view(log.dir) if b[3] == 1 and not b[2]] == [[(5, b"x")]]
    # read_committed still answers the aborted transaction's index entry, harmlessly.
    info = log.read(0, 1 << 20, isolation=READ_COMMITTED)
    assert info.aborted_transactions == (AbortedTxn(1, 0, 1, 2),)
    log.close()


def test_aborted_records_supersede_nothing(tmp_path: Path) -> None:
    from app.core.log.cleaner import CleanerConfig, LogCleaner

    clock = Clock()
    config = LogConfig().with_overrides(
        {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01, "file.delete.delay.ms": 0}
    )
    log = Log(tmp_path / "t-0", config, clock_ms=clock)
    log.append(kplain([(b"k", b"committed")], clock.now))  # 0
    log.append(ktxn(1, 0, [(b"k", b"aborted")], clock.now))  # 1
    log.append_control(1, 0, commit=False, coordinator_epoch=0)  # 2
    log.roll()
    log.append(kplain([(b"other", b"x")], clock.now))
    cleaner = LogCleaner(tmp_path, lambda: [log], CleanerConfig())  # type: ignore[arg-type]
    assert cleaner.clean(log, now=clock.now, force=True) is not None
    data = [r for b in kafka_python_view(log.dir) if not b[2] for r in b[4]]
    assert data == [(0, b"committed"), (3, b"x")]
    log.close()


# -- file formats: upgrades and damage ------------------------------------------------


def test_version_1_producer_snapshots_still_load(tmp_path: Path) -> None:
    import crc32c

    # Version 1 layout, written out independently: no transaction fields, 1..5 batches.
    body = struct.pack(">I", 1) + struct.pack(">qhqB", 42, 3, TS, 1)
    body += struct.pack(">iiqqq", 0, 4, 10, 14, TS)
    path = tmp_path / snapshot_name(15)
    path.write_bytes(struct.pack(">4sHI", b"LBPS", 1, crc32c.crc32c(body)) + body)
    (entry,) = read_snapshot(path)
    assert (entry.producer_id, entry.epoch, entry.last_seq) == (42, 3, 4)
    assert entry.current_txn_first_offset == -1 and entry.coordinator_epoch == -1


def test_torn_txnindex_tail_is_cut_on_load(tmp_path: Path) -> None:
    from app.core.log.txn_index import TransactionIndex

    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(txnindex_bytes([(5, 0, 3, 4)]) + b"\x00" * 10)
    index = TransactionIndex(path, 0)
    assert index.entries == [AbortedTxn(5, 0, 3, 4)]
    assert path.stat().st_size == 34
    index.append(AbortedTxn(6, 4, 9, 10))
    assert path.read_bytes() == txnindex_bytes([(5, 0, 3, 4), (6, 4, 9, 10)])
    with pytest.raises(ValueError):
        index.append(AbortedTxn(7, 8, 9, 10))  # markers only move forward
    index.truncate_to(9)
    assert path.read_bytes() == txnindex_bytes([(5, 0, 3, 4)])
