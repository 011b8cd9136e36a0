"""Long-poll fetches woken by appends, and ListOffsets."""

from __future__ import annotations

import threading
import time
from typing import Any

from api_helpers import create_topic, fetch, produce
from starlette.testclient import TestClient


def _fetch_in_thread(
    client: TestClient, url: str, params: dict[str, Any]
) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        start = time.monotonic()
        r = client.get(url, params=params)
        out["elapsed"] = time.monotonic() - start
        out["response"] = r

    t = threading.Thread(target=run)
    t.start()
    return t, out


def _wait_for_waiter(client: TestClient, count: int = 1) -> None:
    waiters = client.app.state.logbus.waiters  # type: ignore[attr-defined]
    deadline = time.monotonic() + 5
    while waiters.waiting() < count:
        assert time.monotonic() < deadline, "the fetch never started waiting"
        time.sleep(0.005)


def test_long_poll_is_woken_by_an_append(client: TestClient) -> None:
    create_topic(client, "lp")
    produce(client, "lp", [{"value": "old"}])
    t, out = _fetch_in_thread(
        client, "/topics/lp/partitions/0/records", {"offset": 1, "max_wait_ms": 10_000}
    )
    _wait_for_waiter(client)
    appended_at = time.monotonic()
    produce(client, "lp", [{"value": "new"}])
    t.join(10)
    assert not t.is_alive()
    woke_after = time.monotonic() - appended_at
    r = out["response"]
    assert r.status_code == 200
    assert [rec["value"] for rec in r.json()["records"]] == ["new"]
    # Woken by the append, not by max_wait_ms (10 s): a bound well under the wait, loose
    # enough for a loaded 2-core machine (the produce itself once took ~2 s there).
    assert out["elapsed"] < 5 and woke_after < 5
    assert client.app.state.logbus.waiters.waiting() == 0  # type: ignore[attr-defined]


def test_long_poll_waits_for_min_bytes(client: TestClient) -> None:
    create_topic(client, "mb")
    t, out = _fetch_in_thread(
        client,
        "/topics/mb/partitions/0/records",
        {"offset": 0, "min_bytes": 3000, "max_wait_ms": 10_000},
    )
    _wait_for_waiter(client)
    produce(client, "mb", [{"value": "x" * 1000}])  # one batch ~1.1 kB: not enough
    time.sleep(0.1)
    assert t.is_alive()
    produce(client, "mb", [{"value": "y" * 2500}])
    t.join(10)
    assert not t.is_alive()
    assert len(out["response"].json()["records"]) == 2
    assert out["elapsed"] < 5


def test_long_poll_times_out_empty(client: TestClient) -> None:
    create_topic(client, "to")
    start = time.monotonic()
    r = client.get("/topics/to/partitions/0/records", params={"offset": 0, "max_wait_ms": 200})
    elapsed = time.monotonic() - start
    assert r.status_code == 200
    assert r.json()["records"] == []
    assert 0.18 <= elapsed < 2


def test_long_poll_other_partition_does_not_wake(client: TestClient) -> None:
    create_topic(client, "two", partitions=2)
    t, out = _fetch_in_thread(
        client, "/topics/two/partitions/0/records", {"offset": 0, "max_wait_ms": 400}
    )
    _wait_for_waiter(client)
    produce(client, "two", [{"value": 1, "partition": 1}])
    t.join(10)
    assert out["response"].json()["records"] == []
    assert out["elapsed"] >= 0.35


def test_data_available_answers_immediately(client: TestClient) -> None:
    produce(client, "now", [{"value": 1}])
    start = time.monotonic()
    r = client.get("/topics/now/partitions/0/records", params={"offset": 0, "max_wait_ms": 5000})
    assert time.monotonic() - start < 1
    assert len(r.json()["records"]) == 1


def test_list_offsets(client: TestClient) -> None:
    create_topic(client, "lo")
    url = "/topics/lo/partitions/0/offsets"
    assert client.get(url, params={"at": "earliest"}).json() == {"offset": 0, "timestamp": -1}
    assert client.get(url, params={"at": "latest"}).json() == {"offset": 0, "timestamp": -1}
    produce(client, "lo", [{"value": i, "timestamp": 1000 + 10 * i} for i in range(5)])
    produce(client, "lo", [{"value": i, "timestamp": 2000 + 10 * i} for i in range(5)])
    assert client.get(url, params={"at": "latest"}).json() == {"offset": 10, "timestamp": -1}
    assert client.get(url).json() == {"offset": 10, "timestamp": -1}
    assert client.get(url, params={"at": "earliest"}).json() == {"offset": 0, "timestamp": -1}
    assert client.get(url, params={"at": "0"}).json() == {"offset": 0, "timestamp": 1000}
    assert client.get(url, params={"at": "1015"}).json() == {"offset": 2, "timestamp": 1020}
    assert client.get(url, params={"at": "2000"}).json() == {"offset": 5, "timestamp": 2000}
    assert client.get(url, params={"at": "9999"}).json() == {"offset": -1, "timestamp": -1}
    assert fetch(client, "lo", 0, 2)["records"][0]["timestamp"] == 1020


def test_deleting_the_topic_ends_a_waiting_fetch(client: TestClient) -> None:
    create_topic(client, "gone")
    t, out = _fetch_in_thread(
        client, "/topics/gone/partitions/0/records", {"offset": 0, "max_wait_ms": 10_000}
    )
    _wait_for_waiter(client)
    assert client.delete("/topics/gone").status_code == 204
    t.join(10)
    assert out["response"].status_code == 404
    assert out["response"].json()["error_code"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert out["elapsed"] < 5
