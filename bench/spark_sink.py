"""The ``logbus`` Spark sink: exactly-once (transactions) beside at-least-once, same run.

``python -m bench.spark_sink [RECORDS]`` starts a broker and, on ``local[2]``, writes
``RECORDS`` rows (default 500,000; a string key, a 128-byte value) from a cached
DataFrame in 4 Spark partitions to a 4-partition topic with ``df.write.format("logbus")``,
alternating:

* ``at_least_once``: the default sink, each task through the SDK's idempotent producer;
* ``exactly_once``: ``deliveryGuarantee=exactly-once``, each task's rows in a
  transaction (transactional batches over HTTP) committed by the driver at the job's end
  (the streaming sink's per-micro-batch path, minus the batch marker).

Each figure is the median of ``runs`` timed writes (after one untimed warm-up of each),
in records/s, and their ratio. ``run()`` returns the figures.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from app.client import Admin
from bench import common
from bench.spark import local_spark
from bench.spark import main as records_main

DEFAULT_RECORDS = 500_000
PARTITIONS = 4


def run(url: str | None = None, records: int = DEFAULT_RECORDS, runs: int = 3) -> dict[str, Any]:
    if url is None:
        with common.broker() as started:
            return run(started, records, runs)
    spark = local_spark()
    try:
        df = (
            spark.range(records, numPartitions=PARTITIONS)
            .selectExpr(
                "CAST(id AS STRING) AS key",
                "CAST(repeat(sha2(CAST(id AS STRING), 256), 2) AS BINARY) AS value",
            )
            .cache()
        )
        assert df.count() == records
        guarantees = {"at_least_once": "at-least-once", "exactly_once": "exactly-once"}
        topics = {name: f"sink-{name}" for name in guarantees}
        with Admin(url) as admin:
            for topic in topics.values():
                admin.create_topic(topic, partitions=PARTITIONS)

        def write(name: str) -> float:
            start = time.perf_counter()
            (
                df.write.format("logbus")
                .option("logbus.url", url)
                .option("topic", topics[name])
                .option("deliveryGuarantee", guarantees[name])
                .mode("append")
                .save()
            )
            return time.perf_counter() - start

        times: dict[str, list[float]] = {name: [] for name in guarantees}
        for i in range(runs + 1):
            for name in guarantees:
                took = write(name)
                if i > 0:  # the first of each warms up the Python workers
                    times[name].append(took)
        median = {name: statistics.median(t) for name, t in times.items()}
        return {
            "records": records,
            "partitions": PARTITIONS,
            "runs": runs,
            **{f"{n}_records_per_s": round(records / s) for n, s in median.items()},
            "exactly_once_over_at_least_once": round(
                median["at_least_once"] / median["exactly_once"], 2
            ),
        }
    finally:
        spark.stop()


if __name__ == "__main__":
    raise SystemExit(records_main(sys.argv[1:], run, DEFAULT_RECORDS))
