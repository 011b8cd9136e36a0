"""Produce throughput over HTTP: JSON requests of 1,000 small records, and prebuilt 1 MiB binary batches.

The client keeps ``inflight`` requests in flight on keep-alive connections
(threads; the GIL is released while waiting on the socket), because one
request at a time measures the round trip, not the broker. It uses the
standard library's ``http.client``: httpx costs the client about as much CPU
as the broker spends on a 1 MiB append, and both share two cores here.
"""

from __future__ import annotations

import http.client
import threading
import time
from urllib.parse import urlsplit

import httpx
import orjson

from app.common.batch import BatchBuilder
from bench.common import median_of

VALUE = "x" * 100


def _drive(
    url: str, path: str, body: bytes, headers: dict[str, str], requests: int, inflight: int
) -> float:
    """Seconds to send ``requests`` copies of ``body`` split over ``inflight`` threads."""
    per_thread = requests // inflight
    errors: list[str] = []

    parts = urlsplit(url)

    def worker() -> None:
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
        try:
            for _ in range(per_thread):
                conn.request("POST", path, body=body, headers=headers)
                response = conn.getresponse()
                answer = response.read()
                if response.status >= 300:
                    errors.append(answer.decode(errors="replace"))
                    return
        finally:
            conn.close()

    threads = [threading.Thread(target=worker) for _ in range(inflight)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"produce failed: {errors[0]}")
    return elapsed


def json_produce(
    url: str, topic: str, requests: int = 300, per_request: int = 1000, inflight: int = 2
) -> float:
    """Records/s for JSON produce of 100-byte string values, ``per_request`` records a request."""
    body = orjson.dumps(
        {"value_format": "string", "records": [{"value": VALUE} for _ in range(per_request)]}
    )
    headers = {"content-type": "application/json"}
    n = (requests // inflight) * inflight
    elapsed = _drive(url, f"/topics/{topic}/partitions/0/records", body, headers, n, inflight)
    return n * per_request / elapsed


def one_mib_batch() -> tuple[bytes, int]:
    builder = BatchBuilder()
    value = b"x" * 100
    while builder.size_in_bytes() < (1 << 20) - 200:
        builder.append(value)
    return builder.build(), len(builder)


def binary_produce(url: str, topic: str, requests: int = 400, inflight: int = 2) -> float:
    """MB/s for binary produce of a prebuilt ~1 MiB RecordBatch."""
    batch, _ = one_mib_batch()
    headers = {"content-type": "application/octet-stream"}
    n = (requests // inflight) * inflight
    elapsed = _drive(url, f"/topics/{topic}/partitions/0/batches", batch, headers, n, inflight)
    return n * len(batch) / elapsed / 1e6


def run(url: str, runs: int = 3) -> dict[str, object]:
    with httpx.Client(base_url=url) as c:
        for name in ("bench-json", "bench-bin"):
            c.post(
                "/topics",
                json={"name": name, "partitions": 1, "configs": {"max.message.bytes": 4 << 20}},
            )
    jp, jp_samples = median_of(runs, lambda: json_produce(url, "bench-json"))
    bp, bp_samples = median_of(runs, lambda: binary_produce(url, "bench-bin"))
    return {
        "json_produce_records_per_s": jp,
        "json_produce_samples": jp_samples,
        "binary_produce_mb_per_s": bp,
        "binary_produce_samples": bp_samples,
    }
