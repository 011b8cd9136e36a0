"""The exactly-once ``logbus`` sink in a 3-broker cluster (#16): "one path, many
deployments". The sink is given one bootstrap broker that coordinates none of its
transactional ids and leads only some of its output partitions: InitProducerId,
AddPartitionsToTxn and the driver's EndTxn must follow 421 NOT_COORDINATOR to each id's
coordinator, the batches must reach each partition's leader, the batch markers their
group's coordinator; read_committed then holds each input exactly once.

One test (one cluster, one SparkSession): a batch write, then a streaming copy of two
micro-batches.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

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
TASKS = 2  # Spark partitions writing: ids {prefix}-0-0 and {prefix}-1-0


def _prefix_coordinated_elsewhere(leader_of: Any) -> str:
    """A transactional id prefix whose tasks' ids are all coordinated by brokers other than
    the bootstrap one (the leaders of their ``__transaction_state`` partitions)."""
    for i in range(200):
        prefix = f"spark-cluster-{i}"
        ids = [f"{prefix}-{t}-0" for t in range(TASKS)]
        if all(leader_of(partition_for(tid, TXN_PARTITIONS)) != BOOTSTRAP for tid in ids):
            return prefix
    raise AssertionError("no prefix whose ids another broker coordinates")


def test_the_exactly_once_sink_routes_across_a_cluster(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    from pyspark.sql.functions import col

    cluster = cluster_factory(size=3, env=TXN_ENV)
    url = cluster.url(BOOTSTRAP)  # the only broker the sink is told of
    with Admin(url) as admin:
        for name, partitions in (("out", 3), ("src", 2), ("dst", 3)):
            admin.create_topic(name, partitions=partitions, replication_factor=2)
    # A first transactional id creates __transaction_state, whose leaders pick the prefix.
    with Producer(url, transactional_id="warm-up") as p:
        p.init_transactions()
    prefix = _prefix_coordinated_elsewhere(lambda p: cluster.leader("__transaction_state", p))
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
