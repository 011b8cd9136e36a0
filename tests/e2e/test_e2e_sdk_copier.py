"""The SDK copier (``tests/e2e/copier/sdk_copier.py``) run once, without kills, against a
broker subprocess: every input record lands once in the output, on its partition, and the
group's committed offsets are the input's ends. (The kill -9 loop over every copier is
``test_e2e_copier.py``'s.)"""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
from conftest import REPO, Broker

COPIER = REPO / "tests" / "e2e" / "copier" / "sdk_copier.py"
N = 500


def committed(c: httpx.Client, group: str, topic: str) -> dict[int, int]:
    r = c.get(f"/groups/{group}/offsets", params={"topic": topic})
    return {o["partition"]: o["offset"] for o in r.json().get("offsets", [])}


def records(c: httpx.Client, topic: str, partition: int, isolation: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    offset = 0
    while True:
        r = c.get(
            f"/topics/{topic}/partitions/{partition}/records",
            params={"offset": offset, "isolation_level": isolation, "value_format": "string"},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        out += [(rec["key"], rec["value"]) for rec in body["records"]]
        if body["next_offset"] == offset:
            return out
        offset = body["next_offset"]


def test_sdk_copier_copies_each_record_once(broker: Broker) -> None:
    with broker.client() as c:
        for name in ("copy-in", "copy-out"):
            assert c.post("/topics", json={"name": name, "partitions": 2}).status_code == 201
        for start in range(0, N, 100):
            batch = [{"key": f"k{i}", "value": f"v{i}"} for i in range(start, start + 100)]
            assert c.post("/topics/copy-in/records", json={"records": batch}).status_code == 200
        ends = {
            p: c.get(f"/topics/copy-in/partitions/{p}/offsets", params={"at": "latest"}).json()[
                "offset"
            ]
            for p in (0, 1)
        }
        args = ["--url", broker.url, "--input", "copy-in", "--output", "copy-out"]
        args += ["--group", "copier", "--transactional-id", "copier-0", "--max-batch", "60"]
        proc = subprocess.Popen([sys.executable, str(COPIER), *args], stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while committed(c, "copier", "copy-in") != ends:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
                assert time.monotonic() < deadline, committed(c, "copier", "copy-in")
                time.sleep(0.1)
        finally:
            proc.kill()
            proc.wait()
        total = 0
        for p in (0, 1):
            source = records(c, "copy-in", p, "read_uncommitted")
            copied = records(c, "copy-out", p, "read_committed")
            # Exactly once, on the same partition (order within a partition is kept too).
            assert copied == source
            total += len(copied)
        assert total == N
