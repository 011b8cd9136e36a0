"""Controller.reconcile's decisions, against an in-memory ZkStore with CAS versions."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import cast

import pytest

from app.core.replication.controller import Controller
from app.core.replication.state import NO_LEADER, BrokerInfo, PartitionState, TopicAssignment
from app.core.replication.zk import ZkStore

UNCLEAN = "unclean.leader.election.enable"


class FakeClient:
    connected = True


class FakeZk:
    """The ZkStore methods the controller calls; states carry znode versions."""

    def __init__(self, live: set[int]) -> None:
        self.client = FakeClient()
        self.live = set(live)
        self.assignments: dict[str, TopicAssignment] = {}
        self.states: dict[tuple[str, int], tuple[PartitionState, int]] = {}
        self.writes: list[tuple[str, int, PartitionState]] = []
        self.controller_node: tuple[int, int] | None = None
        self.controller_epoch = 0
        # Runs inside set_state before the version check: another writer racing us.
        self.before_set: Callable[[str, int], None] = lambda _t, _p: None
        self.watchers: dict[str, list[Callable[..., object]]] = {
            "brokers": [],
            "topics": [],
            "controller": [],
            "session": [],
            "topic": [],
        }
        self.lock = threading.Lock()
        # (topic, topic id, partition) -> brokers that reported the replica offline.
        self.offline: dict[tuple[str, str, int], set[int]] = {}

    # -- brokers and controller
    def live_brokers(self) -> dict[int, BrokerInfo]:
        return {b: BrokerInfo(b, f"http://b{b}") for b in sorted(self.live)}

    def controller(self) -> tuple[int, int] | None:
        return self.controller_node

    def try_become_controller(self, broker_id: int) -> int | None:
        with self.lock:
            if self.controller_node is not None:
                return None
            self.controller_epoch += 1
            self.controller_node = (broker_id, self.controller_epoch)
            return self.controller_epoch

    def watch_controller(self, cb: Callable[[int | None], None]) -> None:
        self.watchers["controller"].append(cb)

    def watch_brokers(self, cb: Callable[[list[str]], None]) -> None:
        self.watchers["brokers"].append(cb)
        cb([str(b) for b in sorted(self.live)])

    def watch_topics(self, cb: Callable[[list[str]], None]) -> None:
        self.watchers["topics"].append(cb)
        cb(self.topics())

    def offline_replicas(self) -> dict[tuple[str, str, int], set[int]]:
        return {k: set(v) for k, v in self.offline.items()}

    def add_session_listener(self, cb: Callable[[str], None]) -> None:
        self.watchers["session"].append(cb)

    def watch_topic(self, name: str, cb: Callable[[TopicAssignment | None], bool]) -> None:
        self.watchers["topic"].append(lambda: cb(self.assignments.get(name)))
        cb(self.assignments.get(name))

    def fire_topic_watches(self) -> None:
        """The topic znodes changed: each watch reads its topic again; one answering False
        is gone, as kazoo's DataWatch stops."""
        self.watchers["topic"] = [w for w in self.watchers["topic"] if w() is not False]

    # -- topics and states
    def topics(self) -> list[str]:
        return sorted(self.assignments)

    def get_topic(self, name: str) -> TopicAssignment | None:
        return self.assignments.get(name)

    def get_state(self, topic: str, partition: int) -> tuple[PartitionState, int] | None:
        return self.states.get((topic, partition))

    def create_state(self, topic: str, partition: int, state: PartitionState) -> bool:
        if topic not in self.assignments or (topic, partition) in self.states:
            return False
        self.states[(topic, partition)] = (state, 0)
        self.writes.append((topic, partition, state))
        return True

    def set_state(
        self, topic: str, partition: int, state: PartitionState, version: int
    ) -> int | None:
        self.before_set(topic, partition)
        current = self.states.get((topic, partition))
        if current is None or current[1] != version:
            return None
        self.states[(topic, partition)] = (state, version + 1)
        self.writes.append((topic, partition, state))
        return version + 1

    # -- test helpers
    def add_topic(
        self, name: str, *replicas: tuple[int, ...], configs: dict[str, object] | None = None
    ) -> None:
        self.assignments[name] = TopicAssignment("id-" + name, tuple(replicas), dict(configs or {}))

    def put(self, topic: str, p: int, state: PartitionState, version: int = 3) -> None:
        self.states[(topic, p)] = (state, version)

    def state(self, topic: str, p: int = 0) -> PartitionState:
        return self.states[(topic, p)][0]

    def version(self, topic: str, p: int = 0) -> int:
        return self.states[(topic, p)][1]


