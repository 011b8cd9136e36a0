"""Throughput through the Python SDK (app.client): produce and consume, 100-byte values, acks=1.

``python -m bench.sdk URL`` against a running broker prints the figures as
JSON; ``run(url)`` returns them. Each figure is the median of ``runs`` runs,
each on a fresh topic, timed from the first send to the last acknowledgement
(``flush``) and, for consume, from the first poll to the last record.

Produce figures, because they measure different things:

* ``produce_send``: one ``Producer.send`` call per record, null keys, each
  returning a delivery future: what code written like Kafka's Java client gets.
* ``produce_send_keyed_callback``: the same with one of 1,000 keys per record
  and a delivery callback per record (a Python function, called once per
  record; it counts, and the count is checked): the idiomatic Kafka-style call.
* ``produce_send_keyed_recorder``: the same loop with ``perf produce``'s own
  callback (the producer extension's latency recorder) instead of the Python
  function: ``perf produce --keys 1000``'s workload written as a plain loop.
* ``perf_produce_keyed`` and ``perf_produce``: what ``logbus perf produce
  --partitions 4 --records N --keys 1000`` (the same workload as the figure
  above) and plain ``logbus perf produce`` (null keys, as Kafka's tool) print,
  run through :func:`app.perf.run_produce` itself, so the README's figures
  are the tool's.
* ``produce_send_many``: ``Producer.send_many`` with lists of 10,000 values:
  the same batches, requests and acknowledgements, without a Python call,
  lock and future per record.

The five produce figures of one run are taken round-robin (one sample of
each, then the next round), so load from other work on the machine falls on
all of them alike; each is the median of its samples. ``producer_compiled``
says whether the producer's C extension was in use.

and two consume figures, over the same topics: ``consume`` with
``Consumer.poll`` (a ConsumerRecord tuple per record) and ``consume_columns``
with ``Consumer.poll_columns`` (parallel lists per partition).

And end-to-end latency (``e2e_*_ms``): ``logbus perf e2e``'s loop
(:func:`app.perf.run_e2e`) producing 10,000 records/s into a one-partition
topic (as Kafka's EndToEndLatency tool does) while a consumer in the same
process reads them; per record, receive time minus the send time stamped in
its value. Each percentile is the median over the runs.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from app.client import Admin, Consumer, Producer, RecordMetadata, TopicPartition
from app.client.producer import _speedups
from app.perf import PerfOptions, perf_keys, run_e2e, run_produce
from bench.common import median_of

VALUE = b"x" * 100
PARTITIONS = 4
E2E_RATE = 10_000
E2E_PERCENTILES = (("p50", "e2e_p50_ms"), ("p99", "e2e_p99_ms"), ("p999", "e2e_p999_ms"))


def _topic(admin: Admin) -> str:
    name = f"bench-sdk-{uuid.uuid4().hex[:8]}"
    admin.create_topic(name, PARTITIONS)
    return name


def produce_send(url: str, topic: str, records: int) -> float:
    """Records/s with one ``send`` per record."""
    with Producer(url, acks=1) as producer:
        producer.send(topic, VALUE).result(timeout=30)  # metadata and connections are warm
        send, value = producer.send, VALUE  # locals: the loop measures send, not lookups
        start = time.perf_counter()
        for _ in range(records):
            send(topic, value)
        producer.flush()
        return records / (time.perf_counter() - start)


KEYS = 1_000


def produce_send_keyed_callback(
    url: str, topic: str, records: int, recorder: bool = False
) -> float:
    """Records/s with one ``send(topic, value, key=..., on_delivery=...)`` per record; the
    callback is a Python function that counts, or ``perf produce``'s latency recorder."""
    keys = perf_keys(KEYS)
    delivered = [0]

    def count(meta: RecordMetadata | None, exc: BaseException | None) -> None:
        if meta is not None:
            delivered[0] += 1

    latencies = _speedups.LatencyRecorder()
    on_delivery: Callable[[RecordMetadata | None, BaseException | None], None] = (
        latencies if recorder else count
    )
    with Producer(url, acks=1) as producer:
        producer.send(topic, VALUE).result(timeout=30)
        # Locals, as perf produce's own loop: the two module-global look-ups a record this
        # loop paid were part of why perf measured faster than send (1.11-1.12x).
        send, value, nkeys = producer.send, VALUE, KEYS
        start = time.perf_counter()
        for i in range(records):
            send(topic, value, key=keys[i % nkeys], on_delivery=on_delivery)
        producer.flush()
        rate = records / (time.perf_counter() - start)
    if recorder:
        delivered[0] = len(latencies.latencies()) // 8
    if delivered[0] != records:
        raise RuntimeError(f"{delivered[0]} of {records} records acknowledged")
    return rate


def perf_produce(url: str, topic: str, records: int, keys: int) -> float:
    """``logbus perf produce --partitions 4 --records N [--keys K]``: its records/s."""
    result = run_produce(
        PerfOptions(url=url, topic=topic, records=records, partitions=PARTITIONS, keys=keys)
    )
    if result["acknowledged"] != records:
        raise RuntimeError(f"perf produce: {result}")
    return float(result["records_per_s"])


