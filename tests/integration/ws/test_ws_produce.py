"""WS /ws/produce: the same semantics as JSON produce, one answer per request id."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from ws_helpers import LiveBroker, live_broker, recv, send

from app.api.ws.protocol import Close


def test_acks_in_order_with_offsets(broker: LiveBroker) -> None:
    broker.create_topic("p", 2)

    async def main() -> None:
        ws = await connect(broker.ws_url("/ws/produce"))
        for i in range(50):  # pipelined: all sent before any answer is read
            await send(
                ws,
                {"id": f"r{i}", "topic": "p", "records": [{"value": i, "partition": i % 2}]},
            )
        for i in range(50):
            ack = await recv(ws)
            assert ack == {
                "type": "ack",
                "id": f"r{i}",
                "offsets": [
                    {
                        "partition": i % 2,
                        "offset": i // 2,
                        "timestamp": ack["offsets"][0]["timestamp"],
                    }
                ],
            }
        await send(
            ws,
            {
                "type": "produce",
                "id": 7,
                "topic": "p",
                "partition": 1,
                "records": [{"key": "k", "value": "aGk=", "headers": {"h": "v"}}],
                "value_format": "binary",
                "key_format": "string",
            },
        )
        ack = await recv(ws)
        assert ack["id"] == 7 and ack["offsets"][0]["offset"] == 25
        await ws.close()

    asyncio.run(main())
    with broker.http() as c:
        r = c.get("/topics/p/partitions/1/records", params={"offset": 25, "max_wait_ms": 0})
        record = r.json()["records"][0]
        assert (record["key"], record["value"]) == ("k", "hi")
        assert record["headers"] == [{"key": "h", "value": "v"}]


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ({"id": 1, "topic": "p", "records": []}, "INVALID_REQUEST"),
        (
            {"id": 2, "topic": "p", "records": [{"value": "x", "partition": 9}]},
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
        (
            {"id": 3, "topic": "p", "partition": 9, "records": [{"value": 1}]},
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
        (
            {"id": 4, "topic": "p", "records": [{"value": "%%"}], "value_format": "binary"},
            "INVALID_REQUEST",
        ),
        ({"id": 5, "topic": "p", "records": [{"value": 1, "bogus": 1}]}, "INVALID_REQUEST"),
        ({"id": 6, "topic": "bad topic!", "records": [{"value": 1}]}, "INVALID_TOPIC_EXCEPTION"),
        ({"id": 7, "records": [{"value": 1}]}, "INVALID_REQUEST"),
        ({"id": 8, "type": "fetch", "topic": "p"}, "INVALID_REQUEST"),
    ],
)
def test_errors_carry_the_request_id(
    broker: LiveBroker, message: dict[str, object], code: str
) -> None:
    broker.create_topic("p", 2)

    async def main() -> None:
        ws = await connect(broker.ws_url("/ws/produce"))
        await send(ws, message)
        error = await recv(ws)
        assert error["type"] == "error" and error["error_code"] == code, error
        assert error["id"] == message["id"]
        await send(ws, {"id": "next", "topic": "p", "records": [{"value": 1}]})
        assert (await recv(ws))["type"] == "ack"  # the socket carries on
        await ws.close()

    asyncio.run(main())
    with broker.http() as c:  # nothing of the bad requests was written
        parts = c.get("/topics/p").json()["partitions"]
        assert sum(p["high_watermark"] for p in parts) == 1


def test_auto_create_and_limits(tmp_path: Path) -> None:
    with live_broker(tmp_path, auto_create_topics_enable=True, max_request_bytes=2048) as broker:

        async def main() -> None:
            ws = await connect(broker.ws_url("/ws/produce"))
            await send(ws, {"id": 1, "topic": "fresh", "records": [{"value": 1}]})
            assert (await recv(ws))["type"] == "ack"
            await send(ws, {"id": 2, "topic": "fresh", "records": [{"value": "x" * 4000}]})
            error = await recv(ws)
            assert error["error_code"] == "MESSAGE_TOO_LARGE"
            await ws.send("not json")
            assert (await recv(ws))["error_code"] == "INVALID_REQUEST"
            await ws.send(b"\x00")
            with pytest.raises(ConnectionClosed):
                await recv(ws)
            assert ws.close_code == Close.UNSUPPORTED_DATA

        asyncio.run(main())


def test_small_requests_append_inline_unless_the_topic_fsyncs(broker: LiveBroker) -> None:
    with broker.http() as c:
        body = {"name": "synced", "partitions": 1, "configs": {"flush.messages": 1}}
        assert c.post("/topics", json=body).status_code == 201
    broker.create_topic("plain")

    async def main() -> None:
        ws = await connect(broker.ws_url("/ws/produce"))
        for i, topic in enumerate(["plain", "synced", "plain", "synced"]):
            await send(ws, {"id": i, "topic": topic, "records": [{"value": i}]})
            ack = await recv(ws)
            assert ack["type"] == "ack" and ack["offsets"][0]["offset"] == i // 2
        big = [{"value": "x" * 1000}] * 100  # over the inline size: a worker thread appends
        await send(ws, {"id": "big", "topic": "plain", "records": big})
        assert (await recv(ws))["offsets"][-1]["offset"] == 101
        await ws.close()

    asyncio.run(main())


def test_internal_topics_are_refused(broker: LiveBroker) -> None:
    """As over HTTP: only the broker writes __consumer_offsets."""
    with broker.http() as c:
        r = c.post(
            "/groups/g/heartbeat", json={"member_epoch": 0, "subscribed_topics": ["t"]}
        )  # creates __consumer_offsets
        assert r.status_code == 200, r.text

    async def main() -> None:
        ws = await connect(broker.ws_url("/ws/produce"))
        await send(ws, {"id": 1, "topic": "__consumer_offsets", "records": [{"value": 1}]})
        answer = await recv(ws)
        assert answer["id"] == 1 and answer["error_code"] == "INVALID_TOPIC_EXCEPTION", answer
        await ws.close()

    asyncio.run(main())
