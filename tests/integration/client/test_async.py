"""AsyncProducer, AsyncConsumer and AsyncAdmin against a real broker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from client_helpers import FaultyTransport, error_response

from app.client import AsyncAdmin, AsyncConsumer, AsyncProducer, RecordMetadata, TopicPartition
from app.client.errors import BufferFull
from app.common.errors import OffsetOutOfRange, TopicAlreadyExists, UnknownTopicOrPartition

MakeTopic = Callable[..., str]


def test_async_produce_consume_round_trip(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(3)

    async def main() -> None:
        seen: list[RecordMetadata | None] = []
        async with AsyncProducer(broker_url, linger_ms=2) as p:
            futures = [
                await p.send(
                    topic, b"%d" % i, key=b"k%d" % (i % 10), on_delivery=lambda m, e: seen.append(m)
                )
                for i in range(1000)
            ]
            report = await p.send_many(topic, [b"bulk"] * 500)
            metas = [await f for f in futures]
            assert len(await report) == 500
            one = await p.send_and_wait(topic, b"last", partition=2)
            assert one.partition == 2
        assert len(seen) == 1000 and all(m is not None for m in seen)
        per_partition: dict[int, list[int]] = {}
        for m in metas:
            per_partition.setdefault(m.partition, []).append(m.offset)
        assert all(o == sorted(o) for o in per_partition.values())

        async with AsyncConsumer(broker_url, auto_offset_reset="earliest") as c:
            tps = [TopicPartition(topic, p) for p in range(3)]
            c.assign(tps)
            total = sum((await c.end_offsets(tps)).values())
            assert total == 1501
            got: dict[int, list[int]] = {}
            while sum(map(len, got.values())) < total:
                for r in await c.poll(timeout_ms=5000):
                    got.setdefault(r.partition, []).append(r.offset)
            assert all(offsets == list(range(len(offsets))) for offsets in got.values())
            assert await c.position(tps[2]) == len(got[2])
            c.seek(tps[0], 3)
            records = await c.poll(timeout_ms=5000, max_records=2)
            assert [(r.partition, r.offset) for r in records] == [(0, 3), (0, 4)]

    asyncio.run(main())


def test_async_retries_and_back_pressure(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)

    async def main() -> None:
        plan = {0: "connect", 1: error_response(504, "REQUEST_TIMED_OUT", True)}
        transport = FaultyTransport(lambda n: plan.get(n))
        async with AsyncProducer(
            broker_url, transport=transport, retry_backoff_ms=5, linger_ms=0
        ) as p:
            assert (await p.send_and_wait(topic, b"x")).offset == 0
        slow = FaultyTransport(lambda n: None)
        slow.delay = 0.5
        async with AsyncProducer(
            broker_url,
            transport=slow,
            batch_size=1000,
            buffer_memory=2000,
            max_block_ms=100,
            linger_ms=0,
        ) as p:
            with pytest.raises(BufferFull):
                for _ in range(100):
                    await p.send(topic, b"y" * 600)

    asyncio.run(main())


def test_async_consumer_resets_and_errors(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)

    async def main() -> None:
        async with AsyncProducer(broker_url) as p:
            await p.send_many(topic, [b"a", b"b", b"c"])
            await p.flush()
        tp = TopicPartition(topic, 0)
        async with AsyncConsumer(broker_url, auto_offset_reset="none") as c:
            c.assign([tp])
            c.seek(tp, 50)
            with pytest.raises(OffsetOutOfRange):
                await c.poll(timeout_ms=2000)
        async with AsyncConsumer(broker_url, auto_offset_reset="earliest") as c:
            c.assign([tp])
            c.seek(tp, 50)
            records = await c.poll(timeout_ms=2000)
            assert [r.value for r in records] == [b"a", b"b", b"c"]
            found = await c.offsets_for_times({tp: 0})
            assert found[tp] is not None and found[tp].offset == 0  # type: ignore[union-attr]

    asyncio.run(main())


def test_async_admin(broker_url: str) -> None:
    async def main() -> None:
        async with AsyncAdmin(broker_url) as admin:
            desc = await admin.create_topic("sdk-async-admin", 2, configs={"retention.ms": 60000})
            assert desc.name == "sdk-async-admin" and len(desc.partitions) == 2
            assert desc.configs["retention.ms"] == 60000
            with pytest.raises(TopicAlreadyExists):
                await admin.create_topic("sdk-async-admin", 2)
            assert (await admin.list_topics())["sdk-async-admin"] == 2
            offsets = await admin.list_offsets([TopicPartition("sdk-async-admin", 1)], "latest")
            assert offsets[TopicPartition("sdk-async-admin", 1)] is not None
            await admin.delete_topic("sdk-async-admin")
            with pytest.raises(UnknownTopicOrPartition):
                await admin.describe_topic("sdk-async-admin")

    asyncio.run(main())


def test_async_poll_columns(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)

    async def main() -> None:
        async with AsyncProducer(broker_url) as p:
            report = await p.send_many(topic, [b"%d" % i for i in range(2000)])
            await report
        async with AsyncConsumer(broker_url, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(topic, 0)])
            values: list[bytes | None] = []
            while len(values) < 2000:
                for cols in await c.poll_columns(timeout_ms=5000, max_records=300):
                    assert cols.topic == topic and cols.partition == 0
                    values.extend(cols.values)
            assert values == [b"%d" % i for i in range(2000)]

    asyncio.run(main())


def test_async_seek_during_a_long_poll_does_not_wait_for_it(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(1)

    async def main() -> None:
        async with AsyncProducer(broker_url) as p:
            await (await p.send_many(topic, [b"%d" % i for i in range(10)]))
        tp = TopicPartition(topic, 0)
        async with AsyncConsumer(
            broker_url, auto_offset_reset="latest", fetch_max_wait_ms=10_000
        ) as c:
            c.assign([tp])
            assert await c.poll(timeout_ms=100) == []
            c.seek(tp, 4)
            loop = asyncio.get_running_loop()
            start = loop.time()
            records = await c.poll(timeout_ms=5000)
            assert [r.offset for r in records] == list(range(4, 10))
            assert loop.time() - start < 5  # not the 10 s long poll

    asyncio.run(main())
