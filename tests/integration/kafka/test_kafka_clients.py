"""Unchanged Kafka clients against a real broker's Kafka door: librdkafka (confluent-kafka),
kafka-python and aiokafka produce and consume; one log, three doors (what the Kafka door
writes HTTP reads byte for byte, and the other way round)."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka_harness import KafkaBroker


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def rdkafka_consume(
    bootstrap: str, topic: str, count: int, **conf: object
) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **conf}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_idempotent_acks_all_produce_and_assign_consume(
    kafka_broker: KafkaBroker, codec: str
) -> None:
    topic = _topic(f"rd-{codec}")
    producer = Producer(
        {
            "bootstrap.servers": kafka_broker.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 5,
        }
    )
    delivered: list[tuple[object, int]] = []
    for i in range(200):
        producer.produce(
            topic,
            key=b"k%d" % i,
            value=b"value-%d" % i * 3,
            on_delivery=lambda err, msg: delivered.append(
                (err, msg.offset() if err is None else -1)
            ),
        )
    assert producer.flush(30) == 0
    assert [err for err, _ in delivered if err is not None] == []
    assert sorted(off for _, off in delivered) == list(range(200))
    got = rdkafka_consume(kafka_broker.bootstrap, topic, 200)
    assert got == [(i, b"k%d" % i, b"value-%d" % i * 3) for i in range(200)]


def test_kafka_python_produces_and_consumes(kafka_broker: KafkaBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    topic = _topic("kp")
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(50)]
    producer.flush(30)
    assert [f.get(timeout=30).offset for f in futures] == list(range(50))
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, enable_auto_commit=False)
    tp = KTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + 30
    while len(got) < 50 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [(r.offset, r.key, r.value) for r in records]
    consumer.close()
    assert got == [(i, b"k%d" % i, b"v%d" % i) for i in range(50)]


def test_aiokafka_produces_and_consumes(kafka_broker: KafkaBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    topic = _topic("aio")

    async def run() -> list[tuple[int, bytes | None, bytes | None]]:
        producer = AIOKafkaProducer(
            bootstrap_servers=kafka_broker.bootstrap,
            enable_idempotence=True,
            compression_type="gzip",
        )
        await producer.start()
        try:
            for i in range(50):
                await producer.send(topic, key=b"k%d" % i, value=b"v%d" % i)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka_broker.bootstrap, enable_auto_commit=False
        )
        await consumer.start()
        got: list[tuple[int, bytes | None, bytes | None]] = []
        try:
            tp = ATopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            async with asyncio.timeout(30):
                while len(got) < 50:
                    batch = await consumer.getmany(tp, timeout_ms=500)
                    got += [(r.offset, r.key, r.value) for r in batch.get(tp, [])]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [(i, b"k%d" % i, b"v%d" % i) for i in range(50)]


def test_one_log_three_doors(kafka_broker: KafkaBroker) -> None:
    """Kafka door -> HTTP byte for byte, and HTTP -> librdkafka."""
    topic = _topic("doors")
    values = [bytes(range(256)), b"", b"\x00\xff" * 1000]
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values):
        producer.produce(topic, key=b"k%d" % i, value=value)
    assert producer.flush(30) == 0
    with httpx.Client(base_url=kafka_broker.url, timeout=30) as http:
        answer = http.get(
            f"/topics/{topic}/partitions/0/records",
            params={"offset": 0, "key_format": "binary", "value_format": "binary"},
        ).json()
        assert [base64.b64decode(r["value"]) for r in answer["records"]] == values
        assert [base64.b64decode(r["key"]) for r in answer["records"]] == [b"k0", b"k1", b"k2"]

        back = _topic("doors-back")
        sent = [base64.b64encode(v).decode() for v in values]
        r = http.post(
            f"/topics/{back}/records",
            json={"records": [{"value": v} for v in sent], "value_format": "binary"},
        )
        assert r.status_code == 200, r.text
    got = rdkafka_consume(kafka_broker.bootstrap, back, len(values))
    assert [(off, value) for off, _, value in got] == list(enumerate(values))


def test_librdkafka_commits_are_the_groups_offsets_over_http(kafka_broker: KafkaBroker) -> None:
    """FindCoordinator, OffsetCommit and OffsetFetch on the group coordinator HTTP uses: a
    consumer outside any group (assign) commits, reads its commit back, and HTTP sees it."""
    topic, group = _topic("commit"), _topic("group")
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(5):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0
    conf = {"bootstrap.servers": kafka_broker.bootstrap, "group.id": group}
    consumer = Consumer({**conf, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 3
    finally:
        consumer.close()
    with httpx.Client(base_url=kafka_broker.url, timeout=30) as http:
        offsets = http.get(f"/groups/{group}/offsets").json()["offsets"]
    assert [(o["topic"], o["partition"], o["offset"]) for o in offsets] == [(topic, 0, 3)]
    # A new consumer of the group starts at the committed offset (OffsetFetch).
    got = []
    consumer = Consumer({**conf, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0)])  # OFFSET_STORED: the group's commit
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.offset())
    finally:
        consumer.close()
    assert got == [3, 4]


def _both_in_the_parked_fetch(
    consumer: Consumer, http: httpx.Client, topic: str, deadline: float
) -> None:
    """Return once the consumer's next Fetch names partitions 0 and 1.

    librdkafka keeps one Fetch in flight per broker, naming the partitions that were
    fetchable when it was sent; a partition that becomes fetchable later (here: joined to
    the broker's thread a moment after the other, which a loaded host makes likely)
    waits for that Fetch's answer, up to ``fetch.wait.max.ms``. So records go to
    partition 0, one at a time, until an answer has carried partition 1's end (a
    _PARTITION_EOF event) and every one of them is read: the Fetch sent after that
    answer names both, and nothing but a new append can answer it early."""
    sent = read = 0
    eof_1 = False
    while not (eof_1 and read == sent):
        assert time.monotonic() < deadline, f"{read} of {sent} read, partition 1's end: {eof_1}"
        if read == sent:  # one record at a time: none left to answer a later Fetch
            r = http.post(
                f"/topics/{topic}/partitions/0/records",
                json={"records": [{"value": f"early-{sent}"}], "value_format": "string"},
            )
            assert r.status_code == 200, r.text
            sent += 1
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() is None:
            assert (msg.partition(), msg.value()) == (0, b"early-%d" % read)
            read += 1
        else:
            assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            eof_1 = eof_1 or msg.partition() == 1


@pytest.mark.parametrize("joins", ["together", "staggered"])
def test_a_long_poll_is_woken_by_an_append_to_any_partition_it_asked_for(
    kafka_broker: KafkaBroker, joins: str
) -> None:
    """A Fetch names two partitions and waits up to 30 s: an HTTP produce to the second one
    ends the wait (long before the 30 s: the bound only catches a wait not woken).

    ``staggered`` assigns partition 1 a second after partition 0, so that (unless the
    host is too loaded for librdkafka to have sent one by then) a Fetch naming partition 0
    alone is in flight: what librdkafka sometimes does on its own under load with both
    assigned at once. The test failed twice that way before it waited for a Fetch naming
    both: the produce to partition 1 went unseen until that Fetch's 30 s were over."""
    topic = _topic("wake")
    with httpx.Client(base_url=kafka_broker.url, timeout=30) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 2}).status_code == 201
        consumer = Consumer(
            {
                "bootstrap.servers": kafka_broker.bootstrap,
                "group.id": "unused",
                "fetch.wait.max.ms": 30_000,
                "socket.timeout.ms": 60_000,
                "enable.partition.eof": True,
            }
        )
        try:
            if joins == "together":
                consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
            else:
                consumer.assign([TopicPartition(topic, 0, 0)])
                assert consumer.poll(1) is None  # a Fetch naming partition 0 only
                consumer.incremental_assign([TopicPartition(topic, 1, 0)])
            _both_in_the_parked_fetch(consumer, http, topic, time.monotonic() + 25)
            start = time.monotonic()
            r = http.post(
                f"/topics/{topic}/partitions/1/records",
                json={"records": [{"value": "late"}], "value_format": "string"},
            )
            assert r.status_code == 200, r.text
            msg = None
            while msg is None and time.monotonic() - start < 25:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is not None:
                    # partition 0's end again, at most: no record is due there
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    assert msg.partition() == 0, msg.partition()
                    msg = None
            assert msg is not None, "the append to partition 1 did not wake the Fetch"
            assert (msg.partition(), msg.value()) == (1, b"late")
        finally:
            consumer.close()


