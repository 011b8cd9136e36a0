"""Replication safety under faults, checked against a model of every acknowledgement.

Three brokers, a topic of 2 partitions with replication factor 3 and
``min.insync.replicas=2``. Producer threads send acks=all JSON requests of many
records with values never sent before, following redirects (a 307 must mean
nothing was written), and record every acknowledgement: the partition and offset
of each value. Meanwhile brokers are killed (SIGKILL) and frozen (SIGSTOP, some
past their ZooKeeper session, so leadership moves while they hold requests) at
random, one at a time. A failed request is not sent again: its values may or may
not be in the log, but at most once.

After the faults the cluster settles (every replica in the ISR) and stops; then
every replica's files are read and:

- all replicas are byte-identical up to the high watermark;
- every acknowledged value is at its acknowledged offset;
- no value is there twice; each producer's acknowledged records are in the order
  it sent them.

The slow-disk variant delays every leader append by 0..40 ms inside the append
(LOGBUS_TEST_SLOW_APPEND_MS, a test-only fault injection, app/core/replication/
faults.py): it widens the window where a request checked leadership and has not
written yet, where leadership moves.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx
import orjson
import pytest
from cluster import Cluster
from test_e2e_cluster import create_topic, read_replica, wait_isr

from app.common.batch import decode_records
from app.core.replication.auth import HEADER

if TYPE_CHECKING:
    from conftest import ClusterFactory

pytestmark = pytest.mark.timeout(300)

TOPIC = "safety"
PARTITIONS = 2
PRODUCERS = 6
RECORDS_PER_REQUEST = 40
VALUE_PAD = "x" * 200
FAULT_SECONDS = 25.0


@dataclass
class Acks:
    """What the producers were told: value -> (partition, offset), per producer in order."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    at: dict[str, tuple[int, int]] = field(default_factory=dict)
    order: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    redirects: int = 0

    def acked(self, producer: int, values: list[str], offsets: list[dict[str, int]]) -> None:
        with self.lock:
            for value, where in zip(values, offsets, strict=True):
                self.at[value] = (where["partition"], where["offset"])
                self.order.setdefault((producer, where["partition"]), []).append(where["offset"])

    def failed(self, why: str) -> None:
        with self.lock:
            self.failures[why] = self.failures.get(why, 0) + 1


def produce_loop(cluster: Cluster, producer: int, acks: Acks, stop: threading.Event) -> None:
    rng = random.Random(producer)
    url = rng.choice(cluster.urls)
    with httpx.Client(timeout=10, follow_redirects=True) as client:
        request = 0
        while not stop.is_set():
            partition = request % PARTITIONS
            values = [f"p{producer}-{request}-{i}-{VALUE_PAD}" for i in range(RECORDS_PER_REQUEST)]
            request += 1
            try:
                answer = client.post(
                    f"{url}/topics/{TOPIC}/partitions/{partition}/records",
                    params={"acks": "all", "timeout_ms": 5_000},
                    json={"records": [{"value": v} for v in values]},
                )
            except httpx.HTTPError as exc:
                acks.failed(type(exc).__name__)
                url = rng.choice(cluster.urls)
                continue
            if answer.history:
                with acks.lock:
                    acks.redirects += 1
            if answer.status_code == 200:
                acks.acked(producer, values, answer.json()["offsets"])
                url = f"{answer.url.scheme}://{answer.url.netloc.decode()}"
            else:
                acks.failed(f"{answer.status_code} {answer.json().get('error_code')}")
                url = rng.choice(cluster.urls)
                time.sleep(0.05)


def inject_faults(cluster: Cluster, rng: random.Random, seconds: float) -> list[str]:
    """Kill or freeze one broker at a time, a partition's leader more often than not; all
    are running again at the end. Most freezes outlast the ZooKeeper session (2 s), so
    leadership moves while the frozen leader holds requests it already checked."""
    actions: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        victim = rng.choice(cluster.ids)
        if rng.random() < 0.7:
            with contextlib.suppress(httpx.HTTPError, KeyError, StopIteration):
                victim = cluster.leader(TOPIC, rng.randrange(PARTITIONS))
            if victim not in cluster.ids:
                victim = rng.choice(cluster.ids)
        if rng.random() < 0.3:
            down = rng.uniform(0.2, 2.0)
            actions.append(f"kill {victim} {down:.1f}s")
            cluster.kill(victim)
            time.sleep(down)
            cluster.restart(victim, wait=False)
        else:
            down = rng.uniform(1.0, 3.5)
            actions.append(f"freeze {victim} {down:.1f}s")
            cluster.pause(victim)
            time.sleep(down)
            cluster.resume(victim)
        time.sleep(rng.uniform(0.3, 1.5))
    return actions


