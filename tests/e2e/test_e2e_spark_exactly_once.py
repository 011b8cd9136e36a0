"""The ``logbus`` sink with ``deliveryGuarantee=exactly-once`` on local Spark against a
real broker (#16): transactions per task per micro-batch, committed by the driver.

Its own SparkSession (``local[2,2]``: a failed task is tried twice, where ``local[2]``
fails the job at once), so tasks can be retried. Output is read back with Spark's
``read_committed`` reader, and with ``read_uncommitted`` to see what aborted attempts
left in the log.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Broker
from spark_query import local_session
from test_e2e_spark import _produce, _values  # skips this module without pyspark or java

from app.client import Admin
from app.common.partitioner import partition_for_key

pytestmark = pytest.mark.slow

EXACTLY_ONCE = {"deliveryGuarantee": "exactly-once"}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = local_session(
        "logbus-exactly-once-tests",
        "local[2,2]",
        # Small Arrow batches into the sink: each is sent as it comes, so a task that
        # fails half-way has written part of its rows.
        spark__sql__execution__arrow__maxRecordsPerBatch="20",
    )
    yield session
    session.stop()


def _read(spark: Any, url: str, topic: str, committed: bool = True) -> list[tuple[bytes, int]]:
    """(value, partition) of every record of ``topic`` a read_committed (or uncommitted)
    Spark batch read returns."""
    rows = (
        spark.read.format("logbus")
        .option("logbus.url", url)
        .option("subscribe", topic)
        .option("isolation.level", "read_committed" if committed else "read_uncommitted")
        .load()
        .select("value", "partition")
        .collect()
    )
    return [(bytes(r.value), r.partition) for r in rows]


def _copy(
    spark: Any, url: str, value: Any, checkpoint: Path, per_batch: int, **options: str
) -> Any:
    """Start copying src to dst (keyed by value) exactly-once, ``per_batch`` offsets per
    micro-batch."""
    return (
        spark.readStream.format("logbus")
        .option("logbus.url", url)
        .option("subscribe", "src")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_batch))
        .load()
        .select(value.alias("key"), value.alias("value"))
        .writeStream.format("logbus")
        .option("logbus.url", url)
        .option("topic", "dst")
        .option("checkpointLocation", str(checkpoint))
        .options(**EXACTLY_ONCE, **options)
        .trigger(availableNow=True)
        .start()
    )


def _topics(broker: Broker, src: int, dst: int) -> dict[int, list[bytes]]:
    with Admin(broker.url) as admin:
        admin.create_topic("src", partitions=src)
        admin.create_topic("dst", partitions=dst)
    return _produce(broker.url, "src", src, 150)


def _describe(url: str, transactional_id: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/transactions/{transactional_id}")
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


def test_a_streaming_copy_holds_each_input_once_for_read_committed(
    spark: Any, broker: Broker, tmp_path: Path
) -> None:
    from pyspark.sql.functions import col

    sent = _topics(broker, 2, 3)
    # The default transactional id prefix: logbus-spark-{query id}.
    query = _copy(spark, broker.url, col("value"), tmp_path / "chk", 200)
    prefix = f"logbus-spark-{query.id}"
    query.awaitTermination(240)
    assert query.exception() is None
    got = _read(spark, broker.url, "dst")
    assert Counter(v for v, _ in got) == Counter(v for vs in sent.values() for v in vs)
    # Keyed rows go where the producer's partitioner puts them.
    assert all(p == partition_for_key(v, 3) for v, p in got)
    # Nothing was aborted: the log holds the same records.
    assert len(_read(spark, broker.url, "dst", committed=False)) == len(got)
    # Each task's last transaction recorded its micro-batch (2 batches of 2 tasks).
    for task in (0, 1):
        described = _describe(broker.url, f"{prefix}-{task}-0")
        assert described["transaction_state"] == "CompleteCommit"
        r = httpx.get(f"{broker.url}/groups/{prefix}-{task}/offsets")
        assert [o["offset"] for o in r.json()["offsets"]] == [1], r.text


def test_a_batch_write_is_visible_only_once_the_job_commits(spark: Any, broker: Broker) -> None:
    with Admin(broker.url) as admin:
        admin.create_topic("out", partitions=2)
    df = spark.createDataFrame([(f"v{i}",) for i in range(100)], "value string").repartition(3)
    df.write.format("logbus").option("logbus.url", broker.url).option("topic", "out").options(
        **EXACTLY_ONCE
    ).mode("append").save()
    got = _read(spark, broker.url, "out")
    assert sorted(v for v, _ in got) == sorted(f"v{i}".encode() for i in range(100))


def test_a_task_failing_mid_write_is_retried_and_its_attempt_never_read(
    spark: Any, broker: Broker, tmp_path: Path
) -> None:
    """A UDF fails partition 0's task on its first attempt at record 120 of 150; Spark
    retries it, the retry's InitProducerId fences the attempt and aborts what it wrote:
    read_committed sees each input once, while the log holds the aborted rows too."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    # The UDF's Python worker buffers its output (64 KiB) before Spark sees any: padded
    # values fill that buffer, so the failing attempt's sink gets (and writes) rows before
    # the failure.
    pad = b"." * 4096

    def fail_once(value: bytes) -> bytes:
        context = TaskContext.get()
        if value == b"src-0-120" and context is not None and context.attemptNumber() == 0:
            # The sink's producer sends what it got after its linger: give it time, so the
            # attempt has written rows when it fails (on a loaded machine it had not yet).
            time.sleep(3)
            raise RuntimeError("injected failure of the first attempt")
        return value + pad

    sent = _topics(broker, 2, 1)
    value = udf(fail_once, "binary")("value")
    query = _copy(
        spark, broker.url, value, tmp_path / "chk", 300, **{"transactional.id.prefix": "retry"}
    )
    query.awaitTermination(240)
    assert query.exception() is None
    want = Counter(v + pad for vs in sent.values() for v in vs)
    assert Counter(v for v, _ in _read(spark, broker.url, "dst")) == want
    everything = Counter(v for v, _ in _read(spark, broker.url, "dst", committed=False))
    aborted = everything - want
    assert aborted, "the failed attempt wrote nothing before failing"
    assert set(aborted) <= {f"src-0-{i}".encode() + pad for i in range(120)}


