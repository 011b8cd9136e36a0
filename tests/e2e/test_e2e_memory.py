"""The broker-wide memory budget (app/api/memory.py) against a real ``logbus serve``.

Issue #12's reproducers, scaled to a test's time: large JSON produces at once, JSON
fetchers with a huge ``max_bytes`` that never read, WebSocket subscribers granted credit
that never read. For each: the broker's memory (``VmRSS``/``VmHWM`` of the subprocess,
from ``/proc``) stays bounded by the budget plus a fixed overhead, the broker keeps
serving meanwhile, its memory returns near the baseline once the clients leave, and every
acknowledged record reads back.
"""

from __future__ import annotations

import socket
import threading
import time

import httpx
import memory_probe
import orjson
import pytest
from conftest import Broker, BrokerFactory
from memory_probe import rss_during_crowd

MIB = 1024 * 1024
BUDGET = 64 * MIB
VALUE = "x" * 1000


def pid(broker: Broker) -> int:
    assert broker.proc is not None
    return broker.proc.pid


def proc_mb(broker: Broker, field: str = "VmRSS") -> float:
    return memory_probe.proc_mb(pid(broker), field)


def settle(broker: Broker, seconds: float = 2.5, timeout: float = 60) -> float:
    """RSS once the memory budget is idle (nothing reserved, nobody waiting) and the idle
    trim (1 s later) had its chance."""
    deadline = time.monotonic() + timeout
    while broker.metric("logbus_memory_budget_used_bytes") or broker.metric(
        "logbus_memory_budget_waiting"
    ):
        assert time.monotonic() < deadline, "the memory budget never went idle"
        time.sleep(0.2)
    time.sleep(seconds)
    return proc_mb(broker)


def load(broker: Broker, topic: str, megabytes: int) -> int:
    """``megabytes`` MB of 1,000-byte string records in partition 0; returns the count."""
    body = {"value_format": "string", "records": [{"value": VALUE}] * 1000}
    with broker.client() as client:
        assert client.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
        for _ in range(megabytes):
            r = client.post(f"/topics/{topic}/partitions/0/records", json=body)
            assert r.status_code == 200, r.text
    return megabytes * 1000


def reads_back(broker: Broker, topic: str, count: int) -> None:
    """Every acknowledged record of ``topic`` is there, intact (binary fetches, CRCs checked
    by the SDK's decoder would be heavier: the JSON answer is verified by the broker)."""
    seen = 0
    offset = 0
    with broker.client() as client:
        while offset < count:
            r = client.get(
                f"/topics/{topic}/partitions/0/records",
                params={"offset": offset, "max_bytes": 4 * MIB, "value_format": "string"},
            )
            assert r.status_code == 200, r.text
            records = r.json()["records"]
            assert records, offset
            for record in records:
                assert record["offset"] == offset + 0 and record["value"] in (VALUE, "normal")
                offset += 1
                seen += 1
    assert seen == count


def serves_a_small_round_trip(broker: Broker, topic: str = "normal") -> float:
    """One produce then one fetch on a fresh connection; the seconds it took."""
    started = time.monotonic()
    with httpx.Client(base_url=broker.url, timeout=20) as client:
        r = client.post(
            f"/topics/{topic}/records",
            json={"value_format": "string", "records": [{"value": "normal"}]},
        )
        assert r.status_code == 200, r.text
        offset = r.json()["offsets"][0]["offset"]
        r = client.get(
            f"/topics/{topic}/partitions/0/records",
            params={"offset": offset, "value_format": "string"},
        )
        assert r.status_code == 200 and r.json()["records"][0]["value"] == "normal"
    return time.monotonic() - started


@pytest.fixture
def budgeted(new_broker: BrokerFactory) -> Broker:
    broker = new_broker(
        env={
            "LOGBUS_MEMORY_BUDGET_BYTES": str(BUDGET),
            "LOGBUS_MAX_REQUEST_BYTES": str(40 * MIB),
            "LOGBUS_FETCH_MAX_BYTES": str(32 * MIB),
        }
    ).start()
    with broker.client() as client:
        assert client.post("/topics", json={"name": "normal", "partitions": 1}).status_code == 201
    return broker


