"""A streaming query copying one topic into another, that can stall mid-batch; run in a
process of its own by tests that kill its driver with SIGKILL.

``python spark_query.py URL SOURCE SINK CHECKPOINT [STALL_AT [TXN_PREFIX]]`` runs
:func:`start` on a local SparkSession and exits 0 when the query is done (``-`` for no
STALL_AT).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
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


def local_session(app_name: str, master: str = "local[2]", **config: str) -> Any:
    """A local SparkSession for the tests, its Python workers on this interpreter (the venv,
    which can import app.spark), no UI, bound to loopback, the ``logbus`` format
    registered; ``config`` adds Spark settings (dots as ``__``: ``spark__ui__port``)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from app.spark import register

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # The JVM waits this long for the Python side to connect to a collect's local
        # socket (15 s by default): on a loaded 2-core machine the driver took longer once,
        # and PySpark reported it as an UnboundLocalError in _load_from_socket.
        .config("spark.python.authenticate.socketTimeout", "120s")
    )
    for name, value in config.items():
        builder = builder.config(name.replace("__", "."), value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def spawn(log: Path, *argv: str) -> subprocess.Popen[bytes]:
    """Run this script with ``argv`` in a process (and process group) of its own, its
    output appended to ``log``; :func:`kill` ends the whole group."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, __file__, *argv],
            cwd=Path(__file__).resolve().parents[2],
            stdout=out,
            stderr=out,
            start_new_session=True,  # so that SIGKILL reaches the JVM and workers too
        )


def kill(driver: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver, its JVM and its Python workers."""
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()


def main(argv: list[str]) -> None:
    """Run :func:`start` with ``argv`` (URL SOURCE SINK CHECKPOINT [STALL_AT [TXN_PREFIX]])."""
    spark = local_session(
        "logbus-kill-test",
        # A short-lived JVM: with the C1 compiler alone and a serial GC the query got
        # to its stall in ~36 s instead of ~57 s here (2 shared, busy cores).
        spark__driver__extraJavaOptions="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    )
    query = start(spark, *argv[:4], *(None if a == "-" else a for a in argv[4:6]))
    query.awaitTermination()
    error = query.exception()
    spark.stop()
    if error is not None:
        raise SystemExit(f"query failed: {error}")


if __name__ == "__main__":
    main(sys.argv[1:])
