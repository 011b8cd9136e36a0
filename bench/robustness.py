"""Abusive clients under the listener's limits: the broker's memory and a normal client's latency.

``python -m bench.robustness`` prints the figures as JSON; ``run()`` returns them. One
``logbus serve`` with default settings; the abusive clients all run in this process on
one event loop, the normal client in a thread of its own:

* ``baseline``: broker RSS once started and loaded with a 20 MB partition, and the
  normal client's latency (one keyed single-record JSON produce, then a JSON fetch of
  ~10 records, on one keep-alive connection) with nothing else going on.
* ``idle_5000``: 5,000 connections that never send a byte, from five loopback
  addresses (1,000 each, under the default ``max_connections_per_ip``), held while the normal
  client runs. The idle timeout (60 s) is longer than the measurement.
* ``trickle_1000``: 1,000 connections sending a request head one byte a second; how many
  the header timeout (20 s) closed, and the normal client's latency meanwhile.
* ``ws_unread_1000``: 1,000 WebSocket subscribers granted credit on the loaded partition
  that never read; the RSS while they are connected and after they have left.
* ``refuse_oversized``: from writing a head that declares a body over
  ``max_request_bytes`` to reading the 413 (median of 50).

RSS is the broker's ``VmRSS`` (``/proc/PID/status``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson

from bench.common import free_port, wait_until

SOURCES = [f"127.0.0.{i}" for i in range(1, 6)]
NORMAL_SOURCE = "127.0.0.9"
LOAD_BYTES = 20 * 1024 * 1024


@contextlib.contextmanager
def _broker() -> Iterator[tuple[str, int]]:
    port = free_port()
    data = tempfile.mkdtemp(prefix="logbus-bench-robust-")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--data-dir", data, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{url}/readyz").status_code == 200)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data, ignore_errors=True)


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _load(url: str) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        client.post("/topics", json={"name": "load", "partitions": 1}).raise_for_status()
        client.post("/topics", json={"name": "normal", "partitions": 1}).raise_for_status()
        value = "x" * 1000
        body = {"value_format": "string", "records": [{"value": value}] * 1000}
        for _ in range(LOAD_BYTES // (1000 * 1000)):
            client.post("/topics/load/partitions/0/records", json=body).raise_for_status()


def _normal_client(url: str, seconds: float) -> dict[str, float]:
    """Produce-then-fetch round trips for ``seconds``: latency percentiles in ms."""
    samples: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds
    # From an address of its own: the abusive clients fill 127.0.0.1-5's quotas.
    transport = httpx.HTTPTransport(local_address=NORMAL_SOURCE)
    with httpx.Client(base_url=url, timeout=30, transport=transport) as client:
        i = 0
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                produced = client.post(
                    "/topics/normal/records",
                    json={"records": [{"key": f"k{i}", "value": {"n": i}}]},
                )
                offset = produced.json()["offsets"][0]["offset"]
                client.get(
                    "/topics/normal/partitions/0/records",
                    params={"offset": max(0, offset - 9)},
                ).raise_for_status()
            except (httpx.HTTPError, KeyError, ValueError):
                errors += 1
                continue
            samples.append((time.perf_counter() - started) * 1000)
            i += 1
    samples.sort()
    if not samples:
        return {"round_trips": 0, "errors": errors}
    return {
        "round_trips": len(samples),
        "errors": errors,
        "p50_ms": round(samples[len(samples) // 2], 2),
        "p99_ms": round(samples[int(len(samples) * 0.99)], 2),
    }


async def _measure(url: str, seconds: float) -> dict[str, float]:
    return await asyncio.to_thread(_normal_client, url, seconds)


async def _open_idle(port: int, count: int) -> list[socket.socket]:
    sockets = []
    for i in range(count):
        sock = socket.socket()
        sock.bind((SOURCES[i // 1000 % len(SOURCES)], 0))
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        sockets.append(sock)
    return sockets


async def _idle(url: str, port: int, pid: int, seconds: float) -> dict[str, Any]:
    sockets = await _open_idle(port, 5000)
    await asyncio.sleep(1)
    try:
        rss = _rss_mb(pid)
        latency = await _measure(url, seconds)
    finally:
        for sock in sockets:
            sock.close()
    return {"connections": len(sockets), "rss_mb": round(rss, 1), **latency}


async def _trickle(url: str, port: int, pid: int, seconds: float) -> dict[str, Any]:
    head = b"GET /topics HTTP/1.1\r\nHost: bench\r\nX-Slow: " + b"a" * 10_000
    closed = 0

    async def trickler(source: str) -> None:
        nonlocal closed
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=(source, 0)
            )
        except OSError:
            return
        try:
            for byte in head:
                writer.write(bytes([byte]))
                await writer.drain()
                try:
                    if await asyncio.wait_for(reader.read(1), 1.0) == b"":
                        closed += 1
                        return
                except TimeoutError:
                    pass
                else:
                    closed += 1  # the 408 answer
                    return
        except OSError:
            closed += 1
        finally:
            writer.close()

    tasks = [asyncio.create_task(trickler(SOURCES[i % len(SOURCES)])) for i in range(1000)]
    await asyncio.sleep(2)
    rss = _rss_mb(pid)
    latency = await _measure(url, seconds)
    # The header timeout is 20 s: wait until it has had time to act on every trickler.
    await asyncio.sleep(max(0.0, 25 - seconds))
    closed_in_time = closed
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "connections": 1000,
        "rss_mb": round(rss, 1),
        "closed_by_header_timeout_within_25s": closed_in_time,
        **latency,
    }


async def _ws_unread(url: str, pid: int, seconds: float) -> dict[str, Any]:
    from websockets.asyncio.client import connect
    from websockets.exceptions import WebSocketException

    ws_url = url.replace("http://", "ws://") + "/ws/subscribe"
    subscribe = orjson.dumps(
        {
            "type": "subscribe",
            "topics": ["load"],
            "start": "earliest",
            "format": "json",
            "credit": {"records": 1 << 40},
        }
    ).decode()
    opened = []
    failed = 0
    for _ in range(1000):
        try:
            # max_queue=1: the library stops reading once one frame waits, as a client
            # that never reads would.
            ws = await connect(ws_url, max_size=None, max_queue=1, open_timeout=30)
            await ws.send(subscribe)
            if not opened:
                reply = orjson.loads(await ws.recv())
                assert reply["type"] == "subscribed", reply
            opened.append(ws)
        except (OSError, TimeoutError, WebSocketException):
            failed += 1
    await asyncio.sleep(5)
    during = _rss_mb(pid)
    latency = await _measure(url, seconds)
    for ws in opened:
        ws.transport.abort()
    await asyncio.sleep(5)
    return {
        "subscribers": len(opened),
        "failed_handshakes": failed,
        "rss_mb": round(during, 1),
        "rss_after_mb": round(_rss_mb(pid), 1),
        **latency,
    }


def _refuse_oversized(port: int, rounds: int = 50) -> float:
    head = (
        b"POST /topics/normal/records HTTP/1.1\r\nHost: bench\r\n"
        b"content-type: application/json\r\ncontent-length: 10000000000\r\n\r\n"
    )
    samples = []
    for _ in range(rounds):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            started = time.perf_counter()
            sock.sendall(head)
            answer = sock.recv(65536)
            samples.append((time.perf_counter() - started) * 1000)
            assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
    return round(statistics.median(samples), 3)


def run(seconds: float = 10.0) -> dict[str, Any]:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    results: dict[str, Any] = {}
    with _broker() as (url, pid):
        port = int(url.rsplit(":", 1)[1])
        _load(url)
        results["baseline"] = {"rss_mb": round(_rss_mb(pid), 1), **_normal_client(url, seconds)}
        results["idle_5000"] = asyncio.run(_idle(url, port, pid, seconds))
        results["trickle_1000"] = asyncio.run(_trickle(url, port, pid, seconds))
        results["ws_unread_1000"] = asyncio.run(_ws_unread(url, pid, seconds))
        results["refuse_oversized_ms"] = _refuse_oversized(port)
        results["rss_end_mb"] = round(_rss_mb(pid), 1)
    return results


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
