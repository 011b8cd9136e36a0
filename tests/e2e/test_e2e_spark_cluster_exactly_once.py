"""The exactly-once ``logbus`` sink in a 3-broker cluster (#16): "one path, many
deployments". The sink is given one bootstrap broker that coordinates none of its
transactional ids and does not lead every output partition (and a marker group is
coordinated by another broker than its id): InitProducerId,
AddPartitionsToTxn and the driver's EndTxn must follow 421 NOT_COORDINATOR to each id's
coordinator, the batches must reach each partition's leader, the batch markers their
group's coordinator; read_committed then holds each input exactly once.

One test (one cluster, one SparkSession): a batch write, then a streaming copy of two
micro-batches.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ClusterFactory
from spark_query import local_session
from test_e2e_cluster_sdk_transactions import TXN_ENV
from test_e2e_cluster_transactions import TXN_PARTITIONS
from test_e2e_spark import _produce  # skips this module without pyspark or java
from test_e2e_spark_exactly_once import EXACTLY_ONCE, _copy, _read

from app.client import Admin, Producer, TopicPartition
from app.groups.hashing import partition_for

pytestmark = pytest.mark.slow

BOOTSTRAP = 1
TXN_STATE = "__transaction_state"
OFFSETS = "__consumer_offsets"
OFFSETS_PARTITIONS = 3
ENV = {**TXN_ENV, "LOGBUS_OFFSETS_TOPIC_NUM_PARTITIONS": str(OFFSETS_PARTITIONS)}
TASKS = 2  # Spark partitions writing: ids {prefix}-0-0 and {prefix}-1-0


def _pick_prefix(leader: Callable[[str, int], int]) -> str:
    """A transactional id prefix whose tasks' ids are all coordinated by brokers other than
    the bootstrap one (the leaders of their ``__transaction_state`` partitions), and one of
    whose marker groups ``{prefix}-{task}`` is coordinated by yet another broker than its
    id (so TxnOffsetCommit goes elsewhere than AddOffsetsToTxn, as in Kafka)."""
    for i in range(500):
        prefix = f"spark-cluster-{i}"
        txn = [
            leader(TXN_STATE, partition_for(f"{prefix}-{t}-0", TXN_PARTITIONS))
            for t in range(TASKS)
        ]
        group = [
            leader(OFFSETS, partition_for(f"{prefix}-{t}", OFFSETS_PARTITIONS))
            for t in range(TASKS)
        ]
        if BOOTSTRAP not in txn and any(g != t for g, t in zip(group, txn, strict=True)):
            return prefix
    raise AssertionError("no prefix whose ids and groups other brokers coordinate")


def test_the_exactly_once_sink_routes_across_a_cluster(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    from pyspark.sql.functions import col

    cluster = cluster_factory(size=3, env=ENV)
    url = cluster.url(BOOTSTRAP)  # the only broker the sink is told of
    with Admin(url) as admin:
        for name, partitions in (("out", 3), ("src", 2), ("dst", 3)):
            admin.create_topic(name, partitions=partitions, replication_factor=2)
    # A first transactional id creates __transaction_state, a first FindCoordinator
    # __consumer_offsets: their partitions' leaders pick the prefix.
    with Producer(url, transactional_id="warm-up") as p:
        p.init_transactions()
    with cluster.client(BOOTSTRAP) as c:

        def found() -> bool:
            return c.post("/coordinator", json={"key": "warm-up"}).status_code == 200

        cluster.wait_until(found, message="a group coordinator")

    def led() -> bool:
        internal = [(TXN_STATE, TXN_PARTITIONS), (OFFSETS, OFFSETS_PARTITIONS)]
        return all(cluster.leader(t, p) > 0 for t, n in internal for p in range(n))

    cluster.wait_until(led, message="leaders of the internal topics")
    prefix = _pick_prefix(cluster.leader)
    for topic in ("out", "dst"):
        leaders = {cluster.leader(topic, p) for p in range(3)}
        assert leaders - {BOOTSTRAP}, (topic, leaders)  # batches must go elsewhere too
    sent = _produce(url, "src", 2, 150)
    spark = local_session("logbus-cluster-exactly-once-tests", "local[2]")
    try:
        options = {**EXACTLY_ONCE, "transactional.id.prefix": prefix}
        # A batch write: each task's transaction, committed by the driver. Keyed rows
        # spread over the 3 partitions, so each task writes to every leader.
        rows = [(f"v{i}", f"v{i}") for i in range(60)]
        df = spark.createDataFrame(rows, "key string, value string")
        df.repartition(TASKS).write.format("logbus").option("logbus.url", url).option(
            "topic", "out"
        ).options(**options).mode("append").save()
        got = Counter(v for v, _ in _read(spark, url, "out"))
        assert got == Counter(f"v{i}".encode() for i in range(60))
        assert {p for _, p in _read(spark, url, "out")} == {0, 1, 2}

        # A streaming copy: two micro-batches, each task's marker in its group.
        query = _copy(
            spark,
            url,
            col("value"),
            tmp_path / "chk",
            200,
            **{"transactional.id.prefix": prefix},
        )
        query.awaitTermination(240)
        assert query.exception() is None
        want = Counter(v for vs in sent.values() for v in vs)
        assert Counter(v for v, _ in _read(spark, url, "dst")) == want
        # Nothing aborted: the log holds the same records.
        assert len(_read(spark, url, "dst", committed=False)) == sum(want.values())
        with Admin(url) as admin:
            for t in range(TASKS):
                tid = f"{prefix}-{t}-0"
                assert admin.describe_transaction(tid)["transaction_state"] == "CompleteCommit"
                marker = admin.list_group_offsets(f"{prefix}-{t}")
                assert marker == {TopicPartition("dst", 0): 1}, marker
    finally:
        spark.stop()
