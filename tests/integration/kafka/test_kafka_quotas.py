"""Client quotas on the Kafka door: the quotas HTTP clients are held to, by the same
manager, with Kafka's throttle_time_ms (KIP-219).

One broker for the module with a short quota window (11 x 0.2 s: the burst a client may
send before it is throttled is 2.2 s worth of its quota). Quotas are set over HTTP
(``POST /quotas``) on a client id; librdkafka reports the throttle times it is told in
``throttle_cb``. The throttled client's rate falls to its quota once the burst is spent,
every record still arrives; a client id without a quota beside it is not throttled."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_harness import KafkaBroker, start_broker, stop_broker

pytestmark = pytest.mark.slow

QUOTA = 40_000  # bytes/s
RECORDS, VALUE = 200, b"x" * 1000  # 200 KB: the 88 KB burst, then ~2.8 s at the quota


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    started = start_broker(
        tmp_path_factory.mktemp("kafka-quotas"), ("LOGBUS_QUOTA_WINDOW_SIZE_S", "0.2")
    )
    yield started
    stop_broker(started)


def set_quota(broker: KafkaBroker, client_id: str, key: str, value: float) -> None:
    body = {
        "entries": [
            {
                "entity": [{"entity_type": "client-id", "entity_name": client_id}],
                "ops": [{"key": key, "value": value}],
            }
        ]
    }
    answer = httpx.post(f"{broker.url}/quotas", json=body, timeout=10)
    assert answer.status_code == 200, answer.text


def produce(broker: KafkaBroker, topic: str, client_id: str) -> tuple[float, list[Any]]:
    """Seconds to produce RECORDS records as ``client_id``, and the throttle events."""
    throttles: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "batch.size": 16_384,
            "throttle_cb": throttles.append,
        }
    )
    start = time.monotonic()
    for _ in range(RECORDS):
        producer.produce(topic, VALUE)
        producer.poll(0)
    assert producer.flush(60) == 0
    return time.monotonic() - start, throttles


def test_a_produce_quota_throttles_librdkafka(broker: KafkaBroker) -> None:
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    set_quota(broker, "slow-producer", "producer_byte_rate", QUOTA)
    elapsed, throttles = produce(broker, topic, "slow-producer")
    assert throttles, "no throttle_time_ms reached the client"
    assert max(t.throttle_time for t in throttles) > 0
    # 200 KB at 40 KB/s after an 88 KB burst: well over 2 s (the frames' own headers
    # count too); unthrottled it takes a fraction of a second.
    assert elapsed >= 2.0, elapsed
    free_elapsed, free_throttles = produce(broker, topic, "free-producer")
    assert not free_throttles and free_elapsed < elapsed, (free_elapsed, free_throttles)


def test_a_fetch_quota_throttles_librdkafka(broker: KafkaBroker) -> None:
    topic = f"quota-fetch-{uuid.uuid4().hex[:8]}"
    produce(broker, topic, "filler")
    set_quota(broker, "slow-reader", "consumer_byte_rate", QUOTA)
    throttles: list[Any] = []
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "slow-reader",
            "group.id": "unused",
            "enable.auto.commit": False,
            # Small fetches, so the quota is measured over many answers.
            "message.max.bytes": 16_384,
            "fetch.max.bytes": 16_384,
            "max.partition.fetch.bytes": 16_384,
            "throttle_cb": throttles.append,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.monotonic()
    deadline = start + 60
    try:
        while got < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
    finally:
        consumer.close()
    elapsed = time.monotonic() - start
    assert got == RECORDS
    assert throttles and max(t.throttle_time for t in throttles) > 0, throttles
    assert elapsed >= 2.0, elapsed
