"""Bad input on a socket gets an error frame or a documented close code; the broker
and every other socket carry on."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from ws_helpers import LiveBroker, recv, send, subscribe

from app.api.ws.protocol import Close

OK_SUBSCRIBE: dict[str, Any] = {"type": "subscribe", "topics": ["t"], "credit": {"records": 100}}

# (what the client sends after a good subscribe, the error code or the close code)
AFTER_SUBSCRIBE: list[tuple[str, str | bytes, str | int]] = [
    ("non-JSON", "{nope", "INVALID_REQUEST"),
    ("JSON but not an object", "[1, 2]", "INVALID_REQUEST"),
    ("no type", '{"records": 1}', "INVALID_REQUEST"),
    ("unknown type", '{"type": "launch"}', "INVALID_REQUEST"),
    ("negative credit", '{"type": "credit", "records": -5}', "INVALID_REQUEST"),
    ("credit not a number", '{"type": "credit", "records": "9"}', "INVALID_REQUEST"),
    ("unknown field", '{"type": "ping", "extra": 1}', "INVALID_REQUEST"),
    (
        "seek unknown partition",
        '{"type": "seek", "topic": "zz", "partition": 0, "offset": 0}',
        "INVALID_REQUEST",
    ),
    (
        "seek out of range",
        '{"type": "seek", "topic": "t", "partition": 0, "offset": 99}',
        "OFFSET_OUT_OF_RANGE",
    ),
    ("second subscribe", orjson.dumps(OK_SUBSCRIBE).decode(), "INVALID_REQUEST"),
    ("commit without group", '{"type": "commit"}', "INVALID_REQUEST"),
    ("binary frame", b"\x00\x01", Close.UNSUPPORTED_DATA),
]

# (the first message, the error code sent before closing with 4400, or a close code)
FIRST_MESSAGE: list[tuple[str, str | bytes, str | int]] = [
    ("non-JSON", "hello", "INVALID_REQUEST"),
    ("not a subscribe", '{"type": "ping"}', "INVALID_REQUEST"),
    (
        "unknown topic",
        '{"type": "subscribe", "topics": ["nope"], "credit": {"records": 1}}',
        "UNKNOWN_TOPIC_OR_PARTITION",
    ),
    (
        "unknown partition",
        '{"type": "subscribe", "partitions": [{"topic": "t", "partition": 4}],'
        ' "credit": {"records": 1}}',
        "UNKNOWN_TOPIC_OR_PARTITION",
    ),
    ("nothing subscribed", '{"type": "subscribe", "credit": {"records": 1}}', "INVALID_REQUEST"),
    (
        "negative credit",
        '{"type": "subscribe", "topics": ["t"], "credit": {"records": -1}}',
        "INVALID_REQUEST",
    ),
    ("bad format", '{"type": "subscribe", "topics": ["t"], "format": "xml"}', "INVALID_REQUEST"),
    (
        "group with partitions",
        '{"type": "subscribe", "partitions": [{"topic": "t", "partition": 0}], "group": "g"}',
        "INVALID_REQUEST",
    ),
    (
        "unknown assignor",
        '{"type": "subscribe", "topics": ["t"], "group": "g", "server_assignor": "nope"}',
        "UNSUPPORTED_ASSIGNOR",
    ),
    (
        "group with a timestamp start",
        '{"type": "subscribe", "topics": ["t"], "group": "g", "start": {"timestamp": 1}}',
        "INVALID_REQUEST",
    ),
    (
        "instance_id without group",
        '{"type": "subscribe", "topics": ["t"], "instance_id": "i"}',
        "INVALID_REQUEST",
    ),
    (
        "committed start",
        '{"type": "subscribe", "topics": ["t"], "start": "committed"}',
        "INVALID_REQUEST",
    ),
    ("binary frame", b"\x01", Close.UNSUPPORTED_DATA),
]


@pytest.mark.parametrize(
    ("name", "payload", "expected"), AFTER_SUBSCRIBE, ids=[c[0] for c in AFTER_SUBSCRIBE]
)
def test_bad_message_after_subscribe(
    broker: LiveBroker, name: str, payload: str | bytes, expected: str | int
) -> None:
    broker.create_topic("t")
    url = broker.ws_url("/ws/subscribe")

    async def main() -> None:
        other, _ = await subscribe(url, **{k: v for k, v in OK_SUBSCRIBE.items() if k != "type"})
        ws, _ = await subscribe(url, **{k: v for k, v in OK_SUBSCRIBE.items() if k != "type"})
        await ws.send(payload)
        if isinstance(expected, str):
            error = await recv(ws)
            assert error["type"] == "error" and error["error_code"] == expected, error
            assert isinstance(error["message"], str) and error["retriable"] is False
            await send(ws, {"type": "ping"})  # the socket is still usable
            assert (await recv(ws))["type"] == "pong"
        else:
            with pytest.raises(ConnectionClosed):
                await recv(ws)
            assert ws.close_code == expected
        broker.produce("t", [{"value": name}])
        frame = await recv(other)
        assert frame["records"][0]["value"] == name
        await other.close()
        await ws.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("name", "payload", "expected"), FIRST_MESSAGE, ids=[c[0] for c in FIRST_MESSAGE]
)
def test_bad_first_message(
    broker: LiveBroker, name: str, payload: str | bytes, expected: str | int
) -> None:
    broker.create_topic("t")
    url = broker.ws_url("/ws/subscribe")

    async def main() -> None:
        other, _ = await subscribe(url, topics=["t"], credit={"records": 10})
        ws = await connect(url)
        await ws.send(payload)
        if isinstance(expected, str):
            error = await recv(ws)
            assert error["type"] == "error" and error["error_code"] == expected, error
            expected_close = Close.BAD_REQUEST
        else:
            expected_close = expected
        with pytest.raises(ConnectionClosed):
            await recv(ws)
        assert ws.close_code == expected_close
        broker.produce("t", [{"value": name}])
        assert (await recv(other))["records"][0]["value"] == name
        await other.close()

    asyncio.run(main())


def test_idle_timeout_closes_with_4408(broker: LiveBroker) -> None:
    broker.create_topic("t")

    async def main() -> None:
        url = broker.ws_url("/ws/subscribe?idle_timeout_ms=300")
        ws, _ = await subscribe(url, topics=["t"], credit={"records": 1})
        for _ in range(3):  # pings keep it open
            await asyncio.sleep(0.15)
            await send(ws, {"type": "ping"})
            assert (await recv(ws))["type"] == "pong"
        with pytest.raises(ConnectionClosed):
            await recv(ws, 5)
        assert ws.close_code == Close.IDLE_TIMEOUT
        ws = await connect(broker.ws_url("/ws/produce?idle_timeout_ms=300"))
        with pytest.raises(ConnectionClosed):
            await recv(ws, 5)
        assert ws.close_code == Close.IDLE_TIMEOUT

    asyncio.run(main())


@pytest.mark.parametrize("value", ["abc", "5", "999999999999"])
def test_bad_idle_timeout_parameter(broker: LiveBroker, value: str) -> None:
    async def main() -> None:
        ws = await connect(broker.ws_url(f"/ws/subscribe?idle_timeout_ms={value}"))
        error = await recv(ws)
        assert error["error_code"] == "INVALID_REQUEST" and "idle_timeout_ms" in error["message"]
        with pytest.raises(ConnectionClosed):
            await recv(ws)
        assert ws.close_code == Close.BAD_REQUEST

    asyncio.run(main())
