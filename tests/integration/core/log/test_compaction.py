"""Compaction through the LogManager: the background cleaner, its checkpoint, restarts,
topic deletion, and reads and appends that go on while a log is cleaned."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from log_helpers import BASE_TS, kafka_python_batches

from app.common.batch import BatchBuilder, decode_records
from app.common.errors import OffsetOutOfRange
from app.core.log import Log, LogConfig, LogManager
from app.core.log.checkpoint import OffsetCheckpointFile
from app.core.log.cleaner import CLEANER_CHECKPOINT, CleanerConfig, LogCleaner

COMPACT = {
    "cleanup.policy": "compact",
    "segment.bytes": 4096,
    "min.cleanable.dirty.ratio": 0.1,
    "file.delete.delay.ms": 1000,
}


def batch(pairs: list[tuple[bytes, bytes | None]]) -> bytes:
    builder = BatchBuilder()
    for key, value in pairs:
        builder.append(value, key, timestamp=BASE_TS)
    return builder.build()


def fill(log: Log, rounds: int, keys: int, model: dict[bytes, tuple[int, bytes | None]]) -> None:
    for r in range(rounds):
        pairs: list[tuple[bytes, bytes | None]] = [
            (b"key-%03d" % k, b"round-%d-" % r + b"x" * 40) for k in range(keys)
        ]
        for i in range(0, keys, 10):
            info = log.append(batch(pairs[i : i + 10]))
            for j, (key, value) in enumerate(pairs[i : i + 10]):
                model[key] = (info.first_offset + j, value)


def all_records(log: Log) -> dict[int, tuple[bytes | None, bytes | None]]:
    fetched = log.read(log.log_start_offset, 1 << 30)
    return {r.offset: (r.key, r.value) for r in decode_records(fetched.read_bytes())}


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    m = LogManager(
        tmp_path / "data",
        flush_scheduler_interval_ms=20,
        cleaner_config=CleanerConfig(backoff_ms=20),
    )
    m.start()
    yield m
    m.shutdown()


def wait_for(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_background_cleaner_compacts_and_checkpoints(manager: LogManager) -> None:
    manager.create_topic("c", 1, COMPACT)
    manager.create_topic("plain", 1)
    log = manager.get_log("c", 0)
    plain = manager.get_log("plain", 0)
    model: dict[bytes, tuple[int, bytes | None]] = {}
    fill(log, 20, 30, model)
    plain.append(batch([(b"k", b"1")] * 5))
    plain.roll()
    plain.append(batch([(b"k", b"2")]))
    active = log.segments[-1].base_offset
    checkpoint = OffsetCheckpointFile(manager.data_dir / CLEANER_CHECKPOINT)
    wait_for(lambda: checkpoint.read().get(("c", 0)) == active)
    records = all_records(log)
    for key, (offset, value) in model.items():
        assert records[offset] == (key, value)
    below = [k for o, (k, _) in records.items() if o < active]
    assert len(below) == len(set(below))
    # Only compacted topics are cleaned.
    assert len(all_records(plain)) == 6
    stats = manager.cleaner_stats()
    assert stats["passes"] >= 1 and stats["bytes_read"] > stats["bytes_written"] > 0
    assert stats["running"] is True
    entry = stats["logs"]["c-0"]
    assert entry["first_dirty_offset"] == active
    assert entry["last_pass"]["completed"] is True
    assert "plain-0" not in stats["logs"]
    for path in sorted(log.dir.glob("*.log")):
        kafka_python_batches(path.read_bytes())


def test_compaction_survives_restart(tmp_path: Path) -> None:
    config = CleanerConfig(enable=False)
    model: dict[bytes, tuple[int, bytes | None]] = {}
    with LogManager(tmp_path, cleaner_config=config) as m:
        m.create_topic("c", 2, COMPACT)
        log = m.get_log("c", 1)
        fill(log, 10, 20, model)
        log.roll()
        result = m.run_cleaner_once()
        assert result is not None and (result.topic, result.partition) == ("c", 1)
        assert m.run_cleaner_once() is None
        before = all_records(log)
        size = log.size_in_bytes
    assert OffsetCheckpointFile(tmp_path / CLEANER_CHECKPOINT).read() == {("c", 1): 200}
    with LogManager(tmp_path, cleaner_config=config) as m:
        log = m.get_log("c", 1)
        assert all_records(log) == before and log.size_in_bytes == size
        assert m.cleaner is not None and m.cleaner.first_dirty_offset(log) == 200
        assert m.run_cleaner_once() is None  # nothing dirty
        # New writes make it dirty again; only they are in the map.
        fill(log, 1, 20, model)
        log.roll()
        assert m.run_cleaner_once() is not None
        records = all_records(log)
        assert sorted(records) == sorted(offset for offset, _ in model.values())


def test_deleting_a_topic_forgets_its_checkpoint(tmp_path: Path) -> None:
    with LogManager(tmp_path, cleaner_config=CleanerConfig(enable=False)) as m:
        m.create_topic("c", 1, COMPACT)
        log = m.get_log("c", 0)
        fill(log, 5, 10, {})
        log.roll()
        assert m.run_cleaner_once() is not None
        assert ("c", 0) in OffsetCheckpointFile(tmp_path / CLEANER_CHECKPOINT).read()
        m.delete_topic("c")
        assert OffsetCheckpointFile(tmp_path / CLEANER_CHECKPOINT).read() == {}
        assert m.run_cleaner_once() is None
        assert "c-0" not in m.cleaner_stats()["logs"]


def test_shutdown_abandons_a_pass_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = LogConfig().with_overrides(COMPACT)
    log = Log(tmp_path / "t-0", config)
    fill(log, 40, 50, {})
    log.roll()
    cleaner = LogCleaner(tmp_path, lambda: [log])
    cleaner._stop.set()  # as shutdown() does while a pass runs
    assert cleaner.clean(log, force=True) is None
    assert not list(log.dir.glob("*.cleaned"))
    assert cleaner.checkpoints() == {}
    log.close()


def test_in_flight_slices_survive_a_swap(tmp_path: Path) -> None:
    config = LogConfig().with_overrides({**COMPACT, "file.delete.delay.ms": 60_000})
    clock = [BASE_TS]
    log = Log(tmp_path / "t-0", config, clock_ms=lambda: clock[0])
    fill(log, 10, 10, {})
    log.roll()
    fetched = log.read(0, 1 << 30)
    old = [r.offset for r in decode_records(fetched.read_bytes())]
    assert LogCleaner(tmp_path, lambda: [log]).clean(log) is not None
    assert len(all_records(log)) == 10
    # The old files are renamed .deleted but still open: the slices read what they held.
    assert [r.offset for r in decode_records(fetched.read_bytes())] == old
    assert list(log.dir.glob("*.log.deleted"))
    assert log.delete_expired_files(clock[0] + 60_000) > 0
    assert not list(log.dir.glob("*.deleted"))
    log.close()


def test_reads_and_appends_go_on_while_the_cleaner_works(tmp_path: Path) -> None:
    """Writers, readers and the cleaner at once; then the model is checked."""
    config = LogConfig().with_overrides(
        {**COMPACT, "segment.bytes": 16 << 10, "min.cleanable.dirty.ratio": 0.01}
    )
    log = Log(tmp_path / "t-0", config)
    cleaner = LogCleaner(tmp_path, lambda: [log], CleanerConfig(backoff_ms=1))
    model: dict[bytes, tuple[int, bytes | None]] = {}
    stop = threading.Event()
    errors: list[BaseException] = []
    fetches = [0]

    def write() -> None:
        rng = random.Random(1)
        try:
            i = 0
            # Keep writing until the cleaner has swapped segments under us a few times,
            # however slow a loaded machine makes it (the deadline only ends a cleaner
            # that makes no progress at all, and the assertion below then fails).
            deadline = time.monotonic() + 240
            while i < 2000 or (cleaner.stats()["passes"] < 3 and time.monotonic() < deadline):
                i += 1
                pairs: list[tuple[bytes, bytes | None]] = [
                    (b"key-%03d" % rng.randrange(200), b"v%d-%d" % (i, j) + b"." * 60)
                    for j in range(8)
                ]
                info = log.append(batch(pairs))
                for j, (key, value) in enumerate(pairs):
                    model[key] = (info.first_offset + j, value)
        except BaseException as e:
            errors.append(e)
        finally:
            stop.set()

    def read() -> None:
        rng = random.Random(2)
        try:
            while not stop.is_set():
                end = log.log_end_offset
                if end == 0:
                    continue
                offset = rng.randrange(log.log_start_offset, end)
                try:
                    fetched = log.read(offset, 64 << 10)
                except OffsetOutOfRange:
                    continue
                got = [r.offset for r in decode_records(fetched.read_bytes(), min_offset=offset)]
                assert got, f"nothing at or after {offset} below {end}"
                assert got == sorted(set(got)) and got[0] >= offset
                fetches[0] += 1
        except BaseException as e:
            errors.append(e)
            stop.set()

    cleaner.start()
    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cleaner.shutdown()
    assert not errors, errors
    assert fetches[0] > 50
    assert cleaner.stats()["passes"] >= 3
    log.roll()
    while cleaner.clean(log) is not None:
        pass
    records = all_records(log)
    assert sorted(records) == sorted(offset for offset, _ in model.values())
    for key, (offset, value) in model.items():
        assert records[offset] == (key, value)
    for path in sorted(log.dir.glob("*.log")):
        kafka_python_batches(path.read_bytes())
    log.close()
    reopened = Log(tmp_path / "t-0", config)
    assert all_records(reopened) == records
    reopened.close()
