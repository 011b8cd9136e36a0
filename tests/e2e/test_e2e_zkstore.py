"""zk.ZkStore against a real ZooKeeper (the `zookeeper` fixture): paths, ephemeral nodes,
controller election, compare-and-set states, topic deletion, watches."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import wait_until
from kazoo.client import KazooClient  # type: ignore[import-untyped,unused-ignore]
from zookeeper import ZooKeeperServer

from app.common.errors import KafkaStorageError, TopicAlreadyExists
from app.core.replication.state import BrokerInfo, PartitionState, TopicAssignment
from app.core.replication.zk import (
    OFFLINE_REPLICAS,
    ZkStore,
    identity_path,
    split_connect,
    state_path,
    topic_path,
)
from app.core.replication.zk_offline import OfflineReplicaCache

SESSION_MS = 4000

# Registers /brokers/ids/<id> with a short session, then hangs until killed (a kill -9'd
# broker whose session ZooKeeper has not expired yet).
HOLDER = """
import sys, time
from kazoo.client import KazooClient
client = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[3]))
client.start(timeout=10)
client.create(sys.argv[2], b'{"id": 7, "url": "http://old"}', ephemeral=True, makepath=True)
print("ready", flush=True)
while True:
    time.sleep(60)
"""


@pytest.fixture
def stores(zookeeper: ZooKeeperServer) -> Iterator[list[ZkStore]]:
    made: list[ZkStore] = []
    yield made
    for store in made:
        if store.client.connected:
            store.stop()


@pytest.fixture
def raw(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zookeeper.connect_string, timeout=10.0)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def new_store(server: ZooKeeperServer, stores: list[ZkStore], chroot: str = "/lb") -> ZkStore:
    store = ZkStore(server.connect_string + chroot, SESSION_MS)
    store.start(timeout_s=10)
    stores.append(store)
    return store


def test_split_connect() -> None:
    assert split_connect("h1:2181,h2:2181/logbus") == ("h1:2181,h2:2181", "/logbus")
    assert split_connect("h:1/a/b/") == ("h:1", "/a/b")
    assert split_connect("h:1/") == ("h:1", "")
    assert split_connect("h:1") == ("h:1", "")


def test_start_creates_the_chroot_and_base_paths(
    zookeeper: ZooKeeperServer, stores: list[ZkStore], raw: KazooClient
) -> None:
    assert raw.exists("/deep") is None
    store = new_store(zookeeper, stores, "/deep/er")
    for path in ("/brokers/ids", "/brokers/topics", "/cluster"):
        assert raw.exists("/deep/er" + path) is not None, path
    # The cluster id is created once and agreed on by every broker.
    cid = store.cluster_id()
    assert len(cid) == 22
    assert new_store(zookeeper, stores, "/deep/er").cluster_id() == cid
    assert raw.get("/deep/er/cluster/id")[0] == cid.encode()
    # Another chroot is another cluster.
    assert new_store(zookeeper, stores, "/other").cluster_id() != cid


def test_register_broker_is_ephemeral(
    zookeeper: ZooKeeperServer, stores: list[ZkStore], raw: KazooClient
) -> None:
    a = new_store(zookeeper, stores)
    b = new_store(zookeeper, stores)
    a.register_broker(BrokerInfo(1, "http://a"), wait_s=1)
    b.register_broker(BrokerInfo(2, "http://b"), wait_s=1)
    assert b.live_brokers() == {1: BrokerInfo(1, "http://a"), 2: BrokerInfo(2, "http://b")}
    _, stat = raw.get("/lb/brokers/ids/1")
    assert stat.ephemeralOwner == a.session_id != 0
    # The same session registering again (a reconnect) just updates its node.
    a.register_broker(BrokerInfo(1, "http://a2"), wait_s=1)
    assert b.live_brokers()[1] == BrokerInfo(1, "http://a2")
    # ... with its Kafka listener (issue #19), which other brokers read back.
    a.register_broker(BrokerInfo(1, "http://a2", ("a", 9092)), wait_s=1)
    assert b.live_brokers()[1].kafka_listener == ("a", 9092)
    # Another live session holding the id: refused after waiting.
    started = time.monotonic()
    with pytest.raises(KafkaStorageError, match="broker id 1"):
        b.register_broker(BrokerInfo(1, "http://imposter"), wait_s=0.5)
    assert time.monotonic() - started >= 0.5
    # A clean stop removes the node at once.
    a.stop()
    assert sorted(b.live_brokers()) == [2]


def test_register_broker_waits_out_a_dead_sessions_node(
    zookeeper: ZooKeeperServer, stores: list[ZkStore], tmp_path: Path
) -> None:
    path = "/lb/brokers/ids/7"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, zookeeper.connect_string, path, "1.0"],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "holder.err").open("wb"),
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().startswith(b"ready"), (tmp_path / "holder.err").read_text()
        store = new_store(zookeeper, stores)
        assert store.live_brokers() == {7: BrokerInfo(7, "http://old")}
        holder.kill()
        holder.wait()
        started = time.monotonic()
        store.register_broker(BrokerInfo(7, "http://new"), wait_s=15)
        waited = time.monotonic() - started
        assert store.live_brokers() == {7: BrokerInfo(7, "http://new")}
        assert 0.2 < waited < 10, f"waited {waited:.1f} s for the 1 s session to expire"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_controller_election_has_one_winner_and_epochs_grow(
    zookeeper: ZooKeeperServer, stores: list[ZkStore]
) -> None:
    brokers = [new_store(zookeeper, stores) for _ in range(4)]
    assert brokers[0].controller() is None
    results: dict[int, int | None] = {}
    barrier = threading.Barrier(len(brokers))

    def run(i: int) -> None:
        barrier.wait()
        results[i] = brokers[i].try_become_controller(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(brokers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    winners = [i for i, epoch in results.items() if epoch is not None]
    assert len(results) == 4 and len(winners) == 1, results
    winner = winners[0]
    first_epoch = results[winner]
    assert first_epoch is not None and first_epoch >= 1
    assert brokers[1].controller() == (winner, first_epoch)
    # While it lives nobody else wins.
    loser = next(i for i in range(4) if i != winner)
    assert brokers[loser].try_become_controller(loser) is None
    assert brokers[loser].controller() == (winner, first_epoch)
    # Its session ends: the /controller node goes, the next one gets a higher epoch.
    brokers[winner].stop()
    assert brokers[loser].controller() is None
    second = brokers[loser].try_become_controller(loser)
    assert second is not None and second > first_epoch
    assert brokers[loser].controller() == (loser, second)


def test_topics_and_partition_states(
    zookeeper: ZooKeeperServer, stores: list[ZkStore], raw: KazooClient
) -> None:
    store = new_store(zookeeper, stores)
    assignment = TopicAssignment("id1", ((1, 2), (2, 1)), {"retention.ms": 1000})
    store.create_topic("orders", assignment)
    with pytest.raises(TopicAlreadyExists):
        store.create_topic("orders", TopicAssignment("id2", ((3,),)))
    assert store.get_topic("orders") == assignment, "the first assignment is kept"
    assert store.get_topic("missing") is None
    store.create_topic("audit", TopicAssignment("id3", ((1,),)))
    assert store.topics() == ["audit", "orders"]

    # Partition state: created once, then only compare-and-set.
    assert store.get_state("orders", 0) is None
    first = PartitionState(1, 0, (1, 2), 1)
    assert store.create_state("orders", 0, first)
    assert not store.create_state("orders", 0, PartitionState(2, 0, (2,), 1)), "exists"
    assert store.get_state("orders", 0) == (first, 0)
    assert raw.exists("/lb" + state_path("orders", 0)) is not None
    second = PartitionState(2, 1, (2,), 1)
    assert store.set_state("orders", 0, second, 0) == 1
    assert store.set_state("orders", 0, PartitionState(1, 1, (1,), 1), 0) is None, "stale"
    assert store.get_state("orders", 0) == (second, 1)
    assert store.set_state("orders", 1, second, 0) is None, "no state node yet"


def test_create_state_after_delete_topic_does_not_resurrect_it(
    zookeeper: ZooKeeperServer, stores: list[ZkStore], raw: KazooClient
) -> None:
    store = new_store(zookeeper, stores)
    store.create_topic("gone", TopicAssignment("id", ((1,), (1,))))
    assert store.create_state("gone", 0, PartitionState(1, 0, (1,), 1))
    assert store.delete_topic("gone")
    assert raw.exists("/lb" + topic_path("gone")) is None
    # A controller that read the topic before the delete writes its state late.
    assert not store.create_state("gone", 1, PartitionState(1, 0, (1,), 1))
    assert not store.create_state("gone", 0, PartitionState(1, 0, (1,), 1))
    assert raw.exists("/lb" + topic_path("gone")) is None
    assert store.topics() == [] and store.get_topic("gone") is None
    assert store.set_state("gone", 0, PartitionState(1, 1, (1,), 1), 0) is None
    # The name can be used again.
    store.create_topic("gone", TopicAssignment("id2", ((1,),)))
    assert store.get_state("gone", 0) is None


def test_a_compare_and_set_of_a_deleted_topic_does_not_land_on_the_one_created_again(
    zookeeper: ZooKeeperServer, stores: list[ZkStore]
) -> None:
    """A change read from "orders" (id1, version 0), written after "orders" was deleted and
    created again (id2, also version 0): it fails, and the new topic keeps its own
    assignment; a change of the new topic still lands."""
    store = new_store(zookeeper, stores)
    store.create_topic("orders", TopicAssignment("id1", ((1,),)))
    read = store.get_topic_versioned("orders")
    assert read is not None
    old, version = read
    assert version == 0
    assert store.delete_topic("orders")
    fresh = TopicAssignment("id2", ((2,), (2,)))
    store.create_topic("orders", fresh)
    assert store.get_topic_versioned("orders") == (fresh, 0)
    grown = dataclasses.replace(old, replicas=((1,), (1,), (1,)), configs={"retention.ms": 1})
    assert not store.set_topic("orders", grown, version)
    assert store.get_topic("orders") == fresh
    changed = dataclasses.replace(fresh, configs={"retention.ms": 2})
    assert store.set_topic("orders", changed, 0)
    assert store.get_topic_versioned("orders") == (changed, 1)
    assert not store.set_topic("orders", changed, 0), "a stale version still fails"


def test_a_topic_created_without_an_identity_takes_one_at_its_first_change(
    zookeeper: ZooKeeperServer, stores: list[ZkStore], raw: KazooClient
) -> None:
    """A topic an earlier version created (its znode alone): its first change writes its
    identity with it, after which a change of a topic of that name created again fails."""
    store = new_store(zookeeper, stores)
    before = TopicAssignment("id1", ((1,),))
    raw.create("/lb" + topic_path("legacy"), before.to_json(), makepath=True)
    changed = dataclasses.replace(before, configs={"retention.ms": 5})
    assert not store.set_topic("legacy", changed, 7), "a stale version"
    assert raw.exists("/lb" + identity_path("legacy", "id1")) is None, "nothing written"
    assert store.set_topic("legacy", changed, 0)
    assert raw.exists("/lb" + identity_path("legacy", "id1")) is not None
    assert store.get_topic_versioned("legacy") == (changed, 1)
    assert store.delete_topic("legacy")
    store.create_topic("legacy", TopicAssignment("id2", ((1,),)))
    store.set_topic("legacy", TopicAssignment("id2", ((1,),), {"retention.ms": 6}), 0)
    assert not store.set_topic("legacy", dataclasses.replace(changed, configs={}), 1)
    assert store.get_topic("legacy") == TopicAssignment("id2", ((1,),), {"retention.ms": 6})


def test_offline_replica_reports_are_ephemeral(
    zookeeper: ZooKeeperServer, stores: list[ZkStore]
) -> None:
    """What the controller's round reads: every broker's current report (its changes are
    watched by the OfflineReplicaCache, below)."""
    reader = new_store(zookeeper, stores)
    broker = new_store(zookeeper, stores)
    assert reader.offline_replicas() == {}
    broker.set_offline_replicas(2, {"orders": ("id1", [3, 1])})
    assert reader.offline_replicas() == {("orders", "id1", 1): {2}, ("orders", "id1", 3): {2}}
    broker.set_offline_replicas(2, {"orders": ("id1", [1])})  # a changed report
    assert reader.offline_replicas() == {("orders", "id1", 1): {2}}
    broker.stop()  # its session ends: the report goes with it
    wait_until(lambda: reader.offline_replicas() == {}, 10, "the report's end")
    again = new_store(zookeeper, stores)
    again.set_offline_replicas(2, {"audit": ("id2", [0])})
    assert reader.offline_replicas() == {("audit", "id2", 0): {2}}
    again.set_offline_replicas(2, {})
    assert reader.offline_replicas() == {}


def test_the_offline_replica_cache_follows_every_brokers_report(
    zookeeper: ZooKeeperServer, stores: list[ZkStore]
) -> None:
    """What metadata answers read: every broker's report, kept from watches (present at
    start, changed, taken back and made again, gone with the session), by topic id."""
    reader = new_store(zookeeper, stores)
    one = new_store(zookeeper, stores)
    two = new_store(zookeeper, stores)
    one.set_offline_replicas(1, {"orders": ("id1", [0, 2])})
    changes = threading.Event()
    cache = OfflineReplicaCache()
    cache.start(reader.client, changes.set)
    assert cache.brokers("orders", "id1", 0) == {1}  # there when start returns
    assert cache.brokers("orders", "id1", 1) == frozenset()
    assert cache.brokers("orders", "other-id", 0) == frozenset()  # a new topic of the name
    two.set_offline_replicas(2, {"orders": ("id1", [2])})
    wait_until(lambda: cache.brokers("orders", "id1", 2) == {1, 2}, 10, "a second report")
    assert changes.is_set()
    one.set_offline_replicas(1, {})  # taken back: the node goes
    wait_until(lambda: cache.brokers("orders", "id1", 0) == frozenset(), 10, "a report taken back")
    assert cache.brokers("orders", "id1", 2) == {2}
    one.set_offline_replicas(1, {"audit": ("id3", [1])})  # made again at the same path
    wait_until(lambda: cache.brokers("audit", "id3", 1) == {1}, 10, "a report made again")
    two.stop()  # its session ends: its report goes with it
    wait_until(lambda: cache.brokers("orders", "id1", 2) == frozenset(), 10, "a session's end")
    reader.client.create(f"{OFFLINE_REPLICAS}/7", b"[1, 2]")  # malformed: no report
    reader.client.create(
        f"{OFFLINE_REPLICAS}/8", b'{"audit": {"topic_id": "id3", "partitions": [1]}}'
    )
    wait_until(lambda: cache.brokers("audit", "id3", 1) == {1, 8}, 10, "a report after a bad one")


def test_delete_topic_of_a_missing_topic_says_so(
    zookeeper: ZooKeeperServer, stores: list[ZkStore]
) -> None:
    # The manager answers UnknownTopicOrPartition on False. (kazoo's recursive delete
    # returns quietly for a missing node, so a plain delete(recursive=True) never says so.)
    store = new_store(zookeeper, stores)
    assert not store.delete_topic("never")
    store.create_topic("once", TopicAssignment("id", ((1,),)))
    assert store.delete_topic("once")
    assert not store.delete_topic("once")


def test_watches_fire(zookeeper: ZooKeeperServer, stores: list[ZkStore]) -> None:
    store = new_store(zookeeper, stores)
    other = new_store(zookeeper, stores)
    brokers: list[list[str]] = []
    topics: list[list[str]] = []
    controllers: list[int | None] = []
    states: list[tuple[PartitionState | None, int]] = []
    assignments: list[TopicAssignment | None] = []
    store.watch_brokers(brokers.append)
    store.watch_topics(topics.append)
    store.watch_controller(controllers.append)
    # Every watch reports the current value at once.
    wait_until(lambda: brokers and topics and controllers, 5, "initial watch calls")
    assert (brokers[-1], topics[-1], controllers[-1]) == ([], [], None)

    other.register_broker(BrokerInfo(5, "http://e"), wait_s=1)
    wait_until(lambda: brokers[-1] == ["5"], 5, "broker watch")
    assert other.try_become_controller(5) is not None
    wait_until(lambda: controllers[-1] == 5, 5, "controller watch")

    assignment = TopicAssignment("id", ((5,),))
    other.create_topic("t", assignment)
    wait_until(lambda: topics[-1] == ["t"], 5, "topics watch")

    def on_topic(a: TopicAssignment | None) -> bool:
        assignments.append(a)
        return True

    def on_state(s: PartitionState | None, v: int) -> bool:
        states.append((s, v))
        return True

    store.watch_topic("t", on_topic)
    store.watch_state("t", 0, on_state)
    wait_until(lambda: assignments and states, 5, "initial topic/state calls")
    assert assignments[-1] == assignment and states[-1] == (None, -1)
    state = PartitionState(5, 0, (5,), 1)
    assert other.create_state("t", 0, state)
    wait_until(lambda: states[-1] == (state, 0), 5, "state watch on create")
    newer = PartitionState(5, 1, (5,), 1)
    assert other.set_state("t", 0, newer, 0) == 1
    wait_until(lambda: states[-1] == (newer, 1), 5, "state watch on set")

    other.stop()  # its broker node and /controller go with the session
    wait_until(lambda: brokers[-1] == [], 5, "broker gone")
    wait_until(lambda: controllers[-1] is None, 5, "controller gone")
    store.delete_topic("t")
    wait_until(lambda: topics[-1] == [], 5, "topic gone")
    wait_until(lambda: assignments[-1] is None, 5, "topic watch on delete")
    wait_until(lambda: states[-1] == (None, -1), 5, "state watch on delete")


def test_session_listener_hears_connection_changes(
    zookeeper: ZooKeeperServer, stores: list[ZkStore]
) -> None:
    store = ZkStore(zookeeper.connect_string, SESSION_MS)
    heard: list[str] = []

    def failing(_: str) -> None:
        raise RuntimeError("listener bug")

    store.add_session_listener(failing)  # a failing listener does not stop the others
    store.add_session_listener(heard.append)
    store.start(timeout_s=10)
    stores.append(store)
    wait_until(lambda: "connected" in heard, 5, "connected")
    store.stop()
    wait_until(lambda: "lost" in heard, 5, "lost on close")
