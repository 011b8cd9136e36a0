"""A small set of records kept in ZooKeeper that every broker reloads whole on a change
notice: the base of the ACL store (:mod:`app.core.replication.zk_acls`), the quota
store (:mod:`app.core.replication.zk_quotas`) and the SCRAM credential store
(:mod:`app.core.replication.zk_scram`), which differ only in their layout.

Format: the records' znodes live under the roots of the subclass's ``LAYOUT``; with each
write, in the same ZooKeeper transaction, the writer creates a PERSISTENT_SEQUENTIAL
``<changes>/<change_prefix><seq>`` node whose value says what changed (Kafka's change
notifications), and keeps the newest ``KEEP_CHANGES`` of them.

Invariants: a record is changed only by compare-and-set on its znode's version, retried
when another writer got there first, so concurrent writers on several brokers never lose
an update; a failed reload keeps the last set. Reloads run both on kazoo's watch thread
and in the writer's thread, and a whole-set read takes many round trips, so two may
overlap: each takes a ticket before it reads, and only a read that started after the
installed one's is installed. Without that, a slow read begun before a write could finish
last and put back the set the write replaced (a revoked credential or deleted ACL valid
again) until some later change. The latest-started read began after the last write it
was told of (a write's own reload, or the notice's), so the newest set always wins. A
notice's reload cut off by a lost connection or session is retried until it succeeds or
the client closes (the watch does not call back again for that change).

Concurrency: blocking kazoo calls (the broker runs writes in a worker thread); the
ChildrenWatch callback runs on kazoo's thread, retries its reload there while the
connection is lost (as kazoo's own ChildrenWatch retries its read; close() interrupts
it), and calls the listeners there. The
subclass's ``_install`` swaps its set under ``_lock``. Thread-safe.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import ClassVar, Generic, NamedTuple, TypeVar
from urllib.parse import quote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.recipe.watchers import ChildrenWatch
from kazoo.retry import InterruptedError as RetryInterrupted
from kazoo.retry import KazooRetry

from app.core.replication.zk import ensure_chroot

__all__ = ["ZkLayout", "ZkWatchedStore", "node_name"]

_log = logging.getLogger(__name__)

R = TypeVar("R")
T = TypeVar("T")
V = TypeVar("V")


def node_name(name: str) -> str:
    """``name`` as one znode's name: percent-encoded UTF-8 (Kafka's sanitized names;
    ``urllib.parse.unquote`` reads it back), and ``.`` and ``..``, which ZooKeeper
    refuses as a node's name, with their dots encoded too. Kafka's sanitizer leaves
    those as they are (its brokers fail on them); its desanitizer reads ``%2E``."""
    encoded = quote(name, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


class ZkLayout(NamedTuple):
    """Where a store keeps its records (``roots``) and its change notices."""

    roots: tuple[str, ...]
    changes: str
    change_prefix: str
    # What the set holds, for the log line of a failed reload.
    what: str


class ZkWatchedStore(Generic[R, T]):
    """Connection, change notices, ordered reloads and compare-and-set writes shared by
    the ZooKeeper stores; ``R`` is what a whole read of ZooKeeper answers, ``T`` the set
    installed from it (module docstring)."""

    LAYOUT: ClassVar[ZkLayout]
    KEEP_CHANGES: ClassVar[int] = 100
    RELOAD_RETRY_MAX_S: ClassVar[float] = 2.0

    def __init__(self, connect: str, session_timeout_ms: int) -> None:
        self._connect = connect
        self.client = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000)
        self._lock = threading.Lock()
        self._listeners: list[Callable[[T], None]] = []
        # Tickets of reloads begun, and of the one whose read is installed (module docstring).
        self._reads_begun = 0
        self._read_installed = 0
        # A change notice's reload, retried on a lost connection or session (_on_changes)
        # until close(), at most RELOAD_RETRY_MAX_S apart. Interrupted by close(): kazoo's
        # stop() joins the callback thread the retry runs on.
        self._closing = threading.Event()
        self._reload_retry = KazooRetry(
            max_tries=-1,
            delay=0.1,
            backoff=2,
            max_delay=self.RELOAD_RETRY_MAX_S,
            ignore_expire=True,
            sleep_func=self.client.handler.sleep_func,
            interrupt=self._closing.is_set,
        )

    def _read_all(self) -> R:
        """Read the whole set from ZooKeeper (blocking; no lock held)."""
        raise NotImplementedError

    def _install(self, read: R) -> T:
        """Make ``read`` current and answer the set (called with ``_lock`` held)."""
        raise NotImplementedError

    def _current(self) -> T:
        """The set installed now (called with ``_lock`` held)."""
        raise NotImplementedError

    def _reload(self) -> T:
        """Read the whole set from ZooKeeper and make it current, unless a read begun
        later was installed first; answer the set now current."""
        with self._lock:
            self._reads_begun += 1
            ticket = self._reads_begun
        read = self._read_all()
        with self._lock:
            if ticket < self._read_installed:
                return self._current()
            self._read_installed = ticket
            return self._install(read)

    def start(self, timeout_s: float = 30.0) -> None:
        ensure_chroot(self._connect, timeout_s)
        self.client.start(timeout=timeout_s)
        for path in (*self.LAYOUT.roots, self.LAYOUT.changes):
            self.client.ensure_path(path)
        self._reload()
        ChildrenWatch(self.client, self.LAYOUT.changes, self._on_changes)

    def _on_changes(self, children: list[str]) -> None:
        try:
            # Retried while the connection is lost: this call is the only reload the change
            # gets here (kazoo's ChildrenWatch re-arms on reconnection but calls back only
            # when the children differ from those it last handed over), so giving up would
            # keep the replaced set (a revoked credential, a deleted ACL) until a later one.
            current = self._reload_retry.copy()(self._reload)
        except RetryInterrupted:
            return  # closing
        except Exception:
            _log.exception(
                "reloading %s from ZooKeeper failed; keeping the last set", self.LAYOUT.what
            )
            return
        for cb in self._listeners:
            cb(current)

    def _compare_and_set(
        self,
        path: str,
        read: Callable[[bytes | None], V],
        change: Callable[[V], V],
        encode: Callable[[V], bytes | None],
        notice: bytes,
        *,
        create_unchanged: bool = False,
    ) -> bool:
        """Apply ``change`` to the record at ``path`` (``read(None)`` when it is absent),
        retrying on a conflicting write; False when nothing was written.

        The write and its change notice (value ``notice``) are one ZooKeeper transaction:
        both or neither. Apart, a connection lost between them left the record changed
        with no broker told (a revoked credential valid on the others, and the client's
        retry, finding nothing left to change, wrote no notice either).

        ``encode`` answers the new value's bytes, or None to delete the node (never asked
        for a node that does not exist). ``create_unchanged``: a missing node is created
        even when ``change`` leaves the value as it was.
        """
        changes, prefix = self.LAYOUT.changes, self.LAYOUT.change_prefix
        while True:
            try:
                data, stat = self.client.get(path)
                current = read(data)
                version: int | None = stat.version
            except NoNodeError:
                current, version = read(None), None
            new = change(current)
            if new == current and (version is not None or not create_unchanged):
                return False
            payload = encode(new)
            tx = self.client.transaction()
            if version is None:
                # A transaction's create makes no parents (the quota node of a user's
                # client id may have none yet).
                self.client.ensure_path(path.rsplit("/", 1)[0])
                tx.create(path, payload or b"")
            elif payload is None:
                tx.delete(path, version=version)
            else:
                tx.set_data(path, payload, version=version)
            tx.create(f"{changes}/{prefix}", notice, sequence=True)
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                return True
            if isinstance(results[0], BadVersionError | NodeExistsError | NoNodeError):
                continue  # another writer changed the record: read again
            raise next(
                r
                for r in results
                if isinstance(r, Exception) and not isinstance(r, RolledBackError)
            )

    def _trim_changes(self) -> None:
        changes = self.LAYOUT.changes
        for old in sorted(self.client.get_children(changes))[: -self.KEEP_CHANGES]:
            with contextlib.suppress(NoNodeError):
                self.client.delete(f"{changes}/{old}")

    def watch(self, on_change: Callable[[T], None]) -> None:
        self._listeners.append(on_change)

    def close(self) -> None:
        self._closing.set()
        try:
            self.client.stop()
        finally:
            self.client.close()
