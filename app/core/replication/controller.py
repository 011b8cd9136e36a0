"""The controller: one broker at a time elects partition leaders and trims the ISR.

Every broker runs a :class:`Controller`; the one that creates the ephemeral
``/controller`` znode is active until its ZooKeeper session ends, then
another takes over (each new controller bumps ``/controller_epoch``).

The active controller *reconciles* rather than replaying events: whenever
the set of live brokers or topics changes (ZooKeeper watches), and on a
timer, it reads every partition's state and fixes what is wrong:

- a partition without a state znode gets its first one (leader: the first
  live replica, ISR: the live replicas, epoch 0): a new topic's, and the new
  partitions of a grown one (the active controller watches every topic's znode);
- a partition whose leader is dead gets a new leader from the live ISR
  members, in replica order, with the leader epoch bumped; with none alive
  it stays leaderless (``unclean.leader.election.enable`` false) until an
  ISR member returns, or an unclean election picks any live replica;
- dead brokers leave the ISR at once, so ``acks=all`` writes do not wait for
  ``replica.lag.time.max.ms``;
- a replica its broker reported offline (``/brokers/offline_replicas/<id>``: it is
  assigned the partition but could not create its log, Kafka's offline replica) counts
  as dead for that partition alone: it is never elected, leaves the ISR, and a first
  state leaves it out, until its report goes (the broker restarted and made it);
  the round reads the reports from ZooKeeper with the states; the owner's watch-fed
  cache (:class:`~app.core.replication.zk_offline.OfflineReplicaCache`) kicks it;
- every ``leader_imbalance_check_interval_ms`` the preferred replica (the
  first one) gets leadership back when it is alive and in the ISR.

Every write is a compare-and-set on the znode's version, so a stale controller
or a leader changing the ISR at the same moment cannot overwrite a newer
state: the loser re-reads and tries again on the next round.

Threads: one daemon thread (``logbus-controller``) does the work; watches
only set an event. Safe to call :meth:`kick` from any thread.
"""

from __future__ import annotations

import logging
import threading
import time

from kazoo.exceptions import KazooException

from app.core.replication.state import NO_LEADER, PartitionState
from app.core.replication.zk import ZkStore

_log = logging.getLogger(__name__)

# Reconcile this often even without a watch firing (a missed or failed round).
SAFETY_INTERVAL_S = 5.0


