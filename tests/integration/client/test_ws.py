"""app.client.ws against a real broker: order per partition, credit window, reconnects, seeks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from app.client import Producer, TopicPartition
from app.client.ws import Subscription, WsRecord, subscribe

MakeTopic = Callable[..., str]


def fill(url: str, topic: str, partitions: int, n: int) -> None:
    with Producer(url, batch_size=2048) as p:
        for part in range(partitions):
            for i in range(n):
                p.send(topic, b"%d-%d" % (part, i), key=b"k%d" % i, partition=part)


async def take(sub: Subscription, n: int) -> list[WsRecord]:
    out: list[WsRecord] = []

    async def run() -> None:
        async for record in sub:
            out.append(record)
            if len(out) >= n:
                return

    await asyncio.wait_for(run(), 20)
    return out


@pytest.mark.parametrize("fmt", ["json", "binary"])
def test_records_in_order_per_partition_through_a_small_window(
    broker_url: str, make_topic: MakeTopic, fmt: str
) -> None:
    topic = make_topic(3)
    fill(broker_url, topic, 3, 200)

    async def main() -> list[WsRecord]:
        async with subscribe(
            broker_url, topics=[topic], start="earliest", format=fmt, value_format="binary",
            key_format="binary", credit=16,
        ) as sub:  # fmt: skip
            records = await take(sub, 600)
            assert len(sub._buffer) <= 16  # the window bounds what waits here
            return records

    records = asyncio.run(main())
    for part in range(3):
        mine = [r for r in records if r.partition == part]
        assert [r.offset for r in mine] == list(range(200))
        assert [r.value for r in mine] == [b"%d-%d" % (part, i) for i in range(200)]
        assert mine[7].key == b"k7" and mine[7].topic == topic


def test_resumes_from_an_explicit_offset_and_survives_a_dropped_socket(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(1)
    fill(broker_url, topic, 1, 50)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with subscribe(
            broker_url, partitions=[tp], start=5, value_format="string", credit=8
        ) as sub:
            first = await take(sub, 10)
            assert [r.offset for r in first] == list(range(5, 15))
            assert first[0].value == "0-5"
            position = sub.positions[tp]
        assert position == 15
        # A new socket from the position: nothing skipped, nothing repeated.
        async with subscribe(broker_url, partitions=[tp], start={tp: position}, credit=8) as sub:
            again = await take(sub, 5)
            assert [r.offset for r in again] == list(range(15, 20))
            # The connection drops under the iterator: it resubscribes from its positions.
            assert sub._ws is not None
            await sub._ws.close()
            more = await take(sub, 10)
            assert [r.offset for r in more] == list(range(20, 30))
            await sub.seek(tp, 2)
            assert [r.offset for r in await take(sub, 3)] == [2, 3, 4]

    asyncio.run(main())


def test_pause_holds_a_partition_back_until_resume(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(2)
    fill(broker_url, topic, 2, 20)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    async def main() -> None:
        async with subscribe(broker_url, topics=[topic], start="earliest", credit=100) as sub:
            await sub.pause(p0)
            only = await take(sub, 20)
            assert {r.partition for r in only} == {1}
            await sub.resume(p0)
            rest = await take(sub, 20)
            assert [r.offset for r in rest] == list(range(20))
            assert {r.partition for r in rest} == {0}
            assert sub.positions == {p0: 20, p1: 20}

    asyncio.run(main())
