"""Wake waiting fetches when an append makes data available, without polling.

A fetch that finds fewer than ``min_bytes`` waits on an :class:`asyncio.Event`
in a per-partition waiter set. The first time a partition gets a waiter we
register one append listener on its :class:`~app.core.log.log.Log`; the log
calls it on the appending thread after every append, and it hops to the event
loop with ``call_soon_threadsafe`` only when someone is waiting, so appends
with no fetch waiting pay one dict lookup.

A waiter joins the set *before* it checks the log, so an append that lands
between the check and the wait still finds it and wakes it (no lost wakeup).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.log.log import Log

PartitionKey = tuple[str, int]


class FetchWaiters:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: dict[PartitionKey, set[asyncio.Event]] = {}
        # The Log object each listener is on: a deleted and recreated topic is a
        # new Log that needs its own listener.
        self._listening: dict[PartitionKey, tuple[Log, Callable[[Log], None]]] = {}
        self._closed = False

    def _ensure_listener(self, log: Log) -> None:
        key = (log.topic, log.partition)
        current = self._listening.get(key)
        if current is not None and current[0] is log:
            return
        if current is not None:
            self._detach(current)
        waiters = self._waiters.setdefault(key, set())

        def on_append(_: Log) -> None:
            # Runs on the appending thread: read the set only, mutate on the loop.
            loop = self._loop
            if waiters and loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self._wake, key)

        log.add_append_listener(on_append)
        self._listening[key] = (log, on_append)

    @staticmethod
    def _detach(entry: tuple[Log, Callable[[Log], None]]) -> None:
        log, cb = entry
        # A closed or deleted log may refuse; there is nothing left to undo then.
        with contextlib.suppress(Exception):
            log.remove_append_listener(cb)

    def _wake(self, key: PartitionKey) -> None:
        for event in self._waiters.get(key, ()):
            event.set()

    def register(self, log: Log, event: asyncio.Event | None = None) -> asyncio.Event:
        """An event set by every append to ``log``; pair with :meth:`unregister`.

        Pass ``event`` to share one event among several logs (a WebSocket
        subscription waits on all of its partitions at once).
        """
        # The loop serving requests now (an app can outlive a loop, e.g. under a test client).
        self._loop = asyncio.get_running_loop()
        if event is None:
            event = asyncio.Event()
        if self._closed:
            event.set()
            return event
        self._ensure_listener(log)
        self._waiters[(log.topic, log.partition)].add(event)
        return event

    def unregister(self, log: Log, event: asyncio.Event) -> None:
        waiters = self._waiters.get((log.topic, log.partition))
        if waiters is not None:
            waiters.discard(event)

    def notify(self, log: Log) -> None:
        """Wake the waiters of ``log`` now (on the loop): its high watermark moved without
        an append (replication), so records became visible."""
        self._wake((log.topic, log.partition))

    def forget_topic(self, topic: str) -> None:
        """After a topic is deleted: wake its waiters (they find it gone) and drop its listeners."""
        for key in [k for k in self._listening if k[0] == topic]:
            self._detach(self._listening.pop(key))
        for key, waiters in self._waiters.items():
            if key[0] == topic:
                for event in waiters:
                    event.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    def close(self) -> None:
        """Release every waiter (they answer with what they have) and every listener."""
        self._closed = True
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()
        for entry in self._listening.values():
            self._detach(entry)
        self._listening.clear()
