"""Typed Avro HTTP JSON produce and fetch against untyped JSON, same run (issue 18).

``python -m bench.typed_records`` (also ``make bench``'s ``typed_records`` section;
hand-recorded below the marker of bench/RESULTS.md):

- produce: one keep-alive ``httpx.Client`` posts ``BATCH`` records per request to
  ``POST /topics/{t}/records`` for ``SECONDS``: the same values as ``value_format=json``
  (the untyped baseline) and as ``value_format=avro`` with ``value_schema_id`` (each value
  validated and framed in Confluent's wire format); records/s.
- fetch: the same client reads from offset 0 of each topic, ``value_format=json``
  against ``value_format=avro`` (each value decoded through the id it carries); records/s.
  Two shapes: ``max_bytes`` 4 MiB for both (``*_fetch_rps``: equal stored bytes, so the
  Avro answer holds about twice the records of the JSON one, its records being half the
  size), and the same number of records in both answers (``*_fetch_same_rps``:
  ``FETCH_BATCHES`` stored batches of ``BATCH`` records each, ``max_bytes`` set per topic
  from its batch size). Both answers exceed the broker's inline size, so every record is
  decoded and rendered (the rendered-batch cache serves small answers only).

Beside each fetch rate, the broker's CPU time per record fetched (``*_cpu_us``, user +
system from ``/proc/PID/stat`` over the same seconds): the one client parsing each answer
with ``orjson.loads`` costs about as much per record as the broker, the same for both
formats, so the rates' ratio understates a change in the broker's own work.

The goals in issue 18: typed produce >= 0.7x untyped, typed fetch >= 0.8x. Each figure is
the median of ``rounds`` runs, alternating typed and untyped so the machine's load hits
both alike; one client, one process, one broker.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import httpx
import orjson

from bench.common import broker_process, machine
from bench.http_edge import _cpu_seconds

SECONDS = 3.0
BATCH = 500
# Stored batches (of BATCH records) per fetch in the same-records shape: ~2 MiB of JSON.
FETCH_BATCHES = 60
SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {"name": "qty", "type": "int"},
            {"name": "price", "type": "double"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
)


def _values(n: int) -> list[dict[str, Any]]:
    return [
        {"id": i, "item": f"item-{i % 97}", "qty": i % 7, "price": 9.5, "tags": ["a", "b"]}
        for i in range(n)
    ]


def _produce_rate(c: httpx.Client, topic: str, body: bytes, seconds: float) -> float:
    done = 0
    start = time.perf_counter()
    while True:
        r = c.post(
            f"/topics/{topic}/records", content=body, headers={"Content-Type": "application/json"}
        )
        if r.status_code != 200:
            raise RuntimeError(f"produce {topic}: {r.status_code} {r.text}")
        done += BATCH
        now = time.perf_counter()
        if now - start >= seconds:
            return done / (now - start)


def _batch_bytes(c: httpx.Client, topic: str) -> int:
    """The size of ``topic``'s first stored batch (a binary fetch answers at least one
    whole batch, whatever ``max_bytes``)."""
    r = c.get(
        f"/topics/{topic}/partitions/0/records",
        params={"offset": 0, "max_wait_ms": 0, "max_bytes": 1},
        headers={"accept": "application/octet-stream"},
    )
    r.raise_for_status()
    return len(r.content)


def _fetch_rate(
    c: httpx.Client,
    pid: int,
    figures: dict[str, list[float]],
    name: str,
    topic: str,
    fmt: str,
    seconds: float,
    max_bytes: int = 4 << 20,
    expect: int | None = None,
) -> None:
    """Appends to ``figures`` the records/s (``name``) and the broker's CPU microseconds
    per record (``name`` with ``_cpu_us`` for ``_rps``)."""
    done = 0
    cpu = _cpu_seconds(pid)
    start = time.perf_counter()
    params: dict[str, str | int] = {
        "offset": 0, "max_wait_ms": 0, "value_format": fmt, "max_bytes": max_bytes
    }  # fmt: skip
    while True:
        r = c.get(f"/topics/{topic}/partitions/0/records", params=params)
        if r.status_code != 200:
            raise RuntimeError(f"fetch {topic}: {r.status_code} {r.text}")
        records = orjson.loads(r.content)["records"]
        if len(records) < BATCH or "value_error" in records[0]:
            raise RuntimeError(f"fetch {topic}: {len(records)} records, {records[:1]}")
        if expect is not None and len(records) != expect:
            raise RuntimeError(f"fetch {topic}: {len(records)} records, not {expect}")
        done += len(records)
        now = time.perf_counter()
        if now - start >= seconds:
            figures.setdefault(name, []).append(done / (now - start))
            used = _cpu_seconds(pid) - cpu
            figures.setdefault(name.replace("_rps", "_cpu_us"), []).append(used / done * 1e6)
            return


def run(
    rounds: int = 3, seconds: float = SECONDS, render_cache_bytes: int | None = None
) -> dict[str, Any]:
    """``render_cache_bytes``: the broker's ``LOGBUS_FETCH_RENDER_CACHE_BYTES`` (None: its
    default); 0 turns the rendered-records cache off, so every fetch decodes and renders
    every record, typed or not (the per-record cost, without the cache's help)."""
    figures: dict[str, list[float]] = {}
    records = [{"value": v} for v in _values(BATCH)]
    env = (
        None
        if render_cache_bytes is None
        else {"LOGBUS_FETCH_RENDER_CACHE_BYTES": str(render_cache_bytes)}
    )
    with broker_process(env) as (url, pid), httpx.Client(base_url=url, timeout=60) as c:
        r = c.post(
            "/schema-registry/subjects/orders-value/versions",
            json={"schema": SCHEMA},
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        )
        r.raise_for_status()
        schema_id = r.json()["id"]
        plain = orjson.dumps({"records": records})
        typed = orjson.dumps(
            {"records": records, "value_format": "avro", "value_schema_id": schema_id}
        )
        for _ in range(rounds):
            figures.setdefault("json_produce_rps", []).append(
                _produce_rate(c, "plain", plain, seconds)
            )
            figures.setdefault("avro_produce_rps", []).append(
                _produce_rate(c, "typed", typed, seconds)
            )
        # One partition each (the broker's default): the fetch reads many batches from
        # offset 0 of topics that now hold many.
        same = FETCH_BATCHES * BATCH
        plain_max = FETCH_BATCHES * _batch_bytes(c, "plain")
        typed_max = FETCH_BATCHES * _batch_bytes(c, "typed")
        for _ in range(rounds):
            _fetch_rate(c, pid, figures, "json_fetch_rps", "plain", "json", seconds)
            _fetch_rate(c, pid, figures, "avro_fetch_rps", "typed", "avro", seconds)
            _fetch_rate(
                c, pid, figures, "json_fetch_same_rps", "plain", "json", seconds, plain_max, same
            )
            _fetch_rate(
                c, pid, figures, "avro_fetch_same_rps", "typed", "avro", seconds, typed_max, same
            )
    result: dict[str, Any] = {k: statistics.median(v) for k, v in figures.items()}
    result["avro_vs_json_produce"] = result["avro_produce_rps"] / result["json_produce_rps"]
    result["avro_vs_json_fetch"] = result["avro_fetch_rps"] / result["json_fetch_rps"]
    result["avro_vs_json_fetch_same"] = (
        result["avro_fetch_same_rps"] / result["json_fetch_same_rps"]
    )
    for shape in ("fetch", "fetch_same"):
        result[f"avro_vs_json_{shape}_cpu"] = (
            result[f"avro_{shape}_cpu_us"] / result[f"json_{shape}_cpu_us"]
        )
    result["records_per_request"] = BATCH
    result["fetch_max_bytes"] = 4 << 20
    result["fetch_same_records_per_request"] = same
    result["rounds"] = rounds
    result["render_cache_bytes"] = "default" if render_cache_bytes is None else render_cache_bytes
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument(
        "--render-cache-bytes",
        type=int,
        default=None,
        help="the broker's LOGBUS_FETCH_RENDER_CACHE_BYTES (0: off; default: its default)",
    )
    args = parser.parse_args()
    result = run(args.rounds, args.seconds, args.render_cache_bytes)
    print(json.dumps({"machine": machine(), **result}, indent=2, default=str))


if __name__ == "__main__":
    main()
