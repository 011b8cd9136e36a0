"""Transactions against real broker processes, over HTTP (#16).

What a read_committed reader sees is computed from the partition's raw batches (a binary
fetch, read_uncommitted) with Kafka's consumer rule: a transactional batch counts once its
producer's COMMIT marker follows, is dropped at an ABORT, and the first batch of a
transaction with no marker yet is where the last stable offset holds the reader.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Broker

from app.common.batch import (
    TRANSACTIONAL_MASK,
    decode_records,
    iter_headers,
    read_control_marker,
)


def committed_view(client: httpx.Client, topic: str, partition: int) -> tuple[list[str], int]:
    """(values a read_committed reader gets, the last stable offset)."""
    r = client.get(
        f"/topics/{topic}/partitions/{partition}/records",
        params={"offset": 0, "max_bytes": 1 << 24, "max_wait_ms": 0},
        headers={"accept": "application/octet-stream"},
    )
    assert r.status_code == 200, r.text
    buf = r.content
    fate: dict[int, str] = {}  # batch base offset -> "commit" | "abort" | "open"
    open_batches: dict[int, list[int]] = {}
    for pos, h in iter_headers(buf):
        if h.is_control:
            commit = read_control_marker(buf, pos).commit
            for base in open_batches.pop(h.producer_id, []):
                fate[base] = "commit" if commit else "abort"
        elif h.attributes & TRANSACTIONAL_MASK:
            open_batches.setdefault(h.producer_id, []).append(h.base_offset)
            fate[h.base_offset] = "open"
    end = int(r.headers.get("Logbus-High-Watermark", 1 << 62))
    lso = min((b for bases in open_batches.values() for b in bases), default=end)
    values: list[str] = []
    for pos, h in iter_headers(buf):
        if h.is_control or h.base_offset >= lso or fate.get(h.base_offset, "commit") != "commit":
            continue
        values += [(x.value or b"").decode() for x in decode_records(buf[pos : pos + h.size])]
    return values, lso


def init(c: httpx.Client, tid: str, **body: Any) -> tuple[int, int]:
    r = c.post("/producers", json={"transactional_id": tid, **body})
    assert r.status_code == 200, r.text
    return r.json()["producer_id"], r.json()["producer_epoch"]


def produce(c: httpx.Client, tid: str, pe: tuple[int, int], values: list[str], p: int = 0) -> Any:
    return c.post(
        f"/transactions/{tid}/topics/out/records",
        params={"producer_id": pe[0], "producer_epoch": pe[1]},
        json={"value_format": "string", "records": [{"value": v, "partition": p} for v in values]},
    )


def end(c: httpx.Client, tid: str, pe: tuple[int, int], what: str) -> Any:
    return c.post(
        f"/transactions/{tid}/{what}", json={"producer_id": pe[0], "producer_epoch": pe[1]}
    )


def state(c: httpx.Client, tid: str) -> str:
    r = c.get(f"/transactions/{tid}")
    assert r.status_code == 200, r.text
    return str(r.json()["transaction_state"])


def wait_for(pred: Any, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_commit_abort_lso_timeout_and_fencing(tmp_path: Path, broker_factory: list[Broker]) -> None:
    broker = Broker(
        tmp_path / "data",
        tmp_path / "broker.log",
        {"LOGBUS_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "100"},
    )
    broker_factory.append(broker)
    broker.start()
    with broker.client() as c:
        assert c.post("/topics", json={"name": "out", "partitions": 1}).status_code == 201
        job = init(c, "job")
        assert produce(c, "job", job, ["a", "b"]).status_code == 200
        # Open: the reader is held before the transaction's first record.
        assert committed_view(c, "out", 0) == ([], 0)
        assert end(c, "job", job, "commit").json()["transaction_state"] == "CompleteCommit"
        assert committed_view(c, "out", 0)[0] == ["a", "b"]
        assert produce(c, "job", job, ["x"]).status_code == 200
        assert end(c, "job", job, "abort").json()["transaction_state"] == "CompleteAbort"
        assert committed_view(c, "out", 0)[0] == ["a", "b"]
        # A zombie: a second instance fences the first and aborts what it left open.
        assert produce(c, "job", job, ["zombie"]).status_code == 200
        job2 = init(c, "job")
        r = produce(c, "job", job, ["late"])
        assert r.status_code == 409 and r.json()["error_code"] == "PRODUCER_FENCED", r.text
        r = end(c, "job", job, "commit")
        assert r.status_code == 409 and r.json()["error_code"] == "PRODUCER_FENCED", r.text
        assert produce(c, "job", job2, ["c"]).status_code == 200
        assert end(c, "job", job2, "commit").status_code == 200
        assert committed_view(c, "out", 0)[0] == ["a", "b", "c"]
        # A transaction left open past its timeout is aborted by the broker.
        slow = init(c, "slow", transaction_timeout_ms=300)
        assert produce(c, "slow", slow, ["never"]).status_code == 200
        held = committed_view(c, "out", 0)[1]
        wait_for(lambda: state(c, "slow") == "CompleteAbort", "the timed-out transaction")
        values, lso = committed_view(c, "out", 0)
        assert values == ["a", "b", "c"] and lso > held
        r = end(c, "slow", slow, "commit")
        assert r.status_code == 409 and r.json()["error_code"] == "PRODUCER_FENCED"


@pytest.mark.slow
def test_a_broker_dead_in_the_middle_of_a_commit_completes_it_on_restart(
    tmp_path: Path, broker_factory: list[Broker]
) -> None:
    """The coordinator wrote PrepareCommit and one marker (the group's offsets), then the
    process died (os._exit, as kill -9); the restarted broker finds PrepareCommit in
    __transaction_state and writes the missing markers."""
    data = tmp_path / "data"
    crashing = Broker(data, tmp_path / "b1.log", {"LOGBUS_TEST_TXN_CRASH": "after-first-marker"})
    crashing.start()
    with crashing.client() as c:
        assert c.post("/topics", json={"name": "in", "partitions": 1}).status_code == 201
        assert c.post("/topics", json={"name": "out", "partitions": 2}).status_code == 201
        job = init(c, "copier")
        assert produce(c, "copier", job, ["p0"], p=0).status_code == 200
        assert produce(c, "copier", job, ["p1"], p=1).status_code == 200
        r = c.post(
            "/transactions/copier/offsets",
            json={
                "producer_id": job[0],
                "producer_epoch": job[1],
                "group_id": "g",
                "offsets": [{"topic": "in", "partition": 0, "offset": 7}],
            },
        )
        assert r.status_code == 200, r.text
        with pytest.raises(httpx.TransportError):
            end(c, "copier", job, "commit")
    assert crashing.proc is not None
    crashing.proc.wait(timeout=10)
    crashing.proc = None
    assert not crashing.clean_shutdown_marker.exists()

    broker = Broker(data, tmp_path / "b2.log")
    broker_factory.append(broker)
    broker.start()
    with broker.client() as c:
        wait_for(lambda: state(c, "copier") == "CompleteCommit", "completion after restart")
        assert committed_view(c, "out", 0)[0] == ["p0"]
        assert committed_view(c, "out", 1)[0] == ["p1"]
        r = c.get("/groups/g/offsets", params={"topic": "in"})
        assert r.json()["offsets"][0]["offset"] == 7, r.text
        # The same producer goes on with its next transaction.
        assert produce(c, "copier", job, ["next"], p=0).status_code == 200
        assert end(c, "copier", job, "commit").status_code == 200
        assert committed_view(c, "out", 0)[0] == ["p0", "next"]