class Controller:
    def __init__(
        self,
        store: ZkStore,
        broker_id: int,
        *,
        unclean_leader_election: bool = False,
        leader_imbalance_check_interval_ms: int = 30_000,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.unclean = unclean_leader_election
        self.imbalance_interval_s = leader_imbalance_check_interval_ms / 1000
        self.epoch = 0
        self.active = False
        self.elections = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watching = False
        # Topics whose znode this controller watches (kazoo's thread discards): a topic's
        # new partitions need first states as soon as their assignment is written.
        self._topic_watches: set[str] = set()
        self._seen_topics: list[str] = []  # the topics the last reconcile read
        self._next_preferred = 0.0

    def start(self) -> None:
        self.store.watch_controller(lambda _: self.kick())
        self.store.add_session_listener(self._on_session)
        self._thread = threading.Thread(target=self._run, name="logbus-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def kick(self) -> None:
        """Reconcile soon (any thread)."""
        self._wake.set()

    def _on_session(self, state: str) -> None:
        if state == "lost":
            # The ephemeral /controller went with the session.
            self.active = False
        self.kick()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self._round()
            except KazooException as exc:
                _log.warning("controller round failed (ZooKeeper: %s); retrying", exc)
                self._wake.set()
                self._stop.wait(0.5)
            except Exception:
                _log.exception("controller round failed; retrying")
                self._stop.wait(0.5)
            timeout = SAFETY_INTERVAL_S
            if self.active:
                timeout = min(timeout, max(0.05, self._next_preferred - time.monotonic()))
            self._wake.wait(timeout)

    def _round(self) -> None:
        if not self.store.client.connected:
            return
        current = self.store.controller()
        if current is None:
            epoch = self.store.try_become_controller(self.broker_id)
            if epoch is not None:
                self.epoch = epoch
                self.active = True
                self.elections += 1
                self._next_preferred = time.monotonic() + self.imbalance_interval_s
                _log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
            current = self.store.controller()
        self.active = current is not None and current[0] == self.broker_id
        if not self.active:
            return
        if not self._watching:
            self._watching = True
            self.store.watch_brokers(lambda _: self.kick())
            self.store.watch_topics(lambda _: self.kick())
            # Offline-replica reports are watched once per broker, by the ReplicaManager's
            # OfflineReplicaCache, which kicks this controller on every change.
        preferred = time.monotonic() >= self._next_preferred
        self.reconcile(preferred=preferred)
        for topic in self._seen_topics:
            self._watch_topic(topic)
        if preferred:
            self._next_preferred = time.monotonic() + self.imbalance_interval_s

    def reconcile(self, *, preferred: bool = False) -> int:
        """One pass over every partition; returns the number of states written."""
        found: list[tuple[str, int, tuple[int, ...], bool, tuple[PartitionState, int] | None]] = []
        self._seen_topics = []
        ids: dict[str, str] = {}
        for topic in self.store.topics():
            assignment = self.store.get_topic(topic)
            if assignment is None:
                continue
            self._seen_topics.append(topic)
            ids[topic] = assignment.topic_id
            # The topic's own unclean.leader.election.enable wins over the broker's.
            unclean = bool(assignment.configs.get("unclean.leader.election.enable", self.unclean))
            for p, replicas in enumerate(assignment.replicas):
                found.append((topic, p, replicas, unclean, self.store.get_state(topic, p)))
        # The live brokers are read after the states: a broker a leader put into an ISR had
        # registered before, so it is in this set and is not taken out again as dead.
        live = set(self.store.live_brokers())
        offline = self.store.offline_replicas()
        written = 0
        for topic, p, replicas, unclean, current in found:
            if self._stop.is_set():
                break
            topic_id = ids[topic]
            up = live - offline.get((topic, topic_id, p), set())
            if self._fix(topic, p, replicas, up, preferred, unclean, current):
                written += 1
        return written

    def _watch_topic(self, topic: str) -> None:
        """Reconcile again when the topic's assignment changes (partitions added by
        CreatePartitions on any broker): the topics' children watch does not see it."""
        if topic in self._topic_watches:
            return
        self._topic_watches.add(topic)

        def on_data(assignment: object) -> bool:
            if assignment is None:  # deleted: a topic created again gets a new watch
                self._topic_watches.discard(topic)
                return False
            self.kick()
            return True

        self.store.watch_topic(topic, on_data)

    def _fix(
        self,
        topic: str,
        p: int,
        replicas: tuple[int, ...],
        live: set[int],
        preferred: bool,
        unclean: bool,
        current: tuple[PartitionState, int] | None,
    ) -> bool:
        """``live``: the brokers that may hold this partition now (alive, and not having
        reported its replica offline)."""
        alive = [r for r in replicas if r in live]
        if current is None:
            leader = alive[0] if alive else NO_LEADER
            first = PartitionState(leader, 0, tuple(alive) or replicas, self.epoch)
            return self.store.create_state(topic, p, first)
        state, version = current
        isr_alive = tuple(r for r in state.isr if r in live)
        new: PartitionState | None = None
        if state.leader == NO_LEADER or state.leader not in live:
            candidates = [r for r in replicas if r in isr_alive]
            if candidates:
                new = PartitionState(candidates[0], state.leader_epoch + 1, isr_alive, self.epoch)
            elif unclean and alive:
                _log.warning("unclean leader election for %s-%d: %d", topic, p, alive[0])
                new = PartitionState(alive[0], state.leader_epoch + 1, (alive[0],), self.epoch)
            elif state.leader != NO_LEADER:
                # Nobody in the ISR is alive: offline until one returns. The last ISR is kept
                # so that exactly those replicas, which hold every acknowledged record, qualify.
                new = PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr, self.epoch)
        elif isr_alive != state.isr:
            new = PartitionState(state.leader, state.leader_epoch, isr_alive, self.epoch)
        elif (
            preferred
            and replicas[0] != state.leader
            and replicas[0] in live
            and replicas[0] in state.isr
        ):
            new = PartitionState(replicas[0], state.leader_epoch + 1, state.isr, self.epoch)
        if new is None:
            return False
        if self.store.set_state(topic, p, new, version) is None:
            self.kick()  # someone wrote first: look again
            return False
        if new.leader != state.leader:
            _log.info(
                "%s-%d: leader %d -> %d (epoch %d), isr %s",
                topic,
                p,
                state.leader,
                new.leader,
                new.leader_epoch,
                list(new.isr),
            )
        return True