def test_read_committed_over_the_kafka_door_skips_an_aborted_http_transaction(
    kafka_broker: KafkaBroker,
) -> None:
    """Transactions written over HTTP, read by librdkafka: read_committed (its default)
    gets the committed records only, read_uncommitted all of them (the aborted
    transactions travel in the Fetch answer, control batches are skipped by the client)."""
    topic = _topic("txn")
    with httpx.Client(base_url=kafka_broker.url, timeout=30) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
        for outcome in ("abort", "commit"):
            tid = _topic(f"tid-{outcome}")
            ids = http.post("/producers", json={"transactional_id": tid}).json()
            r = http.post(
                f"/transactions/{tid}/topics/{topic}/records",
                params=ids,
                json={"records": [{"value": outcome}], "value_format": "string"},
            )
            assert r.status_code == 200, r.text
            r = http.post(f"/transactions/{tid}/{outcome}", json=ids)
            assert r.status_code == 200, r.text
        # One plain record after both markers, so each reader has an end to reach.
        r = http.post(
            f"/topics/{topic}/records",
            json={"records": [{"value": "plain"}], "value_format": "string"},
        )
        assert r.status_code == 200, r.text

    def values(level: str, count: int) -> list[bytes | None]:
        got = rdkafka_consume(kafka_broker.bootstrap, topic, count, **{"isolation.level": level})
        return [value for _, _, value in got]

    assert values("read_committed", 2) == [b"commit", b"plain"]
    assert values("read_uncommitted", 3) == [b"abort", b"commit", b"plain"]


