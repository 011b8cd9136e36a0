"""Issue #12's memory reproducers against the broker-wide memory budget (app/api/memory.py).

``python -m bench.memory_budget`` prints JSON. Each reproducer runs twice in the same run,
on a fresh ``logbus serve`` each time: with the default budget, and with the budget set so
high it never binds (``LOGBUS_MEMORY_BUDGET_BYTES`` = 64 GiB: the broker as it was before
the budget). Figures are the broker's ``VmRSS``/``VmHWM`` from ``/proc``, in MB:

* ``json_produce``: one 100 MB JSON produce (the default ``max_request_bytes``), then four
  at once: peak (``VmHWM``) over the baseline after each.
* ``json_fetch_unread``: 20 JSON fetches with ``max_bytes=2147483647`` of a 48 MB partition
  (``fetch_max_bytes`` 50 MB) from sockets that never read: RSS 8 s in, and after they
  closed (budget idle, trim done).
* ``ws_unread``: 1,000 WebSocket subscribers granted credit on that partition that never
  read: RSS 8 s in, and after they left.

Each also records one normal produce+fetch round trip's time during the abuse.

``python -m bench.memory_budget ws_cycles`` runs only ``ws_cycles``: three crowds of 1,000
never-reading subscribers (credit granted, 4 KiB receive buffers) connect and leave, one
after the other, against one broker with a 64 MiB budget: RSS with each crowd and after it
left. Growing from cycle to cycle would be a leak; a plateau is what the allocator keeps.
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.common import broker_process

# The broker's memory is measured as tests/e2e/test_e2e_memory.py measures it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from memory_probe import proc_mb, rss_during_crowd

MB = 1024 * 1024
UNBOUND = str(64 * 1024 * MB)
VALUE = "x" * 1000


def _mb(pid: int, field: str = "VmRSS") -> float:
    return round(proc_mb(pid, field), 1)


def _metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _settled(url: str, pid: int) -> float:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and (
        _metric(url, "logbus_memory_budget_used_bytes")
        or _metric(url, "logbus_memory_budget_waiting")
    ):
        time.sleep(0.5)
    time.sleep(3)
    return _mb(pid)


def _round_trip(url: str) -> float:
    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=120) as client:
        r = client.post("/topics/normal/records", json={"records": [{"value": 1}]})
        offset = r.json()["offsets"][0]["offset"]
        client.get("/topics/normal/partitions/0/records", params={"offset": offset})
    return round((time.perf_counter() - started) * 1000, 1)


def _setup(url: str, load_mb: int) -> None:
    with httpx.Client(base_url=url, timeout=120) as client:
        client.post("/topics", json={"name": "normal", "partitions": 1}).raise_for_status()
        client.post(
            "/topics",
            json={"name": "big", "partitions": 1, "configs": {"max.message.bytes": 128 * MB}},
        ).raise_for_status()
        client.post("/topics", json={"name": "loaded", "partitions": 1}).raise_for_status()
        body = {"value_format": "string", "records": [{"value": VALUE}] * 1000}
        for _ in range(load_mb):
            client.post("/topics/loaded/partitions/0/records", json=body).raise_for_status()


def _json_produce(url: str, pid: int) -> dict[str, Any]:
    body = orjson.dumps(
        {"value_format": "string", "records": [{"value": VALUE}] * 98_000}
    )  # ~100 MB, under max_request_bytes (100 MiB)
    base = _mb(pid, "VmHWM")

    def post() -> None:
        with httpx.Client(base_url=url, timeout=600) as client:
            r = client.post(
                "/topics/big/partitions/0/records",
                content=body,
                headers={"content-type": "application/json"},
            )
            r.raise_for_status()

    post()
    one = _mb(pid, "VmHWM") - base
    threads = [threading.Thread(target=post) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(1)
    during = _round_trip(url)
    for t in threads:
        t.join()
    return {
        "body_mb": round(len(body) / MB, 1),
        "one_peak_mb": round(one, 1),
        "four_at_once_peak_mb": round(_mb(pid, "VmHWM") - base, 1),
        "round_trip_during_ms": during,
        "after_mb": _settled(url, pid),
    }


def _json_fetch_unread(url: str, pid: int, port: int) -> dict[str, Any]:
    baseline = _settled(url, pid)
    socks = []
    for _ in range(20):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(
            b"GET /topics/loaded/partitions/0/records?offset=0&max_bytes=2147483647 HTTP/1.1\r\n"
            b"Host: x\r\nAccept: application/json\r\n\r\n"
        )
        socks.append(sock)
    time.sleep(8)
    during = _mb(pid)
    trip = _round_trip(url)
    for sock in socks:
        sock.close()
    return {
        "baseline_mb": baseline,
        "during_mb": during,
        "round_trip_during_ms": trip,
        "after_mb": _settled(url, pid),
    }


async def _ws(url: str, count: int) -> list[Any]:
    from websockets.asyncio.client import connect

    subscribe = orjson.dumps(
        {
            "type": "subscribe",
            "topics": ["loaded"],
            "start": "earliest",
            "format": "json",
            "credit": {"records": 1 << 40},
        }
    ).decode()
    opened = []
    for _ in range(count):
        try:
            ws = await connect(url, max_size=None, max_queue=1, open_timeout=30)
            await ws.send(subscribe)
            opened.append(ws)
        except (OSError, TimeoutError):
            pass
    return opened


def _ws_unread(url: str, pid: int) -> dict[str, Any]:
    baseline = _settled(url, pid)
    loop = asyncio.new_event_loop()
    try:
        opened = loop.run_until_complete(
            _ws(url.replace("http://", "ws://") + "/ws/subscribe", 1000)
        )
        loop.run_until_complete(asyncio.sleep(8))
        during = _mb(pid)
        trip = _round_trip(url)
        for ws in opened:
            ws.transport.abort()
        loop.run_until_complete(asyncio.sleep(1))
    finally:
        loop.close()
    return {
        "subscribers": len(opened),
        "baseline_mb": baseline,
        "during_mb": during,
        "round_trip_during_ms": trip,
        "after_mb": _settled(url, pid),
    }


def ws_cycles(cycles: int = 3, crowd: int = 1000) -> dict[str, Any]:
    out: dict[str, Any] = {"subscribers": crowd, "budget_mb": 64, "cycles": []}
    with broker_process({"LOGBUS_MEMORY_BUDGET_BYTES": str(64 * MB)}) as (url, pid):
        _setup(url, 16)
        out["baseline_mb"] = _settled(url, pid)
        ws_url = url.replace("http://", "ws://") + "/ws/subscribe"
        for _ in range(cycles):
            during = round(rss_during_crowd(ws_url, pid, crowd, 3, open_timeout=60), 1)
            out["cycles"].append({"during_mb": during, "after_mb": _settled(url, pid)})
    return out


def _one(env: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with broker_process(env) as (url, pid):
        port = int(url.rsplit(":", 1)[1])
        _setup(url, 48)
        out["baseline_mb"] = _settled(url, pid)
        out["budget_bytes"] = _metric(url, "logbus_memory_budget_limit_bytes")
        out["json_produce"] = _json_produce(url, pid)
        out["json_fetch_unread"] = _json_fetch_unread(url, pid, port)
        out["ws_unread"] = _ws_unread(url, pid)
    return out


def run() -> dict[str, Any]:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return {
        "budget_default": _one({}),
        "budget_unbound": _one({"LOGBUS_MEMORY_BUDGET_BYTES": UNBOUND}),
    }


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["ws_cycles"]:
        _soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))
        print(json.dumps(ws_cycles(), indent=2))
    else:
        print(json.dumps(run(), indent=2))
