"""``Consumer(isolation_level=...)`` and ``AsyncConsumer``: binary fetches filtered on the
client with the broker's aborted list, positions past dropped batches and markers, held at
the last stable offset while a transaction is open; the Admin's ListOffsets too."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from isolation_helpers import Broker, Writer, scenario

from app.client import Admin, AsyncConsumer, Consumer, TopicPartition

MakeTopic = Callable[[], tuple[str, Writer]]


def poll_until(c: Consumer, n: int, *, columns: bool = False, timeout: float = 10) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        if columns:
            for run in c.poll_columns(timeout_ms=100):
                got += [v or b"" for v in run.values]
        else:
            got += [r.value or b"" for r in c.poll(timeout_ms=100)]
    return got


@pytest.mark.parametrize("columns", [False, True])
def test_consumer_reads_committed_records_only_and_waits_for_the_commit(
    broker: Broker, topic: MakeTopic, columns: bool
) -> None:
    name, w = topic()
    s = scenario(w)
    tp = TopicPartition(name, 0)
    with Consumer(
        broker.url, isolation_level="read_committed", max_poll_records=2, fetch_max_wait_ms=100
    ) as c:
        c.assign([tp])
        c.seek(tp, 0)
        assert poll_until(c, len(s["committed"]), columns=columns) == s["committed"]
        assert poll_until(c, 1, columns=columns, timeout=0.5) == []
        assert c.position(tp) == s["lso"]
        w.commit(3)
        assert poll_until(c, 3, columns=columns) == [b"o9", b"o10", b"p11"]
        # Past the COMMIT marker at the end too.
        assert poll_until(c, 1, columns=columns, timeout=0.3) == []
        assert c.position(tp) == s["end"] + 1


def test_read_uncommitted_consumer_sees_every_record(broker: Broker, topic: MakeTopic) -> None:
    name, w = topic()
    s = scenario(w)
    tp = TopicPartition(name, 0)
    with Consumer(broker.url, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert poll_until(c, len(s["uncommitted"])) == s["uncommitted"]


def test_answers_of_aborted_batches_only_move_the_position(
    broker: Broker, topic: MakeTopic
) -> None:
    name, w = topic()
    for pid in (21, 22):
        w.txn(pid, [b"x", b"y"])
    w.abort(21)
    w.abort(22)
    tp = TopicPartition(name, 0)
    with Consumer(broker.url, isolation_level="read_committed", fetch_max_wait_ms=50) as c:
        c.assign([tp])
        c.seek(tp, 0)
        assert poll_until(c, 1, timeout=0.5) == []
        assert c.position(tp) == w.log.log_end_offset == 6
        w.plain([b"z"])
        assert poll_until(c, 1) == [b"z"]


def test_latest_is_the_lso_for_a_read_committed_consumer(broker: Broker, topic: MakeTopic) -> None:
    name, w = topic()
    w.plain([b"a"])
    w.txn(31, [b"t"])
    w.plain([b"b"])
    tp = TopicPartition(name, 0)
    with Consumer(broker.url, isolation_level="read_committed") as c:
        c.assign([tp])
        assert c.position(tp) == 1  # auto_offset_reset=latest: the LSO
        c.seek_to_end(tp)
        assert c.position(tp) == 1
    with Consumer(broker.url) as c:
        c.assign([tp])
        assert c.position(tp) == 3
    with Admin(broker.url) as admin:
        found = admin.list_offsets([tp], "latest", isolation_level="read_committed")[tp]
        assert found is not None and found.offset == 1
        with pytest.raises(ValueError):
            admin.list_offsets([tp], "latest", isolation_level="read_dirty")
    with pytest.raises(ValueError, match="isolation_level"):
        Consumer(broker.url, isolation_level="committed")


def test_async_consumer_reads_committed(broker: Broker, topic: MakeTopic) -> None:
    name, w = topic()
    s = scenario(w)
    tp = TopicPartition(name, 0)

    async def main() -> None:
        async with AsyncConsumer(
            broker.url, isolation_level="read_committed", fetch_max_wait_ms=100
        ) as c:
            c.assign([tp])
            c.seek(tp, 0)
            got: list[bytes] = []
            deadline = time.monotonic() + 10
            while len(got) < len(s["committed"]) and time.monotonic() < deadline:
                got += [r.value or b"" for r in await c.poll(timeout_ms=100)]
            assert got == s["committed"]
            assert await c.poll(timeout_ms=300) == []
            assert await c.position(tp) == s["lso"]
            w.abort(3)
            more: list[bytes] = []
            while not more and time.monotonic() < deadline:
                more += [r.value or b"" for r in await c.poll(timeout_ms=100)]
            assert more == [b"p11"]

    asyncio.run(main())


def test_group_consumer_reads_committed(broker: Broker, topic: MakeTopic) -> None:
    name, w = topic()
    s = scenario(w)
    with Consumer(broker.url, isolation_level="read_committed", auto_offset_reset="earliest") as c:
        c.subscribe([name], group_id=f"g-{name}")
        assert poll_until(c, len(s["committed"]), timeout=20) == s["committed"]
        c.commit()
        assert c.committed([TopicPartition(name, 0)])[TopicPartition(name, 0)] == s["lso"]


def _open_transaction_over_group_offsets(broker: Broker, name: str, group: str) -> Any:
    """The group committed 2 (partition 0) and 3 (partition 1); then a transaction, still
    open, committed 7 for partition 0. Returns a function that ends it."""
    http = broker.http()
    r = http.post(
        f"/groups/{group}/offsets",
        json={
            "member_epoch": -1,
            "offsets": [
                {"topic": name, "partition": 0, "offset": 2},
                {"topic": name, "partition": 1, "offset": 3},
            ],
        },
    )
    assert r.status_code == 200, r.text
    tid = f"copier-{name}"
    r = http.post("/producers", json={"transactional_id": tid})
    assert r.status_code == 200, r.text
    producer = {k: r.json()[k] for k in ("producer_id", "producer_epoch")}
    r = http.post(f"/transactions/{tid}/groups", json={**producer, "group_id": group})
    assert r.status_code == 200, r.text
    offsets = [{"topic": name, "partition": 0, "offset": 7}]
    r = http.post(
        f"/transactions/{tid}/offsets", json={**producer, "group_id": group, "offsets": offsets}
    )
    assert r.status_code == 200, r.text

    def commit() -> None:
        try:
            end = http.post(f"/transactions/{tid}/commit", json=producer)
            assert end.status_code == 200, end.text
        finally:
            http.close()

    return commit


class _Polls:
    """Records by partition, and the longest poll, over polls of 200 ms."""

    def __init__(self) -> None:
        self.got: dict[int, list[int]] = {0: [], 1: []}
        self.polls = 0
        self.longest = 0.0
        self.deadline = 0.0

    def phases(self, end_transaction: Callable[[], None]) -> Iterator[Callable[[], bool]]:
        """First ten polls while the transaction is open: nothing (the group's offsets
        are fetched together, as Kafka's consumer does, and wait together); then the
        transaction ends and the records come from the offsets it left."""
        self.deadline = time.monotonic() + 20
        yield lambda: self.polls >= 10
        assert self.got == {0: [], 1: []}, self.got
        end_transaction()
        self.deadline = time.monotonic() + 20
        yield lambda: len(self.got[0]) + len(self.got[1]) == 3 + 7

    def took(self, records: list[Any], started: float) -> None:
        self.polls += 1
        self.longest = max(self.longest, time.monotonic() - started)
        assert time.monotonic() < self.deadline, self.got
        for r in records:
            self.got[r.partition].append(r.offset)


@pytest.mark.parametrize("shell", ["sync", "async"])
def test_a_poll_is_not_held_by_a_transaction_over_the_groups_offsets(
    broker: Broker, shell: str
) -> None:
    """A read_committed group consumer does not start partitions whose offsets an open
    transaction committed (KIP-447), and its polls are not held by it either (Kafka's are
    not): each returns at its timeout; the partitions start at the offsets the
    transaction left once it commits."""
    name = f"iso-unstable-{shell}"
    broker.create_topic(name, 2)
    broker.produce(name, [{"value": f"{p}-{i}", "partition": p} for i in range(10) for p in (0, 1)])
    group = f"g-{name}"
    end_transaction = _open_transaction_over_group_offsets(broker, name, group)
    polls = _Polls()
    settings: dict[str, Any] = {
        "isolation_level": "read_committed",
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": 100,
    }
    if shell == "sync":
        with Consumer(broker.url, **settings) as c:
            c.subscribe([name], group_id=group)
            for done in polls.phases(end_transaction):
                while not done():
                    started = time.monotonic()
                    polls.took(c.poll(timeout_ms=200), started)
    else:

        async def main() -> None:
            async with AsyncConsumer(broker.url, **settings) as c:
                c.subscribe([name], group_id=group)
                for done in polls.phases(end_transaction):
                    while not done():
                        started = time.monotonic()
                        polls.took(await c.poll(timeout_ms=200), started)

        asyncio.run(main())
    assert polls.got == {0: [7, 8, 9], 1: list(range(3, 10))}
    # Polls of 200 ms: none waited out the transaction (before: up to 30 s, then an error).
    assert polls.longest < 5, polls.longest