def make(live: set[int], *, unclean: bool = False, epoch: int = 5) -> tuple[FakeZk, Controller]:
    zk = FakeZk(live)
    controller = Controller(cast(ZkStore, zk), 1, unclean_leader_election=unclean)
    controller.epoch = epoch
    controller.active = True
    return zk, controller


def test_first_states_lead_on_the_first_live_replica_with_the_live_isr() -> None:
    zk, c = make({1, 2, 3})
    zk.add_topic("t", (1, 2, 3), (2, 3, 1), (3, 1, 2))
    zk.add_topic("u", (4, 2, 3), (4, 5))
    assert c.reconcile() == 5
    assert zk.state("t", 0) == PartitionState(1, 0, (1, 2, 3), 5)
    assert zk.state("t", 1) == PartitionState(2, 0, (2, 3, 1), 5)
    assert zk.state("t", 2) == PartitionState(3, 0, (3, 1, 2), 5)
    # Broker 4 is not alive: the first *live* replica leads; the ISR holds only live ones.
    assert zk.state("u", 0) == PartitionState(2, 0, (2, 3), 5)
    # No live replica at all: leaderless, every replica qualifies.
    assert zk.state("u", 1) == PartitionState(NO_LEADER, 0, (4, 5), 5)
    # Nothing left to fix.
    zk.writes.clear()
    assert c.reconcile() == 0 and zk.writes == []


def test_a_replica_reported_offline_is_neither_first_leader_nor_in_the_first_isr() -> None:
    """Broker 1 could not create its replicas of t-0 and t-1 (a disk error, no descriptors
    left): the first states leave it out; t-2, which it hosts, and the reports of an older
    topic of the name (another id) do not count."""
    zk, c = make({1, 2, 3})
    zk.add_topic("t", (1, 2, 3), (3, 1), (1, 2))
    zk.offline[("t", "id-t", 0)] = {1}
    zk.offline[("t", "id-t", 1)] = {1}
    zk.offline[("t", "id-old", 2)] = {1}
    assert c.reconcile() == 3
    assert zk.state("t", 0) == PartitionState(2, 0, (2, 3), 5)
    assert zk.state("t", 1) == PartitionState(3, 0, (3,), 5)
    assert zk.state("t", 2) == PartitionState(1, 0, (1, 2), 5)
    # Its only replica offline: leaderless, as with no live replica.
    zk.add_topic("solo", (1,))
    zk.offline[("solo", "id-solo", 0)] = {1}
    assert c.reconcile() == 1 and zk.state("solo").leader == NO_LEADER


def test_a_leader_or_follower_reported_offline_gives_way_and_leaves_the_isr() -> None:
    """The first states were written before broker 1's report came: as leader it gives
    way to the next ISR member (epoch bumped), as a follower it leaves the ISR; never
    brought back by the preferred election; its report gone, it may be in sync again."""
    zk, c = make({1, 2, 3})
    zk.add_topic("t", (1, 2, 3), (2, 1, 3))
    zk.put("t", 0, PartitionState(1, 0, (1, 2, 3), 5), version=0)
    zk.put("t", 1, PartitionState(2, 0, (2, 1, 3), 5), version=0)
    zk.offline[("t", "id-t", 0)] = {1}
    zk.offline[("t", "id-t", 1)] = {1}
    assert c.reconcile(preferred=True) == 2
    assert zk.state("t", 0) == PartitionState(2, 1, (2, 3), 5)
    assert zk.state("t", 1) == PartitionState(2, 0, (2, 3), 5)
    assert c.reconcile(preferred=True) == 0, "the offline preferred replica is not elected"
    zk.offline.clear()
    assert c.reconcile(preferred=True) == 0, "out of the ISR: a leader adds it back"


def test_dead_leader_gives_way_to_the_next_isr_member_in_replica_order() -> None:
    zk, c = make({2, 3})
    zk.add_topic("t", (1, 3, 2))
    # ISR order differs from replica order: replica order decides.
    zk.put("t", 0, PartitionState(1, 4, (2, 1, 3), 2), version=7)
    assert c.reconcile() == 1
    assert zk.state("t") == PartitionState(3, 5, (2, 3), 5)
    assert zk.version("t") == 8


