"""The broker's side of cluster mode: the :class:`~app.core.topology.Topology` of a
broker in a cluster, what the HTTP layer and the group coordinator use.

:class:`ReplicaManager` joins the cluster (registers ``/brokers/ids/<id>``),
runs this broker's :class:`~app.core.replication.controller.Controller`
candidate, and mirrors the cluster's metadata from ZooKeeper watches: live
brokers, topic assignments, every partition's state, and every broker's offline
replica reports (:mod:`app.core.replication.zk_offline`, for metadata answers). For
the partitions this broker holds it keeps a
:class:`~app.core.replication.partition.Partition`
that becomes leader or follower as the state znode says, and a follower
fetcher (:mod:`app.core.replication.fetcher`) for the followed ones.

Topics are created and deleted in ZooKeeper, by whichever broker got the
request; every broker reacts to the watch by creating (only the partitions it
holds) or deleting its local logs.

Threads: kazoo's watch callbacks hop onto the event loop; from there on every
state change happens on the loop, so nothing here needs a lock (appends on
worker threads meet state changes in each Partition's leader/ISR lock). The
blocking kazoo calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from app.common.aio import wait_event
from app.common.errors import (
    BrokerNotAvailable,
    KafkaStorageError,
    LogbusError,
    NotLeaderOrFollower,
    OffsetNotAvailable,
    PartitionLimitExceeded,
    UnknownTopicOrPartition,
)
from app.core import listeners
from app.core.replication.auth import ReplicaAuth
from app.core.replication.config import ReplicaConfig
from app.core.replication.controller import Controller
from app.core.replication.fetcher import ReplicaFetcher
from app.core.replication.partition import Partition, append_to_leaders
from app.core.replication.state import NO_LEADER, BrokerInfo, PartitionState, TopicAssignment
from app.core.replication.topic_admin import TopicAdmin
from app.core.replication.zk import ZkStore
from app.core.replication.zk_offline import OfflineReplicaCache
from app.core.topology import (
    LeaderAppend,
    LeadershipListener,
    TopicIdIndex,
    TopicListener,
    parse_topic_id,
)

if TYPE_CHECKING:
    from app.core.log.config import LogConfig
    from app.core.log.log import AppendInfo, Log
    from app.core.log.manager import LogManager

_log = logging.getLogger(__name__)


class _ZkProducerIdBlocks:
    """Producer id blocks from ZooKeeper (see :mod:`app.core.log.producer_ids`)."""

    def __init__(self, store: ZkStore) -> None:
        self.store = store

    def allocate(self, block_size: int) -> int:
        return self.store.allocate_producer_ids(block_size)

    def issued_below(self) -> int:
        return self.store.producer_ids_issued_below()


class ReplicaManager(TopicAdmin):
    """A cluster broker's :class:`~app.core.topology.Topology`; see the module docstring."""

    leadership_moves = True

    def __init__(
        self, settings: ReplicaConfig, logs: LogManager, notify: Callable[[Log], None]
    ) -> None:
        assert settings.zookeeper, "cluster mode needs a ZooKeeper connect string"
        self.settings = settings
        self.logs = logs
        self.broker_id = settings.broker_id
        self.url = settings.url
        self._notify = notify
        self.store = ZkStore(settings.zookeeper, settings.zookeeper_session_timeout_ms)
        self.controller = Controller(
            self.store,
            self.broker_id,
            unclean_leader_election=settings.unclean_leader_election_enable,
            leader_imbalance_check_interval_ms=settings.leader_imbalance_check_interval_ms,
        )
        self.fetcher: ReplicaFetcher | None = None
        # Inter-broker credentials, from ZooKeeper at start (a follower's fetches carry them).
        self.auth: ReplicaAuth | None = None
        self.cluster_id = ""
        self.brokers: dict[int, BrokerInfo] = {}
        self.controller_id: int | None = None
        self.assignments: dict[str, TopicAssignment] = {}
        self._topic_ids = TopicIdIndex(self.topics, self.topic_id)
        self.states: dict[tuple[str, int], tuple[PartitionState, int]] = {}
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._watched: set[str] = set()  # read on kazoo's thread: stop watches of gone topics
        self._watch_ids: dict[str, str] = {}  # topic -> id of its latest topic watch
        self._watched_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed = asyncio.Event()
        self._listeners: list[LeadershipListener] = []
        self._topic_listeners: list[TopicListener] = []
        self._topic_tasks: set[asyncio.Task[None]] = set()
        # Applying a topic's assignment awaits worker threads: one at a time.
        self._assign_lock = asyncio.Lock()
        # Replicas assigned here that this broker could not create, per topic: (topic id,
        # partitions), published in /brokers/offline_replicas/<id> for the controller.
        self._offline: dict[str, tuple[str, list[int]]] = {}
        self._offline_lock = asyncio.Lock()
        # The last write of the report failed (ZooKeeper away): ZooKeeper may hold an
        # older one. Changed under _offline_lock only.
        self._offline_unsynced = False
        # Every broker's reports (this one's included), from watches: what metadata lists.
        self.offline_reports = OfflineReplicaCache()
        self._isr_task: asyncio.Task[None] | None = None
        # The ZooKeeper session this broker's registration was last written in.
        self._registered_session: int | None = None
        self._stopping = False
        self.topics_synced = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        standalone = self.logs.standalone_topics()
        if standalone:
            # Their data is not in the cluster's metadata: serving or deleting them would
            # both be wrong, so refuse before touching anything.
            raise KafkaStorageError(
                f"{self.logs.data_dir} holds topics of a standalone broker ({', '.join(standalone)});"
                " a cluster broker starts on a data dir of its own (an empty --data-dir)"
            )
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._assign_lock = asyncio.Lock()
        self._offline_lock = asyncio.Lock()
        self.topics_synced = asyncio.Event()
        self.fetcher = ReplicaFetcher(self)
        await asyncio.to_thread(self.store.start)
        await asyncio.to_thread(
            self.offline_reports.start, self.store.client, self._offline_reports_changed
        )
        self.cluster_id = await asyncio.to_thread(self.store.cluster_id)
        self.auth = ReplicaAuth(await asyncio.to_thread(self.store.inter_broker_secret))
        self.logs.producer_ids.use_cluster_blocks(_ZkProducerIdBlocks(self.store))
        self.store.add_session_listener(self._on_session)
        await self._register()
        self.store.watch_brokers(lambda _: self._soon(self._refresh_brokers))
        self.store.watch_controller(lambda cid: self._soon(self._set_controller, cid))
        self.store.watch_topics(lambda names: self._soon(self._on_topics, names))
        self.controller.start()
        self._isr_task = asyncio.create_task(self._isr_loop(), name="logbus-isr-shrink")
        # Serve only once this broker knows the topics (and has created their logs).
        if not await wait_event(self.topics_synced, 60):
            raise TimeoutError("the topics were not read from ZooKeeper within 60 s")

    def _offline_reports_changed(self) -> None:
        # kazoo's thread: metadata answers change, and the controller (if this broker is
        # it) re-elects around the replicas now offline or back.
        self._soon(self._changed_now)
        self.controller.kick()

    async def stop(self) -> None:
        self._stopping = True
        if self._isr_task is not None:
            self._isr_task.cancel()
        for task in list(self._topic_tasks):
            task.cancel()
        for part in self.partitions.values():
            part.stop()
        if self.fetcher is not None:
            await self.fetcher.close()
        await asyncio.to_thread(self.controller.stop)
        # Closing the session removes /brokers/ids/<id> at once: the controller moves
        # leadership without waiting for the session timeout.
        await asyncio.to_thread(self.store.stop)

    async def _register(self) -> None:
        """Register this broker (at start, and with each new session). A new session's
        report is written first (the old one's went with that session): registered, the
        broker is live for the controller, which must not take its missing replicas for
        live ones meanwhile. At start there is none yet (nor the old life's: the
        registration waits for that session to end, and its report with it)."""
        wait_s = 2 * self.settings.zookeeper_session_timeout_ms / 1000 + 5
        info = BrokerInfo(self.broker_id, self.url, self.settings.kafka_listener)
        if self._offline:
            await self._publish_offline()
        # Read before: a session that changes meanwhile only means one more registration.
        session = self.store.session_id
        await asyncio.to_thread(self.store.register_broker, info, wait_s)
        self._registered_session = session

    async def _report_offline(self, name: str, topic_id: str, partitions: list[int]) -> None:
        """This broker's replicas ``partitions`` of ``name`` (of id ``topic_id``) are
        assigned here but have no log (it could not create them): tell the controller, so
        that it neither elects this broker for them nor keeps it in their ISR (Kafka's
        offline replicas). An empty list takes the topic's report back."""
        if partitions:
            self._offline[name] = (topic_id, sorted(partitions))
        elif self._offline.pop(name, None) is None:
            return
        await self._publish_offline()

    async def _publish_offline(self, *, if_unsynced: bool = False) -> None:
        """Write this broker's whole report as it is now (writes in order, each one the
        latest record). ``if_unsynced``: only if the last write failed; checked under the
        lock, so a write in flight when the connection came back is waited for, and is
        written again if it failed."""
        async with self._offline_lock:
            if if_unsynced and not self._offline_unsynced:
                return
            snapshot = dict(self._offline)
            try:
                await asyncio.to_thread(self.store.set_offline_replicas, self.broker_id, snapshot)
                self._offline_unsynced = False
            except Exception as exc:  # ZooKeeper away: written again when it is back
                self._offline_unsynced = True
                _log.error("offline replicas %s not reported to ZooKeeper: %s", snapshot, exc)

    def _soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """From kazoo's thread onto the loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed() and not self._stopping:
            loop.call_soon_threadsafe(fn, *args)

    def _on_session(self, state: str) -> None:
        if state == "connected":
            self._soon(self._on_connected)

    def _on_connected(self) -> None:
        """On the loop, at each (re)connection. Not registered in this session (a new
        one: the ephemeral registration and report went with the old; or its
        registration failed, the connection lost again meanwhile): register. Else a
        report write that failed while the connection was down (a new offline replica,
        or one taken back) is made again, not left to the next change or session."""
        if self._registered_session != self.store.session_id:
            self._spawn(self._register())
        else:
            self._spawn(self._publish_offline(if_unsynced=True))

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._topic_tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._topic_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("cluster metadata task failed", exc_info=task.exception())

    def _refresh_brokers(self) -> None:
        self._spawn(self._load_brokers())

    async def _load_brokers(self) -> None:
        self.brokers = await asyncio.to_thread(self.store.live_brokers)
        self._changed_now()

    def _set_controller(self, controller: int | None) -> None:
        self.controller_id = controller

    def _changed_now(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_changed(self, timeout_s: float) -> None:
        await wait_event(self._changed, timeout_s)

    # -- topics ------------------------------------------------------------------------

    def _on_topics(self, names: list[str]) -> None:
        self._spawn(self._sync_topics(names))

    async def _sync_topics(self, names: list[str]) -> None:
        wanted = set(names)
        with self._watched_lock:
            new = wanted - self._watched
            gone = self._watched - wanted
            self._watched |= new
            self._watched -= gone
        for name in gone:
            await self._drop_topic(name)
        for name in sorted(new):
            await self._add_topic(name)
        if not self.topics_synced.is_set():
            # Topics deleted while this broker was down go now.
            for name in self.logs.topics():
                if name not in wanted:
                    _log.info("deleting local topic %s: it is gone from the cluster", name)
                    await asyncio.to_thread(self.logs.delete_topic, name)
            self.topics_synced.set()
        self._changed_now()

    async def _add_topic(self, name: str) -> None:
        assignment = await asyncio.to_thread(self.store.get_topic, name)
        if assignment is None:
            with self._watched_lock:
                self._watched.discard(name)
            return
        if name in self.logs.topics() and self.logs.topic_id(name) != assignment.topic_id:
            # A topic of this name was deleted and created again while we were away.
            self._tell_topic_deleted(name)
            await asyncio.to_thread(self.logs.delete_topic, name)
        # Created here, or, made while this broker was away, brought in line with the
        # partitions added and configs changed meanwhile.
        await self._apply_assignment(name, assignment)
        # Watched whether or not its replicas could be made here: its later changes (new
        # partitions, configs, a retry of what failed) and its deletion reach this broker.
        # Once per topic id: the topics' watch and a replaced topic's may both add it.
        if self._watch_ids.get(name) != assignment.topic_id:
            self._watch_ids[name] = assignment.topic_id
            self.store.watch_topic(name, self._topic_watch(name, assignment.topic_id))

    def _topic_watch(self, name: str, topic_id: str) -> Callable[[TopicAssignment | None], bool]:
        """The topic znode's watch: a changed assignment (partitions added, configs
        changed: :meth:`create_partitions`, :meth:`alter_topic_config`) is applied on the
        loop. Stops once the topics' watch has seen the topic go.

        Another topic id under the name: the topic was deleted and created again unseen
        by the topics' children watch (kazoo's ChildrenWatch calls no one when the
        children it reads are those it had: a reconnection after an outage that spanned
        both, or both between two of its reads), so this watch replaces it here
        (:meth:`_replaced`) and stops: the new topic gets a watch of its own. It watches
        on through the deletion (no node) for that."""

        def on_data(assignment: TopicAssignment | None) -> bool:
            with self._watched_lock:
                if name not in self._watched:
                    return False
            if assignment is None:
                return True
            if assignment.topic_id != topic_id:
                self._soon(self._spawn, self._replaced(name, topic_id))
                return False
            self._soon(self._spawn, self._apply_assignment(name, assignment))
            return True

        return on_data

    async def _replaced(self, name: str, old_id: str) -> None:
        """The topic of id ``old_id`` is gone from under ``name``, another one there: drop
        it (its replicas, logs and offline report) and add the one ZooKeeper has, unless
        the topics' watch did (the topic known here is not the old one, or the name is
        not watched)."""
        if await self._drop_topic(name, only_id=old_id):
            await self._add_topic(name)

    async def _apply_assignment(self, name: str, assignment: TopicAssignment) -> None:
        """Make this broker's view and replicas of ``name`` what ``assignment`` says:
        the topic created here if it is not yet (its logs for the partitions hosted
        here), its configs (every log of the topic here takes them, and DescribeConfigs
        answers them), and any partitions beyond the ones known, with a
        :class:`Partition` for each hosted here and a state watch for each (the
        controller elects their leaders). One at a time (watches and the first read may
        race); an assignment of another topic id or with fewer partitions than known is
        an old one and changes nothing.

        Replicas this broker cannot make (a disk error, no descriptors left, a config
        its version does not keep) are reported offline (the controller elects others
        and leaves this broker out of their ISR) and not served, while its view follows
        the assignment all the same (partition count, replicas, configs in its metadata
        answers); the next changed assignment tries again, and a success takes the
        report back."""
        async with self._assign_lock:
            with self._watched_lock:
                if name not in self._watched:
                    return
            known = self.assignments.get(name)
            if known is not None and (
                known.topic_id != assignment.topic_id or assignment.partitions < known.partitions
            ):
                return
            if known == assignment and name in self._offline:
                return  # failed with this very assignment: tried again when it changes
            hosted = [p for p, r in enumerate(assignment.replicas) if self.broker_id in r]
            create = name not in self.logs.topics()
            failure: LogbusError | None = None
            changed = False
            try:
                if create:
                    await asyncio.to_thread(
                        functools.partial(
                            self.logs.create_topic,
                            name,
                            assignment.partitions,
                            assignment.configs,
                            topic_id=assignment.topic_id,
                            hosted=hosted,
                        )
                    )
                    changed = True
                else:
                    changed = await asyncio.to_thread(
                        functools.partial(
                            self.logs.apply_cluster_assignment,
                            name,
                            assignment.partitions,
                            assignment.configs,
                            hosted,
                            topic_id=assignment.topic_id,
                        )
                    )
            except UnknownTopicOrPartition:
                # The topic here is another one of that name (deleted and created again
                # since this assignment was read), or gone: its own assignment is applied
                # by its own watch. Applying this one would give the new topic the old
                # one's configs and id here, and refuse the new one's partitions after.
                return
            except LogbusError as exc:
                failure = exc
            with self._watched_lock:
                if name not in self._watched:
                    return  # deleted while its logs changed: _drop_topic has them
            local_id = self._local_topic_id(name)
            if local_id is not None and local_id != assignment.topic_id:
                return  # deleted and created again while its logs changed
            here = self._hosted_here(name)
            offline = [p for p in hosted if p not in here]
            if failure is not None:
                _log.error(
                    "topic %r: this broker cannot host its replicas (it cannot %s from "
                    "ZooKeeper: %d partitions, configs %s): %s; its replicas %s are "
                    "reported offline and not served; %s: it is tried again at the topic's "
                    "next change or at restart",
                    name,
                    "create it" if create else "apply its assignment",
                    assignment.partitions,
                    assignment.configs,
                    failure,
                    offline,
                    "raise the file descriptor limit or max_partitions"
                    if isinstance(failure, PartitionLimitExceeded)
                    else "fix the cause",
                )
            if offline or name in self._offline:
                await self._report_offline(name, assignment.topic_id, offline)
            if changed:
                _log.info(
                    "topic %s: %d partitions, config overrides %s (from ZooKeeper)",
                    name,
                    assignment.partitions,
                    assignment.configs,
                )
            self.assignments[name] = assignment
            made = []
            for p in hosted:
                if (name, p) in self.partitions or p not in here:
                    continue
                part = Partition(
                    self.logs.get_log(name, p),
                    assignment.replicas[p],
                    self.broker_id,
                    write_state=self._writer(name, p),
                    notify=self._notify,
                    lag_time_max_ms=self.settings.replica_lag_time_max_ms,
                    registered=lambda r: r in self.brokers,
                    locate=self.broker_url,
                )
                part.on_follow = self._follow
                self.partitions[(name, p)] = part
                made.append(p)
            first_new = 0 if known is None else known.partitions
            for p in range(first_new, assignment.partitions):
                self.store.watch_state(name, p, self._state_watch(name, p))
            for p in made:
                # Made at a retry: its state came while it had no replica here.
                if (name, p) in self.states:
                    state, version = self.states[(name, p)]
                    self._apply_state(name, p, state, version)
        self._changed_now()

    def _hosted_here(self, name: str) -> set[int]:
        """The partitions of ``name`` with a log on this broker."""
        try:
            return set(self.logs.hosted_partitions(name))
        except UnknownTopicOrPartition:
            return set()

    def _local_topic_id(self, name: str) -> str | None:
        try:
            return self.logs.topic_id(name)
        except UnknownTopicOrPartition:
            return None

    def _state_watch(self, name: str, p: int) -> Callable[[PartitionState | None, int], bool]:
        def on_state(state: PartitionState | None, version: int) -> bool:
            with self._watched_lock:
                if name not in self._watched:
                    return False
            if state is not None:
                self._soon(self._apply_state, name, p, state, version)
            return True

        return on_state

    def _apply_state(self, name: str, p: int, state: PartitionState, version: int) -> None:
        if name not in self.assignments:
            return
        known = self.states.get((name, p))
        if known is not None and known[1] > version:
            return
        self.states[(name, p)] = (state, version)
        part = self.partitions.get((name, p))
        if part is not None:
            was_leader, old_epoch = part.is_leader, part.leader_epoch
            part.apply(state, version)
            if part.is_leader and was_leader and part.leader_epoch != old_epoch:
                # Leadership went away and came back between two notifications: whatever
                # was built on the old term (a coordinator's cache) must be rebuilt.
                self._tell_listeners(name, p, False)
                self._tell_listeners(name, p, True)
            elif part.is_leader != was_leader:
                self._tell_listeners(name, p, part.is_leader)
        self._changed_now()

    async def _drop_topic(self, name: str, only_id: str | None = None) -> bool:
        """Forget the deleted topic ``name``: its view, replicas, states, report and logs.
        ``only_id``: only if the topic known here is that one and still watched; False
        when nothing was dropped.

        Under the assign lock, like every apply: one of the deleted topic in flight
        finishes first (resumed after its report's write, it put the topic back in the
        view, where the new topic of that name then looked older and was never made
        here), and a topic created again under the name is applied after (this drop,
        resumed after taking the report back, removed the new topic's replicas and logs)."""
        async with self._assign_lock:
            if only_id is not None:
                with self._watched_lock:
                    if name not in self._watched:
                        return False
                known = self.assignments.get(name)
                if (known.topic_id if known else self._local_topic_id(name)) != only_id:
                    return False  # the topics' watch dropped it, and maybe added another
            await self._drop_topic_now(name)
            return True

    async def _drop_topic_now(self, name: str) -> None:
        self.assignments.pop(name, None)
        self._tell_topic_deleted(name)
        if name in self._offline:
            await self._report_offline(name, "", [])
        for key in [k for k in self.partitions if k[0] == name]:
            part = self.partitions.pop(key)
            was_leader = part.is_leader
            part.stop()
            if self.fetcher is not None:
                self.fetcher.unfollow(key)
            if was_leader:
                self._tell_listeners(key[0], key[1], False)
        for key in [k for k in self.states if k[0] == name]:
            del self.states[key]
        if name in self.logs.topics():
            with contextlib.suppress(UnknownTopicOrPartition):
                await asyncio.to_thread(self.logs.delete_topic, name)
        self._changed_now()

    def _writer(self, name: str, p: int) -> Callable[[PartitionState, int], Any]:
        async def write(state: PartitionState, version: int) -> int | None:
            try:
                return await asyncio.to_thread(self.store.set_state, name, p, state, version)
            except Exception as exc:  # ZooKeeper away: the next check tries again
                _log.warning("ISR change of %s-%d not written: %s", name, p, exc)
                return None

        return write

    def _follow(self, part: Partition) -> None:
        if self.fetcher is not None:
            self.fetcher.follow(part)

    def truncated(self, log: Log) -> None:
        """A follower cut its log: readers holding positions past the cut must hear of it."""
        self._notify(log)

    async def _isr_loop(self) -> None:
        interval = max(0.05, self.settings.replica_lag_time_max_ms / 2000)
        while True:
            await asyncio.sleep(interval)
            for part in list(self.partitions.values()):
                part.maybe_shrink_isr()
                part.check_low_watermark()

    def checkpoint_starts(self) -> None:
        """Write every log's start offset down (a follower's fetcher, after following a
        leader's start; blocking)."""
        self.logs.checkpoint()

    def start_moved(self, log: Log) -> None:
        """A follower moved its log start offset (after the leader's): readers holding
        positions below it must hear of it. The caller has written it down."""
        self._notify(log)

    # -- what requests need ------------------------------------------------------------

    def add_leadership_listener(self, cb: LeadershipListener) -> None:
        """``cb(topic, partition, leads)`` on the loop whenever this broker starts or stops
        leading a partition it holds (a new term of its own leadership: stop, then start)."""
        self._listeners.append(cb)

    def remove_leadership_listener(self, cb: LeadershipListener) -> None:
        if cb in self._listeners:
            self._listeners.remove(cb)

    def add_topic_listener(self, cb: TopicListener) -> None:
        """``cb(topic)`` on the loop when a topic is deleted from the cluster. Every broker
        sees every deletion through its ZooKeeper watch, whichever broker got the request
        and whether or not it holds a replica (the group coordinators use it: a group's
        offsets live with its coordinator, not with the topic's replicas). A listener
        added twice is called once."""
        if cb not in self._topic_listeners:
            self._topic_listeners.append(cb)

    def _tell_topic_deleted(self, topic: str) -> None:
        listeners.notify(self._topic_listeners, topic, log=_log, what="topic listener")

    def _tell_listeners(self, topic: str, partition: int, leads: bool) -> None:
        listeners.notify(
            self._listeners, topic, partition, leads, log=_log, what="leadership listener"
        )

    def broker_url(self, broker: int) -> str | None:
        info = self.brokers.get(broker)
        return None if info is None else info.url

    def topics(self) -> list[str]:
        return sorted(self.assignments)

    def partition_count(self, topic: str) -> int:
        assignment = self.assignments.get(topic)
        if assignment is None:
            raise UnknownTopicOrPartition(topic)
        return assignment.partitions

    def replicas_of(self, topic: str, partition: int) -> tuple[int, ...]:
        assignment = self.assignments.get(topic)
        if assignment is None or not 0 <= partition < assignment.partitions:
            raise UnknownTopicOrPartition(topic, partition)
        return assignment.replicas[partition]

    def leader_of(self, topic: str, partition: int) -> tuple[int | None, str | None]:
        """(leader id, its URL), ``(None, None)`` while there is no leader."""
        self.replicas_of(topic, partition)
        known = self.states.get((topic, partition))
        if known is None or known[0].leader == NO_LEADER:
            return None, None
        leader = known[0].leader
        return leader, self.broker_url(leader)

    def is_leader(self, topic: str, partition: int) -> bool:
        part = self.partitions.get((topic, partition))
        return part is not None and part.is_leader

    def leader_partition(self, topic: str, partition: int) -> Partition:
        """This broker's replica, if it leads ``topic-partition``; else NotLeaderOrFollower
        naming the leader (UnknownTopicOrPartition for a partition that does not exist)."""
        part = self.partitions.get((topic, partition))
        if part is not None and part.is_leader:
            return part
        leader, url = self.leader_of(topic, partition)
        if leader == self.broker_id:
            url = None  # the state says us, but we have not taken over yet: retry shortly
        raise NotLeaderOrFollower(topic, partition, leader, url)

    def append_to_leaders(
        self, work: Sequence[LeaderAppend], *, acks_all: bool
    ) -> list[AppendInfo]:
        """See :func:`app.core.replication.partition.append_to_leaders`: under each
        partition's leader/ISR lock, all or none. The replicas are this manager's own."""
        parts = []
        for replica, epoch, data in work:
            assert isinstance(replica, Partition), "a replica this manager handed out"
            parts.append((replica, epoch, data))
        return append_to_leaders(parts, acks_all=acks_all)

    def authorize_follower(self, replica_id: int, credential: str | None) -> bool:
        """Every claim of a follower's fetch is checked (:meth:`verify_replica`)."""
        self.verify_replica(replica_id, credential)
        return True

    def replica_log(self, topic: str, partition: int) -> Log | None:
        try:
            return self.logs.get_log(topic, partition)
        except UnknownTopicOrPartition:
            return None  # held by other brokers only

    def offsets_error(self, topic: str, partition: int) -> OffsetNotAvailable | None:
        """:meth:`Partition.offsets_error` of this broker's replica (None without one)."""
        part = self.partitions.get((topic, partition))
        return None if part is None else part.offsets_error()

    def verify_replica(self, replica_id: int, presented: str | None) -> None:
        """A fetch claiming ``replica_id`` carries that broker's inter-broker credential
        (:mod:`app.core.replication.auth`), else ClusterAuthorizationFailed."""
        if self.auth is None:
            raise BrokerNotAvailable("the broker is joining its cluster")
        self.auth.verify(replica_id, presented)

    def partition_info(self, topic: str, partition: int) -> dict[str, Any]:
        replicas = self.replicas_of(topic, partition)
        known = self.states.get((topic, partition))
        state = known[0] if known is not None else None
        return {
            "partition": partition,
            "leader": state.leader if state is not None else NO_LEADER,
            "leader_epoch": state.leader_epoch if state is not None else -1,
            "replicas": list(replicas),
            "isr": list(state.isr) if state is not None else [],
        }

    def offline_replicas(self, topic: str, partition: int) -> list[int]:
        """Replicas on brokers that are not live, and those their broker could not make
        (reported offline: :meth:`_apply_assignment`), whichever broker they are on: the
        reports come from the watch-fed :attr:`offline_reports` (no ZooKeeper read), this
        broker's own also from its own record (known before its report lands)."""
        replicas = self.replicas_of(topic, partition)
        topic_id = self.assignments[topic].topic_id
        reported = self.offline_reports.brokers(topic, topic_id, partition)
        mine = self._offline.get(topic)
        here_offline = mine is not None and mine[0] == topic_id and partition in mine[1]
        return [
            r
            for r in replicas
            if r not in self.brokers or r in reported or (r == self.broker_id and here_offline)
        ]

    def topic_configs(self, topic: str) -> tuple[LogConfig, dict[str, object]]:
        """The topic's config and overrides as its ZooKeeper assignment has them (this
        broker's view, which follows it even where its replicas could not take them: a
        config its version does not keep is shown among the overrides, and the config
        is then its replicas' own, or the broker's default without any)."""
        assignment = self.assignments.get(topic)
        if assignment is None:
            raise UnknownTopicOrPartition(topic)
        overrides = dict(assignment.configs)
        try:
            config = self.logs.default_config.with_overrides(overrides)
        except LogbusError:
            try:
                config = self.logs.topic_config(topic)
            except UnknownTopicOrPartition:
                config = self.logs.default_config
        return config, overrides

    def topic_id(self, topic: str) -> uuid.UUID:
        """The id the controller gave the topic (its ZooKeeper assignment), the same on
        every broker, whether or not this one holds a replica."""
        assignment = self.assignments.get(topic)
        if assignment is None:
            raise UnknownTopicOrPartition(topic)
        return parse_topic_id(assignment.topic_id)

    def topic_named_by(self, topic_id: uuid.UUID) -> str:
        return self._topic_ids.name_of(topic_id)
