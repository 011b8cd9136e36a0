"""WebSocket push: produce-to-subscriber latency, and fan-out throughput.

``python -m bench.ws [URL]`` prints the figures as JSON (and starts a broker
when no URL is given); ``run(url)`` returns them.

* ``latency``: 10 subscribers on one partition (JSON frames); a producer on
  ``/ws/produce`` sends every millisecond the records due at the target rate
  (1 at 1,000 records/s, 10 at 10,000 records/s), each value carrying its send
  time. Latency is from just before the produce message is written to the
  socket until a subscriber has parsed the frame holding the record: the
  broker's append, the wakeup, the read, rendering and both network hops.
  Percentiles are over every (record, subscriber) pair. The subscribers run
  in two processes of their own (5 each), the producer in this one; clients
  do not negotiate permessage-deflate.
* ``fanout``: a partition preloaded with 100-byte records is read from the
  start by 100 subscribers at once; records/s delivered to all of them
  together, for binary frames (raw batches) and for JSON frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import statistics
import struct
import sys
import time
import uuid
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import httpx
import orjson
from websockets.asyncio.client import ClientConnection, connect

from app.common.batch import BatchBuilder

LATENCY_SUBSCRIBERS = 10
LISTEN_PROCESSES = 2
FANOUT_SUBSCRIBERS = 100
CREDIT = {"records": 1 << 40}
_TOPIC_LEN = struct.Struct(">H")
_TAIL = struct.Struct(">iqq")


def _ws(url: str, path: str) -> str:
    return url.replace("http://", "ws://") + path


def _topic(url: str, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    r = httpx.post(f"{url}/topics", json={"name": name, "partitions": 1}, timeout=30)
    r.raise_for_status()
    return name


async def _subscribe(url: str, topic: str, fmt: str, start: str) -> ClientConnection:
    # No permessage-deflate: on loopback it only adds CPU on both ends.
    ws = await connect(_ws(url, "/ws/subscribe"), max_size=None, open_timeout=60, compression=None)
    message = {"type": "subscribe", "topics": [topic], "start": start, "format": fmt}
    await ws.send(orjson.dumps({**message, "credit": CREDIT}).decode())
    reply = orjson.loads(await ws.recv())
    assert reply["type"] == "subscribed", reply
    return ws


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {
        "p50_ms": at(0.50),
        "p99_ms": at(0.99),
        "p99_9_ms": at(0.999),
        "max_ms": round(ordered[-1] * 1000, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
        "samples": len(ordered),
    }


def _listen_process(url: str, topic: str, count: int, total: int, conn: Connection) -> None:
    """``count`` subscribers in this process: report ready, then every record's latency."""

    async def main() -> None:
        subscribers = [await _subscribe(url, topic, "json", "latest") for _ in range(count)]
        conn.send("ready")
        samples: list[float] = []

        async def listen(ws: ClientConnection) -> None:
            seen = 0
            while seen < total:
                frame = orjson.loads(await ws.recv())
                # perf_counter is CLOCK_MONOTONIC: the same clock in every process here.
                now = time.perf_counter()
                for record in frame["records"]:
                    samples.append(now - record["value"])
                seen += len(frame["records"])

        await asyncio.wait_for(asyncio.gather(*(listen(ws) for ws in subscribers)), 120)
        for ws in subscribers:
            await ws.close()
        conn.send(samples)

    asyncio.run(main())


