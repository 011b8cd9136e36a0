"""The ZooKeeper store: every path cluster mode uses, JSON values, CAS writes, watches.

Layout (under the connect string's optional chroot; docs/ARCHITECTURE.md)::

    /cluster/id                                   the cluster id, created by the first broker
    /cluster/inter_broker_secret                  32 random bytes, likewise (see auth.py)
    /brokers/ids/<id>                             EPHEMERAL BrokerInfo: the live brokers,
                                                  {"id", "url", "kafka_listener"?}
    /controller                                   EPHEMERAL {"broker_id", "epoch"}
    /controller_epoch                             int, +1 (CAS) per new controller
    /brokers/topics/<topic>                       TopicAssignment: written at creation,
                                                  then by CAS when partitions are added
                                                  or configs change (every broker watches it)
    /brokers/topics/<topic>/topic_id/<topic id>   empty: the topic's identity, created with
                                                  it (one transaction); a CAS of the topic
                                                  checks it in the same transaction
    /brokers/topics/<topic>/partitions/<p>/state  PartitionState, written only by CAS
    /brokers/offline_replicas/<id>                EPHEMERAL {"<topic>": {"topic_id",
                                                  "partitions": [p]}}: replicas the broker
                                                  is assigned but could not create (the
                                                  controller neither elects it for them
                                                  nor keeps it in their ISR)

Methods are blocking kazoo calls: the asyncio side runs them in a worker
thread. Watch callbacks run on kazoo's own thread and must hand work off
quickly. Thread-safe (kazoo's client is).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, cast

import orjson
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from app.common.errors import KafkaStorageError, TopicAlreadyExists, ZooKeeperUnavailable
from app.core.listeners import notify
from app.core.replication.state import BrokerInfo, PartitionState, TopicAssignment

_log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

BROKERS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CLUSTER_ID = "/cluster/id"
INTER_BROKER_SECRET = "/cluster/inter_broker_secret"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
OFFLINE_REPLICAS = "/brokers/offline_replicas"
# A topic node's value while its subtree is being removed.
DELETED_TOPIC = b'{"deleted":true}'


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def identity_path(topic: str, topic_id: str) -> str:
    """The child that exists exactly as long as the topic of id ``topic_id`` does: a
    topic deleted and created again under its name has another one, so a compare-and-set
    checking it cannot land on the new topic (whose znode version starts at 0 again and
    may equal the version read from the old one)."""
    return f"{TOPICS}/{topic}/topic_id/{topic_id}"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def parse_offline_report(data: bytes) -> list[tuple[str, str, int]]:
    """``(topic, topic id, partition)`` of each replica a ``/brokers/offline_replicas/<id>``
    value names. Raises ValueError, TypeError, KeyError or AttributeError when malformed."""
    raw: dict[str, Any] = orjson.loads(data)
    return [
        (topic, str(entry["topic_id"]), int(p))
        for topic, entry in raw.items()
        for p in entry["partitions"]
    ]


def split_connect(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/logbus"`` -> ``("h1:2181,h2:2181", "/logbus")``."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot.rstrip("/")) if slash and chroot.strip("/") else ""


def ensure_chroot(connect: str, timeout_s: float) -> None:
    """Create the connect string's chroot (``/logbus`` of ``h:2181/logbus``) if missing.

    kazoo does not create a missing chroot, and every client under it (the cluster
    store, the ACL and quota stores) would fail; a root-level client does, once.
    """
    hosts, chroot = split_connect(connect)
    if not chroot:
        return
    root = KazooClient(hosts=hosts, timeout=timeout_s)
    root.start(timeout=timeout_s)
    try:
        root.ensure_path(chroot)
    finally:
        root.stop()
        root.close()


def _needs_zookeeper(what: str) -> Callable[[F], F]:
    """Answer ZooKeeperUnavailable at once while disconnected, instead of a kazoo call that
    waits for the connection to return (a request would hang for the whole outage), and
    when the connection drops during the call."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: ZkStore, *args: Any, **kwargs: Any) -> Any:
            if not self.client.connected:
                raise ZooKeeperUnavailable(what)
            try:
                return fn(self, *args, **kwargs)
            except (ConnectionLoss, SessionExpiredError):
                raise ZooKeeperUnavailable(what) from None

        return cast(F, wrapper)

    return decorate