def test_list_offsets_earliest_latest_and_by_time(kafka_broker: KafkaBroker) -> None:
    topic = _topic("offsets")
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i, ts in enumerate((1_000, 2_000, 3_000)):
        producer.produce(topic, value=b"v%d" % i, timestamp=ts)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "unused"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 3)
        (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, 1_500)], timeout=10)
        assert found.offset == 1
        (after,) = consumer.offsets_for_times([TopicPartition(topic, 0, 9_000)], timeout=10)
        assert after.offset == -1  # none at or after: Kafka's "no offset" (-1)
    finally:
        consumer.close()


def test_acks_0_is_appended_and_unanswered(kafka_broker: KafkaBroker) -> None:
    topic = _topic("acks0")
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "acks": 0})
    for i in range(20):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0
    got = rdkafka_consume(kafka_broker.bootstrap, topic, 20)
    assert [value for _, _, value in got] == [b"v%d" % i for i in range(20)]


def test_a_produce_error_is_the_kafka_code_of_the_error_tree(kafka_broker: KafkaBroker) -> None:
    """Writing an internal topic (the broker's __consumer_offsets, there from its start) is
    InvalidTopic (INVALID_TOPIC_EXCEPTION, 17) over HTTP; over the Kafka door the delivery
    report carries the same Kafka error."""
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "retries": 0})
    errors: list[KafkaError] = []
    producer.produce(
        "__consumer_offsets", value=b"x", partition=0, on_delivery=lambda e, m: errors.append(e)
    )
    producer.flush(30)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_EXCEPTION]


def test_describe_cluster_names_this_broker(kafka_broker: KafkaBroker) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    cluster = admin.describe_cluster(request_timeout=10).result(timeout=30)
    with httpx.Client(base_url=kafka_broker.url, timeout=30) as http:
        metadata = http.get("/metadata").json()
    assert cluster.cluster_id == metadata["cluster_id"]
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [
        (0, "127.0.0.1", kafka_broker.kafka_port)
    ]
    assert cluster.controller.id == 0
