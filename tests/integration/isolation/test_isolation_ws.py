"""isolation_level on WS /ws/subscribe (JSON and binary frames, plain and group
subscriptions): a read_committed subscriber is pushed only committed records, held at
the last stable offset while a transaction is open, released when it commits."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from isolation_helpers import Broker, Writer, scenario
from websockets.asyncio.client import ClientConnection, connect

from app.api.ws.protocol import parse_binary_frame
from app.client.ws import Subscription
from app.client.ws import subscribe as ws_subscribe
from app.common.batch import decode_records, iter_headers

MakeTopic = Callable[[], tuple[str, Writer]]


async def subscribe(broker: Broker, **message: Any) -> tuple[ClientConnection, Any]:
    ws = await connect(broker.ws_url("/ws/subscribe"), max_size=None)
    await ws.send(orjson.dumps({"type": "subscribe", **message}).decode())
    first = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
    assert first["type"] == "subscribed", first
    return ws, first


async def frames_until(
    ws: ClientConnection, done: Callable[[list[tuple[int, bytes]]], bool], timeout: float = 10
) -> tuple[list[tuple[int, bytes]], int]:
    """Records (offset, value) from records frames until ``done``; the last next_offset."""
    got: list[tuple[int, bytes]] = []
    next_offset = -1
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done(got):
        frame = await asyncio.wait_for(ws.recv(), deadline - loop.time())
        if isinstance(frame, bytes):
            _, _, _, next_offset, batches = parse_binary_frame(frame)
            for _, h in iter_headers(batches):
                assert not h.is_control, "a control batch in a read_committed frame"
            got += [(r.offset, r.value or b"") for r in decode_records(batches)]
            continue
        msg = orjson.loads(frame)
        if msg["type"] == "records":
            got += [(r["offset"], base64.b64decode(r["value"])) for r in msg["records"]]
            next_offset = msg["next_offset"]
    return got, next_offset


async def nothing_more(ws: ClientConnection, seconds: float = 0.5) -> None:
    """No records frame arrives within ``seconds`` (the subscriber is held)."""
    try:
        frame = await asyncio.wait_for(ws.recv(), seconds)
    except TimeoutError:
        return
    if isinstance(frame, str):
        assert orjson.loads(frame)["type"] != "records", frame
    raise AssertionError(f"a frame past the last stable offset: {frame!r}")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# How a read_committed subscriber subscribes ("{name}" is the topic's name), and whether
# its "subscribed" answer already names the partitions (a group member's come with its
# assignment).
SUBSCRIPTIONS: dict[str, tuple[dict[str, Any], bool]] = {
    "json_frames": ({"start": "earliest", "value_format": "binary"}, True),
    "binary_frames": ({"start": "earliest", "format": "binary"}, True),
    "group_member": ({"group": "g-{name}", "default": "earliest", "value_format": "binary"}, False),
}


@pytest.mark.parametrize(
    ("how", "commit", "released"),
    [
        # Held at the LSO, then released by the commit: the open transaction's records.
        ("json_frames", True, [b"o9", b"o10", b"p11"]),
        # Aborted and control batches never in a frame; the abort releases the plain p11.
        ("binary_frames", False, [b"p11"]),
        ("group_member", True, [b"o9", b"o10", b"p11"]),
    ],
)
def test_read_committed_subscriber_is_held_at_the_lso_and_released_by_the_end(
    broker: Broker, topic: MakeTopic, how: str, commit: bool, released: list[bytes]
) -> None:
    name, w = topic()
    s = scenario(w)
    fields, names_partitions = SUBSCRIPTIONS[how]
    fields = {k: v.format(name=name) if isinstance(v, str) else v for k, v in fields.items()}

    async def main() -> None:
        ws, subscribed = await subscribe(
            broker,
            topics=[name],
            isolation_level="read_committed",
            credit={"records": 1000},
            **fields,
        )
        if names_partitions:
            assert subscribed["partitions"][0]["last_stable_offset"] == s["lso"]
        got, next_offset = await frames_until(ws, lambda g: len(g) >= len(s["committed"]))
        assert [v for _, v in got] == s["committed"]
        assert next_offset <= s["lso"]
        await nothing_more(ws)
        if commit:
            w.commit(3)
        else:
            w.abort(3)
        more, next_offset = await frames_until(ws, lambda g: len(g) >= len(released))
        assert [v for _, v in more] == released and next_offset == s["end"] + 1
        await nothing_more(ws, 0.2)
        await ws.close()

    run(main())


def test_read_uncommitted_subscriber_sees_every_record(broker: Broker, topic: MakeTopic) -> None:
    name, w = topic()
    s = scenario(w)

    async def main() -> None:
        ws, _ = await subscribe(
            broker, topics=[name], start="earliest", value_format="binary", credit={"records": 99}
        )
        got, _ = await frames_until(ws, lambda g: len(g) >= len(s["uncommitted"]))
        assert [v for _, v in got] == s["uncommitted"]
        await ws.close()

    run(main())


def test_latest_and_seek_latest_are_the_lso(broker: Broker, topic: MakeTopic) -> None:
    name, w = topic()
    w.plain([b"old"])
    w.txn(5, [b"t"])
    w.plain([b"p"])

    async def main() -> None:
        ws, subscribed = await subscribe(
            broker,
            topics=[name],
            value_format="binary",
            isolation_level="read_committed",
            credit={"records": 100},
        )
        assert subscribed["partitions"][0]["offset"] == 1  # the LSO, not the HW (3)
        await ws.send(
            orjson.dumps(
                {"type": "seek", "topic": name, "partition": 0, "offset": "latest"}
            ).decode()
        )
        await nothing_more(ws, 0.3)
        w.commit(5)
        got, _ = await frames_until(ws, lambda g: len(g) >= 2)
        assert [v for _, v in got] == [b"t", b"p"]
        await ws.close()

    run(main())


@pytest.mark.parametrize("fmt", ["json", "binary"])
def test_the_sdk_websocket_subscription_reads_committed(
    broker: Broker, topic: MakeTopic, fmt: str
) -> None:
    name, w = topic()
    s = scenario(w)

    async def take(sub: Subscription, n: int) -> list[bytes]:
        out: list[bytes] = []
        async for record in sub:
            out.append(record.value)
            if len(out) >= n:
                break
        return out

    async def main() -> None:
        async with ws_subscribe(
            broker.url,
            topics=[name],
            start="earliest",
            format=fmt,
            value_format="binary",
            isolation_level="read_committed",
        ) as sub:
            assert await asyncio.wait_for(take(sub, 5), 10) == s["committed"]
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(take(sub, 1), 0.5)
            w.commit(3)
            assert await asyncio.wait_for(take(sub, 3), 10) == [b"o9", b"o10", b"p11"]

    run(main())
