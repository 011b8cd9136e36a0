"""WebSocket against a real ``logbus serve`` process: 1,000 subscribers at once, and a
broker whose memory stays bounded while stalled subscribers sit on a 100 MB stream."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from app.common.batch import BatchBuilder

OCTET = {"content-type": "application/octet-stream"}

if TYPE_CHECKING:
    # Only a type: which conftest module is `conftest` depends on the collection order.
    from conftest import Broker

SUBSCRIBERS = 1000
PARTITIONS = 4
STALLED = 10


def ws_url(broker: Broker, path: str) -> str:
    return broker.url.replace("http://", "ws://") + path


async def open_subscriber(url: str, **message: Any) -> ClientConnection:
    ws = await connect(url, max_size=None, open_timeout=60)
    await ws.send(orjson.dumps({"type": "subscribe", **message}).decode())
    frame = orjson.loads(await asyncio.wait_for(ws.recv(), 60))
    assert frame["type"] == "subscribed", frame
    return ws


def produce(broker: Broker, round_: int, count: int) -> None:
    records = [{"value": [round_, i], "partition": i % PARTITIONS} for i in range(count)]
    r = httpx.post(f"{broker.url}/topics/fan/records", json={"records": records}, timeout=30)
    assert r.status_code == 200, r.text


@pytest.mark.slow
def test_a_thousand_subscribers_all_receive_every_record(broker: Broker) -> None:
    r = httpx.post(f"{broker.url}/topics", json={"name": "fan", "partitions": PARTITIONS})
    assert r.status_code == 201, r.text
    rounds, per_round = 5, 40
    produce(broker, 0, per_round)  # a backlog before anyone subscribes
    total = rounds * per_round
    url = ws_url(broker, "/ws/subscribe")

    async def consume(ws: ClientConnection) -> dict[int, list[list[int]]]:
        got: dict[int, list[list[int]]] = defaultdict(list)
        n = 0
        while n < total:
            frame = orjson.loads(await asyncio.wait_for(ws.recv(), 60))
            assert frame["type"] == "records", frame
            offsets = [r["offset"] for r in frame["records"]]
            assert offsets[0] == len(got[frame["partition"]])  # no gap, no repeat
            got[frame["partition"]].extend(r["value"] for r in frame["records"])
            n += len(offsets)
        await ws.close()
        return got

    async def main() -> None:
        sockets: list[ClientConnection] = []
        for start in range(0, SUBSCRIBERS, 100):
            sockets += await asyncio.gather(
                *(
                    open_subscriber(
                        url, topics=["fan"], start="earliest", credit={"records": 10_000}
                    )
                    for _ in range(start, min(start + 100, SUBSCRIBERS))
                )
            )
        consumers = [asyncio.create_task(consume(ws)) for ws in sockets]
        for round_ in range(1, rounds):  # pushed while everyone is subscribed
            await asyncio.to_thread(produce, broker, round_, per_round)
        results = await asyncio.gather(*consumers)
        expected = {
            p: [[r, i] for r in range(rounds) for i in range(per_round) if i % PARTITIONS == p]
            for p in range(PARTITIONS)
        }
        for got in results:
            assert dict(got) == expected

    started = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - started < 120


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_stalled_subscribers_hold_broker_memory_bounded(broker: Broker) -> None:
    assert broker.proc is not None
    r = httpx.post(f"{broker.url}/topics", json={"name": "big", "partitions": 1})
    assert r.status_code == 201, r.text
    builder = BatchBuilder()
    for _ in range(500):
        builder.append(b"r" * 1000)
    body = builder.build()
    batches = 100 * 1024 * 1024 // len(body) + 1
    url = ws_url(broker, "/ws/subscribe")

    def produce_all() -> None:
        with httpx.Client(base_url=broker.url, timeout=60) as c:
            for _ in range(batches):
                r = c.post("/topics/big/partitions/0/batches", content=body, headers=OCTET)
                assert r.status_code == 200, r.text

    async def main() -> tuple[int, int]:
        # Warm up the produce path first, so its own buffers are in the baseline.
        await asyncio.to_thread(produce_all_n, 5)
        baseline = rss_bytes(pid)
        zero = await open_subscriber(url, topics=["big"], credit={"records": 0})
        stalled = []
        for _ in range(STALLED):
            # max_queue=1: the client stops reading after one frame; TCP pushes back.
            ws = await connect(url, max_size=None, max_queue=1)
            await ws.send(
                orjson.dumps(
                    {"type": "subscribe", "topics": ["big"], "credit": {"bytes": 1 << 40}}
                ).decode()
            )
            stalled.append(ws)
        peak = baseline
        t0 = time.monotonic()
        task = asyncio.create_task(asyncio.to_thread(produce_all))
        while not task.done():
            peak = max(peak, rss_bytes(pid))
            await asyncio.sleep(0.05)
        await task
        print(f"produced 100 MB in {time.monotonic() - t0:.1f} s")
        peak = max(peak, rss_bytes(pid))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(zero.recv(), 0.3)
        await zero.close()
        for ws in stalled:
            ws.transport.abort()  # a client that vanished without a close handshake
        return baseline, peak

    def produce_all_n(n: int) -> None:
        with httpx.Client(base_url=broker.url, timeout=60) as c:
            for _ in range(n):
                assert (
                    c.post(
                        "/topics/big/partitions/0/batches", content=body, headers=OCTET
                    ).status_code
                    == 200
                )

    pid = broker.proc.pid
    baseline, peak = asyncio.run(main())
    buffered_peak = broker.metric("logbus_ws_buffered_bytes_peak")
    socket_peak = broker.metric("logbus_ws_socket_buffered_bytes_peak")
    print(
        f"broker RSS {baseline / 2**20:.1f} -> {peak / 2**20:.1f} MiB; ws buffered peak {buffered_peak / 2**20:.2f} MiB, "
        f"per socket {socket_peak / 2**20:.2f} MiB"
    )
    assert 0 < socket_peak < 2 * 1024 * 1024
    assert buffered_peak <= STALLED * socket_peak
    # 100 MB went past 11 sockets: holding any of it per socket would show as hundreds of MB.
    assert peak - baseline < 48 * 1024 * 1024, (baseline, peak)
    # The vanished sockets are cleaned up: nothing left open or held.
    deadline = time.monotonic() + 10
    while (
        broker.metric('logbus_ws_connections{endpoint="subscribe"}') and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert broker.metric('logbus_ws_connections{endpoint="subscribe"}') == 0
    assert broker.metric("logbus_ws_buffered_bytes") == 0


def test_sigterm_with_open_sockets_exits_cleanly(broker: Broker) -> None:
    r = httpx.post(f"{broker.url}/topics", json={"name": "bye", "partitions": 1})
    assert r.status_code == 201, r.text

    async def main() -> tuple[int | None, int | None]:
        sub = await open_subscriber(
            ws_url(broker, "/ws/subscribe"), topics=["bye"], credit={"records": 10}
        )
        producer = await connect(ws_url(broker, "/ws/produce"))
        await producer.send(
            orjson.dumps({"id": 1, "topic": "bye", "records": [{"value": 1}]}).decode()
        )
        assert orjson.loads(await producer.recv())["type"] == "ack"
        assert orjson.loads(await sub.recv())["records"][0]["value"] == 1
        started = time.monotonic()
        code = await asyncio.to_thread(broker.stop)
        assert code == 0, broker.log()
        assert time.monotonic() - started < 10  # sockets do not hold the shutdown
        closes = []
        for ws in (sub, producer):
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 5)
            closes.append(ws.close_code)
        return closes[0], closes[1]

    sub_code, producer_code = asyncio.run(main())
    assert broker.clean_shutdown_marker.exists()
    # uvicorn closes open sockets with 1012 (service restart) when the broker stops.
    assert sub_code in (1001, 1006, 1012) and producer_code in (1001, 1006, 1012)
