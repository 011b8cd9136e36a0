"""Cluster mode (issue #7): replicated produce throughput and leader failover time.

``python -m bench.cluster [--quick]`` prints the figures as JSON; ``run()`` returns them.
It starts a real ZooKeeper and three ``logbus serve --zookeeper`` brokers on this machine
through the e2e harness (tests/e2e/cluster.py, with its short timings, DEFAULT_ENV), and
one plain broker (no ZooKeeper) for the baseline.

Throughput: the SDK Producer's ``send_many`` (lists of 10,000 100-byte values, the
producer's default settings) into a 4-partition topic for ``seconds`` per run, timed from
the first send to the last acknowledgement (``flush``):

* cluster: replication factor 3, ``min.insync.replicas=2``, ``acks=all``;
* baseline: one plain broker, replication factor 1, ``acks=1``.

Runs alternate (baseline, cluster, baseline, ...) so both see the same machine; the
figure is the median of each pair's ratio (the ratio of the medians is reported too).
Every record is checked to be there (end offsets).
All four processes of the cluster, ZooKeeper and the producer share this machine's cores.

Failover: one partition (replication factor 3, ``min.insync.replicas=2``) and a producer
thread writing one record at a time with ``acks=all`` (``send(...).result()``, SDK
defaults: retries with 100 ms..1 s backoff). Per round: wait until all three replicas are
in the ISR and the preferred replica leads again, ``kill -9`` the leader, and measure

* ``ack``: from the kill until the first acknowledgement of a write *sent after* the
  kill (so it cannot be the old leader's: at most one round trip more than the first
  acknowledgement of any write);
* ``metadata``: from the kill until ``/metadata`` on a survivor names a new leader;

then restart the killed broker. Kills stop after ``kills`` rounds or ``budget_s``.
Failure detection is ZooKeeper's session expiry, so the session timeout
(LOGBUS_ZOOKEEPER_SESSION_TIMEOUT_MS, 2,000 ms in the harness) bounds both from below.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from app.client import Admin, Consumer, Producer, TopicPartition
from bench import common

E2E = Path(__file__).resolve().parents[1] / "tests" / "e2e"
VALUE = b"x" * 100
PARTITIONS = 4
CHUNK = 10_000
BROKERS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC = 2
WAIT_S = 60.0


def _harness() -> tuple[Any, Any, dict[str, str]]:
    """(Cluster, ZooKeeperServer, DEFAULT_ENV) from tests/e2e (conftest first: see cluster.py)."""
    if str(E2E) not in sys.path:
        sys.path.insert(0, str(E2E))
    importlib.import_module("conftest")
    harness = importlib.import_module("cluster")
    zookeeper = importlib.import_module("zookeeper")
    return harness.Cluster, zookeeper.ZooKeeperServer, dict(harness.DEFAULT_ENV)


def _wait(check: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, KeyError, IndexError, StopIteration):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


def _delete(admin: Admin, topic: str) -> None:
    """Delete ``topic``; a failure is reported, not fatal (the next run uses a new name)."""
    for attempt in range(3):
        try:
            admin.delete_topic(topic)
            return
        except Exception as exc:
            print(f"  delete {topic} failed (attempt {attempt + 1}): {exc!r}", flush=True)
            time.sleep(1.0)


def _partition_state(cluster: Any, topic: str, partition: int) -> dict[str, Any]:
    state: dict[str, Any] = cluster.partition(topic, partition)
    return state


def _fully_replicated(cluster: Any, topic: str, partitions: int) -> bool:
    meta = cluster.metadata()
    harness = importlib.import_module("cluster")
    for p in range(partitions):
        state = harness.find_partition(meta, topic, p)
        if int(state["leader"]) < 0 or len(state["isr"]) != len(state["replicas"]):
            return False
    return True


# ------------------------------------------------------------------ throughput


def produce_for(urls: list[str], topic: str, acks: str, seconds: float) -> dict[str, float]:
    """``send_many`` for ``seconds``, then flush; records, elapsed s, records/s, MB/s."""
    values = [VALUE] * CHUNK
    with Producer(urls, acks=acks) as producer:
        producer.send(topic, VALUE).result(timeout=30)  # metadata and connections are warm
        send_many = producer.send_many
        sent = 0
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            send_many(topic, values)
            sent += CHUNK
        producer.flush()
        elapsed = time.perf_counter() - start
    with Consumer(urls) as consumer:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        stored = sum(consumer.end_offsets(tps).values())
    if stored != sent + 1:
        raise RuntimeError(f"{topic}: {stored} records stored, {sent + 1} sent")
    rate = sent / elapsed
    return {
        "records": sent,
        "seconds": elapsed,
        "records_per_s": rate,
        "mb_per_s": rate * len(VALUE) / 1e6,
    }


def _one_broker_run(url: str, seconds: float) -> dict[str, float]:
    topic = f"bench-single-{uuid.uuid4().hex[:8]}"
    with Admin(url) as admin:
        admin.create_topic(topic, PARTITIONS)
        try:
            return produce_for([url], topic, "1", seconds)
        finally:
            _delete(admin, topic)


def _cluster_run(cluster: Any, seconds: float) -> dict[str, float]:
    topic = f"bench-rf3-{uuid.uuid4().hex[:8]}"
    urls: list[str] = cluster.urls
    with Admin(urls) as admin:
        admin.create_topic(
            topic,
            PARTITIONS,
            replication_factor=REPLICATION_FACTOR,
            configs={"min.insync.replicas": MIN_INSYNC},
        )
        try:
            _wait(lambda: _fully_replicated(cluster, topic, PARTITIONS), f"{topic} ISR")
            result = produce_for(urls, topic, "all", seconds)
            # Were the followers still in the ISR at the end? (a shrink would be a cheat)
            result["isr_sizes_after"] = min(
                len(_partition_state(cluster, topic, p)["isr"]) for p in range(PARTITIONS)
            )
            return result
        finally:
            _delete(admin, topic)


def throughput(cluster: Any, runs: int, seconds: float) -> dict[str, Any]:
    single: list[dict[str, float]] = []
    replicated: list[dict[str, float]] = []
    with common.broker() as url:
        for _ in range(runs):
            single.append(_one_broker_run(url, seconds))
            print(f"  one broker, acks=1: {single[-1]['records_per_s']:,.0f} records/s", flush=True)
            replicated.append(_cluster_run(cluster, seconds))
            print(
                f"  3 brokers, RF 3, acks=all: {replicated[-1]['records_per_s']:,.0f} records/s",
                flush=True,
            )
    one = statistics.median(s["records_per_s"] for s in single)
    three = statistics.median(s["records_per_s"] for s in replicated)
    ratios = [
        r["records_per_s"] / s["records_per_s"] for r, s in zip(replicated, single, strict=True)
    ]
    return {
        "partitions": PARTITIONS,
        "value_bytes": len(VALUE),
        "seconds_per_run": seconds,
        "producer": f"SDK Producer.send_many, lists of {CHUNK:,}, default settings",
        "replicated_records_per_s": three,
        "replicated_mb_per_s": three * len(VALUE) / 1e6,
        "single_records_per_s": one,
        "single_mb_per_s": one * len(VALUE) / 1e6,
        # Each baseline run is paired with the cluster run right after it (same machine
        # load): the figure is the median of those ratios; the ratio of the medians beside.
        "ratio": statistics.median(ratios),
        "ratio_samples": ratios,
        "ratio_of_medians": three / one,
        "replicated_samples": replicated,
        "single_samples": single,
    }


# ------------------------------------------------------------------ failover


class _Writer(threading.Thread):
    """One acks=all write at a time; keeps (sent, acknowledged) monotonic times."""

    def __init__(self, urls: list[str], topic: str) -> None:
        super().__init__(name="bench-failover-writer", daemon=True)
        self.urls = urls
        self.topic = topic
        self.acks: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        with Producer(self.urls, acks="all", linger_ms=0) as producer:
            while not self.stopping.is_set():
                sent = time.monotonic()
                try:
                    producer.send(self.topic, VALUE).result(timeout=60)
                except Exception as exc:
                    self.errors.append(repr(exc))
                    continue
                with self.lock:
                    self.acks.append((sent, time.monotonic()))

    def first_ack_sent_after(self, t0: float) -> float | None:
        """When the first write sent at or after ``t0`` was acknowledged (None: not yet)."""
        found = None
        with self.lock:
            for sent, acked in reversed(self.acks):
                if sent < t0:
                    break
                found = acked
        return found


def _new_leader(client: httpx.Client, topic: str, old: int) -> bool:
    harness = importlib.import_module("cluster")
    response = client.get("/metadata")
    response.raise_for_status()
    leader = int(harness.find_partition(response.json(), topic, 0)["leader"])
    return leader not in (-1, old)


def _one_kill(cluster: Any, writer: _Writer, topic: str, preferred: int) -> dict[str, Any]:
    """Settle, kill -9 the leader, time the failover, restart the killed broker."""
    # Settled: every replica in the ISR and the preferred one leading again.
    _wait(lambda: _fully_replicated(cluster, topic, 1), "all replicas in the ISR")
    with contextlib.suppress(TimeoutError):
        _wait(lambda: cluster.leader(topic) == preferred, "the preferred leader", 10)
    leader = int(cluster.leader(topic))
    survivor = next(i for i in cluster.ids if i != leader)
    acks_before = len(writer.acks)
    _wait(lambda: len(writer.acks) > acks_before, "a write before the kill")
    with httpx.Client(base_url=cluster.url(survivor), timeout=5) as client:
        t0 = time.monotonic()
        cluster.kill(leader)
        _wait(lambda: _new_leader(client, topic, leader), "a new leader", 30)
        metadata_s = time.monotonic() - t0
    _wait(lambda: writer.first_ack_sent_after(t0) is not None, "a write acknowledged", 60)
    acked = writer.first_ack_sent_after(t0)
    assert acked is not None
    cluster.restart(leader)
    return {"killed": leader, "ack_ms": (acked - t0) * 1000, "metadata_ms": metadata_s * 1000}


def failover(cluster: Any, kills: int, budget_s: float) -> dict[str, Any]:
    topic = f"bench-failover-{uuid.uuid4().hex[:8]}"
    with Admin(cluster.urls) as admin:
        admin.create_topic(
            topic,
            1,
            replication_factor=REPLICATION_FACTOR,
            configs={"min.insync.replicas": MIN_INSYNC},
        )
    _wait(lambda: _fully_replicated(cluster, topic, 1), f"{topic} ISR")
    preferred = int(_partition_state(cluster, topic, 0)["replicas"][0])
    writer = _Writer(cluster.urls, topic)
    writer.start()
    rounds: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        _wait(lambda: len(writer.acks) > 10, "the writer's first acknowledgements")
        while len(rounds) < kills and time.monotonic() - started < budget_s:
            rounds.append(_one_kill(cluster, writer, topic, preferred))
            print(f"  kill {len(rounds)}: {rounds[-1]}", flush=True)
    finally:
        writer.stopping.set()
        writer.join(timeout=90)
        with Admin(cluster.urls) as admin:
            _delete(admin, topic)

    def pct(key: str, q: float) -> float:
        values = sorted(r[key] for r in rounds)
        # nearest rank: with 10-20 samples p99 is the maximum
        return float(values[min(len(values) - 1, max(0, round(q * len(values) + 0.5) - 1))])

    return {
        "kills": len(rounds),
        "elapsed_s": time.monotonic() - started,
        "writes_acked": len(writer.acks),
        "write_errors": len(writer.errors),
        "write_error_examples": writer.errors[:3],
        **{f"ack_{name}_ms": pct("ack_ms", q) for name, q in (("p50", 0.5), ("p99", 0.99))},
        "ack_max_ms": max(r["ack_ms"] for r in rounds),
        **{
            f"metadata_{name}_ms": pct("metadata_ms", q)
            for name, q in (("p50", 0.5), ("p99", 0.99))
        },
        "metadata_max_ms": max(r["metadata_ms"] for r in rounds),
        "rounds": rounds,
    }


# ------------------------------------------------------------------ section


def run(runs: int = 3, quick: bool = False) -> dict[str, Any]:
    make_cluster, zookeeper_server, default_env = _harness()
    workdir = Path(tempfile.mkdtemp(prefix="logbus-bench-cluster-"))
    zk = zookeeper_server(workdir / "zookeeper")
    cluster = make_cluster(workdir, zk, BROKERS)
    cluster.start()
    try:
        tp = throughput(cluster, runs, seconds=3.0 if quick else 10.0)
        fo = failover(cluster, kills=5 if quick else 15, budget_s=60.0 if quick else 150.0)
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "brokers": BROKERS,
        "replication_factor": REPLICATION_FACTOR,
        "min_insync_replicas": MIN_INSYNC,
        "cores": os.cpu_count(),
        "note": f"{BROKERS} brokers, ZooKeeper and the producer share {os.cpu_count()} cores",
        "env": default_env,
        "throughput": tp,
        "failover": fo,
    }


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    common.warm_memory()
    print(json.dumps(run(runs=1 if quick else 3, quick=quick), indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