class ZkStore:
    """One broker's ZooKeeper session and the cluster's znodes; see the module docstring."""

    def __init__(self, connect: str, session_timeout_ms: int) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.client = KazooClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            # Keep reconnecting for as long as it takes: brokers go on serving meanwhile.
            connection_retry=KazooRetry(max_tries=-1, max_delay=1.0),
            command_retry=KazooRetry(max_tries=3, max_delay=0.5),
        )
        self._session_listeners: list[Callable[[str], None]] = []
        self.client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's thread; listeners only hand off.
        name = {
            KazooState.LOST: "lost",
            KazooState.SUSPENDED: "suspended",
            KazooState.CONNECTED: "connected",
        }.get(state, str(state))
        notify(self._session_listeners, name, log=_log, what="session listener")

    def add_session_listener(self, cb: Callable[[str], None]) -> None:
        """``cb("lost" | "suspended" | "connected")`` on kazoo's thread."""
        self._session_listeners.append(cb)

    def start(self, timeout_s: float = 30.0) -> None:
        ensure_chroot(self.connect, timeout_s)
        self.client.start(timeout=timeout_s)
        for path in (BROKERS, TOPICS, OFFLINE_REPLICAS, "/cluster"):
            self.client.ensure_path(path)

    def stop(self) -> None:
        """Close the session: this broker's ephemeral nodes go at once."""
        try:
            self.client.stop()
        finally:
            self.client.close()

    @property
    def session_id(self) -> int:
        sid = self.client.client_id
        return int(sid[0]) if sid else 0

    # -- cluster and brokers -------------------------------------------------------

    def cluster_id(self) -> str:
        candidate = uuid.uuid4().hex[:22]
        with contextlib.suppress(NodeExistsError):
            self.client.create(CLUSTER_ID, candidate.encode(), makepath=True)
        data, _ = self.client.get(CLUSTER_ID)
        return bytes(data).decode()

    def inter_broker_secret(self) -> bytes:
        """The cluster's inter-broker secret (:mod:`.auth`): made by the first broker to ask,
        like the cluster id, and the same for every broker after."""
        with contextlib.suppress(NodeExistsError):
            self.client.create(INTER_BROKER_SECRET, secrets.token_bytes(32), makepath=True)
        data, _ = self.client.get(INTER_BROKER_SECRET)
        return bytes(data)

    def register_broker(self, info: BrokerInfo, wait_s: float) -> None:
        """Create ``/brokers/ids/<id>``, waiting out a dead session's node of the same id."""
        path = f"{BROKERS}/{info.id}"
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.client.create(path, info.to_json(), ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                try:
                    _, stat = self.client.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.session_id:
                    self.client.set(path, info.to_json())
                    return
                if time.monotonic() > deadline:
                    raise KafkaStorageError(
                        f"broker id {info.id} is registered by another live broker"
                    ) from None
                # Our previous life's session (kill -9, quick restart) expires soon.
                time.sleep(0.2)

    def live_brokers(self) -> dict[int, BrokerInfo]:
        out: dict[int, BrokerInfo] = {}
        for child in self.client.get_children(BROKERS):
            try:
                data, _ = self.client.get(f"{BROKERS}/{child}")
            except NoNodeError:
                continue
            info = BrokerInfo.from_json(data)
            out[info.id] = info
        return out

    def watch_brokers(self, cb: Callable[[list[str]], None]) -> None:
        """``cb(child names)`` now and on every change, on kazoo's thread."""

        def on_children(children: list[str]) -> None:
            cb(list(children))

        ChildrenWatch(self.client, BROKERS, on_children)

    # -- replicas a broker could not create --------------------------------------------

    def set_offline_replicas(
        self, broker_id: int, offline: dict[str, tuple[str, list[int]]]
    ) -> None:
        """Publish ``{topic: (topic id, partitions)}``, the replicas this broker is assigned
        but could not create (a disk error, no descriptors left, a config it cannot
        apply), as ``/brokers/offline_replicas/<id>``: ephemeral, so it goes with the
        session (a restarted broker tries them again); removed when empty."""
        path = f"{OFFLINE_REPLICAS}/{broker_id}"
        if not offline:
            with contextlib.suppress(NoNodeError):
                self.client.delete(path)
            return
        value = orjson.dumps(
            {t: {"topic_id": tid, "partitions": sorted(ps)} for t, (tid, ps) in offline.items()}
        )
        try:
            self.client.create(path, value, ephemeral=True, makepath=True)
        except NodeExistsError:
            self.client.set(path, value)

    def offline_replicas(self) -> dict[tuple[str, str, int], set[int]]:
        """``(topic, topic id, partition) -> brokers`` that reported the replica offline."""
        out: dict[tuple[str, str, int], set[int]] = {}
        try:
            children = self.client.get_children(OFFLINE_REPLICAS)
        except NoNodeError:
            return out
        for child in children:
            try:
                data, _ = self.client.get(f"{OFFLINE_REPLICAS}/{child}")
            except NoNodeError:
                continue
            try:
                broker = int(child)
                for key in parse_offline_report(data):
                    out.setdefault(key, set()).add(broker)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                _log.warning("ignoring malformed %s/%s: %s", OFFLINE_REPLICAS, child, exc)
        return out

    # -- producer ids --------------------------------------------------------------

    @_needs_zookeeper("allocating producer ids")
    def allocate_producer_ids(self, block_size: int) -> int:
        """Reserve the next ``block_size`` producer ids cluster-wide; the first of them."""
        while True:
            try:
                data, stat = self.client.get(PRODUCER_ID_BLOCK)
            except NoNodeError:
                try:
                    self.client.create(PRODUCER_ID_BLOCK, orjson.dumps({"block_end": block_size}))
                    return 0
                except NodeExistsError:
                    continue
            start = int(orjson.loads(data)["block_end"])
            value = orjson.dumps({"block_start": start, "block_end": start + block_size})
            try:
                self.client.set(PRODUCER_ID_BLOCK, value, version=stat.version)
                return start
            except BadVersionError:
                continue

    @_needs_zookeeper("checking producer ids")
    def producer_ids_issued_below(self) -> int:
        try:
            data, _ = self.client.get(PRODUCER_ID_BLOCK)
        except NoNodeError:
            return 0
        return int(orjson.loads(data)["block_end"])

    # -- controller ----------------------------------------------------------------

    def try_become_controller(self, broker_id: int) -> int | None:
        """The new controller epoch if this broker won the election, else None."""
        try:
            self.client.create(
                CONTROLLER, orjson.dumps({"broker_id": broker_id, "epoch": -1}), ephemeral=True
            )
        except NodeExistsError:
            return None
        # Only the winner moves the epoch (as Kafka), then tells it in /controller.
        epoch = self._bump_controller_epoch()
        self.client.set(CONTROLLER, orjson.dumps({"broker_id": broker_id, "epoch": epoch}))
        return epoch

    def _bump_controller_epoch(self) -> int:
        while True:
            try:
                data, stat = self.client.get(CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.client.create(CONTROLLER_EPOCH, b"1")
                    return 1
                except NodeExistsError:
                    continue
            epoch = int(bytes(data).decode() or 0) + 1
            try:
                self.client.set(CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
                return epoch
            except BadVersionError:
                continue

    def controller(self) -> tuple[int, int] | None:
        """(broker id, epoch) of the current controller."""
        try:
            data, _ = self.client.get(CONTROLLER)
        except NoNodeError:
            return None
        raw: dict[str, Any] = orjson.loads(data)
        return int(raw["broker_id"]), int(raw["epoch"])

    def watch_controller(self, cb: Callable[[int | None], None]) -> None:
        def on_data(data: bytes | None, _stat: Any) -> None:
            cb(None if data is None else int(orjson.loads(data)["broker_id"]))

        DataWatch(self.client, CONTROLLER, on_data)

    # -- topics and partitions -----------------------------------------------------

    def topics(self) -> list[str]:
        return sorted(self.client.get_children(TOPICS))

    def watch_topics(self, cb: Callable[[list[str]], None]) -> None:
        def on_children(children: list[str]) -> None:
            cb(sorted(children))

        ChildrenWatch(self.client, TOPICS, on_children)

    @_needs_zookeeper("creating a topic")
    def create_topic(self, name: str, assignment: TopicAssignment) -> None:
        """Create the topic's znode and its identity (:func:`identity_path`) at once."""
        txn = self.client.transaction()
        txn.create(topic_path(name), assignment.to_json())
        txn.create(f"{topic_path(name)}/topic_id")
        txn.create(identity_path(name, assignment.topic_id))
        results = txn.commit()
        if isinstance(results[0], NodeExistsError):
            raise TopicAlreadyExists(name)
        failed = next((r for r in results if isinstance(r, Exception)), None)
        if failed is not None:
            raise KafkaStorageError(f"could not create topic {name!r} in ZooKeeper: {failed!r}")

    def get_topic(self, name: str) -> TopicAssignment | None:
        try:
            data, _ = self.client.get(topic_path(name))
        except NoNodeError:
            return None
        return None if not data or data == DELETED_TOPIC else TopicAssignment.from_json(data)

    def get_topic_versioned(self, name: str) -> tuple[TopicAssignment, int] | None:
        """The topic's assignment and its znode version (for :meth:`set_topic`); None when
        the topic does not exist or is being deleted."""
        try:
            data, stat = self.client.get(topic_path(name))
        except NoNodeError:
            return None
        if not data or data == DELETED_TOPIC:
            return None
        return TopicAssignment.from_json(data), int(stat.version)

    @_needs_zookeeper("changing a topic")
    def set_topic(self, name: str, assignment: TopicAssignment, version: int) -> bool:
        """Compare-and-set the topic's assignment (new partitions, changed configs) onto
        the topic whose id ``assignment`` carries: False when someone else wrote since
        ``version`` was read, or that topic is gone, even if a topic of that name was
        created again since and its znode is at ``version`` too (the write checks the
        topic's identity, :func:`identity_path`, in the same transaction).

        A topic created before identities were written has none: the first change
        creates it in the transaction, which fails if the topic there has one (a new
        topic of that name, created by this version)."""
        path = topic_path(name)
        txn = self.client.transaction()
        txn.check(identity_path(name, assignment.topic_id), -1)
        txn.set_data(path, assignment.to_json(), version=version)
        results = txn.commit()
        if not any(isinstance(r, Exception) for r in results):
            return True
        if not isinstance(results[0], NoNodeError) or self.client.exists(f"{path}/topic_id"):
            return False  # a stale version, or another topic's identity
        txn = self.client.transaction()
        txn.create(f"{path}/topic_id")
        txn.create(identity_path(name, assignment.topic_id))
        txn.set_data(path, assignment.to_json(), version=version)
        return not any(isinstance(r, Exception) for r in txn.commit())

    def watch_topic(self, name: str, cb: Callable[[TopicAssignment | None], bool]) -> None:
        """``cb(assignment or None)`` now and on changes; return False from cb to stop."""

        def on_data(data: bytes | None, _stat: Any) -> bool:
            return cb(
                None if not data or data == DELETED_TOPIC else TopicAssignment.from_json(data)
            )

        DataWatch(self.client, topic_path(name), on_data)

    @_needs_zookeeper("deleting a topic")
    def delete_topic(self, name: str) -> bool:
        """Mark the topic deleted (readers then treat it as gone, so the controller stops
        writing states under it), then remove its subtree."""
        try:
            self.client.set(topic_path(name), DELETED_TOPIC)
        except NoNodeError:
            return False
        for _ in range(20):
            try:
                self.client.delete(topic_path(name), recursive=True)
                return True
            except NoNodeError:
                return True
            except NotEmptyError:
                # A state write that read the topic before the mark: go again.
                time.sleep(0.05)
        raise KafkaStorageError(f"could not remove topic {name} from ZooKeeper") from None

    def get_state(self, topic: str, partition: int) -> tuple[PartitionState, int] | None:
        try:
            data, stat = self.client.get(state_path(topic, partition))
        except NoNodeError:
            return None
        return PartitionState.from_json(data), int(stat.version)

    def create_state(self, topic: str, partition: int, state: PartitionState) -> bool:
        # Level by level, never makepath: a topic deleted meanwhile must stay deleted,
        # not come back as an empty node.
        base = topic_path(topic)
        for path in (f"{base}/partitions", f"{base}/partitions/{partition}"):
            try:
                self.client.create(path)
            except NodeExistsError:
                pass
            except NoNodeError:
                return False
        try:
            self.client.create(state_path(topic, partition), state.to_json())
        except (NodeExistsError, NoNodeError):
            return False  # another controller won, or the topic is being deleted
        return True

    def set_state(
        self, topic: str, partition: int, state: PartitionState, version: int
    ) -> int | None:
        """Compare-and-set: the new version, or None if someone else wrote first."""
        try:
            stat = self.client.set(state_path(topic, partition), state.to_json(), version=version)
        except (BadVersionError, NoNodeError):
            return None
        return int(stat.version)

    def watch_state(
        self,
        topic: str,
        partition: int,
        cb: Callable[[PartitionState | None, int], bool],
    ) -> None:
        """``cb(state or None, version)`` now and on changes; return False from cb to stop."""

        def on_data(data: bytes | None, stat: Any) -> bool:
            if data is None or stat is None:
                return cb(None, -1)
            return cb(PartitionState.from_json(data), int(stat.version))

        DataWatch(self.client, state_path(topic, partition), on_data)
