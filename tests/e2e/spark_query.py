"""A streaming query copying one topic into another, that can stall mid-batch; run in a
process of its own by tests that kill its driver with SIGKILL.

``python spark_query.py URL SOURCE SINK CHECKPOINT [STALL_AT [TXN_PREFIX]]`` runs
:func:`start` on a local SparkSession and exits 0 when the query is done (``-`` for no
STALL_AT).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any


def start(
    spark: Any,
    url: str,
    source: str,
    sink: str,
    checkpoint: str,
    stall_at: str | None = None,
    txn_prefix: str | None = None,
) -> Any:
    """Copy topic ``source`` into ``sink`` (values unchanged) through the ``logbus`` source
    and sink, 200 offsets per micro-batch, with ``Trigger.AvailableNow``; the started query.

    With ``stall_at``, the task that meets the record whose value it is stops there for
    good (a Python UDF that never returns), so a test can kill the driver in the middle
    of that micro-batch. With ``txn_prefix`` the sink is exactly-once, its transactional
    ids ``{txn_prefix}-{Spark partition}``.
    """
    from pyspark.sql.functions import udf

    stall = None if stall_at is None else stall_at.encode()

    def gate(value: bytes) -> bytes:
        if value == stall:
            while True:  # until the test kills the driver (the worker goes with it)
                time.sleep(1)
        return value

    value = udf(gate, "binary")("value").alias("value") if stall is not None else "value"
    guarantee = (
        {}
        if txn_prefix is None
        else {
            "deliveryGuarantee": "exactly-once",
            "transactional.id.prefix": txn_prefix,
        }
    )
    return (
        spark.readStream.format("logbus")
        .option("logbus.url", url)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "200")
        .load()
        .select("key", value)
        .writeStream.format("logbus")
        .option("logbus.url", url)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .options(**guarantee)
        .trigger(availableNow=True)
        .start()
    )


def main(
    url: str,
    source: str,
    sink: str,
    checkpoint: str,
    stall_at: str | None = None,
    txn_prefix: str | None = None,
) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from app.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("logbus-kill-test")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # A short-lived JVM: with the C1 compiler alone and a serial GC the query got
        # to its stall in ~36 s instead of ~57 s here (2 shared, busy cores).
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    query = start(spark, url, source, sink, checkpoint, stall_at, txn_prefix)
    query.awaitTermination()
    error = query.exception()
    spark.stop()
    if error is not None:
        raise SystemExit(f"query failed: {error}")


if __name__ == "__main__":
    main(*sys.argv[1:5], *(None if a == "-" else a for a in sys.argv[5:7]))
