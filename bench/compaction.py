"""Compaction throughput of the log cleaner alone (no HTTP): ``python -m bench.compaction``.

A log of ``records`` keyed records (100-byte values, 12-byte keys, 100
records per batch, uncompressed) where every key is written ten times in
random order, so 10% of the records are live; ``segment.bytes`` is 64 MiB.
One pass cleans the whole log (the active segment is rolled first) with the
default 128 MiB dedupe buffer.

Figures (the median of several repetitions, printed as JSON):

* ``clean_mb_s``: bytes of log read by the pass per second of wall time
  (map build + recopy + swap, fsyncs included).
* ``clean_records_s``: records per second of the same pass.
* ``size_after_pct``: the log's size after the pass, as a percentage of before.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from app.common.batch import BatchBuilder
from app.core.log import Log, LogConfig
from app.core.log.cleaner import LogCleaner

MiB = 1 << 20
VALUE_BYTES = 100
PER_BATCH = 100
WRITES_PER_KEY = 10


def _build(directory: Path, records: int, seed: int) -> Log:
    config = LogConfig().with_overrides(
        {
            "cleanup.policy": "compact",
            "segment.bytes": 64 * MiB,
            "file.delete.delay.ms": 0,
            "max.message.bytes": 4 * MiB,
        }
    )
    log = Log(directory, config)
    rng = random.Random(seed)
    keys = [b"key-%08d" % i for i in range(records // WRITES_PER_KEY)]
    order = keys * WRITES_PER_KEY
    rng.shuffle(order)
    value = rng.randbytes(VALUE_BYTES)
    for start in range(0, len(order), PER_BATCH):
        builder = BatchBuilder(max_bytes=4 * MiB)
        for key in order[start : start + PER_BATCH]:
            builder.append(value, key, timestamp=1_700_000_000_000)
        log.append(builder.build())
    log.roll()
    return log


def bench_clean(workdir: Path, records: int, rep: int) -> tuple[float, float, float]:
    directory = workdir / f"compact{rep}-0"
    log = _build(directory, records, rep)
    try:
        before = log.size_in_bytes
        cleaner = LogCleaner(workdir / f"rep{rep}", lambda: [log])
        (workdir / f"rep{rep}").mkdir()
        started = time.perf_counter()
        result = cleaner.clean(log, force=True)
        elapsed = time.perf_counter() - started
        assert result is not None and result.completed
        assert result.records_retained == records // WRITES_PER_KEY
        return (
            result.bytes_read / MiB / elapsed,
            result.records_read / elapsed,
            100 * log.size_in_bytes / before,
        )
    finally:
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


def run(*, reps: int = 3, records: int = 1_000_000, quick: bool = False) -> dict[str, Any]:
    """Run the figure; returns a JSON-able dict (see the module docstring)."""
    if quick:
        reps, records = 3, 200_000
    workdir = Path(tempfile.mkdtemp(prefix="logbus-compaction-bench-"))
    try:
        samples = [bench_clean(workdir, records, rep) for rep in range(reps)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    mb_s = [s[0] for s in samples]
    rec_s = [s[1] for s in samples]
    return {
        "clean_mb_s": round(statistics.median(mb_s), 1),
        "clean_records_s": round(statistics.median(rec_s)),
        "size_after_pct": round(statistics.median(s[2] for s in samples), 1),
        "samples": {"clean_mb_s": [round(x, 1) for x in mb_s]},
        "params": {
            "reps": reps,
            "records": records,
            "live_fraction": 1 / WRITES_PER_KEY,
            "value_bytes": VALUE_BYTES,
            "records_per_batch": PER_BATCH,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smaller log")
    args = parser.parse_args()
    print(json.dumps(run(quick=args.quick), indent=2))


if __name__ == "__main__":
    main()
