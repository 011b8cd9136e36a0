"""Every broker's offline replicas, as a cache fed by ZooKeeper watches: what metadata
answers list (Kafka's offline replicas of a partition, whichever broker they are on).

Format: ``/brokers/offline_replicas/<broker id>`` (EPHEMERAL, written by that broker's
:class:`~app.core.replication.manager.ReplicaManager`) holds ``{"<topic>": {"topic_id",
"partitions": [p]}}``, the replicas it is assigned but could not create
(:func:`~app.core.replication.zk.parse_offline_report` reads it). The cache keeps, per
``(topic, topic id, partition)``, the brokers whose report names it.

Invariants: one ChildrenWatch on ``/brokers/offline_replicas`` and one DataWatch per
broker id ever seen there, kept for good (a DataWatch of a node that went watches for
its return: a broker's report that goes and comes back is seen without a new watch, and
no deletion racing a re-creation leaves a report unwatched). A broker's entry is its
node's latest value: gone with the node (its session ended, or it took its report
back); a malformed value counts as no report (logged). Keyed by topic id, so a report
about a deleted topic says nothing of a new topic of the same name.

Concurrency: the watches run on kazoo's thread and replace the whole index, under
``_lock``, with a new dict that is never mutated; readers (the event loop, worker
threads) take the current one without a lock, never a ZooKeeper call per request.
``on_change`` runs on kazoo's thread and must only hand off. Thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from app.core.replication.zk import OFFLINE_REPLICAS, parse_offline_report

__all__ = ["OfflineReplicaCache"]

_log = logging.getLogger(__name__)

# (topic, topic id, partition)
ReplicaKey = tuple[str, str, int]


class OfflineReplicaCache:
    """The cluster's offline replica reports, kept current by watches; see the module
    docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Broker id -> the replicas its report names; changed under the lock only.
        self._reports: dict[int, frozenset[ReplicaKey]] = {}
        # (topic, topic id, partition) -> reporting brokers: replaced whole, never mutated.
        self._index: Mapping[ReplicaKey, frozenset[int]] = {}
        self._watched: set[str] = set()
        self._client: KazooClient | None = None
        self._on_change: Callable[[], None] = lambda: None

    def start(self, client: KazooClient, on_change: Callable[[], None] | None = None) -> None:
        """Watch the reports through ``client`` (started; the root exists). The reports
        present now are in the cache when this returns (kazoo calls a new watch at once)."""
        self._client = client
        if on_change is not None:
            self._on_change = on_change
        ChildrenWatch(client, OFFLINE_REPLICAS, self._on_children)

    def brokers(self, topic: str, topic_id: str, partition: int) -> frozenset[int]:
        """The brokers that report their replica of the partition offline."""
        return self._index.get((topic, topic_id, partition), frozenset())

    def _on_children(self, children: list[str]) -> None:
        client = self._client
        assert client is not None
        with self._lock:
            new = [c for c in children if c not in self._watched]
            self._watched.update(new)
        for child in new:
            DataWatch(client, f"{OFFLINE_REPLICAS}/{child}", self._report_watch(child))

    def _report_watch(self, child: str) -> Callable[[bytes | None, Any], bool]:
        def on_data(data: bytes | None, _stat: Any) -> bool:
            self._set_report(child, data)
            return True  # kept while the node is gone: it watches for its return

        return on_data

    def _set_report(self, child: str, data: bytes | None) -> None:
        try:
            broker = int(child)
        except ValueError:
            _log.warning("ignoring %s/%s: not a broker id", OFFLINE_REPLICAS, child)
            return
        keys: frozenset[ReplicaKey] = frozenset()
        if data:
            try:
                keys = frozenset(parse_offline_report(data))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                _log.warning("ignoring malformed %s/%s: %s", OFFLINE_REPLICAS, child, exc)
        with self._lock:
            if self._reports.get(broker, frozenset()) == keys:
                return
            if keys:
                self._reports[broker] = keys
            else:
                self._reports.pop(broker, None)
            index: dict[ReplicaKey, set[int]] = {}
            for b, reported in self._reports.items():
                for key in reported:
                    index.setdefault(key, set()).add(b)
            self._index = {k: frozenset(v) for k, v in index.items()}
        self._on_change()
