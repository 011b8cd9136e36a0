"""Transactions in a cluster: the coordinator of a transactional id is the leader of its
``__transaction_state`` partition, and its markers reach partitions led by other brokers
(WriteTxnMarkers between brokers, with the inter-broker credential)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from cluster import Cluster
from conftest import ClusterFactory
from test_e2e_transactions import committed_view

from app.common.batch import build_batch
from app.groups.hashing import partition_for

TXN_PARTITIONS = 3
OCTET = {"content-type": "application/octet-stream"}


def txn_cluster_env(cleanup_interval_ms: int) -> dict[str, str]:
    """A cluster's settings for transaction tests: a small ``__transaction_state`` on every
    broker, timed-out transactions looked for every ``cleanup_interval_ms``."""
    return {
        "LOGBUS_TRANSACTION_STATE_LOG_NUM_PARTITIONS": str(TXN_PARTITIONS),
        "LOGBUS_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "3",
        "LOGBUS_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": str(
            cleanup_interval_ms
        ),
    }


def _retry(call: Any, what: str, timeout: float = 30) -> httpx.Response:
    """A coordinator call, retried while the coordinator is moving or loading."""
    deadline = time.monotonic() + timeout
    while True:
        r: httpx.Response = call()
        if r.status_code < 300 or r.status_code == 421 or not r.json().get("retriable"):
            return r
        assert time.monotonic() < deadline, (what, r.text)
        time.sleep(0.1)


@pytest.mark.slow
def test_markers_reach_partitions_led_by_other_brokers(cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(
        size=3,
        env={
            "LOGBUS_TRANSACTION_STATE_LOG_NUM_PARTITIONS": str(TXN_PARTITIONS),
            "LOGBUS_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "2",
        },
    )
    any_broker = cluster.client(1)
    r = any_broker.post("/topics", json={"name": "out", "partitions": 3, "replication_factor": 2})
    assert r.status_code == 201, r.text
    tid = "cluster-copier"
    # Any broker creates __transaction_state; the id's coordinator answers (421 names it).
    r = _retry(lambda: any_broker.post("/producers", json={"transactional_id": tid}), "init")
    if r.status_code == 421:
        url = r.json()["coordinator_url"]
        assert url, r.text
    else:
        assert r.status_code == 200, r.text
        url = cluster.url(1)
    coordinator = httpx.Client(base_url=url, timeout=30)
    r = _retry(lambda: coordinator.post("/producers", json={"transactional_id": tid}), "init")
    assert r.status_code == 200, r.text
    pid, epoch = r.json()["producer_id"], r.json()["producer_epoch"]
    leader_of_txn = cluster.leader("__transaction_state", partition_for(tid, TXN_PARTITIONS))
    assert cluster.url(leader_of_txn) == url
    # Partitions on every broker: at least one is led by another broker than the coordinator.
    leaders = {p: cluster.leader("out", p) for p in range(3)}
    assert set(leaders.values()) - {leader_of_txn}, leaders
    producer = {"producer_id": pid, "producer_epoch": epoch}
    r = coordinator.post(
        f"/transactions/{tid}/partitions",
        json={**producer, "topics": [{"topic": "out", "partitions": [0, 1, 2]}]},
    )
    assert r.status_code == 200, r.text
    for p, leader in leaders.items():
        batch = build_batch(
            [(None, f"v{p}".encode())],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            transactional=True,
        )
        with cluster.client(leader) as c:
            r = c.post(f"/topics/out/partitions/{p}/batches", content=batch, headers=OCTET)
            assert r.status_code == 200, r.text
            assert committed_view(c, "out", p)[0] == []
    # JSON produce inside the transaction at a partition's leader that does not coordinate
    # the id (the partition was added at the coordinator above); the coordinator itself
    # names the leader (307 NOT_LEADER_OR_FOLLOWER).
    p_far, far = next((p, lead) for p, lead in leaders.items() if lead != leader_of_txn)
    path = f"/transactions/{tid}/topics/out/records"
    json_body = {"value_format": "string", "records": [{"value": "json", "partition": p_far}]}
    r = coordinator.post(path, params=producer, json=json_body)
    assert r.status_code == 307 and r.json()["leader"] == far, r.text
    with cluster.client(far) as c:
        r = c.post(path, params=producer, json=json_body)
        assert r.status_code == 200, r.text
    r = coordinator.post(f"/transactions/{tid}/commit", json=producer)
    assert r.status_code == 200 and r.json()["transaction_state"] == "CompleteCommit", r.text
    for p, leader in leaders.items():
        with cluster.client(leader) as c:
            extra = ["json"] if p == p_far else []
            assert committed_view(c, "out", p)[0] == [f"v{p}", *extra]
    # A broker that is not the coordinator says who is.
    other = next(i for i in cluster.ids if i != leader_of_txn)
    with cluster.client(other) as c:
        r = c.get(f"/transactions/{tid}")
        assert r.status_code == 421 and r.json()["coordinator"] == leader_of_txn, r.text
    coordinator.close()


@pytest.mark.slow
def test_a_new_coordinator_completes_what_a_dead_one_prepared(
    cluster_factory: ClusterFactory,
) -> None:
    """The coordinator dies (os._exit, as kill -9) after PrepareCommit and one marker; the
    broker that takes over its __transaction_state partition loads it and writes the
    missing markers, to whichever brokers lead those partitions now."""
    cluster = cluster_factory(size=3, env=txn_cluster_env(cleanup_interval_ms=200))
    tid = "failover-copier"
    txn_partition = partition_for(tid, TXN_PARTITIONS)
    with cluster.client(1) as c:
        r = c.post("/topics", json={"name": "out", "partitions": 3, "replication_factor": 3})
        assert r.status_code == 201, r.text
        r = _retry(lambda: c.post("/producers", json={"transactional_id": tid}), "init")
        assert r.status_code in (200, 421), r.text
    # The coordinator restarts with a crash point, and leads its partition again.
    first = cluster.wait_until(
        lambda: (lead := cluster.leader("__transaction_state", txn_partition)) > 0 and lead,
        message="a coordinator",
    )
    cluster.stop_broker(first)
    cluster.brokers[first].env["LOGBUS_TEST_TXN_CRASH"] = "after-first-marker"
    cluster.restart(first)
    cluster.wait_until(
        lambda: cluster.leader("__transaction_state", txn_partition) == first,
        message="leadership back on the preferred replica",
    )
    with cluster.client(first) as coordinator:
        r = _retry(lambda: coordinator.post("/producers", json={"transactional_id": tid}), "init")
        assert r.status_code == 200, r.text
        pid, epoch = r.json()["producer_id"], r.json()["producer_epoch"]
        producer = {"producer_id": pid, "producer_epoch": epoch}
        r = coordinator.post(
            f"/transactions/{tid}/partitions",
            json={**producer, "topics": [{"topic": "out", "partitions": [0, 1, 2]}]},
        )
        assert r.status_code == 200, r.text
        for p in range(3):
            data = build_batch(
                [(None, f"v{p}".encode())],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=0,
                transactional=True,
            )
            with cluster.client(cluster.leader("out", p)) as leader:
                r = leader.post(
                    f"/topics/out/partitions/{p}/batches?acks=all", content=data, headers=OCTET
                )
                assert r.status_code == 200, r.text
        with pytest.raises(httpx.TransportError):
            coordinator.post(f"/transactions/{tid}/commit", json=producer)
    dead = cluster.brokers[first]
    assert dead.proc is not None
    dead.proc.wait(timeout=10)
    dead.proc = None
    # Another replica leads the partition now and completes the commit.
    second = cluster.wait_until(
        lambda: (
            (lead := cluster.leader("__transaction_state", txn_partition)) not in (-1, first)
            and lead
        ),
        message="a new coordinator",
    )

    def completed() -> bool:
        with cluster.client(second) as c:
            r = c.get(f"/transactions/{tid}")
            return r.status_code == 200 and r.json()["transaction_state"] == "CompleteCommit"

    cluster.wait_until(completed, message="the new coordinator completing the commit")
    for p in range(3):
        leader = cluster.wait_until(
            lambda p=p: (lead := cluster.leader("out", p)) not in (-1, first) and lead,
            message=f"a live leader of out-{p}",
        )
        with cluster.client(leader) as c:
            assert committed_view(c, "out", p)[0] == [f"v{p}"]


@pytest.mark.slow
def test_read_committed_on_the_leader_and_after_failover(cluster_factory: ClusterFactory) -> None:
    """An open transaction holds read_committed readers at the LSO on the partition's
    leader and an aborted one is invisible; after the leader is killed the new leader (a
    follower until then: it replicated the markers and rebuilt its aborted-transaction
    index) holds them at the same LSO, still without the aborted records, and the commit
    releases them there."""
    cluster = cluster_factory(size=3, env=txn_cluster_env(cleanup_interval_ms=500))
    tid = "rc-job"
    with cluster.client(1) as c:
        r = c.post("/topics", json={"name": "rc", "partitions": 1, "replication_factor": 3})
        assert r.status_code == 201, r.text
    leader = cluster.wait_until(lambda: (lead := cluster.leader("rc", 0)) > 0 and lead)
    init = {"transactional_id": tid, "transaction_timeout_ms": 600_000}
    with cluster.client(1) as c:  # creates __transaction_state; 421 names the coordinator
        r = _retry(lambda: c.post("/producers", json=init), "init")
        assert r.status_code in (200, 421), r.text
    if r.status_code == 421:
        with httpx.Client(base_url=_coordinator_url(cluster, tid), timeout=30) as c:
            r = _retry(lambda: c.post("/producers", json=init), "init")
            assert r.status_code == 200, r.text
    producer = {k: r.json()[k] for k in ("producer_id", "producer_epoch")}

    def in_txn(value: str, end: str | None) -> None:
        with httpx.Client(base_url=_coordinator_url(cluster, tid), timeout=30) as coord:
            r = coord.post(
                f"/transactions/{tid}/partitions",
                json={**producer, "topics": [{"topic": "rc", "partitions": [0]}]},
            )
            assert r.status_code == 200, r.text
            with cluster.client(leader) as c:
                r = c.post(
                    f"/transactions/{tid}/topics/rc/records",
                    params=producer,
                    json={"value_format": "string", "records": [{"value": value}]},
                )
                assert r.status_code == 200, r.text
            if end is not None:
                r = coord.post(f"/transactions/{tid}/{end}", json=producer)
                assert r.status_code == 200, r.text

    def plain(value: str) -> None:
        with cluster.client(leader) as c:
            r = c.post(
                "/topics/rc/records?acks=all",
                json={"value_format": "string", "records": [{"value": value}]},
            )
            assert r.status_code == 200, r.text

    plain("p0")
    in_txn("c1", "commit")
    in_txn("x", "abort")
    in_txn("o1", None)  # left open
    plain("after")
    with cluster.client(leader) as c:
        values, lso = _committed_read(c)
    assert values == ["p0", "c1"], values
    # p0, c1, its COMMIT, x, its ABORT: the open transaction's first record is offset 5.
    assert lso == 5

    cluster.kill(leader)
    new = cluster.wait_until(
        lambda: (lead := cluster.leader("rc", 0)) not in (-1, leader) and lead,
        message="a new leader of rc-0",
    )
    with cluster.client(new) as c:
        values, lso = cluster.wait_until(
            lambda: (v := _committed_read(c))[1] == 5 and v, message="the LSO on the new leader"
        )
        assert values == ["p0", "c1"], values
        raw = c.get(
            "/topics/rc/partitions/0/records",
            params={"offset": 0, "isolation_level": "read_committed", "max_wait_ms": 0},
            headers={"accept": "application/octet-stream"},
        )
        aborted = raw.headers["Logbus-Aborted-Transactions"]
        assert aborted == f"{producer['producer_id']}:3", aborted
    # The commit (at the id's coordinator, wherever it is now) releases the reader there.
    leader = new
    with httpx.Client(base_url=_coordinator_url(cluster, tid), timeout=30) as coord:
        r = _retry(lambda: coord.post(f"/transactions/{tid}/commit", json=producer), "commit")
        assert r.status_code == 200, r.text
    with cluster.client(new) as c:
        values, lso = _committed_read(c)
    assert values == ["p0", "c1", "o1", "after"], values


def _committed_read(c: httpx.Client) -> tuple[list[str], int]:
    """(values, last stable offset) of one read_committed JSON fetch of rc-0."""
    r = c.get(
        "/topics/rc/partitions/0/records",
        params={
            "offset": 0,
            "isolation_level": "read_committed",
            "value_format": "string",
            "max_wait_ms": 0,
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    return [x["value"] for x in body["records"]], int(body["last_stable_offset"])


def _coordinator_url(cluster: Cluster, tid: str) -> str:
    """The URL of the broker coordinating ``tid`` now (``__transaction_state`` created)."""

    def ask() -> str | None:
        for broker_id in cluster.live_ids:
            with cluster.client(broker_id) as c:
                r = c.get(f"/transactions/{tid}")
                if r.status_code in (200, 404) and r.json().get("error_code") in (
                    None,
                    "TRANSACTIONAL_ID_NOT_FOUND",
                ):
                    return cluster.url(broker_id)
                if r.status_code == 421 and r.json().get("coordinator") in cluster.live_ids:
                    return str(r.json()["coordinator_url"])
        return None

    return cluster.wait_until(ask, message=f"the coordinator of {tid!r}")
