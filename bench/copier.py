"""The exactly-once copier's records/s over HTTP, against a plain copy loop in the same run
(issue #16).

One broker, an input topic of ``records`` records (100-byte values, 3 partitions), copied
to a fresh output topic by one client at a time, on one keep-alive connection:

* copier: the copier of the end-to-end test (``tests/e2e/copier/http_copier.py``, the
  same code, in process, no kills): per round a read_committed fetch of each input
  partition from the group's position, then one transaction of up to ``max_batch``
  records: AddPartitionsToTxn, JSON produce in the transaction per output partition,
  AddOffsetsToTxn, TxnOffsetCommit, commit;
* plain (the baseline, at-least-once): the same reads (read_uncommitted), a plain JSON
  produce per output partition and a plain offset commit (``POST /groups/G/offsets``).

Both alternate ``rounds`` times over fresh output topics and groups; the medians and their
ratio are reported. Run: ``python -m bench.run --only copier`` (or ``python -m
bench.copier`` to print without recording).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

from bench.common import broker, machine

COPIER = Path(__file__).resolve().parents[1] / "tests" / "e2e" / "copier" / "http_copier.py"
PARTITIONS = 3
VALUE = "x" * 100


def _copier_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("http_copier", COPIER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fill(url: str, records: int) -> None:
    with httpx.Client(base_url=url, timeout=60) as c:
        r = c.post("/topics", json={"name": "in", "partitions": PARTITIONS})
        r.raise_for_status()
        for start in range(0, records, 500):
            n = min(500, records - start)
            r = c.post(
                "/topics/in/records",
                json={
                    "value_format": "string",
                    "records": [
                        {"key": str(i), "value": VALUE, "partition": i % PARTITIONS}
                        for i in range(start, start + n)
                    ],
                },
            )
            r.raise_for_status()


def _copier(mod: ModuleType, url: str, tag: str, max_batch: int) -> Any:
    with httpx.Client(base_url=url) as c:
        c.post("/topics", json={"name": f"out-{tag}", "partitions": PARTITIONS}).raise_for_status()
    args = argparse.Namespace(
        url=url,
        input="in",
        output=f"out-{tag}",
        group=f"g-{tag}",
        transactional_id=f"t-{tag}",
        max_batch=max_batch,
        transaction_timeout_ms=60_000,
    )
    return mod.Copier(args)


def run_transactional(mod: ModuleType, url: str, records: int, tag: str, max_batch: int) -> float:
    """Records/s of the exactly-once copier copying the whole input."""
    copier = _copier(mod, url, tag, max_batch)
    copier.init()
    start = time.perf_counter()
    while copier.copied < records:
        copier.transaction()
    return records / (time.perf_counter() - start)


def run_plain(mod: ModuleType, url: str, records: int, tag: str, max_batch: int) -> float:
    """Records/s of the same loop without transactions (at-least-once)."""
    copier = _copier(mod, url, tag, max_batch)
    copier.positions = {p: 0 for p in range(PARTITIONS)}
    http = copier.brokers.http
    copied = 0
    start = time.perf_counter()
    while copied < records:
        taken, after = copier.read()
        for p, got in sorted(taken.items()):
            r = http.post(
                f"{url}/topics/{copier.output}/records",
                json={
                    "key_format": "binary",
                    "value_format": "binary",
                    "records": [
                        {"key": x["key"], "value": x["value"], "partition": p} for x in got
                    ],
                },
            )
            r.raise_for_status()
            copied += len(got)
        offsets = [{"topic": "in", "partition": p, "offset": o} for p, o in sorted(after.items())]
        r = http.post(f"{url}/groups/{copier.group}/offsets", json={"offsets": offsets})
        r.raise_for_status()
        copier.positions = after
    return records / (time.perf_counter() - start)


def run(rounds: int = 3, records: int = 10_000, max_batch: int = 200) -> dict[str, Any]:
    mod = _copier_module()
    txn: list[float] = []
    plain: list[float] = []
    with broker() as url:
        _fill(url, records)
        for i in range(rounds):
            plain.append(run_plain(mod, url, records, f"p{i}", max_batch))
            txn.append(run_transactional(mod, url, records, f"t{i}", max_batch))
    mt, mp = statistics.median(txn), statistics.median(plain)
    return {
        "machine": machine(),
        "records": records,
        "max_batch": max_batch,
        "copier_records_per_s": round(mt),
        "plain_records_per_s": round(mp),
        "copier_runs": [round(x) for x in txn],
        "plain_runs": [round(x) for x in plain],
        "ratio_copier_to_plain": round(mt / mp, 3),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