def big_json_body(megabytes: int) -> bytes:
    records = [{"value": VALUE}] * (megabytes * 1000)
    return orjson.dumps({"value_format": "string", "records": records})


@pytest.mark.slow
def test_large_json_produces_at_once_cost_what_one_costs(budgeted: Broker) -> None:
    """Issue #12: one 100 MB JSON produce peaked at 820 MB, four at once at 1.12 GB. Bodies
    are reserved (4x for JSON) before they are read, so four at once run one after another
    and the peak stays that of one."""
    body = big_json_body(12)  # 12 MB: reserved as 48 MB of the 64 MB budget
    with httpx.Client(base_url=budgeted.url, timeout=120) as client:
        created = client.post(
            "/topics",
            json={"name": "big", "partitions": 1, "configs": {"max.message.bytes": 64 * MIB}},
        )
        assert created.status_code == 201, created.text
        before = proc_mb(budgeted, "VmHWM")
        # Two one after the other: the second peaks over what the first left behind
        # (freed memory the allocator keeps), the steady state of sequential produces.
        for _ in range(2):
            r = client.post(
                "/topics/big/partitions/0/records",
                content=body,
                headers={"content-type": "application/json"},
            )
            assert r.status_code == 200, r.text
    one = proc_mb(budgeted, "VmHWM") - before
    answers: list[int] = []

    def produce() -> None:
        with httpx.Client(base_url=budgeted.url, timeout=120) as c:
            answers.append(
                c.post(
                    "/topics/big/partitions/0/records",
                    content=body,
                    headers={"content-type": "application/json"},
                ).status_code
            )

    threads = [threading.Thread(target=produce) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    # Meanwhile a small request is served (it does not wait behind the large ones).
    assert serves_a_small_round_trip(budgeted) < 15
    for t in threads:
        t.join(120)
    assert answers == [200] * 6
    six = proc_mb(budgeted, "VmHWM") - before
    print(f"12 MB JSON produces one at a time: +{one:.0f} MB peak; six at once: +{six:.0f} MB")
    # Unbudgeted, six parse at once: more than twice the sequential peak.
    assert six < one * 1.4 + 20, (one, six)
    reads_back(budgeted, "big", 8 * 12_000)


def _never_reading_fetch(port: int, topic: str) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"GET /topics/{topic}/partitions/0/records?offset=0&max_bytes=2147483647 HTTP/1.1\r\n"
        "Host: x\r\nAccept: application/json\r\n\r\n".encode()
    )
    return sock


@pytest.mark.slow
def test_json_fetchers_that_never_read_cost_bounded_memory(budgeted: Broker) -> None:
    """Issue #12: 20 JSON fetchers with max_bytes=2147483647 that never read took 1.43 GB.
    Each answer holds its reservation until the client takes it; the others wait."""
    count = load(budgeted, "loaded", 24)
    baseline = settle(budgeted)
    sockets = [_never_reading_fetch(budgeted.port, "loaded") for _ in range(20)]
    try:
        time.sleep(6)
        during = proc_mb(budgeted)
        # Small requests still go through while the large answers wait.
        assert serves_a_small_round_trip(budgeted) < 15
    finally:
        for sock in sockets:
            sock.close()
    # Closing looks like a half-close to the broker (it answers those): the waiting
    # fetches still render, one at a time, and fail to send; then the budget is idle.
    after = settle(budgeted)
    print(
        f"20 never-reading JSON fetchers: baseline {baseline:.0f} MB, during {during:.0f} MB, after {after:.0f} MB"
    )
    # One 24 MB answer rendered (about 3x while rendering) and held; unbudgeted, 20 of them.
    assert during - baseline < 3 * BUDGET / MIB, (baseline, during)
    # What stays is what large JSON renders leave in CPython's allocator (its arenas stay
    # while any object in them lives; README "Memory budget"): measured +38 to +70 MB
    # here, varying with the machine's load, never one answer per client (20 x 25 MB).
    assert after - baseline < 1.5 * BUDGET / MIB, (baseline, after)
    reads_back(budgeted, "loaded", count)


