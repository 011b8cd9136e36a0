"""A log of 10,000 segments: offset lookups stay as fast as in a log of 10."""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

from log_helpers import value_batch

from app.common.batch import decode_records, read_header
from app.core.log import Log, LogConfig

CONFIG = LogConfig().with_overrides({"segment.bytes": 4096, "index.interval.bytes": 1024})
RECORDS_PER_BATCH = 4


def _fill(directory: Path, segments: int) -> Log:
    log = Log(directory, CONFIG)
    batch = value_batch(0, RECORDS_PER_BATCH, size=200)
    while len(log.segments) < segments:
        log.append(batch)
    return log


def _median_lookup_us(log: Log, samples: int, seed: int) -> float:
    rng = random.Random(seed)
    end = log.log_end_offset
    times = []
    for _ in range(samples):
        offset = rng.randrange(end)
        start = time.perf_counter_ns()
        fetched = log.read(offset, 1)
        times.append(time.perf_counter_ns() - start)
        header = read_header(fetched.slices[0].read())
        assert header.base_offset <= offset <= header.last_offset
    return statistics.median(times) / 1000


def test_lookup_in_10000_segments(tmp_path: Path) -> None:
    small = _fill(tmp_path / "small-0", 10)
    big = _fill(tmp_path / "big-0", 10_000)
    assert len(big.segments) == 10_000
    per_segment = small.segments[1].base_offset
    assert big.log_end_offset >= 9_999 * per_segment
    # Warm both (first touch loads a segment's index from disk), then compare.
    for log in (small, big):
        for seg in log.segments:
            seg.translate_offset(seg.base_offset)
    small_us = min(_median_lookup_us(small, 2000, seed) for seed in range(3))
    big_us = min(_median_lookup_us(big, 2000, seed) for seed in range(3))
    assert big_us < 3 * small_us + 20, (small_us, big_us)
    assert big_us < 500
    # And the answers are right: exact records at the edges of segments.
    seg = big.segments[5_000]
    records = list(decode_records(big.read(seg.base_offset, 1).read_bytes()))
    assert records[0].offset == seg.base_offset
    assert records[0].value is not None and records[0].value.startswith(b"v0")
    small.close()
    big.close()