def produce_send_many(url: str, topic: str, records: int, chunk: int = 10_000) -> float:
    """Records/s with ``send_many`` over lists of ``chunk`` values."""
    values = [VALUE] * chunk
    with Producer(url, acks=1) as producer:
        producer.send(topic, VALUE).result(timeout=30)
        send_many = producer.send_many
        start = time.perf_counter()
        for _ in range(records // chunk):
            send_many(topic, values)
        producer.flush()
        return (records // chunk) * chunk / (time.perf_counter() - start)


def consume(url: str, topic: str, max_records: int = 10_000, columns: bool = False) -> float:
    """Records/s reading the whole topic from the beginning, with ``poll`` or ``poll_columns``."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    with Consumer(url, auto_offset_reset="earliest", max_poll_records=max_records) as consumer:
        consumer.assign(tps)
        total = sum(consumer.end_offsets(tps).values())
        for tp in tps:
            consumer.position(tp)
        seen = 0
        start = time.perf_counter()
        while seen < total:
            if columns:
                got = sum(len(c) for c in consumer.poll_columns(timeout_ms=10_000))
            else:
                got = len(consumer.poll(timeout_ms=10_000))
            if not got:
                raise RuntimeError(f"consume stalled at {seen} of {total}")
            seen += got
        return seen / (time.perf_counter() - start)


def e2e_latency(url: str, records: int = 50_000, rate: float = E2E_RATE) -> dict[str, Any]:
    """One ``perf e2e`` run at ``rate`` records/s on a fresh one-partition topic."""
    topic = f"bench-e2e-{uuid.uuid4().hex[:8]}"
    try:
        result = run_e2e(
            PerfOptions(url=url, topic=topic, records=records, throughput=rate, partitions=1)
        )
    finally:
        with Admin(url) as admin:
            admin.delete_topic(topic)
    if result["lost"] or result["duplicates"]:
        raise RuntimeError(f"e2e run lost or duplicated records: {result}")
    return dict(result["latency_ms"])


def run(
    url: str,
    runs: int = 3,
    send_records: int = 1_000_000,
    many_records: int = 3_000_000,
    e2e_records: int = 50_000,
) -> dict[str, Any]:
    topics: list[str] = []
    with Admin(url) as admin:

        def fresh() -> str:
            topics.append(_topic(admin))
            return topics[-1]

        produce: dict[str, tuple[Callable[[], float], list[float]]] = {
            "send": (lambda: produce_send(url, fresh(), send_records), []),
            "keyed": (lambda: produce_send_keyed_callback(url, fresh(), send_records), []),
            "keyed_recorder": (
                lambda: produce_send_keyed_callback(url, fresh(), send_records, recorder=True),
                [],
            ),
            "perf_keyed": (lambda: perf_produce(url, fresh(), send_records, KEYS), []),
            "perf": (lambda: perf_produce(url, fresh(), send_records, 0), []),
        }
        for _ in range(runs):  # round-robin: the machine's load falls on all alike
            for fn, samples in produce.values():
                samples.append(fn())
        rates = {name: statistics.median(samples) for name, (_, samples) in produce.items()}
        for name in topics:  # only the send_many topics are consumed below
            admin.delete_topic(name)
        many_topics_start = len(topics)

        def one_many() -> float:
            return produce_send_many(url, fresh(), many_records)

        many_rate, many_samples = median_of(runs, one_many)
        # Consume the send_many topics: the biggest, and written in full batches.
        many_topics = iter(topics[many_topics_start:])
        consume_rate, consume_samples = median_of(runs, lambda: consume(url, next(many_topics)))
        many_topics = iter(topics[many_topics_start:])
        columns_rate, columns_samples = median_of(
            runs, lambda: consume(url, next(many_topics), columns=True)
        )
        for name in topics[many_topics_start:]:
            admin.delete_topic(name)
    # Latency last, on a broker no longer busy with the throughput topics.
    e2e_runs = [e2e_latency(url, e2e_records) for _ in range(runs)]
    e2e = {key: statistics.median(r[field] for r in e2e_runs) for field, key in E2E_PERCENTILES}
    bytes_per_record = len(VALUE)
    return {
        "value_bytes": bytes_per_record,
        "partitions": PARTITIONS,
        "acks": 1,
        "producer_compiled": _speedups.COMPILED,
        "produce_send_records_per_s": rates["send"],
        "produce_send_mb_per_s": rates["send"] * bytes_per_record / 1e6,
        "produce_send_samples": produce["send"][1],
        "produce_send_keyed_callback_records_per_s": rates["keyed"],
        "produce_send_keyed_callback_samples": produce["keyed"][1],
        "produce_send_keyed_recorder_records_per_s": rates["keyed_recorder"],
        "produce_send_keyed_recorder_samples": produce["keyed_recorder"][1],
        "perf_produce_keyed_records_per_s": rates["perf_keyed"],
        "perf_produce_keyed_samples": produce["perf_keyed"][1],
        "perf_produce_records_per_s": rates["perf"],
        "perf_produce_samples": produce["perf"][1],
        "perf_vs_send_keyed_recorder": rates["perf_keyed"] / rates["keyed_recorder"],
        "perf_vs_send_keyed_callback": rates["perf_keyed"] / rates["keyed"],
        "produce_send_many_records_per_s": many_rate,
        "produce_send_many_mb_per_s": many_rate * bytes_per_record / 1e6,
        "produce_send_many_samples": many_samples,
        "consume_records_per_s": consume_rate,
        "consume_mb_per_s": consume_rate * bytes_per_record / 1e6,
        "consume_samples": consume_samples,
        "consume_columns_records_per_s": columns_rate,
        "consume_columns_mb_per_s": columns_rate * bytes_per_record / 1e6,
        "consume_columns_samples": columns_samples,
        "e2e_records_per_s": E2E_RATE,
        **e2e,
        "e2e_samples": e2e_runs,
    }


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or (len(argv) == 2 and argv[1] != "--e2e-only"):
        print("usage: python -m bench.sdk URL [--e2e-only]", file=sys.stderr)
        return 2
    if len(argv) == 2:
        print(json.dumps([e2e_latency(argv[0]) for _ in range(3)], indent=2))
        return 0
    print(json.dumps(run(argv[0]), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
