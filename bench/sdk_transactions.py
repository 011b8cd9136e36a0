"""The SDK's transactional producer against its idempotent one, and the SDK copier's
records/s, on one broker in the same run (issue #16).

* ``idempotent``: ``Producer(url, acks="all")`` sends 100-byte values with
  ``send_many`` to a 4-partition topic for ``seconds``, then flushes;
* ``transactional``: ``Producer(url, transactional_id=...)`` does the same inside
  transactions committed every ``txn_ms`` (100 ms, the issue's figure): each commit
  flushes, then ends the transaction (AddPartitionsToTxn for each partition's first batch
  of the next one, EndTxn, the COMMIT markers);
* ``copier``: ``tests/e2e/copier/sdk_copier.py`` (consume ``read_committed`` as a group
  member, produce, send the offsets, commit; 200 records per transaction) copies
  ``copy_records`` records from a 2-partition topic; records/s from its start to the
  group's committed offsets reaching the input's ends (its ~1 s start-up included).

The two producers alternate ``rounds`` times (load from other work falls on both);
medians and the ratio are printed as JSON. Run: ``python -m bench.sdk_transactions``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from app.client import Admin, Producer
from bench.common import broker, machine

VALUE = b"x" * 100
CHUNK = 1000
COPIER = Path(__file__).resolve().parents[1] / "tests" / "e2e" / "copier" / "sdk_copier.py"


def produce(url: str, topic: str, seconds: float, txn_ms: float | None) -> float:
    """Records/s acknowledged (committed, for transactions) over ``seconds``."""
    with Admin(url) as admin:
        admin.create_topic(topic, partitions=4)
    config: dict[str, object] = {"acks": "all"}
    if txn_ms is not None:
        config["transactional_id"] = f"bench-{topic}"
    values = [VALUE] * CHUNK
    sent = 0
    with Producer(url, **config) as p:  # type: ignore[arg-type]
        if txn_ms is not None:
            p.init_transactions()
        start = time.perf_counter()
        end = start + seconds
        while True:
            if txn_ms is not None:
                p.begin_transaction()
            txn_end = time.perf_counter() + (txn_ms or seconds * 1000) / 1000
            while time.perf_counter() < min(txn_end, end):
                p.send_many(topic, values)
                sent += CHUNK
            if txn_ms is not None:
                p.commit_transaction()
            else:
                p.flush()
            if time.perf_counter() >= end:
                break
        elapsed = time.perf_counter() - start
    return sent / elapsed


def copier(url: str, records: int) -> float:
    """The SDK copier's records/s over ``records`` records (start-up included)."""
    with httpx.Client(base_url=url, timeout=60) as c:
        for name in ("copy-in", "copy-out"):
            c.post("/topics", json={"name": name, "partitions": 2}).raise_for_status()
        with Producer(url) as p:
            for i in range(records):
                p.send("copy-in", VALUE, key=str(i).encode())
        ends = {
            p: c.get(f"/topics/copy-in/partitions/{p}/offsets", params={"at": "latest"}).json()[
                "offset"
            ]
            for p in (0, 1)
        }
        args = ["--url", url, "--input", "copy-in", "--output", "copy-out", "--group", "copier"]
        args += ["--transactional-id", "copier-0", "--max-batch", "200"]
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, str(COPIER), *args])
        try:
            while True:
                got = c.get("/groups/copier/offsets", params={"topic": "copy-in"}).json()
                if {o["partition"]: o["offset"] for o in got.get("offsets", [])} == ends:
                    break
                if proc.poll() is not None:
                    raise RuntimeError(f"the copier exited with {proc.returncode}")
                time.sleep(0.05)
            elapsed = time.perf_counter() - start
        finally:
            proc.kill()
            proc.wait()
    return records / elapsed


def run(
    rounds: int = 5, seconds: float = 3.0, txn_ms: float = 100.0, copy_records: int = 50_000
) -> dict[str, Any]:
    idem: list[float] = []
    txn: list[float] = []
    with broker() as url:
        for i in range(rounds):
            idem.append(produce(url, f"idem-{i}", seconds, None))
            txn.append(produce(url, f"txn-{i}", seconds, txn_ms))
        copied = copier(url, copy_records)
    mi, mt = statistics.median(idem), statistics.median(txn)
    return {
        "machine": machine(),
        "idempotent_records_s": {"median": round(mi), "runs": [round(x) for x in idem]},
        "transactional_records_s": {"median": round(mt), "runs": [round(x) for x in txn]},
        "txn_ms": txn_ms,
        "ratio_transactional_idempotent": round(mt / mi, 3),
        "copier_records_s": round(copied),
        "copier_records": copy_records,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
