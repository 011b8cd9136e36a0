"""Append permits: a transaction is decided only after its producer's checked appends landed.

A transactional batch is checked (:meth:`TransactionCoordinator.check_produce`) and
then appended, maybe after awaits and maybe on a worker thread. EndTxn (or an abort)
must not write its decision and markers between the two: a batch landing after its
transaction's marker opens a transaction nobody ends (Kafka's "hanging
transaction"). So the produce path holds a permit for the producer id from the check
until its append returned::

    with coordinator.append_permit(producer_id):
        coordinator.check_produce(topic, partition, producer_id, epoch)
        ...  # awaits, a worker thread
        append(...)

and the coordinator, deciding, first closes the producer id to new permits and waits
(bounded) for the count of permits out to reach zero (:meth:`AppendPermits.deciding`).

Invariants: a producer id's count is the number of permits granted and not yet
released (never negative; an id is kept only while its count is above zero or it is
closed). A permit is released exactly once (``release`` is idempotent), whichever
thread or task the append ended on. While an id is closed no permit is granted
(ConcurrentTransactions, retriable: the transaction is being decided; a retry after
it is decided is refused by the check, INVALID_TXN_STATE, as in Kafka). One request
may hold permits of several producer ids, and a producer id permits from several
requests; nothing is tied to an asyncio task.

A permit comes back when the block holding it exits. A produce request awaiting its
append on a worker thread holds it until the thread returned (the broker does not cancel
a request whose client went away); only a request cancelled outright (the broker
stopping) gives it back while its thread may still be appending: then the decision is
not waited for that append.

Concurrency: :meth:`AppendPermits.acquire` and :meth:`AppendPermits.deciding` run on
the event loop, where the checks and the coordinator run (so a check and the permit
taken with it are atomic with respect to EndTxn); :meth:`AppendPermit.release` may
run on any thread: the counts are under a lock, and the waiter is woken on its loop
with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from types import TracebackType

from app.common.errors import ConcurrentTransactions


class AppendPermit:
    """One granted permit; a context manager that releases it on exit."""

    __slots__ = ("_permits", "_released", "producer_id")

    def __init__(self, permits: AppendPermits, producer_id: int) -> None:
        self._permits = permits
        self.producer_id = producer_id
        self._released = False

    def release(self) -> None:
        """Give the permit back (once; later calls do nothing). Any thread."""
        if self._released:
            return
        self._released = True
        self._permits._release(self.producer_id)

    def __enter__(self) -> AppendPermit:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class AppendPermits:
    """The permits out per producer id; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count: dict[int, int] = {}
        self._closed: set[int] = set()
        # Producer id -> (loop, event) of the decision waiting for its count to reach 0.
        self._waiters: dict[int, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def out(self, producer_id: int) -> int:
        """Permits of ``producer_id`` granted and not released."""
        with self._lock:
            return self._count.get(producer_id, 0)

    def acquire(self, producer_id: int, transactional_id: str | None = None) -> AppendPermit:
        """A permit for an append of ``producer_id``'s transactional batches. On the loop.
        ConcurrentTransactions while the producer's transaction is being decided."""
        with self._lock:
            if producer_id in self._closed:
                raise ConcurrentTransactions(
                    f"the transaction of producer {producer_id} is being committed or "
                    "aborted; a batch for it now would land after its end",
                    transactional_id or "",
                )
            self._count[producer_id] = self._count.get(producer_id, 0) + 1
        return AppendPermit(self, producer_id)

    def _release(self, producer_id: int) -> None:
        with self._lock:
            left = self._count.get(producer_id, 0) - 1
            if left > 0:
                self._count[producer_id] = left
                return
            self._count.pop(producer_id, None)
            waiters = self._waiters.pop(producer_id, [])
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # a loop closed meanwhile
                loop.call_soon_threadsafe(event.set)

    @contextlib.asynccontextmanager
    async def deciding(self, producer_id: int, timeout_s: float) -> AsyncIterator[None]:
        """Close ``producer_id`` to new permits, wait until its permits out are released
        (for up to ``timeout_s``: an append stuck past the write timeout does not hold the
        decision forever, as before), then run the block (the decision's write); reopen
        on exit. On the loop."""
        with self._lock:
            nested = producer_id in self._closed
            self._closed.add(producer_id)
        try:
            await self._drained(producer_id, timeout_s)
            yield
        finally:
            if not nested:
                with self._lock:
                    self._closed.discard(producer_id)

    async def _drained(self, producer_id: int, timeout_s: float) -> None:
        event = asyncio.Event()
        with self._lock:
            if self._count.get(producer_id, 0) == 0:
                return
            waiters = self._waiters.setdefault(producer_id, [])
            entry = (asyncio.get_running_loop(), event)
            waiters.append(entry)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await event.wait()
        finally:
            with self._lock:
                left = self._waiters.get(producer_id)
                if left is not None and entry in left:
                    left.remove(entry)
                    if not left:
                        del self._waiters[producer_id]
