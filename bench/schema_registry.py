"""Schema registry look-ups per second against a ``logbus serve`` (issue 18).

``python -m bench.schema_registry`` (also ``make bench``'s ``schema_registry`` section;
hand-recorded below the marker of bench/RESULTS.md):

- raw HTTP: one keep-alive ``httpx.Client`` loops ``GET /schema-registry/schemas/ids/{id}``
  (what a deserializer asks on a cache miss) and ``GET .../subjects/{s}/versions/latest``
  for ``SECONDS`` each; the same-run baseline is ``GET /healthz`` on the same client (the
  HTTP floor of one request), so the ratio is what the registry adds;
- cached client: confluent-kafka's ``SchemaRegistryClient.get_schema(id)`` in a loop after
  the first call (its cache answers: what a deserializer pays per record), and a fresh
  client per look-up (no cache: one HTTP round trip each).

Each figure is the median of ``rounds`` runs; requests/s, one client, one process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx

from bench.common import broker, machine

SECONDS = 3.0
SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Click",
        "fields": [{"name": "page", "type": "string"}, {"name": "ms", "type": "long"}],
    }
)


def _rate(call: Callable[[], object], seconds: float) -> float:
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(50):
            call()
        done += 50
        now = time.perf_counter()
        if now >= deadline:
            return done / (now - start)


def _ok(c: httpx.Client, path: str) -> Callable[[], object]:
    def call() -> object:
        r = c.get(path)
        if r.status_code != 200:
            raise RuntimeError(f"{path}: {r.status_code} {r.text}")
        return r

    return call


def run(rounds: int = 3, seconds: float = SECONDS) -> dict[str, Any]:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    figures: dict[str, list[float]] = {}
    with broker() as url:
        base = url + "/schema-registry"
        r = httpx.post(
            f"{base}/subjects/clicks-value/versions",
            json={"schema": SCHEMA},
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        )
        r.raise_for_status()
        schema_id = r.json()["id"]
        cached = SchemaRegistryClient({"url": base})
        cached.get_schema(schema_id)
        with httpx.Client(base_url=url, timeout=30) as c:
            for _ in range(rounds):
                figures.setdefault("healthz_rps", []).append(_rate(_ok(c, "/healthz"), seconds))
                figures.setdefault("get_by_id_rps", []).append(
                    _rate(_ok(c, f"/schema-registry/schemas/ids/{schema_id}"), seconds)
                )
                figures.setdefault("get_latest_rps", []).append(
                    _rate(
                        _ok(c, "/schema-registry/subjects/clicks-value/versions/latest"),
                        seconds,
                    )
                )
                figures.setdefault("client_cached_rps", []).append(
                    _rate(lambda: cached.get_schema(schema_id), seconds / 3)
                )
                figures.setdefault("client_uncached_rps", []).append(
                    _rate(
                        lambda: SchemaRegistryClient({"url": base}).get_schema(schema_id),
                        seconds,
                    )
                )
    result: dict[str, Any] = {k: statistics.median(v) for k, v in figures.items()}
    result["get_by_id_vs_healthz"] = result["get_by_id_rps"] / result["healthz_rps"]
    result["rounds"] = rounds
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    args = parser.parse_args()
    result = run(args.rounds, args.seconds)
    print(json.dumps({"machine": machine(), **result}, indent=2, default=str))


if __name__ == "__main__":
    main()