def test_dead_leader_with_only_out_of_sync_replicas_alive_leaves_the_partition_offline() -> None:
    zk, c = make({2, 3})
    zk.add_topic("t", (1, 2, 3))
    zk.put("t", 0, PartitionState(1, 4, (1,)))
    assert c.reconcile() == 1
    # Leaderless, epoch bumped (fences the old leader), ISR kept as it was.
    assert zk.state("t") == PartitionState(NO_LEADER, 5, (1,), 5)
    zk.writes.clear()
    assert c.reconcile() == 0 and zk.writes == [], "an offline partition is not rewritten"
    # The last ISR member returns: it leads again.
    zk.live.add(1)
    assert c.reconcile() == 1
    assert zk.state("t") == PartitionState(1, 6, (1,), 5)


def test_every_isr_member_dead_and_nothing_alive_stays_offline_even_when_unclean() -> None:
    zk, c = make({9}, unclean=True)
    zk.add_topic("t", (1, 2))
    zk.put("t", 0, PartitionState(1, 0, (1, 2)))
    assert c.reconcile() == 1
    assert zk.state("t") == PartitionState(NO_LEADER, 1, (1, 2), 5)


@pytest.mark.parametrize(
    ("broker_flag", "topic_configs", "elected"),
    [
        (False, {}, False),
        (True, {}, True),
        (False, {UNCLEAN: True}, True),
        (True, {UNCLEAN: False}, False),  # the topic's own setting wins
    ],
)
def test_unclean_election_by_topic_config_or_broker_flag(
    broker_flag: bool, topic_configs: dict[str, object], elected: bool
) -> None:
    zk, c = make({2, 3}, unclean=broker_flag)
    zk.add_topic("t", (1, 3, 2), configs=topic_configs)
    zk.put("t", 0, PartitionState(1, 4, (1,)))
    c.reconcile()
    if elected:
        # The first live replica in replica order, alone in the ISR.
        assert zk.state("t") == PartitionState(3, 5, (3,), 5)
    else:
        assert zk.state("t") == PartitionState(NO_LEADER, 5, (1,), 5)


def test_unclean_election_also_revives_an_already_leaderless_partition() -> None:
    zk, c = make({2}, unclean=True)
    zk.add_topic("t", (1, 2))
    zk.put("t", 0, PartitionState(NO_LEADER, 3, (1,)))
    assert c.reconcile() == 1
    assert zk.state("t") == PartitionState(2, 4, (2,), 5)


def test_dead_follower_leaves_the_isr_without_an_epoch_bump() -> None:
    zk, c = make({1, 2})
    zk.add_topic("t", (1, 2, 3))
    zk.put("t", 0, PartitionState(1, 4, (1, 3, 2)), version=10)
    assert c.reconcile() == 1
    assert zk.state("t") == PartitionState(1, 4, (1, 2), 5)
    assert zk.version("t") == 11


def test_a_broker_that_registered_while_the_states_were_read_is_not_taken_for_dead() -> None:
    # Broker 3 re-registered (new session) and its leader put it back into the ISR while
    # the controller was reading: the live set it compares with must be at least as new.
    zk, c = make({1, 2})
    zk.add_topic("t", (1, 2, 3))
    zk.put("t", 0, PartitionState(1, 4, (1, 2)), version=10)
    read_state = zk.get_state

    def registering_meanwhile(topic: str, partition: int) -> tuple[PartitionState, int] | None:
        zk.live.add(3)
        zk.put("t", 0, PartitionState(1, 4, (1, 2, 3)), version=11)
        return read_state(topic, partition)

    zk.get_state = registering_meanwhile  # type: ignore[method-assign]
    assert c.reconcile() == 0
    assert zk.state("t") == PartitionState(1, 4, (1, 2, 3)), "3 stays in the ISR"


