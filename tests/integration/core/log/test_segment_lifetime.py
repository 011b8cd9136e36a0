"""Readers racing the cleaner never touch a closed or reused file descriptor.

Issue 20.2: with ``file.delete.delay.ms=0`` the cleaner's swap closed the old
segments' descriptors at once while readers still held views and slices of
them (``EBADF``, or a descriptor number already reused by another file, whose
bytes a reader then got). Eight readers here fetch and read their slices
(sometimes after a pause, as a slow client does) while a writer appends and
the cleaner swaps segments as fast as it can; every batch a reader gets must
pass its CRC and hold the offsets asked for. Then the log is reopened without
a clean shutdown (indexes are checked lazily, on a reader's first lookup) and
the race runs again.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from app.common.batch import BatchBuilder, compute_crc, decode_records, iter_headers
from app.common.errors import OffsetOutOfRange
from app.core.log import Log, LogConfig
from app.core.log.cleaner import LogCleaner

CONFIG = LogConfig().with_overrides(
    {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": 0.01,
        "segment.bytes": 4096,
        "file.delete.delay.ms": 0,
        "delete.retention.ms": 0,
    }
)
READERS = 8
FETCHES = 10_000


def _batch(rng: random.Random, n: int) -> bytes:
    builder = BatchBuilder()
    for j in range(4):
        key = b"key-%03d" % rng.randrange(150)
        builder.append(key + b"=%d.%d" % (n, j) + b"." * 40, key)
    return builder.build()


def _race(log: Log, cleaner: LogCleaner, fetches: int, seed: int) -> tuple[int, list[str]]:
    """Run writer, cleaner and readers until the readers made ``fetches`` fetches and the
    cleaner completed three passes."""
    stop = threading.Event()
    errors: list[str] = []
    done = [0]
    count_lock = threading.Lock()
    passes = [0]
    passed = threading.Condition()

    def fail(message: str) -> None:
        errors.append(message)
        stop.set()

    def write() -> None:
        rng = random.Random(seed)
        n = 0
        try:
            while not stop.is_set():
                n += 1
                log.append(_batch(rng, n))
                if n % 100 == 0:
                    # In step with the cleaner, whatever the load: the log stays small
                    # and every pass swaps segments under the readers.
                    with passed:
                        target = passes[0] + 1
                        while passes[0] < target and not stop.is_set():
                            passed.wait()
        except Exception as e:
            fail(f"writer: {e!r}")

    def clean() -> None:
        try:
            while not stop.is_set():
                if cleaner.clean(log, force=True) is None:
                    time.sleep(0.001)
                    continue
                with passed:
                    passes[0] += 1
                    passed.notify_all()
        except Exception as e:
            fail(f"cleaner: {e!r}")
        finally:
            with passed:
                passed.notify_all()

    def read(index: int) -> None:
        rng = random.Random(seed * 100 + index)
        while not stop.is_set():
            start, end = log.log_start_offset, log.log_end_offset
            if end <= start:
                continue
            offset = rng.randrange(start, end)
            try:
                fetched = log.read(offset, rng.choice((512, 4096, 64 << 10)))
                if rng.random() < 0.2:
                    time.sleep(0.0005)  # a slow client: the slices outlive a swap or two
                data = fetched.read_bytes()
            except OffsetOutOfRange:
                continue
            except Exception as e:
                fail(f"reader {index} at offset {offset}: {e!r}")
                return
            if len(data) != fetched.size:
                fail(f"reader {index}: {len(data)} bytes read of {fetched.size}")
                return
            for pos, header in iter_headers(data):
                if compute_crc(data, pos, header.size) != header.crc:
                    fail(f"reader {index}: foreign bytes at offset {offset} (CRC mismatch)")
                    return
            for record in decode_records(data, min_offset=offset):
                assert record.key is not None and record.value is not None
                if not record.value.startswith(record.key + b"="):
                    fail(f"reader {index}: record {record} is not one that was written")
                    return
            with count_lock:
                done[0] += 1
                if done[0] >= fetches and passes[0] >= 3:
                    stop.set()

    threads = [
        threading.Thread(target=write),
        threading.Thread(target=clean),
        *(threading.Thread(target=read, args=(i,)) for i in range(READERS)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0], errors


@pytest.mark.slow
def test_readers_racing_the_cleaner_with_no_delete_delay(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log(directory, CONFIG)
    cleaner = LogCleaner(tmp_path, lambda: [log])
    done, errors = _race(log, cleaner, FETCHES // 2, seed=1)
    assert not errors, errors[:5]
    assert done >= FETCHES // 2
    assert cleaner.stats()["passes"] >= 3
    # A crash: no clean shutdown, so every index is checked (and perhaps rebuilt) on
    # a reader's first lookup, which may come after the cleaner deleted its segment.
    log.flush()
    log.close()
    (directory / ".clean_shutdown").unlink(missing_ok=True)
    for index in directory.glob("*.index"):
        index.write_bytes(b"\x00" * 3)  # damaged: rebuilt from the .log when first used
    reopened = Log(directory, CONFIG)
    cleaner = LogCleaner(tmp_path, lambda: [reopened])
    done, errors = _race(reopened, cleaner, FETCHES // 2, seed=2)
    assert not errors, errors[:5]
    assert done >= FETCHES // 2
    assert cleaner.stats()["passes"] >= 3
    reopened.close()
