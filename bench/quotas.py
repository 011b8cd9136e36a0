"""Client quotas: how close the measured rate holds to the quota, and what enforcing costs.

``python -m bench.quotas`` (hand-recorded below the marker of bench/RESULTS.md):

- accuracy: a client loops 10 KB JSON produces (or 50 KB-capped fetches) against a
  ``logbus serve`` whose quota names its client id, at default window settings
  (11 x 1 s); the rate is measured from the first throttled answer (the burst of one
  window spent) for ``SECONDS``; the figure is measured / quota.
- cost: a one-record produce loop with no quota at all (the middleware's fast path)
  and with a quota configured on another client id (every request pays the lookup and
  the bucket update, nothing is throttled), as requests/s, same run.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

import httpx

from bench.common import broker, machine

SECONDS = 8.0
THROTTLE = "logbus-throttle-time-ms"


def _alter(url: str, client_id: str, key: str, value: float) -> None:
    entry = {
        "entity": [{"entity_type": "client-id", "entity_name": client_id}],
        "ops": [{"key": key, "value": value}],
    }
    r = httpx.post(f"{url}/quotas", json={"entries": [entry]})
    r.raise_for_status()


def accuracy_produce(quota: float) -> float:
    with broker() as url:
        httpx.post(f"{url}/topics", json={"name": "q", "partitions": 1}).raise_for_status()
        _alter(url, "slow", "producer_byte_rate", quota)
        body = json.dumps({"records": [{"value": "x" * 10_000}]}).encode()
        headers = {"content-type": "application/json", "logbus-client-id": "slow"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
            return _steady(lambda: _produce(c, body), quota)


def _produce(c: httpx.Client, body: bytes) -> tuple[int, bool]:
    r = c.post("/topics/q/records", content=body)
    r.raise_for_status()
    return len(body), THROTTLE in r.headers


def accuracy_fetch(quota: float) -> float:
    with broker() as url:
        httpx.post(f"{url}/topics", json={"name": "f", "partitions": 1}).raise_for_status()
        for _ in range(20):
            httpx.post(
                f"{url}/topics/f/records", json={"records": [{"value": "y" * 20_000}]}
            ).raise_for_status()
        _alter(url, "reader", "consumer_byte_rate", quota)
        with httpx.Client(base_url=url, headers={"logbus-client-id": "reader"}, timeout=60) as c:

            def fetch() -> tuple[int, bool]:
                r = c.get(
                    "/topics/f/partitions/0/records", params={"offset": 0, "max_bytes": 50_000}
                )
                r.raise_for_status()
                return len(r.content), THROTTLE in r.headers

            return _steady(fetch, quota)


def _steady(call: Callable[[], tuple[int, bool]], quota: float) -> float:
    # Spend the burst: until the first throttled answer (at most one window, 11 s).
    while not call()[1]:
        pass
    start = time.monotonic()
    total = 0
    while time.monotonic() - start < SECONDS:
        total += call()[0]
    return total / (time.monotonic() - start) / quota


def cost(with_quota: bool) -> float:
    with broker() as url:
        httpx.post(f"{url}/topics", json={"name": "c", "partitions": 1}).raise_for_status()
        if with_quota:
            _alter(url, "someone-else", "request_rate", 1.0)
        body = json.dumps({"records": [{"value": "v"}]}).encode()
        headers = {"content-type": "application/json", "logbus-client-id": "me"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
            for _ in range(200):
                c.post("/topics/c/records", content=body)
            n, start = 0, time.monotonic()
            while time.monotonic() - start < 4.0:
                c.post("/topics/c/records", content=body).raise_for_status()
                n += 1
            return n / (time.monotonic() - start)


def main() -> None:
    print(machine())
    for quota in (100_000.0, 1_000_000.0):
        print(f"produce quota {quota:.0f} B/s: measured/quota = {accuracy_produce(quota):.3f}")
    print(f"fetch quota 200000 B/s: measured/quota = {accuracy_fetch(200_000.0):.3f}")
    plain, quota = [], []
    for _ in range(3):
        plain.append(cost(False))
        quota.append(cost(True))
    p, q = statistics.median(plain), statistics.median(quota)
    print(f"one-record produces/s: no quota {p:.0f}, quotas configured {q:.0f}, ratio {q / p:.3f}")


if __name__ == "__main__":
    main()