async def _latency(url: str, rate: int, seconds: float) -> dict[str, Any]:
    topic = _topic(url, "bench-ws-lat")
    per_tick = max(1, rate // 1000)
    ticks = int(seconds * 1000)
    total = ticks * per_tick
    # Subscribers live in other processes, so parsing their frames does not delay the
    # producer's clock or each other in one event loop.
    ctx = multiprocessing.get_context("spawn")
    pipes = []
    workers = []
    share = LATENCY_SUBSCRIBERS // LISTEN_PROCESSES
    for _ in range(LISTEN_PROCESSES):
        ours, theirs = ctx.Pipe()
        worker = ctx.Process(target=_listen_process, args=(url, topic, share, total, theirs))
        worker.start()
        pipes.append(ours)
        workers.append(worker)
    for pipe in pipes:
        assert await asyncio.to_thread(pipe.recv) == "ready"
    producer = await connect(_ws(url, "/ws/produce"), compression=None)

    sent_at: list[float] = []
    ack_samples: list[float] = []

    async def drain_acks() -> None:
        for tick in range(ticks):
            ack = orjson.loads(await producer.recv())
            ack_samples.append(time.perf_counter() - sent_at[tick])
            assert ack["type"] == "ack", ack

    acks = asyncio.create_task(drain_acks())
    start = time.perf_counter()
    for tick in range(ticks):
        # Paced on an absolute schedule, so a late tick does not push the rest back.
        delay = start + tick / 1000 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        sent = time.perf_counter()
        sent_at.append(sent)
        message = {"id": tick, "topic": topic, "records": [{"value": sent}] * per_tick}
        await producer.send(orjson.dumps(message).decode())
    elapsed = time.perf_counter() - start
    await asyncio.wait_for(acks, 60)
    await producer.close()
    samples: list[float] = []
    for pipe in pipes:
        samples += await asyncio.to_thread(pipe.recv)
    for worker in workers:
        worker.join(30)
    result = _percentiles(samples)
    acked = _percentiles(ack_samples)
    result["produce_ack_p50_ms"] = acked["p50_ms"]
    result["produce_ack_p99_ms"] = acked["p99_ms"]
    result["offered_records_per_s"] = rate
    result["achieved_records_per_s"] = round(total / elapsed)
    result["subscribers"] = LATENCY_SUBSCRIBERS
    return result


def _preload(url: str, topic: str, records: int) -> None:
    per_batch = 5_000
    with httpx.Client(base_url=url, timeout=60) as client:
        for first in range(0, records, per_batch):
            builder = BatchBuilder()
            for _ in range(min(per_batch, records - first)):
                builder.append(b"x" * 100)
            r = client.post(f"/topics/{topic}/partitions/0/batches", content=builder.build())
            r.raise_for_status()


async def _fanout(url: str, fmt: str, records: int) -> dict[str, Any]:
    topic = _topic(url, f"bench-ws-fan-{fmt}")
    _preload(url, topic, records)
    subscribers = await asyncio.gather(
        *(_subscribe(url, topic, fmt, "earliest") for _ in range(FANOUT_SUBSCRIBERS))
    )
    received = 0

    async def drain(ws: ClientConnection) -> None:
        nonlocal received
        got = 0
        while got < records:
            frame = await ws.recv()
            if isinstance(frame, bytes):
                (n,) = _TOPIC_LEN.unpack_from(frame, 4)
                got = _TAIL.unpack_from(frame, 6 + n)[2]  # next offset: all before it arrived
            else:
                got += len(orjson.loads(frame)["records"])
            received += len(frame)

    start = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(drain(ws) for ws in subscribers)), 600)
    elapsed = time.perf_counter() - start
    for ws in subscribers:
        await ws.close()
    return {
        "format": fmt,
        "subscribers": FANOUT_SUBSCRIBERS,
        "records_per_subscriber": records,
        "seconds": round(elapsed, 3),
        "records_per_s_total": round(FANOUT_SUBSCRIBERS * records / elapsed),
        "megabytes_per_s_total": round(received / elapsed / 1e6, 1),
    }


def run(url: str | None = None, *, seconds: float = 5.0) -> dict[str, Any]:
    with _broker(url) as target:
        return asyncio.run(_run(target, seconds))


async def _run(url: str, seconds: float) -> dict[str, Any]:
    # The figures depend on what else the machine runs: record it beside them.
    load_before = os.getloadavg()[0]
    await _latency(url, 1000, 1.0)  # warm-up: connections, page cache, code paths
    return {
        "machine": {"cpus": os.cpu_count(), "load_average_1m_before": round(load_before, 2)},
        "latency_1000_per_s": await _latency(url, 1_000, seconds),
        "latency_10000_per_s": await _latency(url, 10_000, seconds),
        "fanout_binary": await _fanout(url, "binary", 200_000),
        "fanout_json": await _fanout(url, "json", 20_000),
    }


@contextlib.contextmanager
def _broker(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    from bench import common

    with common.broker() as started:
        yield started


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else None
    print(json.dumps(run(url), indent=2))


if __name__ == "__main__":
    main()
