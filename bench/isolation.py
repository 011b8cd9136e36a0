"""``read_committed`` consume vs ``read_uncommitted``, the same topic in the same run.

The topic holds transactions as a consume-transform-produce job writes them: two
producers whose transactions interleave batch by batch (10 batches of 500 records of
100 bytes each per transaction), one transaction in ten aborted, 1,000,000 records in
all. The transactions are written with the storage layer's own calls (the broker is
stopped, the partition's log opened with :class:`app.core.log.Log`, transactional
batches and COMMIT/ABORT markers appended, the broker started again), since the HTTP
transaction API is another piece of issue #16.

Figures, each the median of ``runs`` runs taken round-robin across the modes (so load
from other work falls on all alike), each run a fresh consumer reading the partition
from offset 0 to its end:

* ``sdk_columns_*``: ``Consumer.poll_columns``; ``sdk_poll_*``: ``Consumer.poll``;
* ``json_fetch_*``: ``GET .../records`` JSON answers (1 MiB each) over the first
  200,000 offsets, following ``next_offset``.

Rates are offsets covered per second (what a reader gets through, aborted records
included) and records handed out per second; ``*_ratio`` is read_committed's offset
rate over read_uncommitted's.

``python -m bench.isolation`` prints the figures as JSON.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from app.client import Consumer, TopicPartition
from app.common.batch import BatchBuilder
from app.core.log import Log
from bench.common import broker_process

TOPIC = "txn-mix"
VALUE = b"x" * 100
BATCH = 500
BATCHES_PER_TXN = 10
TRANSACTIONS = 200  # 200 x 10 x 500 = 1,000,000 records
ABORT_EVERY = 10
JSON_OFFSETS = 200_000
MODES = ("read_uncommitted", "read_committed")


def _serve(data: str) -> contextlib.AbstractContextManager[tuple[str, int]]:
    """A broker over the data dir :func:`write_transactions` filled (it loads for a while)."""
    return broker_process({"LOGBUS_NUM_PARTITIONS": "1"}, data_dir=data, ready_timeout=60)


def _batch(pid: int, seq: int) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)
    for _ in range(BATCH):
        b.append(VALUE, timestamp=1_700_000_000_000)
    return b.build()


def write_transactions(directory: Path) -> dict[str, int]:
    """Two producers' interleaved transactions into the log at ``directory``."""
    log = Log(directory)
    seq = {1: 0, 2: 0}
    committed = aborted = 0
    try:
        for t in range(0, TRANSACTIONS, 2):
            for _ in range(BATCHES_PER_TXN):
                for pid in (1, 2):
                    log.append(_batch(pid, seq[pid]))
                    seq[pid] += BATCH
            for i, pid in enumerate((1, 2)):
                commit = (t + i) % ABORT_EVERY != ABORT_EVERY - 1
                log.append_control(pid, 0, commit=commit, coordinator_epoch=0)
                n = BATCH * BATCHES_PER_TXN
                committed, aborted = (
                    (committed + n, aborted) if commit else (committed, aborted + n)
                )
        end = log.log_end_offset
    finally:
        log.close()
    return {"records": committed + aborted, "aborted": aborted, "log_end_offset": end}


def consume(url: str, mode: str, columns: bool, end: int) -> tuple[float, int, int]:
    """Seconds to read the partition from 0 to ``end``, the records handed out, the
    offsets covered."""
    tp = TopicPartition(TOPIC, 0)
    with Consumer(url, isolation_level=mode, fetch_max_wait_ms=100) as c:
        c.assign([tp])
        c.seek(tp, 0)
        n = 0
        began = time.perf_counter()
        while c.position(tp) < end:
            if columns:
                n += sum(len(run) for run in c.poll_columns(timeout_ms=100))
            else:
                n += len(c.poll(timeout_ms=100))
        return time.perf_counter() - began, n, c.position(tp)


def json_walk(url: str, mode: str, end: int) -> tuple[float, int, int]:
    """Seconds to walk JSON fetches from offset 0 past ``end``, the records answered, the
    offsets covered."""
    n = offset = 0
    with httpx.Client(base_url=url, timeout=60) as client:
        began = time.perf_counter()
        while offset < end:
            r = client.get(
                f"/topics/{TOPIC}/partitions/0/records",
                params={
                    "offset": offset,
                    "max_bytes": 1 << 20,
                    "max_wait_ms": 0,
                    "isolation_level": mode,
                },
            )
            body = r.json()
            n += len(body["records"])
            offset = body["next_offset"]
        return time.perf_counter() - began, n, offset


def _median(samples: list[float]) -> float:
    s = sorted(samples)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def run(runs: int = 3) -> dict[str, Any]:
    data = tempfile.mkdtemp(prefix="logbus-bench-iso-")
    try:
        with _serve(data) as (url, _pid):
            r = httpx.post(f"{url}/topics", json={"name": TOPIC, "partitions": 1})
            r.raise_for_status()
        shape = write_transactions(Path(data) / f"{TOPIC}-0")
        end = shape["log_end_offset"]
        with _serve(data) as (url, _pid):
            figures: dict[str, Callable[[], tuple[float, int, int]]] = {}
            for mode in MODES:
                short = mode.split("_")[1]  # "uncommitted" / "committed"
                figures[f"sdk_columns_{short}"] = lambda m=mode: consume(url, m, True, end)
                figures[f"sdk_poll_{short}"] = lambda m=mode: consume(url, m, False, end)
                figures[f"json_fetch_{short}"] = lambda m=mode: json_walk(url, m, JSON_OFFSETS)
            for fn in figures.values():
                fn()  # warm: page cache, connections, the codec's first calls
            samples: dict[str, list[tuple[float, int, int]]] = {k: [] for k in figures}
            for _ in range(runs):
                for name, fn in figures.items():
                    samples[name].append(fn())
        out: dict[str, Any] = {"topic": shape, "runs": runs}
        for name, got in samples.items():
            out[name] = {
                "seconds": round(_median([s for s, _, _ in got]), 3),
                "offsets_per_s": round(_median([o / s for s, _, o in got])),
                "records_per_s": round(_median([n / s for s, n, _ in got])),
                "records": got[0][1],
                "offsets": got[0][2],
                "samples_s": [round(s, 3) for s, _, _ in got],
            }
        for flavour in ("sdk_columns", "sdk_poll", "json_fetch"):
            committed = out[f"{flavour}_committed"]["offsets_per_s"]
            uncommitted = out[f"{flavour}_uncommitted"]["offsets_per_s"]
            out[f"{flavour}_ratio"] = round(committed / uncommitted, 3)
        return out
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 3), indent=2))
