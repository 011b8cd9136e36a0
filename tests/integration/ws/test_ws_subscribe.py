"""WS /ws/subscribe against a live broker: order, resume, credit, control messages, formats."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection
from ws_helpers import LiveBroker, recv, send, subscribe

from app.api.ws.protocol import parse_binary_frame
from app.common.batch import decode_records


async def collect(
    ws: ClientConnection, want: int, timeout: float = 10
) -> dict[int, list[dict[str, Any]]]:
    """Records by partition until ``want`` arrived; fails on an error frame."""
    got: dict[int, list[dict[str, Any]]] = defaultdict(list)
    n = 0
    while n < want:
        frame = await recv(ws, timeout)
        assert frame["type"] == "records", frame
        got[frame["partition"]].extend(frame["records"])
        assert frame["next_offset"] == frame["records"][-1]["offset"] + 1
        n += len(frame["records"])
    return got


async def quiet(ws: ClientConnection, seconds: float = 0.3) -> None:
    """Nothing arrives for ``seconds``."""
    with pytest.raises(TimeoutError):
        await recv(ws, seconds)


def test_order_is_kept_within_each_partition(broker: LiveBroker) -> None:
    broker.create_topic("orders", 3)
    for i in range(5):  # a backlog before subscribing
        broker.produce("orders", [{"value": [i, j], "partition": j % 3} for j in range(30)])

    async def main() -> None:
        ws, sub = await subscribe(
            broker.ws_url("/ws/subscribe"),
            topics=["orders"],
            start="earliest",
            credit={"records": 1_000_000},
        )
        assert sub["type"] == "subscribed" and len(sub["partitions"]) == 3

        async def produce_live() -> None:
            for i in range(5, 25):
                await asyncio.to_thread(
                    broker.produce,
                    "orders",
                    [{"value": [i, j], "partition": j % 3} for j in range(30)],
                )

        producer = asyncio.create_task(produce_live())
        got = await collect(ws, 25 * 30)
        await producer
        for p, records in got.items():
            assert [r["offset"] for r in records] == list(range(len(records)))
            expected = [[i, j] for i in range(25) for j in range(30) if j % 3 == p]
            assert [r["value"] for r in records] == expected
        await ws.close()

    asyncio.run(main())


def test_resume_from_explicit_offsets_misses_nothing(broker: LiveBroker) -> None:
    broker.create_topic("events", 2)
    broker.produce("events", [{"value": i, "partition": i % 2} for i in range(100)])
    url = broker.ws_url("/ws/subscribe")

    async def main() -> None:
        seen: dict[int, list[int]] = defaultdict(list)
        ws, _ = await subscribe(url, topics=["events"], start="earliest", credit={"records": 37})
        got = await collect(ws, 37)
        await quiet(ws)  # the credit is spent: nothing more
        await ws.close()
        positions = {}
        for p, records in got.items():
            seen[p].extend(r["value"] for r in records)
            positions[str(p)] = records[-1]["offset"] + 1
        broker.produce("events", [{"value": i, "partition": i % 2} for i in range(100, 160)])
        ws, sub = await subscribe(
            url,
            topics=["events"],
            start={"offsets": {"events": positions}, "default": "earliest"},
            credit={"records": 10},
        )
        by_partition = {p["partition"]: p["offset"] for p in sub["partitions"]}
        assert by_partition == {0: positions.get("0", 0), 1: positions.get("1", 0)}
        remaining = 160 - 37
        while remaining:
            await send(ws, {"type": "credit", "records": 10})
            got = await collect(ws, min(10, remaining))
            for p, records in got.items():
                seen[p].extend(r["value"] for r in records)
            remaining -= sum(len(r) for r in got.values())
        for p in (0, 1):
            assert seen[p] == [i for i in range(160) if i % 2 == p]
        await ws.close()

    asyncio.run(main())


def test_credit_in_records_and_bytes(broker: LiveBroker) -> None:
    broker.create_topic("c")
    for i in range(10):
        broker.produce("c", [{"value": "x" * 100, "key": str(i)}])  # one batch each

    async def main() -> None:
        ws, sub = await subscribe(broker.ws_url("/ws/subscribe"), topics=["c"], start="earliest")
        assert sub["credit"] == {"records": 0, "bytes": None}
        await quiet(ws)  # no credit, nothing sent
        await send(ws, {"type": "credit", "records": 3})
        got = await collect(ws, 3)
        assert [r["offset"] for r in got[0]] == [0, 1, 2]
        await quiet(ws)
        await send(ws, {"type": "credit", "bytes": 10})
        error = await recv(ws)
        assert error["error_code"] == "INVALID_REQUEST" and "bytes" in error["message"]
        await ws.close()

        ws, _ = await subscribe(
            broker.ws_url("/ws/subscribe"), topics=["c"], start="earliest", credit={"bytes": 1}
        )
        got = await collect(ws, 1)  # a batch is never split: one goes out, overdrawing
        await quiet(ws)
        await send(ws, {"type": "credit", "bytes": 1_000_000})
        got = await collect(ws, 9)
        assert [r["offset"] for r in got[0]] == list(range(1, 10))
        await ws.close()

    asyncio.run(main())


def test_seek_pause_resume_ping(broker: LiveBroker) -> None:
    broker.create_topic("s", 2)
    broker.produce("s", [{"value": i, "partition": 0} for i in range(10)])

    async def main() -> None:
        ws, _ = await subscribe(
            broker.ws_url("/ws/subscribe"),
            partitions=[{"topic": "s", "partition": 0}, {"topic": "s", "partition": 1}],
            start="latest",
            credit={"records": 1000},
        )
        await send(ws, {"type": "ping", "id": "a"})
        assert await recv(ws) == {"type": "pong", "id": "a"}
        await send(ws, {"type": "seek", "topic": "s", "partition": 0, "offset": 7})
        got = await collect(ws, 3)
        assert [r["value"] for r in got[0]] == [7, 8, 9]
        await send(ws, {"type": "pause", "partitions": [{"topic": "s", "partition": 1}]})
        await send(ws, {"type": "ping"})
        assert await recv(ws) == {"type": "pong"}  # the pause is applied: messages are in order
        broker.produce("s", [{"value": "p1", "partition": 1}, {"value": "p0", "partition": 0}])
        frame = await recv(ws)
        assert (frame["partition"], frame["records"][0]["value"]) == (0, "p0")
        await quiet(ws)
        await send(ws, {"type": "resume", "partitions": [{"topic": "s", "partition": 1}]})
        frame = await recv(ws)
        assert (frame["partition"], frame["records"][0]["value"]) == (1, "p1")
        await send(ws, {"type": "seek", "topic": "s", "partition": 0, "offset": "earliest"})
        got = await collect(ws, 11)
        assert [r["offset"] for r in got[0]] == list(range(11))
        await send(ws, {"type": "seek", "topic": "s", "partition": 0, "offset": 50})
        error = await recv(ws)
        assert error["error_code"] == "OFFSET_OUT_OF_RANGE"
        assert (error["log_start_offset"], error["log_end_offset"]) == (0, 11)
        await send(ws, {"type": "seek", "topic": "s", "partition": 5, "offset": 0})
        assert (await recv(ws))["error_code"] == "INVALID_REQUEST"
        await send(ws, {"type": "commit", "offsets": []})
        error = await recv(ws)
        assert error["error_code"] == "INVALID_REQUEST" and "group" in error["message"]
        await ws.close()

    asyncio.run(main())


def test_binary_frames_carry_the_stored_batches(broker: LiveBroker) -> None:
    broker.create_topic("bin", 2)
    broker.produce(
        "bin", [{"value": f"v{i}", "partition": 1} for i in range(5)], value_format="string"
    )

    async def main() -> None:
        ws, _ = await subscribe(
            broker.ws_url("/ws/subscribe"),
            topics=["bin"],
            start="earliest",
            format="binary",
            credit={"records": 100},
        )
        frame = await recv(ws)
        assert isinstance(frame, bytes)
        topic, partition, hwm, next_offset, batches = parse_binary_frame(frame)
        assert (topic, partition, hwm, next_offset) == ("bin", 1, 5, 5)
        records = list(decode_records(batches))
        assert [(r.offset, r.value) for r in records] == [(i, f"v{i}".encode()) for i in range(5)]
        await ws.close()

    asyncio.run(main())


def test_start_by_timestamp_and_out_of_range(broker: LiveBroker) -> None:
    broker.create_topic("ts")
    broker.produce("ts", [{"value": i, "timestamp": 1000 + i} for i in range(5)])

    async def main() -> None:
        url = broker.ws_url("/ws/subscribe")
        ws, sub = await subscribe(
            url, topics=["ts"], start={"timestamp": 1003}, credit={"records": 10}
        )
        assert sub["partitions"][0]["offset"] == 3
        got = await collect(ws, 2)
        assert [r["value"] for r in got[0]] == [3, 4]
        await ws.close()
        ws, sub = await subscribe(
            url, topics=["ts"], start={"offsets": {"ts": {"0": 9}}}, credit={"records": 10}
        )
        assert sub["type"] == "subscribed"
        error = await recv(ws)
        assert error["error_code"] == "OFFSET_OUT_OF_RANGE" and error["partition"] == 0
        await send(ws, {"type": "seek", "topic": "ts", "partition": 0, "offset": 4})
        got = await collect(ws, 1)
        assert got[0][0]["value"] == 4
        await ws.close()

    asyncio.run(main())


def test_deleted_topic_is_reported(broker: LiveBroker) -> None:
    broker.create_topic("gone")

    async def main() -> None:
        ws, _ = await subscribe(
            broker.ws_url("/ws/subscribe"), topics=["gone"], credit={"records": 10}
        )
        with broker.http() as c:
            assert c.delete("/topics/gone").status_code in (200, 204)
        error = await recv(ws)
        assert error["error_code"] == "UNKNOWN_TOPIC_OR_PARTITION"
        await send(ws, {"type": "ping"})
        assert (await recv(ws))["type"] == "pong"
        await ws.close()

    asyncio.run(main())


def test_shared_frames_respect_each_sockets_credit_and_formats(broker: LiveBroker) -> None:
    broker.create_topic("shared")

    async def main() -> None:
        url = broker.ws_url("/ws/subscribe")
        wide, _ = await subscribe(url, topics=["shared"], credit={"records": 100})
        narrow, _ = await subscribe(url, topics=["shared"], credit={"records": 2})
        strings, _ = await subscribe(
            url, topics=["shared"], credit={"records": 100}, value_format="string"
        )
        broker.produce("shared", [{"value": i} for i in range(5)])
        assert [r["value"] for r in (await collect(wide, 5))[0]] == [0, 1, 2, 3, 4]
        assert [r["value"] for r in (await collect(strings, 5))[0]] == ["0", "1", "2", "3", "4"]
        assert [r["value"] for r in (await collect(narrow, 2))[0]] == [0, 1]
        await quiet(narrow)
        await send(narrow, {"type": "credit", "records": 10})
        assert [r["value"] for r in (await collect(narrow, 3))[0]] == [2, 3, 4]
        for ws in (wide, narrow, strings):
            await ws.close()

    asyncio.run(main())