@pytest.mark.slow
def test_websocket_subscribers_that_never_read_cost_bounded_memory(budgeted: Broker) -> None:
    """Issue #12: 3,000 subscribers granted credit that never read took +2.7 GB. Each frame
    is reserved before it is sent and released once it has left the transport's buffer:
    all of them together hold at most the budget; the broker serves meanwhile, and its
    memory returns when they leave."""
    count = load(budgeted, "loaded", 16)
    baseline = settle(budgeted)
    url = budgeted.url.replace("http://", "ws://") + "/ws/subscribe"
    round_trips: list[float] = []
    during = rss_during_crowd(
        url,
        pid(budgeted),
        400,
        6,
        meanwhile=lambda: round_trips.append(serves_a_small_round_trip(budgeted)),
    )
    assert round_trips[0] < 15
    after = settle(budgeted)
    print(
        f"400 never-reading subscribers: baseline {baseline:.0f} MB, during {during:.0f} MB, after {after:.0f} MB"
    )
    # Unbudgeted: a ~0.6 MB JSON frame buffered per subscriber, 240 MB for 400. Budgeted:
    # the budget plus what 400 open sockets cost besides their frames, measured at +83 to
    # +112 MB over a 94 MB baseline (session 9, main's code and after, alone and under
    # the suite): 40 MB of that allowance failed the test at +112 once; 60 still sits
    # far below the unbudgeted 240.
    assert during - baseline < BUDGET / MIB + 60, (baseline, during)
    assert after - baseline < BUDGET / MIB, (baseline, after)
    reads_back(budgeted, "loaded", count)


CROWD = 1000
CYCLES = 4
# Cycle to cycle, RSS after leaving varies by a few MB (measured +-5 MB over 4 cycles) once
# the first crowd has grown the allocator's arenas to their working size: the first
# cycle's "after" is sometimes ~20 MB under the rest (112, 132, 132 MB against 131, 132,
# 132 in most runs, session 9, main's code too), so growth is counted from the second.
GROWTH_MB = 16
# What a crowd leaves after it left: measured +48 to +50 MB for 1,000 (CPython arenas
# keeping ~40 KB of per-connection objects' worth each), the same every cycle. Before the
# budget-leak fix, the trim on closes and the fixed mmap threshold: +59 to +69 MB, and
# 54 MB of the budget stayed reserved, so later crowds waited.
NEAR_BASELINE_MB = BUDGET / MIB


@pytest.mark.slow
def test_subscriber_crowds_coming_and_going_leave_no_growth(budgeted: Broker) -> None:
    """Issue #12's "after each reproducer, its memory returns near the baseline", repeated:
    a crowd of 1,000 never-reading subscribers connects and leaves, CYCLES times, against
    one broker. A leak grows cycle after cycle; allocator retention does not. After the
    last cycle RSS is within a few MB of after the second (no growth; the first grows the
    allocator's arenas to their working size) and, every cycle, near the baseline
    (what the crowd's buffers left is handed back: app/api/memory.py's trim on closes);
    the broker serves between cycles, and every acknowledged record reads back."""
    count = load(budgeted, "loaded", 16)
    baseline = settle(budgeted)
    url = budgeted.url.replace("http://", "ws://") + "/ws/subscribe"
    figures: list[tuple[float, float]] = []
    for _ in range(CYCLES):
        during = rss_during_crowd(url, pid(budgeted), CROWD, 3)
        figures.append((during, settle(budgeted)))
        assert serves_a_small_round_trip(budgeted) < 15
    print(
        f"{CROWD} never-reading subscribers x {CYCLES}: baseline {baseline:.0f} MB, "
        + ", ".join(f"during {d:.0f} after {a:.0f}" for d, a in figures)
    )
    afters = [after for _, after in figures]
    assert afters[-1] - afters[1] < GROWTH_MB, (baseline, figures)
    assert max(afters) - baseline < NEAR_BASELINE_MB, (baseline, figures)
    reads_back(budgeted, "loaded", count)