def test_preferred_leader_election_only_when_the_preferred_replica_is_alive_and_in_sync() -> None:
    zk, c = make({1, 2, 3})
    zk.add_topic("t", (1, 2, 3), (1, 2, 3), (1, 2, 3))
    zk.put("t", 0, PartitionState(2, 4, (2, 1, 3)))  # preferred alive and in sync
    zk.put("t", 1, PartitionState(2, 4, (2, 3)))  # preferred alive, not in sync
    zk.put("t", 2, PartitionState(1, 4, (1, 2, 3)))  # preferred already leads
    assert c.reconcile(preferred=False) == 0, "only on the imbalance timer"
    assert c.reconcile(preferred=True) == 1
    assert zk.state("t", 0) == PartitionState(1, 5, (2, 1, 3), 5)
    assert zk.state("t", 1) == PartitionState(2, 4, (2, 3), 0)
    assert zk.state("t", 2) == PartitionState(1, 4, (1, 2, 3), 0)


def test_preferred_leader_election_skips_a_dead_preferred_replica() -> None:
    zk, c = make({2, 3})
    zk.add_topic("t", (1, 2, 3))
    zk.put("t", 0, PartitionState(2, 4, (2, 3)))
    assert c.reconcile(preferred=True) == 0
    assert zk.state("t") == PartitionState(2, 4, (2, 3), 0)


def test_cas_conflict_writes_nothing_and_kicks_another_round() -> None:
    zk, c = make({1, 2})
    zk.add_topic("t", (1, 2, 3))
    zk.put("t", 0, PartitionState(1, 4, (1, 2, 3)), version=3)
    theirs = PartitionState(1, 4, (1, 2), 9)

    def racing_leader(topic: str, p: int) -> None:
        # The leader shrinks the ISR between the controller's read and its write.
        zk.before_set = lambda _t, _p: None
        zk.states[(topic, p)] = (theirs, 4)

    zk.before_set = racing_leader
    assert not c._wake.is_set()
    assert c.reconcile() == 0
    assert zk.states[("t", 0)] == (theirs, 4), "the newer state was not overwritten"
    assert zk.writes == []
    assert c._wake.is_set(), "a lost CAS asks for another round"
    # The next round reads the newer state: nothing left to fix.
    c._wake.clear()
    assert c.reconcile() == 0 and not c._wake.is_set()


def test_cas_conflict_on_an_election_then_the_next_round_elects_from_the_new_state() -> None:
    zk, c = make({2, 3})
    zk.add_topic("t", (1, 2, 3))
    zk.put("t", 0, PartitionState(1, 4, (1, 2, 3)), version=3)

    def stale(topic: str, p: int) -> None:
        zk.before_set = lambda _t, _p: None
        zk.states[(topic, p)] = (PartitionState(1, 4, (1, 3), 9), 4)

    zk.before_set = stale
    assert c.reconcile() == 0
    assert c.reconcile() == 1
    assert zk.state("t") == PartitionState(3, 5, (3,), 5)


def test_deleted_topic_and_topic_without_assignment_are_skipped() -> None:
    zk, c = make({1})
    zk.add_topic("t", (1,))
    zk.assignments["gone"] = None  # type: ignore[assignment]  # znode emptied meanwhile
    assert c.reconcile() == 1
    assert set(zk.states) == {("t", 0)}


def test_round_elects_one_controller_and_only_it_reconciles() -> None:
    zk = FakeZk({1, 2})
    zk.add_topic("t", (2, 1))
    other = Controller(cast(ZkStore, zk), 2)
    other._next_preferred = time.monotonic() + 60
    other._round()
    assert other.active and other.epoch == 1 and other.elections == 1
    assert zk.state("t") == PartitionState(2, 0, (2, 1), 1)
    assert len(zk.watchers["brokers"]) == 1 and len(zk.watchers["topics"]) == 1
    me = Controller(cast(ZkStore, zk), 1)
    zk.add_topic("u", (1, 2))
    me._round()
    assert not me.active and me.elections == 0
    assert ("u", 0) not in zk.states, "an inactive controller writes nothing"
    # The controller's session dies: the next broker takes over with a higher epoch.
    zk.controller_node = None
    me._round()
    assert me.active and me.epoch == 2
    assert zk.state("u") == PartitionState(1, 0, (1, 2), 2)


