"""A streaming query in a process of its own, for tests that kill its driver with SIGKILL.

``python spark_query.py URL SOURCE SINK CHECKPOINT [STALL_AT]`` copies topic SOURCE into
topic SINK (values unchanged) through the ``logbus`` source and sink, 500 offsets per
micro-batch, with ``Trigger.AvailableNow``, and exits 0 when done. With STALL_AT the task
that meets the record whose value is STALL_AT stops there for good (a Python UDF that
never returns), so the test can kill the driver in the middle of that micro-batch.
"""

from __future__ import annotations

import os
import sys
import time


def main(url: str, source: str, sink: str, checkpoint: str, stall_at: str | None) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf

    from app.spark import register

    stall = None if stall_at is None else stall_at.encode()

    def gate(value: bytes) -> bytes:
        if value == stall:
            while True:  # until the test kills the driver (the worker goes with it)
                time.sleep(1)
        return value

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("logbus-kill-test")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    query = (
        spark.readStream.format("logbus")
        .option("logbus.url", url)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "500")
        .load()
        .select("key", udf(gate, "binary")("value").alias("value"))
        .writeStream.format("logbus")
        .option("logbus.url", url)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    error = query.exception()
    spark.stop()
    if error is not None:
        raise SystemExit(f"query failed: {error}")


if __name__ == "__main__":
    main(*sys.argv[1:5], sys.argv[5] if len(sys.argv) > 5 else None)
