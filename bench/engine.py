"""In-process benchmark of the log engine alone (no HTTP): ``python -m bench.engine``.

Figures (each the median of several repetitions, printed as JSON):

* ``append_mb_s``: ``Log.append`` of 1 MiB batches into the page cache
  (validate + CRC-32C + stamp + one pwrite per batch), with ``bytes`` input
  (one copy to stamp) and with ``bytearray`` input (stamped in place).
  Goal >= 1000 MB/s.
* ``read_mb_s``: sequential ``Log.read`` of 1 MiB fetches through
  ``FileSlice.read`` (``os.pread``) over the whole log. Goal >= 2000 MB/s.
* ``lookup_us``: median latency of ``Log.read(random offset, 1)`` (segment
  bisect, index bisect, header hops) in a 10-segment and a 10,000-segment log
  of 16 KiB segments, and in a 10-segment log holding the same records as the
  big one. Goal: the big log within 1.5x of the small one.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.common.batch import BatchBuilder, iter_headers
from app.core.limits import raise_nofile_limit
from app.core.log import Log, LogConfig

MiB = 1 << 20


def _one_mib_batch() -> bytes:
    builder = BatchBuilder("none", max_bytes=2 * MiB)
    value = bytes(random.Random(0).randbytes(1000))
    while builder.size_in_bytes() < MiB - 1100:
        builder.append(value, timestamp=1_700_000_000_000)
    return builder.build()


def _median(samples: list[float]) -> float:
    return round(statistics.median(samples), 1)


def bench_append(workdir: Path, total_mib: int, reps: int, *, in_place: bool) -> list[float]:
    batch = _one_mib_batch()
    config = LogConfig().with_overrides({"max.message.bytes": 4 * MiB, "segment.bytes": 256 * MiB})
    samples = []
    for rep in range(reps):
        directory = workdir / f"append{int(in_place)}{rep}-0"
        log = Log(directory, config)
        count = total_mib * MiB // len(batch)
        # A few buffers reused round-robin: stamping only rewrites offset and epoch, and
        # allocating a fresh buffer per batch would measure first-touch page faults.
        pool: list[bytes | bytearray] = (
            [bytearray(batch) for _ in range(4)] if in_place else [batch]
        )
        start = time.perf_counter()
        for i in range(count):
            log.append(pool[i % len(pool)])
        elapsed = time.perf_counter() - start
        samples.append(count * len(batch) / elapsed / 1e6)
        log.close()
        shutil.rmtree(directory)
    return samples


def bench_read(workdir: Path, total_mib: int, reps: int) -> list[float]:
    batch = _one_mib_batch()
    config = LogConfig().with_overrides({"max.message.bytes": 4 * MiB, "segment.bytes": 256 * MiB})
    directory = workdir / "read-0"
    log = Log(directory, config)
    for _ in range(total_mib * MiB // len(batch)):
        log.append(batch)
    samples = []
    for _ in range(reps):
        offset = 0
        total = 0
        start = time.perf_counter()
        while offset < log.log_end_offset:
            fetched = log.read(offset, MiB)
            for piece in fetched.slices:
                data = piece.read()
                total += len(data)
                *_, (_, last) = iter_headers(data)
                offset = last.next_offset
        elapsed = time.perf_counter() - start
        samples.append(total / elapsed / 1e6)
    log.close()
    shutil.rmtree(directory)
    return samples


def _lookup_batch() -> bytes:
    builder = BatchBuilder("none")
    for i in range(10):
        builder.append(b"x" * 150, key=b"k%d" % i, timestamp=1_700_000_000_000)
    return builder.build()


def _fill(
    directory: Path, *, segments: int = 0, records: int = 0, segment_bytes: int = 16 << 10
) -> Log:
    """A log of ``segments`` segments, or of at least ``records`` records, of 1.7 kB batches."""
    config = LogConfig().with_overrides(
        {"segment.bytes": segment_bytes, "index.interval.bytes": 4096}
    )
    batch = _lookup_batch()
    log = Log(directory, config)
    while len(log.segments) < segments or log.log_end_offset < records:
        log.append(batch)
    # Touch every segment once so every log is measured warm (indexes loaded).
    for seg in log.segments:
        seg.translate_offset(seg.base_offset)
    return log


def _lookup_median_us(log: Log, samples: int, seed: int) -> float:
    rng = random.Random(seed)
    end = log.log_end_offset
    offsets = [rng.randrange(end) for _ in range(samples)]
    times = []
    clock: Callable[[], int] = time.perf_counter_ns
    for offset in offsets:
        start = clock()
        log.read(offset, 1)
        times.append(clock() - start)
    return statistics.median(times) / 1000


def bench_lookup(workdir: Path, reps: int) -> dict[str, Any]:
    """Lookups in 10 vs 10,000 segments of 16 KiB, and in 10 segments holding the same data.

    The 10 x 16 KiB log is 160 kB: it sits in the CPU caches, while 10,000
    segments are 160 MB of page cache. The same-data log separates what the
    segment count costs from what the memory hierarchy costs.
    """
    small = _fill(workdir / "small-0", segments=10)
    big = _fill(workdir / "big-0", segments=10_000)
    same = _fill(workdir / "same-0", records=big.log_end_offset, segment_bytes=(16 << 10) * 1000)
    logs = {"segments_10": small, "segments_10000": big, "segments_10_same_data": same}
    samples: dict[str, list[float]] = {name: [] for name in logs}
    for rep in range(reps):
        # Interleave so that machine noise hits all alike.
        for name, log in logs.items():
            samples[name].append(_lookup_median_us(log, 5000, rep))
    result: dict[str, Any] = {
        f"{name}_us": round(statistics.median(s), 2) for name, s in samples.items()
    }
    result["segments"] = {name: len(log.segments) for name, log in logs.items()}
    result["records"] = {name: log.log_end_offset for name, log in logs.items()}
    result["ratio_10000_vs_10"] = round(result["segments_10000_us"] / result["segments_10_us"], 2)
    result["ratio_10000_vs_10_same_data"] = round(
        result["segments_10000_us"] / result["segments_10_same_data_us"], 2
    )
    for log in logs.values():
        log.close()
    return result


def run(*, reps: int = 5, total_mib: int = 512, quick: bool = False) -> dict[str, Any]:
    """Run every figure; returns a JSON-able dict (see the module docstring)."""
    raise_nofile_limit()
    if quick:
        reps, total_mib = 3, 128
    workdir = Path(tempfile.mkdtemp(prefix="logbus-engine-bench-"))
    try:
        append_bytes = bench_append(workdir, total_mib, reps, in_place=False)
        append_in_place = bench_append(workdir, total_mib, reps, in_place=True)
        read = bench_read(workdir, total_mib, reps)
        lookup = bench_lookup(workdir, reps)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "append_mb_s": _median(append_bytes),
        "append_in_place_mb_s": _median(append_in_place),
        "read_mb_s": _median(read),
        "lookup_us": lookup,
        "goals": {
            "append_mb_s >= 1000": _median(append_bytes) >= 1000,
            "read_mb_s >= 2000": _median(read) >= 2000,
            "lookup ratio (same data) <= 1.5": lookup["ratio_10000_vs_10_same_data"] <= 1.5,
            "lookup ratio (same segment size) <= 1.5": lookup["ratio_10000_vs_10"] <= 1.5,
        },
        "samples": {
            "append_mb_s": [round(x, 1) for x in append_bytes],
            "append_in_place_mb_s": [round(x, 1) for x in append_in_place],
            "read_mb_s": [round(x, 1) for x in read],
        },
        "params": {
            "reps": reps,
            "total_mib_per_rep": total_mib,
            "batch_bytes": len(_one_mib_batch()),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer, smaller repetitions")
    args = parser.parse_args()
    print(json.dumps(run(quick=args.quick), indent=2))


if __name__ == "__main__":
    main()