def test_partitions_added_to_a_topic_get_first_states_when_its_znode_changes() -> None:
    zk = FakeZk({1, 2})
    zk.add_topic("t", (1, 2))
    c = Controller(cast(ZkStore, zk), 1)
    c._next_preferred = time.monotonic() + 60
    c._round()
    assert len(zk.watchers["topic"]) == 1  # the active controller watches the topic
    c._wake.clear()
    # CreatePartitions on any broker rewrites the assignment: the watch kicks a round.
    zk.add_topic("t", (1, 2), (2, 1))
    zk.fire_topic_watches()
    assert c._wake.is_set()
    c._round()
    assert zk.state("t", 1) == PartitionState(2, 0, (2, 1), 1)
    assert len(zk.watchers["topic"]) == 1, "one watch per topic, not one per round"
    # Deleted: the watch ends, and a topic created again under the name gets a new one.
    del zk.assignments["t"]
    zk.fire_topic_watches()
    assert zk.watchers["topic"] == []
    zk.add_topic("t", (2,))
    c._round()
    assert len(zk.watchers["topic"]) == 1


def test_round_does_nothing_while_disconnected() -> None:
    zk = FakeZk({1})
    zk.add_topic("t", (1,))
    zk.client.connected = False
    c = Controller(cast(ZkStore, zk), 1)
    c._round()
    assert zk.controller_node is None and zk.states == {}


def test_controller_thread_reacts_to_a_broker_watch() -> None:
    zk = FakeZk({1, 2})
    zk.add_topic("t", (2, 1))
    c = Controller(cast(ZkStore, zk), 1, leader_imbalance_check_interval_ms=60_000)
    c.start()
    try:
        deadline = time.monotonic() + 5
        while ("t", 0) not in zk.states and time.monotonic() < deadline:
            time.sleep(0.01)
        assert zk.state("t") == PartitionState(2, 0, (2, 1), 1)
        # Broker 2 dies; the ZooKeeper watch fires and the controller fails over at once
        # (well before its 5 s safety timer).
        zk.live.discard(2)
        for cb in zk.watchers["brokers"]:
            cb(["1"])
        deadline = time.monotonic() + 2
        while zk.state("t").leader != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert zk.state("t") == PartitionState(1, 1, (1,), 1)
    finally:
        c.stop()
    assert c._thread is not None and not c._thread.is_alive()


def test_a_broker_back_with_a_new_session_is_never_live_without_its_offline_report() -> None:
    """Broker 1's session expired (its registration and its offline report went with
    it) while its replica of t-0 is still missing; broker 2, the last ISR member, is dead,
    and t elects uncleanly. A controller round the moment broker 1 is registered again
    finds its report there: broker 1 is not elected. The report was written after the
    registration: that round took broker 1 for a live replica of t-0 and elected it,
    without a log (then, its report in, left the partition leaderless with broker 1 for
    its ISR)."""
    import asyncio
    from types import SimpleNamespace

    from app.core.replication.config import ReplicaConfig
    from app.core.replication.manager import ReplicaManager

    zk, controller = make(set())
    zk.add_topic("t", (1, 2), configs={UNCLEAN: True})
    zk.put("t", 0, PartitionState(NO_LEADER, 4, (2,)))
    registered = []

    def register_broker(info: BrokerInfo, wait_s: float) -> None:
        zk.live.add(info.id)
        registered.append(info.id)
        controller.reconcile()  # a round right then (the broker watch kicks one)

    def set_offline_replicas(broker_id: int, offline: dict[str, tuple[str, list[int]]]) -> None:
        zk.offline = {k: v - {broker_id} for k, v in zk.offline.items()}
        for topic, (topic_id, partitions) in offline.items():
            for p in partitions:
                zk.offline.setdefault((topic, topic_id, p), set()).add(broker_id)

    zk.register_broker = register_broker  # type: ignore[attr-defined]
    zk.session_id = 7  # type: ignore[attr-defined]
    zk.set_offline_replicas = set_offline_replicas  # type: ignore[attr-defined]
    settings = ReplicaConfig(zookeeper="127.0.0.1:1", broker_id=1, url="http://127.0.0.1:9")
    replicas = ReplicaManager(settings, SimpleNamespace(), lambda log: None)  # type: ignore[arg-type]
    replicas.store = cast(ZkStore, zk)
    replicas._offline = {"t": ("id-t", [0])}
    asyncio.run(replicas._register())
    assert registered == [1] and zk.offline == {("t", "id-t", 0): {1}}
    assert zk.writes == [] and zk.state("t").leader == NO_LEADER, "no leader without a log"
