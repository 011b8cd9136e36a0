"""Transactional produce against idempotent produce, same broker, same run (issue #16).

One producer sends binary batches (``batch_records`` records of 100 bytes each) to one
partition back to back, one request at a time on a keep-alive connection, for
``seconds``:

* idempotent: an id from ``POST /producers``, sequences in the batches;
* transactional: an id from ``POST /producers`` with a ``transactional_id``; every
  ``txn_ms`` (100 ms, the issue's figure) the transaction is committed
  (``POST /transactions/{id}/commit``) and the next one starts with
  ``POST /transactions/{id}/partitions``: two extra requests per transaction, and the
  COMMIT marker the broker appends.

The two runs alternate ``rounds`` times; the medians and their ratio are reported. Run:
``python -m bench.transactions``.

``python -m bench.transactions json``: the JSON produce (``records`` of 100-byte string
values per request, one partition) inside a transaction
(``POST /transactions/{id}/topics/{t}/records``, its append on a worker thread) against a
plain ``acks=all`` JSON produce, the same alternation; requests/s of one client.
"""

from __future__ import annotations

import http.client
import statistics
import time
from typing import Any
from urllib.parse import urlsplit

import orjson

from app.common.batch import BatchBuilder, stamp_producer
from bench.common import broker, machine

VALUE = b"x" * 100


class Conn:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(
            parts.hostname or "127.0.0.1", parts.port, timeout=60
        )

    def post(self, path: str, body: bytes, content_type: str = "application/json") -> bytes:
        self.conn.request("POST", path, body=body, headers={"content-type": content_type})
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"POST {path}: {r.status} {data[:300]!r}")
        return data


def _template(records: int) -> bytearray:
    b = BatchBuilder()
    for _ in range(records):
        b.append(VALUE)
    return bytearray(b.build())


def run_once(
    url: str, topic: str, seconds: float, batch_records: int, txn_ms: float | None, tag: str
) -> float:
    """Records/s of one producer (transactions of ``txn_ms`` when given)."""
    c = Conn(url)
    c.post("/topics", orjson.dumps({"name": topic, "partitions": 1}))
    init: dict[str, object] = {"transactional_id": f"bench-{tag}"} if txn_ms else {}
    got = orjson.loads(c.post("/producers", orjson.dumps(init)))
    pid, epoch = got["producer_id"], got["producer_epoch"]
    producer = orjson.dumps({"producer_id": pid, "producer_epoch": epoch})
    add = orjson.dumps(
        {
            "producer_id": pid,
            "producer_epoch": epoch,
            "topics": [{"topic": topic, "partitions": [0]}],
        }
    )
    batch = _template(batch_records)
    path = f"/topics/{topic}/partitions/0/batches"
    seq = sent = 0
    start = time.perf_counter()
    end = start + seconds
    txn_end = 0.0
    open_txn = False
    while True:
        now = time.perf_counter()
        if txn_ms is not None and open_txn and now >= txn_end:
            c.post(f"/transactions/bench-{tag}/commit", producer)
            open_txn = False
        if now >= end:
            break
        if txn_ms is not None and not open_txn:
            c.post(f"/transactions/bench-{tag}/partitions", add)
            open_txn, txn_end = True, now + txn_ms / 1000
        stamp_producer(batch, 0, pid, epoch, seq, transactional=txn_ms is not None)
        c.post(path, bytes(batch), "application/octet-stream")
        seq += batch_records
        sent += batch_records
    elapsed = time.perf_counter() - start
    c.conn.close()
    return sent / elapsed


def run_json_once(url: str, topic: str, seconds: float, records: int, txn: bool) -> float:
    """Requests/s of one client sending JSON produces of ``records`` records back to back
    (inside one transaction, committed at the end, when ``txn``)."""
    c = Conn(url)
    c.post("/topics", orjson.dumps({"name": topic, "partitions": 1}))
    tid = f"bench-json-{topic}"
    body = orjson.dumps(
        {"value_format": "string", "records": [{"value": VALUE.decode(), "partition": 0}] * records}
    )
    path = f"/topics/{topic}/records?acks=all"
    producer = b""
    if txn:
        got = orjson.loads(c.post("/producers", orjson.dumps({"transactional_id": tid})))
        pid, epoch = got["producer_id"], got["producer_epoch"]
        producer = orjson.dumps({"producer_id": pid, "producer_epoch": epoch})
        path = (
            f"/transactions/{tid}/topics/{topic}/records?producer_id={pid}&producer_epoch={epoch}"
        )
    sent = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        c.post(path, body)
        sent += 1
    elapsed = time.perf_counter() - start
    if txn:
        c.post(f"/transactions/{tid}/commit", producer)
    c.conn.close()
    return sent / elapsed


def run_json(rounds: int = 5, seconds: float = 3.0, records: int = 10) -> dict[str, Any]:
    """The JSON produce in a transaction against a plain acks=all one, alternated on one
    broker: both medians (requests/s), their runs and the ratio (bench.run's section)."""
    plain: list[float] = []
    txn: list[float] = []
    with broker() as url:
        for i in range(rounds):
            plain.append(run_json_once(url, f"plain-{i}", seconds, records, False))
            txn.append(run_json_once(url, f"txn-{i}", seconds, records, True))
    mp, mt = statistics.median(plain), statistics.median(txn)
    return {
        "plain_acks_all_requests_per_s": mp,
        "transactional_requests_per_s": mt,
        "plain_runs": plain,
        "transactional_runs": txn,
        "ratio": mt / mp,
    }


def main_json(rounds: int = 5, seconds: float = 3.0, records: int = 10) -> None:
    result = run_json(rounds, seconds, records)
    plain, txn = result["plain_runs"], result["transactional_runs"]
    mp, mt = result["plain_acks_all_requests_per_s"], result["transactional_requests_per_s"]
    print(orjson.dumps(machine()).decode())
    print(f"JSON produce acks=all requests/s: median {mp:,.0f} runs {[round(x) for x in plain]}")
    print(
        f"JSON produce in a transaction requests/s: median {mt:,.0f} runs {[round(x) for x in txn]}"
    )
    print(f"ratio transactional / plain: {mt / mp:.3f}")


def main(rounds: int = 5, seconds: float = 3.0, batch_records: int = 100) -> None:
    idem: list[float] = []
    txn: list[float] = []
    with broker() as url:
        for i in range(rounds):
            idem.append(run_once(url, f"idem-{i}", seconds, batch_records, None, f"i{i}"))
            txn.append(run_once(url, f"txn-{i}", seconds, batch_records, 100.0, f"t{i}"))
    mi, mt = statistics.median(idem), statistics.median(txn)
    print(orjson.dumps(machine()).decode())
    print(f"idempotent records/s: median {mi:,.0f} runs {[round(x) for x in idem]}")
    print(f"transactional (100 ms) records/s: median {mt:,.0f} runs {[round(x) for x in txn]}")
    print(f"ratio transactional / idempotent: {mt / mi:.3f}")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["json"]:
        main_json()
    else:
        main()
