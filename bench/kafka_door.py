"""librdkafka through the Kafka door against the SDK through the HTTP door, same broker.

``python -m bench.kafka_door`` prints the figures as JSON; ``run()`` returns them. One
``logbus serve`` with its Kafka listener on a free loopback port; 100-byte values, null
keys, a 4-partition topic per figure and round, acks=1:

* ``rdkafka_produce``: confluent-kafka's ``Producer.produce`` per record (librdkafka
  batches, ``linger.ms=5``, ``batch.size`` 1 MiB, no compression), timed from the first
  call to ``flush``; ``rdkafka_consume``: its ``Consumer.consume(10_000)`` over the four
  partitions assigned from offset 0 (no group), until every record is read
  (``fetch.queue.backoff.ms=10``, see ``rdkafka_consume``);
* ``sdk_produce_send`` and ``sdk_consume``: the SDK's ``Producer.send`` per record and
  ``Consumer.poll`` over HTTP (``bench/sdk.py``'s own functions), the same-run baseline.

The four are taken round-robin (one of each per round), each the median over ``rounds``
rounds, in records per second; ``*_ratio``: the Kafka door's figure over the SDK's, same
round, median; ``*_broker_cpu_us_per_record``: the broker process's CPU time (/proc)
over the records of that figure, steadier than records/s on a loaded machine. The
clients run in this process, sharing the machine's cores with the
broker, as a user's laptop run would.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from typing import Any

from app.client import Admin
from bench import sdk
from bench.common import broker_process, free_port

DEFAULT_RECORDS = 500_000
VALUE = b"x" * 100
PARTITIONS = 4


def rdkafka_produce(
    bootstrap: str, topic: str, records: int, extra: dict[str, Any] | None = None
) -> float:
    """``extra``: more librdkafka settings (security: bench/kafka_door_tls.py)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **(extra or {}),
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 1024 * 1024,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": False,
        }
    )
    producer.produce(topic, VALUE)  # metadata and connections warm, as bench/sdk.py does
    producer.flush(30)
    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for i in range(records):
        try:
            produce(topic, VALUE)
        except BufferError:
            poll(0.01)
            produce(topic, VALUE)
        if i % 10_000 == 0:
            poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    assert left == 0, f"{left} records not delivered"
    return records / elapsed


def rdkafka_consume(
    bootstrap: str, topic: str, records: int, extra: dict[str, Any] | None = None
) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **(extra or {}),
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * 1024 * 1024,
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
            # librdkafka stops fetching a partition whose local queue is over
            # queued.min.messages and retries after this backoff (1 s by default): with
            # 8 MiB answers of 100-byte records the queue fills at once and the broker,
            # idle meanwhile (0.02 CPU-s for 500k records), waited on the client. Default:
            # ~200k records/s here; 10 ms: ~420k.
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 120
    try:
        while got < records and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, timeout=1):
                if msg.error() is None:
                    got += 1
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    assert got >= records, f"read {got} of {records}"
    return got / elapsed


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc)."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(records: int = DEFAULT_RECORDS, rounds: int = 3) -> dict[str, Any]:
    kafka_port = free_port()
    bootstrap = f"127.0.0.1:{kafka_port}"
    samples: dict[str, list[float]] = {
        k: [] for k in ("rdkafka_produce", "rdkafka_consume", "sdk_produce_send", "sdk_consume")
    }
    cpu: dict[str, list[float]] = {k: [] for k in samples}
    with broker_process({"LOGBUS_KAFKA_LISTENER": bootstrap}) as (url, pid), Admin(url) as admin:

        def fresh() -> str:
            name = f"kd-{uuid.uuid4().hex[:8]}"
            admin.create_topic(name, PARTITIONS)
            return name

        def measure(name: str, fn: Any, *args: Any) -> None:
            before = _cpu_s(pid)
            samples[name].append(fn(*args))
            cpu[name].append((_cpu_s(pid) - before) / records * 1e6)

        for _ in range(rounds):
            topic = fresh()
            measure("rdkafka_produce", rdkafka_produce, bootstrap, topic, records)
            measure("rdkafka_consume", rdkafka_consume, bootstrap, topic, records)
            topic = fresh()
            measure("sdk_produce_send", sdk.produce_send, url, topic, records)
            measure("sdk_consume", sdk.consume, url, topic)
    result: dict[str, Any] = {"records": records, "rounds": rounds, "value_bytes": len(VALUE)}
    for name, values in samples.items():
        result[name] = round(statistics.median(values))
        result[f"{name}_broker_cpu_us_per_record"] = round(statistics.median(cpu[name]), 3)
    result["produce_ratio"] = round(
        statistics.median(
            a / b
            for a, b in zip(samples["rdkafka_produce"], samples["sdk_produce_send"], strict=True)
        ),
        2,
    )
    result["consume_ratio"] = round(
        statistics.median(
            a / b for a, b in zip(samples["rdkafka_consume"], samples["sdk_consume"], strict=True)
        ),
        2,
    )
    return result


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