def test_a_driver_killed_after_committing_part_of_a_batch_is_restarted_exactly_once(
    spark: Any, broker: Broker, tmp_path: Path
) -> None:
    """The query runs in a process of its own and stalls in partition 0's task of its
    second micro-batch, after partition 1's task wrote its rows in a transaction left
    open for the driver. The test commits that transaction itself, as a driver dying
    half-way through its commit would have, then SIGKILLs the driver (JVM and workers)
    and restarts the query from its checkpoint: Spark replays the micro-batch, the task
    that finds it committed writes nothing, the other's retry fences the stalled
    attempt, and read_committed holds every input once."""
    import spark_query

    with Admin(broker.url) as admin:
        admin.create_topic("src", partitions=2)
        admin.create_topic("dst", partitions=1)
    sent = _produce(broker.url, "src", 2, 200)
    checkpoint = str(tmp_path / "checkpoint")
    log = tmp_path / "driver.log"
    # Stalls at src-0-150; transactional ids kill-{partition}-{attempt}.
    driver = spark_query.spawn(log, broker.url, "src", "dst", checkpoint, "src-0-150", "kill")
    try:
        # Batch 1 holds offsets 100..199 of each partition; partition 1's task wrote them.
        _values(broker.url, "dst", lambda vs: set(sent[1][100:200]) <= set(vs), driver, log)
        # Its transaction is open until the driver commits: read_committed sees batch 0 only.
        seen = Counter(v for v, _ in _read(spark, broker.url, "dst"))
        assert seen == Counter(v for vs in sent.values() for v in vs[:100])
        states = {t: _describe(broker.url, f"kill-{t}-0") for t in (0, 1)}
        # The task done with its rows has committed its batch marker in its transaction.
        done = [
            d
            for d in states.values()
            if any(x["topic"] == "__consumer_offsets" for x in d["topics"])
        ]
        assert len(done) == 1, states
        r = httpx.post(
            f"{broker.url}/transactions/{done[0]['transactional_id']}/commit",
            json={
                "producer_id": done[0]["producer_id"],
                "producer_epoch": done[0]["producer_epoch"],
            },
        )
        assert r.status_code == 200, r.text
    finally:
        spark_query.kill(driver)
    query = spark_query.start(spark, broker.url, "src", "dst", checkpoint, txn_prefix="kill")
    query.awaitTermination(240)
    assert not query.isActive and query.exception() is None
    want = Counter(v for vs in sent.values() for v in vs)
    assert Counter(v for v, _ in _read(spark, broker.url, "dst")) == want
