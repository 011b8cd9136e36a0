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

* ``rdkafka_fetch_gb_s``: fetch throughput in bytes, a librdkafka consumer reading a
  topic of large records (``FETCH_VALUE_BYTES`` values in batches of up to 1 MiB,
  ``FETCH_BYTES`` in all, 4 partitions, from offset 0, counting ``len(value)``) in GB/s
  (10^9 bytes); ``sdk_fetch_gb_s``: the SDK's ``Consumer.poll`` over HTTP reading the same
  topic, the same-run baseline; ``fetch_ratio`` the first over the second;
* ``rdkafka_produce_p50_ms``/``_p99_ms``: librdkafka's produce latency (``produce`` to its
  delivery report, acks=1, librdkafka's defaults otherwise: ``linger.ms=5``) at a steady
  ``LATENCY_RATE`` records/s for ``LATENCY_SECONDS`` (paced as ``logbus perf produce
  --throughput`` paces, delivery reports served by a thread blocked in ``poll``);
  ``sdk_produce_p50_ms``/``_p99_ms``: ``logbus perf produce --throughput 10000`` (the SDK
  over HTTP, :func:`app.perf.run_produce`) at the same rate, the same-run baseline;
  ``produce_p99_ratio``: the SDK's p99 over librdkafka's (above 1: the Kafka door is
  faster).

The four are taken round-robin (one of each per round), each the median over ``rounds``
rounds, in records per second; ``*_ratio``: the Kafka door's figure over the SDK's, same
round, median; ``*_broker_cpu_us_per_record``: the broker process's CPU time (/proc)
over the records of that figure, steadier than records/s on a loaded machine. The
clients run in this process, sharing the machine's cores with the
broker, as a user's laptop run would.
"""

from __future__ import annotations

import functools
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


FETCH_VALUE_BYTES = 64 * 1024
FETCH_BYTES = 512 * 1024 * 1024
LATENCY_RATE = 10_000
LATENCY_SECONDS = 10


def fill_large(bootstrap: str, topic: str, total: int = FETCH_BYTES) -> int:
    """``total`` bytes of ``FETCH_VALUE_BYTES`` values into ``topic`` (spread over its
    partitions by librdkafka), batches of up to 1 MiB; the record count."""
    from confluent_kafka import Producer

    value = b"y" * FETCH_VALUE_BYTES
    count = total // len(value)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 20,
            "batch.size": 1024 * 1024,
            "message.max.bytes": 2 * 1024 * 1024,
            "queue.buffering.max.kbytes": 1024 * 1024,
            "enable.idempotence": False,
        }
    )
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(300)
    assert left == 0, f"{left} large records not delivered"
    return count


def rdkafka_fetch(bootstrap: str, topic: str, records: int) -> float:
    """GB/s (10^9 bytes of values) a librdkafka consumer reads ``topic`` at, from offset 0."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "queued.max.messages.kbytes": 256 * 1024,
            "fetch.queue.backoff.ms": 10,  # see rdkafka_consume
            # Fewer, larger reads of the 50 MiB answers (the broker's fetch_max_bytes):
            # ~0.49 against ~0.42 GB/s here with the system default.
            "socket.receive.buffer.bytes": 8 * 1024 * 1024,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = nbytes = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 120
    try:
        while got < records and time.monotonic() < deadline:
            # A short timeout: consume() waits for its whole count or the timeout, so the
            # last partial batch would otherwise add the timeout to the figure (1 s was
            # more than the whole read).
            for msg in consumer.consume(1000, timeout=0.01):
                if msg.error() is None:
                    got += 1
                    nbytes += len(msg.value() or b"")
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    assert got >= records, f"read {got} of {records}"
    return nbytes / elapsed / 1e9


def sdk_fetch(url: str, topic: str, records: int) -> float:
    """GB/s the SDK's ``Consumer.poll`` reads the same topic at over HTTP (the baseline)."""
    from app.client import Consumer, TopicPartition

    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    with Consumer(
        url,
        auto_offset_reset="earliest",
        max_poll_records=1000,
        max_partition_fetch_bytes=16 * 1024 * 1024,
    ) as consumer:
        consumer.assign(tps)
        for tp in tps:
            consumer.position(tp)
        got = nbytes = 0
        start = time.perf_counter()
        while got < records:
            batch = consumer.poll(timeout_ms=10_000)
            if not batch:
                raise RuntimeError(f"SDK fetch stalled at {got} of {records}")
            got += len(batch)
            nbytes += sum(len(r.value or b"") for r in batch)
        return nbytes / (time.perf_counter() - start) / 1e9


