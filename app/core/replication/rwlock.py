"""A readers-writer lock: a partition's leader/ISR lock (Kafka's ``leaderIsrUpdateLock``).

Appends take it shared: they run at once on many threads (and on the event
loop), each checking under it that the partition still leads in the epoch the
request saw. Leadership changes take it exclusively, so a change waits for the
appends in flight and no append starts until the change is done: an append
either lands entirely before the change (in the old epoch, by a broker that
still led) or sees the change and writes nothing.

Writers are preferred: once a writer waits, new readers wait behind it, so a
steady stream of appends cannot keep a leadership change out.

Not reentrant. A thread that holds the lock shared must not take it exclusively
(it would wait for itself). Thread-safe otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadWriteLock:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
