"""Client quotas against a real broker process: set with ``logbus quotas`` (the SDK's
Admin), a produce byte rate, a fetch byte rate and a request rate hold the measured rate
within 15% of the quota once the first window's burst is spent, with
``Logbus-Throttle-Time-Ms`` on the delayed answers, while a client the quota does not
name runs unthrottled beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from conftest import REPO, Broker, BrokerFactory

pytestmark = pytest.mark.slow

THROTTLE = "logbus-throttle-time-ms"
# A short window (11 x 0.2 s): the burst a client may send before it is throttled is
# 2.2 s worth of its quota, so a few seconds show the steady rate.
WINDOW = {"LOGBUS_QUOTA_WINDOW_SIZE_S": "0.2"}


def logbus(broker: Broker, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGBUS_")}
    env["LOGBUS_URL"] = broker.url
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )


Sample = tuple[float, int, int]  # (answer time, bytes counted, throttle ms)


def drive(
    broker: Broker, client_id: str, call: Callable[[httpx.Client], int], seconds: float
) -> list[Sample]:
    """``call`` in a loop for ``seconds`` as ``client_id``; what each answer carried."""
    out: list[Sample] = []
    with httpx.Client(
        base_url=broker.url, headers={"Logbus-Client-Id": client_id}, timeout=30
    ) as client:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            response_bytes = call(client)
            out.append((time.monotonic(), response_bytes, _last_throttle[client_id]))
    return out


_last_throttle: dict[str, int] = {}


def steady_rate(samples: list[Sample]) -> float:
    """Bytes (or requests) per second after the first throttled answer (the burst spent)."""
    first = next(i for i, s in enumerate(samples) if s[2] > 0)
    start, end = samples[first][0], samples[-1][0]
    assert end - start > 2.5, "too few throttled seconds to measure"
    return sum(s[1] for s in samples[first + 1 :]) / (end - start)


def _topic(broker: Broker, name: str) -> None:
    r = httpx.post(f"{broker.url}/topics", json={"name": name, "partitions": 1})
    assert r.status_code == 201, r.text


def test_produce_quota_holds_and_other_clients_are_unaffected(new_broker: BrokerFactory) -> None:
    broker = new_broker(WINDOW).start()
    _topic(broker, "q")
    quota = 100_000
    r = logbus(broker, "quotas", "set", "--client-id", "slow", "--producer-byte-rate", str(quota))
    assert r.returncode == 0, r.stderr
    listed = json.loads(logbus(broker, "quotas", "list").stdout)
    assert listed == [
        {
            "entity": [{"entity_type": "client-id", "entity_name": "slow"}],
            "values": {"producer_byte_rate": float(quota)},
        }
    ]
    body = json.dumps({"records": [{"value": "x" * 10_000}]}).encode()

    def produce(who: str) -> Callable[[httpx.Client], int]:
        def call(client: httpx.Client) -> int:
            answer = client.post(
                "/topics/q/records", content=body, headers={"content-type": "application/json"}
            )
            assert answer.status_code == 200, answer.text
            _last_throttle[who] = int(answer.headers.get(THROTTLE, "0"))
            return len(body)

        return call

    results: dict[str, list[Sample]] = {}
    threads = [
        threading.Thread(target=lambda w=w: results.__setitem__(w, drive(broker, w, produce(w), 7)))
        for w in ("slow", "fast")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    slow = steady_rate(results["slow"])
    assert abs(slow / quota - 1) <= 0.15, f"measured {slow:.0f} B/s for a quota of {quota}"
    fast = results["fast"]
    assert all(s[2] == 0 for s in fast)
    fast_rate = sum(s[1] for s in fast) / (fast[-1][0] - fast[0][0])
    assert fast_rate > 2 * quota, fast_rate

    r = logbus(broker, "quotas", "remove", "--client-id", "slow")
    assert r.returncode == 0, r.stderr
    assert json.loads(logbus(broker, "quotas", "list").stdout) == []


def test_fetch_and_request_rate_quotas(new_broker: BrokerFactory) -> None:
    broker = new_broker(WINDOW).start()
    _topic(broker, "f")
    for _ in range(20):
        r = httpx.post(
            f"{broker.url}/topics/f/records", json={"records": [{"value": "y" * 20_000}]}
        )
        assert r.status_code == 200
    quota = 200_000
    with httpx.Client(base_url=broker.url) as admin:
        r = admin.post(
            "/quotas",
            json={
                "entries": [
                    {
                        "entity": [{"entity_type": "client-id", "entity_name": "reader"}],
                        "ops": [{"key": "consumer_byte_rate", "value": quota}],
                    },
                    {
                        "entity": [{"entity_type": "client-id", "entity_name": "poller"}],
                        "ops": [{"key": "request_rate", "value": 20}],
                    },
                ]
            },
        )
        assert r.status_code == 200, r.text

    def fetch(client: httpx.Client) -> int:
        answer = client.get(
            "/topics/f/partitions/0/records", params={"offset": 0, "max_bytes": 50_000}
        )
        assert answer.status_code == 200, answer.text
        _last_throttle["reader"] = int(answer.headers.get(THROTTLE, "0"))
        return len(answer.content)

    def poll(client: httpx.Client) -> int:
        answer = client.get("/topics/f")
        assert answer.status_code == 200, answer.text
        _last_throttle["poller"] = int(answer.headers.get(THROTTLE, "0"))
        return 1

    fetched = steady_rate(drive(broker, "reader", fetch, 7))
    assert abs(fetched / quota - 1) <= 0.15, f"fetched {fetched:.0f} B/s for {quota}"
    polled = steady_rate(drive(broker, "poller", poll, 7))
    assert abs(polled / 20 - 1) <= 0.15, f"{polled:.1f} requests/s for 20"