def rdkafka_produce_latency(
    bootstrap: str, topic: str, rate: int = LATENCY_RATE, seconds: int = LATENCY_SECONDS
) -> dict[str, float]:
    """librdkafka's produce-to-delivery-report latency at a steady ``rate`` records/s:
    p50 and p99 in ms (nearest rank, as :mod:`app.perf`)."""
    import threading

    from confluent_kafka import Producer

    from app.perf import Pacer, percentile

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False})
    producer.produce(topic, VALUE)  # metadata and connections first
    producer.flush(30)
    latencies: list[float] = []
    errors: list[object] = []
    clock = time.perf_counter

    def report(sent_at: float, err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            latencies.append((clock() - sent_at) * 1000)

    done = threading.Event()

    def serve_reports() -> None:
        while not done.is_set():
            producer.poll(0.05)  # the GIL is released while it waits

    server = threading.Thread(target=serve_reports, name="bench-delivery-reports")
    server.start()
    total = rate * seconds
    try:
        pacer = Pacer(rate)
        sent = 0
        while sent < total:
            n = min(pacer.step, total - sent)
            for _ in range(n):
                now = clock()
                producer.produce(topic, VALUE, on_delivery=functools.partial(report, now))
            sent += n
            pacer.wait(sent)
        left = producer.flush(60)
    finally:
        done.set()
        server.join()
    assert left == 0 and not errors, f"{left} undelivered, errors {errors[:3]}"
    ordered = sorted(latencies)
    assert len(ordered) == total
    return {"p50": round(percentile(ordered, 50), 3), "p99": round(percentile(ordered, 99), 3)}


def sdk_produce_latency(
    url: str, topic: str, rate: int = LATENCY_RATE, seconds: int = LATENCY_SECONDS
) -> dict[str, float]:
    """``logbus perf produce --throughput RATE`` (the SDK over HTTP): p50 and p99 in ms."""
    from app.perf import PerfOptions, run_produce

    result = run_produce(
        PerfOptions(
            url=url, topic=topic, records=rate * seconds, throughput=rate, partitions=PARTITIONS
        )
    )
    lat = result["latency_ms"]
    return {"p50": float(lat["p50"]), "p99": float(lat["p99"])}


def run_fetch_and_latency(rounds: int = 3) -> dict[str, Any]:
    """The fetch GB/s and produce p99 figures (see the module docstring), one broker."""
    kafka_port = free_port()
    bootstrap = f"127.0.0.1:{kafka_port}"
    fetch: dict[str, list[float]] = {"rdkafka": [], "sdk": []}
    lat: dict[str, list[dict[str, float]]] = {"rdkafka": [], "sdk": []}
    with broker_process({"LOGBUS_KAFKA_LISTENER": bootstrap}) as (url, _pid), Admin(url) as admin:

        def fresh() -> str:
            name = f"kd-{uuid.uuid4().hex[:8]}"
            admin.create_topic(name, PARTITIONS)
            return name

        for _ in range(rounds):
            topic = fresh()
            count = fill_large(bootstrap, topic)
            fetch["rdkafka"].append(rdkafka_fetch(bootstrap, topic, count))
            fetch["sdk"].append(sdk_fetch(url, topic, count))
            admin.delete_topic(topic)
            lat["rdkafka"].append(rdkafka_produce_latency(bootstrap, fresh()))
            lat["sdk"].append(sdk_produce_latency(url, fresh()))
    med = statistics.median
    out: dict[str, Any] = {
        "fetch_value_bytes": FETCH_VALUE_BYTES,
        "fetch_bytes": FETCH_BYTES,
        "latency_rate": LATENCY_RATE,
        "latency_seconds": LATENCY_SECONDS,
        "rdkafka_fetch_gb_s": round(med(fetch["rdkafka"]), 3),
        "sdk_fetch_gb_s": round(med(fetch["sdk"]), 3),
        "fetch_ratio": round(med(a / b for a, b in zip(*fetch.values(), strict=True)), 2),
        "fetch_samples_gb_s": {k: [round(v, 3) for v in vs] for k, vs in fetch.items()},
    }
    for who in ("rdkafka", "sdk"):
        for q in ("p50", "p99"):
            out[f"{who}_produce_{q}_ms"] = round(med(x[q] for x in lat[who]), 3)
    out["produce_p99_ratio"] = round(
        med(s["p99"] / r["p99"] for r, s in zip(lat["rdkafka"], lat["sdk"], strict=True)), 2
    )
    out["latency_samples_ms"] = lat
    return out


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
    import sys

    if sys.argv[1:] == ["--fetch-latency"]:
        print(json.dumps(run_fetch_and_latency(), indent=2))
    else:
        print(json.dumps({**run(), **run_fetch_and_latency()}, indent=2))
