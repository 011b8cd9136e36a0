"""Per-record produce figures of whichever tree is the current directory, for before/after pairs.

``cd <a checkout> && python /path/to/bench/sdk_compare.py [rounds]`` measures,
against a fresh broker of that checkout, round-robin for ``rounds`` rounds
(default 3): ``send`` with null keys, ``send`` with one of 1,000 keys and a
Python delivery callback, ``logbus perf produce`` (``app.perf.run_produce``,
with ``--keys 1000`` too where the tree has that option) and ``send_many``,
1,000,000 records each (``send_many``: 3,000,000), 100-byte values, 4
partitions. It prints JSON: per workload the median and samples in records/s
of wall-clock time, and in records per second of this process's CPU time
(the producer's threads, not the broker's), which load from other work on
the machine disturbs much less. It imports ``app`` and ``bench`` from the
current directory, so the same file measures an older checkout.
"""

from __future__ import annotations

import inspect
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

sys.path.insert(0, ".")

from app.client import Admin, Producer
from app.perf import PerfOptions, run_produce
from bench import common, sdk

VALUE = b"x" * 100
KEYS = [b"key-%d" % i for i in range(1000)]
N = 1_000_000


def keyed_callback(url: str, topic: str) -> float:
    delivered = [0]

    def on_delivery(meta: Any, exc: BaseException | None) -> None:
        delivered[0] += 1

    with Producer(url, acks=1) as producer:
        producer.send(topic, VALUE).result(timeout=30)
        send = producer.send
        start = time.perf_counter()
        for i in range(N):
            send(topic, VALUE, key=KEYS[i % 1000], on_delivery=on_delivery)
        producer.flush()
        rate = N / (time.perf_counter() - start)
    if delivered[0] != N:
        raise RuntimeError(f"{delivered[0]} of {N} callbacks")
    return rate


HAS_KEYS = "keys" in inspect.signature(PerfOptions).parameters


def perf(url: str, topic: str, keys: int) -> float:
    extra: dict[str, Any] = {"keys": keys} if HAS_KEYS else {}
    options = PerfOptions(url=url, topic=topic, records=N, partitions=4, **extra)
    return float(run_produce(options)["records_per_s"])


def main(rounds: int) -> dict[str, Any]:
    with common.broker() as url, Admin(url) as admin:

        def fresh() -> str:
            name = f"compare-{uuid.uuid4().hex[:8]}"
            admin.create_topic(name, 4)
            return name

        work: dict[str, tuple[Callable[[], float], int]] = {
            "send": (lambda: sdk.produce_send(url, fresh(), N), N),
            "send_key_callback": (lambda: keyed_callback(url, fresh()), N),
            "perf_produce": (lambda: perf(url, fresh(), 0), N),
            "send_many": (lambda: sdk.produce_send_many(url, fresh(), 3 * N), 3 * N),
        }
        if HAS_KEYS:
            work["perf_produce_keys_1000"] = (lambda: perf(url, fresh(), 1000), N)
        wall: dict[str, list[float]] = {name: [] for name in work}
        cpu: dict[str, list[float]] = {name: [] for name in work}
        for _ in range(rounds):
            for name, (fn, records) in work.items():
                c0 = time.process_time()
                wall[name].append(round(fn()))
                cpu[name].append(round(records / (time.process_time() - c0)))
    return {
        name: {
            "median": statistics.median(wall[name]),
            "samples": wall[name],
            "per_cpu_s_median": statistics.median(cpu[name]),
            "per_cpu_s": cpu[name],
        }
        for name in work
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)))
