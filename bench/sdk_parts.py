"""The keyed ``send`` path's parts in isolation, per record, without a broker.

``cd <a checkout> && python /path/to/bench/sdk_parts.py [rounds]`` fills four
open batches (1 MB each, the producer's default ``batch_size``) through the
compiled ``send`` (``FastSend``) with one of 1,000 keys, 100-byte values and a
Python delivery callback that counts, then runs the batches' callbacks as an
answer does (``run_callbacks``), then builds them (header, CRC-32C, copy),
and prints ns per record of each part: the best of ``rounds`` rounds (default
40), which other work on the machine disturbs far less than a median. It
imports ``app`` from the current directory, so the same file measures an older
checkout (as ``bench/sdk_compare.py``). What it leaves out is the sender's
HTTP work per request and the hand-offs between the two threads.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

sys.path.insert(0, ".")

from app.client.producer import _speedups
from app.client.producer.batch import ProducerBatch
from app.client.producer.delivery import DeliveryFuture
from app.client.types import RecordMetadata, TopicPartition
from app.common.batch import Compression

KEYS = [b"key-%d" % i for i in range(1000)]
VALUE = b"x" * 100
TOPIC = "t"
PARTITIONS = 4
# Records per round: each partition's batch stays below 1 MB whatever the key spread.
RECORDS = 6000 * PARTITIONS


def one_round() -> tuple[float, float, float]:
    """ns per record of send, run_callbacks and build, for one round."""
    made: dict[tuple[str, int], TopicPartition] = {}

    def tp(topic: str, p: int) -> TopicPartition:
        return made.setdefault((topic, p), TopicPartition(topic, p))

    opened: dict[TopicPartition, ProducerBatch] = {}
    for p in range(PARTITIONS):
        batch = opened[tp(TOPIC, p)] = ProducerBatch(tp(TOPIC, p), Compression.NONE, 1_000_000)
        batch.append(0, b"k", VALUE)  # the compiled send fills batches the Python one opened
    fast = _speedups.FastSend(
        _speedups.Lock(), {}, opened, {TOPIC: PARTITIONS}, tp, DeliveryFuture, None, ProducerBatch
    )
    delivered = [0]

    def count(meta: Any, exc: BaseException | None) -> None:
        if meta is not None:
            delivered[0] += 1

    send, keys = fast.send, KEYS
    start = time.perf_counter()
    for i in range(RECORDS):
        send(TOPIC, VALUE, key=keys[i % 1000], on_delivery=count)
    sent = time.perf_counter()
    for batch in opened.values():
        batch.builder.run_callbacks(TOPIC, 0, 0, -1, None, RecordMetadata, print)
    answered = time.perf_counter()
    for batch in opened.values():
        batch.build()
    built = time.perf_counter()
    if delivered[0] != RECORDS:
        raise RuntimeError(f"{delivered[0]} of {RECORDS} callbacks")
    n = sum(b.count for b in opened.values())
    return (
        (sent - start) / RECORDS * 1e9,
        (answered - sent) / RECORDS * 1e9,
        (built - answered) / n * 1e9,
    )


def main(argv: list[str]) -> int:
    if not _speedups.COMPILED:
        print("the producer's C extension is not built here", file=sys.stderr)
        return 1
    rounds = int(argv[0]) if argv else 40
    samples = [one_round() for _ in range(rounds)]
    best = {
        name: round(min(s[i] for s in samples), 1)
        for i, name in enumerate(("send_ns", "run_callbacks_ns", "build_ns"))
    }
    print(json.dumps({**best, "rounds": rounds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