def run_model_check(cluster: Cluster, seed: int) -> None:
    rng = random.Random(seed)
    create_topic(cluster, TOPIC, partitions=PARTITIONS, configs={"min.insync.replicas": 2}, via=1)
    acks = Acks()
    stop = threading.Event()
    producers = [
        threading.Thread(target=produce_loop, args=(cluster, n, acks, stop), daemon=True)
        for n in range(PRODUCERS)
    ]
    for thread in producers:
        thread.start()
    actions: list[str] = []
    try:
        actions = inject_faults(cluster, rng, FAULT_SECONDS)
    finally:
        stop.set()
        for thread in producers:
            thread.join(60)
    context = (
        f"seed {seed}, actions {actions}, {len(acks.at)} acknowledged, "
        f"{acks.redirects} redirects followed, failures {acks.failures}"
    )
    print(context)  # shown with -s: how much the run exercised
    assert not any(t.is_alive() for t in producers), context
    assert len(acks.at) >= 1_000, context
    for p in range(PARTITIONS):
        wait_isr(cluster, TOPIC, cluster.ids, p)
    hws = {}
    for p in range(PARTITIONS):
        leader = cluster.leader(TOPIC, p)
        described = httpx.get(f"{cluster.url(leader)}/topics/{TOPIC}", timeout=10).json()
        hws[p] = described["partitions"][p]["high_watermark"]
    cluster.stop(stop_zookeeper=False)

    for p in range(PARTITIONS):
        copies = {
            b: read_replica(cluster.broker(b).data_dir, TOPIC, p, hws[p]) for b in cluster.ids
        }
        assert len(set(copies.values())) == 1, f"replicas of {TOPIC}-{p} differ; {context}"
        log = {
            r.offset: orjson.loads(r.value or b"null")
            for r in decode_records(copies[cluster.ids[0]])
            if r.offset < hws[p]
        }
        assert sorted(log) == list(range(min(log, default=0), hws[p])), context
        values = list(log.values())
        assert len(values) == len(set(values)), f"a value written twice in {p}; {context}"
        for value, (partition, offset) in acks.at.items():
            if partition == p:
                found = log.get(offset)
                assert found == value, (
                    f"acknowledged {value[:20]} at {TOPIC}-{p}@{offset}, found "
                    f"{str(found)[:20]}; {context}"
                )
    for (producer, p), offsets in acks.order.items():
        assert offsets == sorted(offsets), f"producer {producer} out of order in {p}; {context}"


@pytest.mark.slow
def test_acknowledged_records_survive_kills_and_freezes(cluster: Cluster) -> None:
    run_model_check(cluster, seed=21)


@pytest.mark.slow
def test_acknowledged_records_survive_faults_on_a_slow_disk(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(env={"LOGBUS_TEST_SLOW_APPEND_MS": "40"})
    run_model_check(cluster, seed=int(time.time()))


def test_a_forged_replica_fetch_is_refused_and_commits_nothing(cluster: Cluster) -> None:
    """A client claiming to be a follower (``replica_id``) without that broker's
    inter-broker credential gets 403 and moves nothing: with the real followers frozen,
    an acks=all write times out instead of being acknowledged on the forger's word, and
    after the leader's death every acknowledged record is still there."""
    create_topic(cluster, "forged", configs={"min.insync.replicas": 2})
    leader = cluster.leader("forged")
    followers = [b for b in cluster.ids if b != leader]
    first = httpx.post(
        f"{cluster.url(leader)}/topics/forged/partitions/0/records",
        params={"acks": "all"},
        json={"records": [{"value": "a"}, {"value": "b"}]},
        timeout=30,
    )
    assert first.status_code == 200, first.text
    wait_isr(cluster, "forged", cluster.ids)
    base = f"{cluster.url(leader)}/topics/forged/partitions/0"
    epoch = cluster.partition("forged")["leader_epoch"]
    forged: list[int] = []
    stop = threading.Event()

    def forge() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                described = client.get(f"{cluster.url(leader)}/topics/forged").json()
                end = described["partitions"][0]["log_end_offset"]
                for replica in followers:
                    answer = client.get(
                        f"{base}/records",
                        params={"offset": end, "replica_id": replica, "leader_epoch": epoch},
                        headers={"Accept": "application/octet-stream", HEADER: "0" * 64},
                    )
                    forged.append(answer.status_code)

    for b in followers:
        cluster.pause(b)
    forger = threading.Thread(target=forge)
    forger.start()
    try:
        lost = httpx.post(
            f"{base}/records",
            params={"acks": "all", "timeout_ms": 1_000},
            json={"records": [{"value": "unreplicated"}]},
            timeout=30,
        )
    finally:
        stop.set()
        forger.join(30)
    assert lost.status_code == 504, lost.text
    assert forged and set(forged) == {403}, sorted(set(forged))
    described = httpx.get(f"{cluster.url(leader)}/topics/forged", timeout=10).json()
    assert described["partitions"][0]["high_watermark"] == 2
    for b in followers:
        cluster.resume(b)
    wait_isr(cluster, "forged", cluster.ids)
    cluster.kill(leader)
    new = cluster.wait_until(
        lambda: (b := cluster.leader("forged")) in followers and b,
        message="a new leader among the followers",
    )
    fetched = httpx.get(
        f"{cluster.url(new)}/topics/forged/partitions/0/records", params={"offset": 0}, timeout=10
    ).json()
    assert [r["value"] for r in fetched["records"]][:2] == ["a", "b"]
