"""app.client.ws as a consumer-group member: the socket is the member while it is open."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from app.client import Producer, TopicPartition
from app.client.ws import Subscription, WsRecord, subscribe

MakeTopic = Callable[..., str]


def fill(url: str, topic: str, partitions: int, n: int) -> None:
    with Producer(url) as p:
        for part in range(partitions):
            for i in range(n):
                p.send(topic, b"%d-%d" % (part, i), partition=part)


async def take(sub: Subscription, n: int) -> list[WsRecord]:
    out: list[WsRecord] = []

    async def run() -> None:
        async for record in sub:
            out.append(record)
            if len(out) >= n:
                return

    await asyncio.wait_for(run(), 20)
    return out


def test_ws_members_split_commit_and_resume(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(2)
    fill(broker_url, topic, 2, 10)
    group = f"ws-g-{time.monotonic_ns()}"
    every = {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    events: list[tuple[str, frozenset[TopicPartition]]] = []

    async def drain(sub: Subscription, into: list[WsRecord]) -> None:
        async for record in sub:
            into.append(record)

    async def main() -> None:
        async with subscribe(
            broker_url, topics=[topic], group=group, default="earliest", value_format="string",
            on_assigned=lambda tps: events.append(("+", frozenset(tps))),
            on_revoked=lambda tps: events.append(("-", frozenset(tps))),
        ) as a:  # fmt: skip
            first = await take(a, 20)
            assert a.assignment == every
            assert sorted((r.partition, r.offset) for r in first) == [
                (p, o) for p in range(2) for o in range(10)
            ]
            # Commit only the first 5 of partition 0 and all of partition 1.
            acked = await a.commit({TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 10})
            assert sorted(o["offset"] for o in acked) == [5, 10]
            async with subscribe(broker_url, topics=[topic], group=group) as b:
                got_a: list[WsRecord] = []
                got_b: list[WsRecord] = []
                readers = [
                    asyncio.create_task(drain(a, got_a)),
                    asyncio.create_task(drain(b, got_b)),
                ]
                deadline = time.monotonic() + 15
                while not (b.assignment and len(a.assignment or ()) == 1):
                    assert time.monotonic() < deadline, "no rebalance"
                    await asyncio.sleep(0.05)
                assert a.assignment is not None and b.assignment is not None
                assert not a.assignment & b.assignment
                assert a.assignment | b.assignment == every
                for task in readers:
                    task.cancel()
                await asyncio.gather(*readers, return_exceptions=True)
        assert events[0] == ("+", frozenset(every))
        assert events[1][0] == "-" and len(events[1][1]) == 1
        # Both left: a new member resumes at the commits, partition 0 from offset 5.
        async with subscribe(broker_url, topics=[topic], group=group, value_format="string") as c:
            again = await take(c, 5)
            assert [(r.partition, r.offset) for r in again] == [(0, o) for o in range(5, 10)]
            assert again[0].value == "0-5"

    asyncio.run(main())
