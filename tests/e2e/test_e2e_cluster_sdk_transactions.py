"""The SDK's transactional producer in a cluster: bootstrapped at a broker that does not
coordinate its transactional id, it finds the coordinator (421 NOT_COORDINATOR names it),
produces to each partition's leader, commits a group's offsets at the group's
coordinator, and a read_committed consumer sees exactly the committed transactions."""

from __future__ import annotations

import time

import pytest
from conftest import ClusterFactory
from test_e2e_cluster_transactions import TXN_PARTITIONS

from app.client import Admin, Consumer, Producer, TopicPartition
from app.groups.hashing import partition_for

# Few __transaction_state partitions (as test_e2e_cluster_transactions.py): quick to create.
TXN_ENV = {
    "LOGBUS_TRANSACTION_STATE_LOG_NUM_PARTITIONS": str(TXN_PARTITIONS),
    "LOGBUS_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "2",
}


@pytest.mark.slow
def test_sdk_transactions_across_brokers(cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(size=3, env=TXN_ENV)
    bootstrap = 1
    with cluster.client(bootstrap) as c:
        for name in ("in", "out"):
            body = {"name": name, "partitions": 3, "replication_factor": 2}
            r = c.post("/topics", json=body)
            assert r.status_code == 201, r.text
    # A first id creates __transaction_state; then pick an id another broker coordinates.
    with Producer(cluster.url(bootstrap), transactional_id="warm-up") as p:
        p.init_transactions()
    tid = next(
        f"sdk-copier-{i}"
        for i in range(100)
        if cluster.leader("__transaction_state", partition_for(f"sdk-copier-{i}", TXN_PARTITIONS))
        != bootstrap
    )
    leaders = {cluster.leader("out", p) for p in range(3)}
    assert len(leaders) > 1, leaders  # markers must reach other brokers too

    with Producer(cluster.url(bootstrap), transactional_id=tid, linger_ms=1) as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(30):
            p.send("out", b"kept-%d" % i, partition=i % 3)
        p.send_offsets_to_transaction({TopicPartition("in", 0): 11}, "sdk-group")
        p.commit_transaction()
        p.begin_transaction()
        for i in range(30):
            p.send("out", b"dropped-%d" % i, partition=i % 3)
        p.flush()
        p.abort_transaction()

    got: list[bytes] = []
    with Consumer(cluster.url(bootstrap), isolation_level="read_committed") as consumer:
        consumer.assign([TopicPartition("out", p) for p in range(3)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 30
        while len(got) < 30 and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(timeout_ms=200) if r.value is not None]
        got += [r.value for r in consumer.poll(timeout_ms=500) if r.value is not None]
    assert sorted(got) == sorted(b"kept-%d" % i for i in range(30))

    with Admin(cluster.url(bootstrap)) as admin:
        assert admin.list_group_offsets("sdk-group") == {TopicPartition("in", 0): 11}
        assert admin.describe_transaction(tid)["transaction_state"] == "CompleteAbort"
