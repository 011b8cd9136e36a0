"""Consumer against a real broker: positions, seeks, time lookups, resets, pipelining."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from client_helpers import CuttingProxy

from app.client import Consumer, ConsumerRecord, OffsetAndTimestamp, Producer, TopicPartition
from app.client.errors import ConsumerClosed, NoOffsetForPartition
from app.common.errors import OffsetOutOfRange, UnknownTopicOrPartition

MakeTopic = Callable[..., str]


def fill(
    url: str, topic: str, n: int, *, partition: int = 0, ts0: int = 1_000_000, step: int = 10
) -> None:
    with Producer(url, batch_size=4096) as p:
        for i in range(n):
            p.send(topic, b"v%d" % i, partition=partition, timestamp=ts0 + i * step)


def poll_n(c: Consumer, n: int, timeout_s: float = 10) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out.extend((r.offset, r.value) for r in c.poll(timeout_ms=500))
    return out


def test_seek_position_and_poll(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)
    fill(broker_url, topic, 300)
    tp = TopicPartition(topic, 0)
    with Consumer(broker_url, auto_offset_reset="earliest", max_poll_records=50) as c:
        c.assign([tp])
        assert c.assignment() == {tp}
        assert c.position(tp) == 0
        first = c.poll(timeout_ms=5000)
        assert [r.offset for r in first] == list(range(50))
        assert c.position(tp) == 50
        # Seek into the middle of a batch: records below the position are skipped.
        c.seek(tp, 123)
        assert c.position(tp) == 123
        records = c.poll(timeout_ms=5000, max_records=10)
        assert [r.offset for r in records] == list(range(123, 133))
        assert records[0].value == b"v123" and records[0].timestamp == 1_000_000 + 1230
        assert records[0].topic == topic and records[0].partition == 0 and records[0].key is None
        c.seek_to_end(tp)
        assert c.position(tp) == 300
        assert c.poll(timeout_ms=100) == []
        c.seek_to_beginning()
        assert c.position(tp) == 0
        assert [o for o, _ in poll_n(c, 300)] == list(range(300))
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 300}


def test_offsets_for_times(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)
    fill(broker_url, topic, 100, ts0=5_000, step=100)
    tp = TopicPartition(topic, 0)
    with Consumer(broker_url) as c:
        c.assign([tp])
        found = c.offsets_for_times({tp: 5_000 + 4_250})
        assert found == {tp: OffsetAndTimestamp(43, 5_000 + 4_300)}
        assert c.offsets_for_times({tp: 0}) == {tp: OffsetAndTimestamp(0, 5_000)}
        assert c.offsets_for_times({tp: 10**12}) == {tp: None}


def test_latest_reset_sees_only_new_records_and_long_poll_wakes(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(1)
    fill(broker_url, topic, 20)
    tp = TopicPartition(topic, 0)
    with Consumer(broker_url, auto_offset_reset="latest", fetch_max_wait_ms=10_000) as c:
        c.assign([tp])
        assert c.position(tp) == 20
        assert c.poll(timeout_ms=50) == []  # the long poll is now waiting at the broker

        def later() -> None:
            time.sleep(0.3)
            with Producer(broker_url, linger_ms=0) as p:
                p.send(topic, b"new", partition=0)

        threading.Thread(target=later).start()
        start = time.monotonic()
        records = c.poll(timeout_ms=10_000)
        waited = time.monotonic() - start
        assert [(r.offset, r.value) for r in records] == [(20, b"new")]
        assert waited < 5, "the append should end the long poll, not its max wait"


def test_fetch_is_pipelined(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(2)
    for p_ in (0, 1):
        fill(broker_url, topic, 200, partition=p_)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with Consumer(broker_url, auto_offset_reset="earliest", max_partition_fetch_bytes=2048) as c:
        c.assign(tps)
        records = c.poll(timeout_ms=5000, max_records=5)
        assert records
        # While the caller holds these records, the next fetch of each partition
        # with an answer is already at the broker.
        in_flight = {tp: st.in_flight is not None for tp, st in c.states.items()}
        assert any(in_flight.values())
        for tp, st in c.states.items():
            if st.fetched is not None:
                assert in_flight[tp] and st.asked == st.fetch_offset > st.position  # type: ignore[operator]
        got = {tp: [] for tp in tps}  # type: dict[TopicPartition, list[int]]
        for r in records:
            got[TopicPartition(r.topic, r.partition)].append(r.offset)
        while sum(map(len, got.values())) < 400:
            for r in c.poll(timeout_ms=5000):
                got[TopicPartition(r.topic, r.partition)].append(r.offset)
        assert all(offsets == list(range(200)) for offsets in got.values())


def test_out_of_range_resets_per_policy(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)
    fill(broker_url, topic, 10)
    tp = TopicPartition(topic, 0)
    with Consumer(broker_url, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 1000)
        assert [o for o, _ in poll_n(c, 10)] == list(range(10))
    with Consumer(broker_url, auto_offset_reset="latest") as c:
        c.assign([tp])
        c.seek(tp, 1000)
        assert c.poll(timeout_ms=300) == []
        assert c.position(tp) == 10
    with Consumer(broker_url, auto_offset_reset="none") as c:
        c.assign([tp])
        with pytest.raises(NoOffsetForPartition):
            c.poll(timeout_ms=100)
        c.seek(tp, 1000)
        with pytest.raises(OffsetOutOfRange) as info:
            c.poll(timeout_ms=2000)
        assert (info.value.log_start_offset, info.value.log_end_offset) == (0, 10)


def test_unknown_partition_raises(broker_url: str) -> None:
    with Consumer(broker_url, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("no-such-topic-for-consumer", 0)])
        with pytest.raises(UnknownTopicOrPartition):
            c.poll(timeout_ms=1000)


def test_assign_replaces_and_close_is_final(broker_url: str, make_topic: MakeTopic) -> None:
    a, b = make_topic(1), make_topic(1)
    fill(broker_url, a, 5)
    fill(broker_url, b, 7)
    c = Consumer(broker_url, auto_offset_reset="earliest")
    c.assign([TopicPartition(a, 0)])
    assert len(poll_n(c, 5)) == 5
    c.assign([TopicPartition(b, 0)])
    assert [v for _, v in poll_n(c, 7)] == [b"v%d" % i for i in range(7)]
    with pytest.raises(ValueError):
        c.seek(TopicPartition(a, 0), 0)
    c.close()
    with pytest.raises(ConsumerClosed):
        c.poll()


def test_poll_columns_matches_poll_and_flavours_mix(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(2)
    with Producer(broker_url, batch_size=2000) as p:
        for i in range(600):
            p.send(
                topic,
                b"v%d" % i,
                key=b"k%d" % (i % 5),
                headers=[("n", b"%d" % i)] if i % 7 == 0 else None,
            )
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with Consumer(broker_url, auto_offset_reset="earliest") as c:
        c.assign(tps)
        expected: list[ConsumerRecord] = []
        while len(expected) < 600:
            expected.extend(c.poll(timeout_ms=5000))
    with Consumer(broker_url, auto_offset_reset="earliest", max_poll_records=37) as c:
        c.assign(tps)
        got: list[ConsumerRecord] = []
        flip = True
        while len(got) < 600:
            # Alternate flavours mid-batch: positions and rows must carry over exactly.
            if flip:
                for cols in c.poll_columns(timeout_ms=5000):
                    assert len(cols) == len(cols.values) == len(cols.headers)
                    assert cols.offsets == sorted(cols.offsets)
                    got.extend(cols.records())
            else:
                got.extend(c.poll(timeout_ms=5000))
            flip = not flip
        assert c.poll_columns(timeout_ms=100) == []
    key = lambda r: (r.partition, r.offset)  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)
    assert any(r.headers for r in got)


def test_cut_connections_are_retried_without_loss_or_repeats(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(2)
    with Producer(broker_url, batch_size=4096) as p:
        for i in range(4000):
            p.send(topic, b"%08d" % i, key=b"%d" % (i % 7))
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    # Every other connection dies 3 kB into the broker's answers (mid-head or mid-body).
    proxy = CuttingProxy(broker_url, lambda n: 3000 if n % 2 == 0 else None)
    try:
        with Consumer(
            proxy.url,
            auto_offset_reset="earliest",
            retry_backoff_ms=10,
            max_partition_fetch_bytes=16_384,
        ) as c:
            c.assign(tps)
            got: dict[int, list[int]] = {0: [], 1: []}
            deadline = time.monotonic() + 30
            while sum(map(len, got.values())) < 4000 and time.monotonic() < deadline:
                for r in c.poll(timeout_ms=1000):
                    got[r.partition].append(r.offset)
            assert proxy.cuts > 0
            for offsets in got.values():
                assert offsets == list(range(len(offsets)))
            assert sum(map(len, got.values())) == 4000
    finally:
        proxy.close()


def test_seek_during_a_long_poll_does_not_wait_for_it(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(1)
    fill(broker_url, topic, 10)
    tp = TopicPartition(topic, 0)
    with Consumer(broker_url, auto_offset_reset="latest", fetch_max_wait_ms=10_000) as c:
        c.assign([tp])
        assert c.poll(timeout_ms=100) == []  # a 10 s long poll is now out
        c.seek(tp, 3)
        start = time.monotonic()
        records = c.poll(timeout_ms=5000)
        assert [r.offset for r in records] == list(range(3, 10))
        assert time.monotonic() - start < 5  # not the 10 s long poll
