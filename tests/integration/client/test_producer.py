"""Producer against a real broker: batching, linger, futures, callbacks, placement, errors."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from client_helpers import FaultyTransport, error_response, high_watermarks, raw_batches
from kafka.partitioner.default import murmur2 as kafka_murmur2

from app.client import Consumer, Producer, RecordMetadata, TopicPartition
from app.client.errors import BufferFull, DeliveryTimeout, ProducerClosed, UnsupportedByBroker
from app.common.errors import (
    BrokerNotAvailable,
    CorruptRecord,
    InvalidRecord,
    RecordTooLarge,
    UnknownTopicOrPartition,
    UnsupportedCompressionType,
)
from app.common.partitioner import partition_for_key

MakeTopic = Callable[..., str]


def consume_all(
    url: str, topic: str, partitions: int
) -> dict[int, list[tuple[int, bytes | None, bytes | None]]]:
    out: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {
        p: [] for p in range(partitions)
    }
    with Consumer(url, auto_offset_reset="earliest", fetch_max_wait_ms=0) as c:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        ends = c.end_offsets(tps)
        total = sum(ends.values())
        seen = 0
        while seen < total:
            records = c.poll(timeout_ms=5000)
            assert records, f"stalled at {seen} of {total}"
            for r in records:
                out[r.partition].append((r.offset, r.key, r.value))
            seen += len(records)
    return out


def test_send_resolves_futures_with_contiguous_offsets(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(1)
    with Producer(broker_url, linger_ms=1) as p:
        futures = [p.send(topic, b"v%d" % i, timestamp=1_700_000_000_000 + i) for i in range(50)]
        metas = [f.result(timeout=10) for f in futures]
    assert [m.offset for m in metas] == list(range(50))
    assert all(m.topic == topic and m.partition == 0 for m in metas)
    assert [m.timestamp for m in metas] == [1_700_000_000_000 + i for i in range(50)]
    assert all(f.done() and f.exception() is None for f in futures)


def test_callbacks_and_done_callbacks_run_once_per_record(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(2)
    got: list[RecordMetadata | None] = []
    errors: list[BaseException | None] = []
    done: list[int] = []
    lock = threading.Lock()

    def on_delivery(meta: RecordMetadata | None, exc: BaseException | None) -> None:
        with lock:
            got.append(meta)
            errors.append(exc)

    with Producer(broker_url) as p:
        for i in range(200):
            f = p.send(topic, b"x", key=b"key-%d" % i, on_delivery=on_delivery)
            f.add_done_callback(lambda fut: done.append(fut.result().offset))
        p.flush()
        late: list[int] = []
        f.add_done_callback(lambda fut: late.append(fut.result().offset))  # already done: runs now
    assert len(got) == 200 and errors == [None] * 200
    now_ms = time.time() * 1000
    assert all(
        m is not None and type(m.timestamp) is int and now_ms - m.timestamp < 60_000 for m in got
    )
    assert type(f.result().timestamp) is int
    assert len(done) == 200 and late == [f.result().offset]
    per_partition = {0: [], 1: []}  # type: dict[int, list[int]]
    for meta in got:
        assert meta is not None
        per_partition[meta.partition].append(meta.offset)
    for offsets in per_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))


def test_flush_and_close_from_a_callback_do_not_deadlock(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(1)
    raised: list[BaseException] = []
    p = Producer(broker_url, linger_ms=0)

    def flush_inside(meta: RecordMetadata | None, exc: BaseException | None) -> None:
        try:
            p.flush()
        except RuntimeError as error:
            raised.append(error)
        p.close()  # stops without waiting on itself

    p.send(topic, b"x", on_delivery=flush_inside).result(timeout=10)
    p._thread.join(timeout=10)
    assert not p._thread.is_alive()
    assert len(raised) == 1 and "callback" in str(raised[0])
    with pytest.raises(ProducerClosed):
        p.send(topic, b"late")
    p.close()


def test_batches_never_exceed_batch_size(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)
    batch_size = 4096
    # A linger longer than the test: only a full batch (or the close) sends, however slow
    # a loaded machine makes the loop (with 50 ms, a batch sometimes left half full).
    with Producer(broker_url, batch_size=batch_size, linger_ms=60_000) as p:
        for i in range(1000):
            p.send(topic, b"%0100d" % i)
    headers = raw_batches(broker_url, topic, 0)
    assert sum(h.record_count for h in headers) == 1000
    assert all(h.size <= batch_size for h in headers)
    # Filled, not one record each: only the last batch may be short.
    per_batch = max(h.record_count for h in headers)
    assert per_batch >= 25
    assert all(h.record_count == per_batch for h in headers[:-1])


def test_a_record_larger_than_batch_size_goes_alone(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)
    with Producer(broker_url, batch_size=1000, linger_ms=20) as p:
        small = p.send(topic, b"a" * 10)
        big = p.send(topic, b"b" * 5000)
        after = p.send(topic, b"c" * 10)
        p.flush()
    assert [small.result().offset, big.result().offset, after.result().offset] == [0, 1, 2]
    counts = [h.record_count for h in raw_batches(broker_url, topic, 0)]
    assert counts == [1, 1, 1]


def test_linger_holds_a_lone_record_then_sends_it(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)
    with Producer(broker_url, linger_ms=1000) as p:
        p.send(topic, b"warm").result(timeout=10)  # metadata and connection are ready
        start = time.monotonic()
        f = p.send(topic, b"lonely")
        time.sleep(0.2)
        # (Margins are wide: CI machines run other suites at the same time.)
        assert not f.done() or time.monotonic() - start >= 0.95, "sent before linger_ms"
        f.result(timeout=10)
        waited = time.monotonic() - start
    assert 0.95 <= waited < 5.0


def test_linger_zero_sends_at_once_and_flush_skips_linger(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(1)
    with Producer(broker_url, linger_ms=0) as p:
        p.send(topic, b"warm").result(timeout=10)
        start = time.monotonic()
        p.send(topic, b"now").result(timeout=10)
        assert time.monotonic() - start < 2
    with Producer(broker_url, linger_ms=60_000) as p:
        f = p.send(topic, b"flushed")
        start = time.monotonic()
        p.flush(timeout=10)
        assert f.done() and time.monotonic() - start < 5


def test_close_delivers_everything_buffered(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(3)
    p = Producer(broker_url, linger_ms=10_000, batch_size=16_384)
    futures = [p.send(topic, b"%d" % i) for i in range(5000)]
    p.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert sum(high_watermarks(broker_url, topic)) == 5000
    with pytest.raises(ProducerClosed):
        p.send(topic, b"late")


def test_keyed_records_land_where_kafka_puts_them(broker_url: str, make_topic: MakeTopic) -> None:
    partitions = 7
    topic = make_topic(partitions)
    keys = [b"user-%d" % i for i in range(300)] + [b"", b"\x00\xff", "ключ".encode()]
    with Producer(broker_url) as p:
        futures = {key: p.send(topic, b"v", key=key) for key in keys}
        p.flush()
    for key, f in futures.items():
        kafka_choice = (kafka_murmur2(key) & 0x7FFFFFFF) % partitions  # type: ignore[no-untyped-call]
        assert f.result().partition == kafka_choice == partition_for_key(key, partitions)
    stored = consume_all(broker_url, topic, partitions)
    for p_, records in stored.items():
        for _, stored_key, _ in records:
            assert stored_key is not None and futures[stored_key].result().partition == p_


def test_null_keys_stick_to_a_partition_per_batch(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(4)
    with Producer(broker_url, batch_size=2000, linger_ms=100) as p:
        futures = [p.send(topic, b"%090d" % i) for i in range(400)]
        p.flush()
    parts = [f.result().partition for f in futures]
    # Runs of one partition as long as a batch, and more than one partition used.
    changes = sum(1 for a, b in itertools.pairwise(parts) if a != b)
    assert len(set(parts)) > 1
    assert changes <= len(parts) // 10


def test_send_many_matches_send(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(2)
    with Producer(broker_url, batch_size=10_000) as p:
        report = p.send_many(topic, [b"%d" % i for i in range(3000)], timestamp=42)
        fixed = p.send_many(topic, [b"a", b"b"], partition=1)
        metas = report.result(timeout=10)
        assert len(report) == 3000 and report.done()
        assert [m.partition for m in fixed.result(timeout=10)] == [1, 1]
    assert all(m.timestamp == 42 for m in metas)
    by_partition: dict[int, list[int]] = {}
    for m in metas:
        by_partition.setdefault(m.partition, []).append(m.offset)
    for offsets in by_partition.values():
        assert offsets == sorted(offsets)
    stored = consume_all(broker_url, topic, 2)
    values = [v or b"" for p_ in (0, 1) for _, _, v in stored[p_]]
    assert sorted(values) == sorted([b"%d" % i for i in range(3000)] + [b"a", b"b"])


def test_unknown_partition_raises_from_send(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(2)
    with Producer(broker_url) as p, pytest.raises(UnknownTopicOrPartition):
        p.send(topic, b"x", partition=2)


def test_send_to_a_new_topic_creates_it(broker_url: str) -> None:
    # Kafka's producer metadata request: the broker's auto-create (on here) makes the topic.
    topic = f"sdk-auto-{time.monotonic_ns()}"
    with Producer(broker_url) as p:
        meta = p.send(topic, b"first").result(timeout=10)
    assert (meta.topic, meta.offset) == (topic, 0)
    assert high_watermarks(broker_url, topic) == [1]


def test_send_to_a_missing_topic_raises_when_the_broker_will_not_create_it() -> None:
    asked: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        if request.url.path == "/metadata":
            # What a broker with auto_create_topics_enable off answers.
            return httpx.Response(
                200, json={"cluster_id": "c", "brokers": [], "controller": 0, "topics": []}
            )
        return error_response(404, "INVALID_REQUEST", False)

    mock = httpx.MockTransport(handler)
    with (
        Producer("http://broker.invalid", transport=mock) as p,
        pytest.raises(UnknownTopicOrPartition),
    ):
        p.send("no-such-topic-here", b"x")
    lookups = [r for r in asked if r.url.path == "/metadata"]
    assert lookups and dict(lookups[0].url.params) == {
        "topics": "no-such-topic-here",
        "allow_auto_topic_creation": "true",
    }


def test_non_retriable_error_fails_the_future(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1, max_message_bytes=2000)
    with Producer(broker_url, linger_ms=0) as p:
        ok = p.send(topic, b"small")
        ok.result(timeout=10)
        too_big = p.send(topic, b"x" * 5000)
        with pytest.raises(RecordTooLarge) as info:
            too_big.result(timeout=10)
        after = p.send(topic, b"fine")
        assert after.result(timeout=10).offset == 1
    assert info.value.limit == 2000  # the broker's fields come through
    assert "exceeds" in info.value.message


def test_record_too_large_for_any_request_raises_at_send(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(1)
    with (
        Producer(broker_url, batch_size=1000, max_request_size=10_000) as p,
        pytest.raises(RecordTooLarge),
    ):
        p.send(topic, b"x" * 20_000)


def test_retriable_errors_are_retried_until_delivered(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(1)
    plan = {0: "connect", 1: error_response(503, "BROKER_NOT_AVAILABLE", True), 2: "connect"}
    transport = FaultyTransport(lambda n: plan.get(n))
    with Producer(broker_url, transport=transport, retry_backoff_ms=5, linger_ms=0) as p:
        metas = [f.result(timeout=10) for f in [p.send(topic, b"r%d" % i) for i in range(3)]]
    assert transport.produce_requests >= 4
    stored = consume_all(broker_url, topic, 1)[0]
    # Each failure happened before the broker appended: exactly once, in order.
    assert [v for _, _, v in stored] == [b"r0", b"r1", b"r2"]
    assert [m.offset for m in metas] == [0, 1, 2]


def test_lost_answers_are_retried_at_least_once_and_in_order(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(1)
    transport = FaultyTransport(lambda n: "lost" if n % 3 == 0 else None)
    with Producer(
        broker_url,
        transport=transport,
        retry_backoff_ms=1,
        linger_ms=0,
        batch_size=1000,
        enable_idempotence=False,
    ) as p:
        futures = [p.send(topic, b"%050d" % i) for i in range(200)]
        p.flush(timeout=30)
    assert all(f.exception() is None for f in futures)
    values = [int(v) for _, _, v in consume_all(broker_url, topic, 1)[0] if v is not None]
    # Without idempotence a lost answer means a duplicate batch, never a gap or a reordering.
    assert set(values) == set(range(200))
    assert len(values) > 200
    firsts = sorted(set(values), key=values.index)
    assert firsts == list(range(200))


def test_non_retriable_injected_error_is_not_retried(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(1)
    transport = FaultyTransport(
        lambda n: error_response(400, "CORRUPT_MESSAGE", False) if n == 0 else None
    )
    with Producer(broker_url, transport=transport, linger_ms=0) as p:
        f = p.send(topic, b"x")
        with pytest.raises(CorruptRecord) as info:
            f.result(timeout=10)
        assert info.value.message == "injected CORRUPT_MESSAGE"
        assert p.send(topic, b"y").result(timeout=10).offset == 0
    assert transport.produce_requests == 2


def test_delivery_timeout_ends_retries(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)
    transport = FaultyTransport(lambda n: "connect")
    with Producer(
        broker_url, transport=transport, retry_backoff_ms=20, delivery_timeout_ms=500, linger_ms=0
    ) as p:
        f = p.send(topic, b"x")
        with pytest.raises(DeliveryTimeout) as info:
            f.result(timeout=10)
    assert isinstance(info.value.__cause__, BrokerNotAvailable)
    assert transport.produce_requests >= 3


def test_send_blocks_on_full_buffer_then_gives_up(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)
    transport = FaultyTransport(lambda n: None)
    transport.delay = 0.5
    with Producer(
        broker_url,
        transport=transport,
        batch_size=1000,
        buffer_memory=3000,
        max_block_ms=100,
        linger_ms=0,
    ) as p:
        p.send(topic, b"warm").result(timeout=10)
        start = time.monotonic()
        with pytest.raises(BufferFull):
            for _ in range(1000):
                p.send(topic, b"x" * 500)
        assert 0.09 <= time.monotonic() - start < 5
    with Producer(
        broker_url, transport=transport, batch_size=1000, buffer_memory=3000, linger_ms=0
    ) as p:
        # With time to wait, back-pressure slows send down and everything arrives.
        futures = [p.send(topic, b"y" * 500) for _ in range(20)]
        p.flush(timeout=30)
        assert all(f.exception() is None for f in futures)


def _assert_refused_for_idempotence(p: Producer, topic: str) -> None:
    """The first record fails with UnsupportedByBroker, or send already refuses with the reason."""
    try:
        future = p.send(topic, b"x")
    except ProducerClosed as closed:
        assert "POST /producers" in str(closed)
    else:
        with pytest.raises(UnsupportedByBroker):
            future.result(timeout=10)
    with pytest.raises(ProducerClosed, match="POST /producers"):
        p.send(topic, b"y")


def test_idempotence_follows_the_broker_by_default(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)
    older = FaultyTransport(lambda n: None)
    older.missing_paths.add("/producers")  # a broker from before POST /producers
    with Producer(broker_url, transport=older, enable_idempotence=True) as p:
        _assert_refused_for_idempotence(p, topic)
    with Producer(broker_url, transport=older) as p:
        p.send(topic, b"plain").result(timeout=10)
    with Producer(broker_url) as p:
        p.send(topic, b"auto").result(timeout=10)
    with Producer(broker_url, acks=0) as p:
        p.send(topic, b"no acks, no idempotence").result(timeout=10)
    first, second, third = raw_batches(broker_url, topic, 0)
    assert first.producer_id == -1 and first.base_sequence == -1
    assert second.producer_id >= 0  # our broker offers POST /producers: on by default
    assert third.producer_id == -1
    with pytest.raises(ValueError):
        Producer(broker_url, acks=0, enable_idempotence=True)


def test_refused_batches_give_their_sequence_back(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1, max_message_bytes=2000)
    with Producer(broker_url, enable_idempotence=True, linger_ms=0) as p:
        assert p.send(topic, b"a").result(timeout=10).offset == 0
        with pytest.raises(RecordTooLarge):
            p.send(topic, b"x" * 5000).result(timeout=10)
        # No gap: the next batch reuses the refused one's sequence and is accepted.
        assert p.send(topic, b"b").result(timeout=10).offset == 1
    assert [h.base_sequence for h in raw_batches(broker_url, topic, 0)] == [0, 1]


def test_send_and_send_many_share_one_sequence_per_partition(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(2)
    with Producer(broker_url, enable_idempotence=True, batch_size=800, linger_ms=1) as p:
        for i in range(30):
            p.send_many(topic, [b"m%d" % i] * 7)
            p.send(topic, b"s%d" % i)
            p.send(topic, b"k%d" % i, key=b"%d" % i)
    total = 0
    for partition in (0, 1):
        expected = 0
        for h in raw_batches(broker_url, topic, partition):
            assert h.base_sequence == expected  # gapless, in log order
            expected += h.record_count
        total += expected
    assert total == 30 * 9


@pytest.mark.parametrize("in_flight", [1, 3])
def test_idempotent_retries_after_lost_answers_store_every_record_once(
    broker_url: str, make_topic: MakeTopic, in_flight: int
) -> None:
    topic = make_topic(3)
    transport = FaultyTransport(lambda n: "lost" if n % 3 == 0 else None)
    with Producer(
        broker_url,
        transport=transport,
        enable_idempotence=True,
        max_in_flight_per_partition=in_flight,
        retry_backoff_ms=1,
        linger_ms=0,
        batch_size=1000,
    ) as p:
        futures = [p.send(topic, b"%050d" % i, key=b"%d" % (i % 11)) for i in range(600)]
        p.flush(timeout=60)
    assert all(f.exception() is None for f in futures)
    assert transport.produce_requests > 3
    stored = consume_all(broker_url, topic, 3)
    values = [int(v) for records in stored.values() for _, _, v in records if v is not None]
    assert sorted(values) == list(range(600))  # nothing lost, nothing twice
    for p_, records in stored.items():
        sequence = [int(v) for _, _, v in records if v is not None]
        assert sequence == sorted(sequence)  # send order within a partition
        # Every future names the offset its record really has.
        for offset, _, v in records:
            assert v is not None and futures[int(v)].result().offset == offset
            assert futures[int(v)].result().partition == p_


def test_idempotent_producer_stamps_consecutive_sequences(
    broker_url: str, make_topic: MakeTopic
) -> None:
    # The broker offers POST /producers: the producer gets an id and numbers its records.
    topic = make_topic(1)
    with Producer(broker_url, enable_idempotence=True, batch_size=512) as p:
        for i in range(300):
            p.send(topic, b"idem %d" % i)
    headers = raw_batches(broker_url, topic, 0)
    assert len(headers) > 1
    assert len({h.producer_id for h in headers}) == 1 and headers[0].producer_id >= 0
    expected = 0
    for h in headers:
        assert h.base_sequence == expected
        expected += h.record_count
    values = [v for _, _, v in consume_all(broker_url, topic, 1)[0]]
    assert values == [b"idem %d" % i for i in range(300)]


def test_config_is_checked() -> None:
    with pytest.raises(ValueError):
        Producer("http://127.0.0.1:1", acks="2")
    with pytest.raises(ValueError):
        Producer("http://127.0.0.1:1", max_in_flight_per_partition=2)
    with pytest.raises(UnsupportedCompressionType):
        Producer("http://127.0.0.1:1", compression="brotli")


def test_compression_round_trips(broker_url: str, make_topic: MakeTopic) -> None:
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        topic = make_topic(1)
        with Producer(broker_url, compression=codec) as p:
            for i in range(500):
                p.send(topic, b"compressible %d " % i * 5, key=b"k")
        headers = raw_batches(broker_url, topic, 0)
        assert all(h.compression.name.lower() == codec for h in headers)
        values = [v for _, _, v in consume_all(broker_url, topic, 1)[0]]
        assert values == [b"compressible %d " % i * 5 for i in range(500)]


def test_acks_zero_resolves_without_offsets(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)
    with Producer(broker_url, acks=0) as p:
        meta = p.send(topic, b"x", timestamp=7).result(timeout=10)
    assert meta.offset == -1 and meta.timestamp == 7
    assert high_watermarks(broker_url, topic) == [1]


def test_bad_value_type_is_refused_and_the_producer_goes_on(
    broker_url: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(1)
    with Producer(broker_url) as p:
        with pytest.raises(TypeError):
            p.send(topic, "not bytes", key=b"k")  # type: ignore[arg-type]
        assert p.send(topic, b"ok", key=b"k").result(timeout=10).offset == 0


def test_headers_round_trip(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(1)
    with Producer(broker_url) as p:
        p.send(topic, b"v", headers=[("trace", b"abc"), ("empty", None)]).result(timeout=10)
    with Consumer(broker_url, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0)])
        (record,) = c.poll(timeout_ms=5000)
    assert record.headers == (("trace", b"abc"), ("empty", None))


def test_unreachable_broker_fails_at_first_send() -> None:
    with Producer("http://127.0.0.1:9", max_block_ms=2000) as p, pytest.raises(BrokerNotAvailable):
        p.send("t", b"x")


def test_invalid_record_from_broker_maps(broker_url: str) -> None:
    # Sanity: an empty binary body is INVALID_RECORD at the broker, and maps to the core class.
    from app.client.errors import error_from_body

    r = httpx.post(f"{broker_url}/topics/x-empty/partitions/0/batches", content=b"")
    assert isinstance(error_from_body(r.status_code, r.content), InvalidRecord)
