"""The broker-wide memory budget: request bodies, JSON fetch answers, WebSocket frames.

Kafka bounds what its network threads hold with ``queued.max.request.bytes``: when the
requests read but not yet answered pass it, the broker stops reading sockets until memory
frees. Logbus does the same for the three places where a client decides how much memory
the broker spends on it (issue #12 measured each: a 100 MB JSON produce peaking at
820 MB, 20 never-reading JSON fetchers with a huge ``max_bytes`` at 1.43 GB, 3,000
never-reading WebSocket subscribers at +2.7 GB):

=====================  =============================================  =======================
what                   reserved                                       released
=====================  =============================================  =======================
request body           ``Content-Length`` when the head is read      the answer is complete
                       (times ``JSON_BODY_FACTOR`` for a JSON body:   or the connection is
                       parsing one costs several times its size);     lost
                       a chunked body as its bytes arrive
JSON fetch answer      the stored bytes times ``JSON_RENDER_FACTOR``  the client has taken the
                       while rendering, then the rendered size        answer (the transport's
                                                                      buffer drained) or the
                                                                      connection is lost
WebSocket frame        the chunk's stored bytes times                 the frame has left the
                       ``JSON_RENDER_FACTOR`` (JSON) or its size      transport's buffer
=====================  =============================================  =======================

Over the budget, work *waits* rather than failing (back-pressure, as in Kafka): a request
body is not read from its socket (the body timeout does not run meanwhile), a fetch
answer is not rendered, a subscriber's pump sends nothing. Waiters are served first in,
first out, so a large reservation is not starved by small ones. A reservation larger
than the whole budget is granted when nothing else is reserved: it runs alone, never
refused for its size (``max_request_bytes`` and ``fetch_max_bytes`` bound it).

Waiting cannot deadlock: every reservation is released when its answer completes or its
connection dies, and a client that takes none of an answer is cut after
``send_timeout_ms`` (:class:`app.api.protocol.GuardedHttpToolsProtocol`, WebSocket frames in
:mod:`app.api.ws.subscribe`), so held memory always frees within that time. A fetch that
still cannot reserve within ``memory_wait_timeout_ms`` answers 503
``BROKER_NOT_AVAILABLE`` (retriable) rather than hold its client indefinitely.

Memory returned: glibc's malloc keeps freed memory in its arenas (one per thread that
allocated: JSON renders run in worker threads), so a broker that served large answers
stays large after the clients leave. When the budget is quiet (at most half in use) a
second after more than ``TRIM_AFTER_BYTES`` were released, the broker calls glibc's
``malloc_trim(0)`` (through ctypes), which returns free arena pages to the system
(measured: 20 never-reading JSON fetchers left the broker at +88 MB over its baseline
before the trim, +38 MB after). What stays is CPython's own small-object arenas, which it
frees only when every object in one is gone: about what one large JSON render leaves,
whatever the number of clients (README "Memory budget").

Concurrency: one :class:`MemoryBudget` per app, used from its event loop only (callbacks
are called from it too).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.common.errors import BrokerNotAvailable

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
# The scope extension the listener offers (app.api.protocol): on_drained(callback).
DRAINED_EXTENSION = "logbus.drained"
# Parsing a JSON produce body with orjson and encoding its records peaks at about 8 times
# the body (measured: 100 MB body, 820 MB peak); a quarter of the peak is the body bytes
# and transient copies, so 4 is the body's share the budget holds for it.
JSON_BODY_FACTOR = 4
# Rendering stored batches as JSON: the decoded records (dicts, strings) and the orjson
# output together measure about 3 times the stored bytes for small records.
JSON_RENDER_FACTOR = 3
# Reservations up to this size skip the queue and may use the last 1/SMALL_SHARE of the
# budget, which larger ones leave free: ordinary small requests and answers go on while
# large ones wait for memory (a broker full of never-reading clients still serves).
SMALL_BYTES = 256 * 1024
SMALL_SHARE = 16
# Released since the last trim before the broker hands free memory back (malloc_trim).
TRIM_AFTER_BYTES = 32 * MIB
# Or connections closed since the last trim: a closing WebSocket frees what the budget
# never saw (its transport's write buffer, parser and protocol state), so a crowd leaving
# must trim even when no reservation was released meanwhile (measured: 1,000 never-reading
# subscribers leaving left RSS where it was with them connected, until a trim).
TRIM_AFTER_CLOSES = 16
# Default budget: a quarter of physical memory, between these bounds.
DEFAULT_MIN_BYTES = 64 * MIB
DEFAULT_MAX_BYTES = 512 * MIB


def default_budget_bytes() -> int:
    """A quarter of the machine's memory, at least 64 MiB and at most 512 MiB.

    512 MiB holds one JSON produce of the default ``max_request_bytes`` (100 MB, reserved
    at 4 times) beside ordinary traffic; a quarter of RAM keeps a small machine's broker
    from being the process the kernel kills. The cap is not the broker's size: page cache
    (which serves fetches) and binary fetches (``sendfile``, no copy) are outside it.
    """
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return DEFAULT_MAX_BYTES
    return max(DEFAULT_MIN_BYTES, min(DEFAULT_MAX_BYTES, physical // 4))


def _libc_function(name: str, argtypes: list[Any]) -> Any | None:
    """glibc's ``name`` with its argument types and an int result, or None where the C
    library is not glibc (musl, macOS: no malloc_trim or mallopt to call)."""
    lib = ctypes.util.find_library("c")
    if not lib:
        return None
    try:
        fn = getattr(ctypes.CDLL(lib), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


def _load_malloc_trim() -> Callable[[int], int] | None:
    trim: Callable[[int], int] | None = _libc_function("malloc_trim", [ctypes.c_size_t])
    return trim


_MALLOC_TRIM = _load_malloc_trim()

# glibc's mallopt parameter numbers (malloc.h).
_M_MMAP_THRESHOLD = -3
# Allocations at least this large get pages of their own (mmap), returned to the system
# the moment they are freed: what glibc does by default until the first such block is
# freed, after which it raises the threshold (up to 32 MiB) and serves later large blocks
# (request bodies, rendered answers, WebSocket frames) from its heaps, where one live small
# object keeps their pages. Setting it fixes it (mallopt turns the adjustment off).
MMAP_THRESHOLD_BYTES = 128 * 1024


def tune_allocator() -> bool:
    """Fix glibc's mmap threshold at ``MMAP_THRESHOLD_BYTES`` (see there), unless the
    operator chose one (``MALLOC_MMAP_THRESHOLD_`` or ``GLIBC_TUNABLES``); False where
    not glibc or left alone. Called once at startup, before worker threads exist."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "mmap_threshold" in os.environ.get(
        "GLIBC_TUNABLES", ""
    ):
        return False
    mallopt = _libc_function("mallopt", [ctypes.c_int, ctypes.c_int])
    return mallopt is not None and bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def release_free_memory() -> bool:
    """Hand free malloc arena pages back to the system; False where not glibc."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


class MemoryWaitTimeout(BrokerNotAvailable):
    """The broker's memory budget stayed in use for the whole wait (HTTP 503, retriable)."""

    def __init__(self, wanted: int, limit: int, waited_ms: int) -> None:
        super().__init__(
            f"the broker's memory budget ({limit} bytes, memory_budget_bytes) stayed in use "
            f"for {waited_ms} ms; {wanted} bytes were needed: retry later or ask for fewer "
            "bytes",
            memory_budget_bytes=limit,
        )


class BudgetCollector(Collector):
    """The budget's state for ``/metrics``: ``logbus_memory_budget_{limit,used,peak}_bytes``,
    ``logbus_memory_budget_waiting`` (reservations queued now), ``..._waits_total`` and
    ``..._trims_total``."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Metric]:
        b = self.budget
        for name, doc, value in (
            ("limit_bytes", "The memory budget (memory_budget_bytes).", b.limit),
            ("used_bytes", "Bytes reserved now (bodies, JSON answers, frames).", b.used),
            ("peak_bytes", "Most bytes reserved at once since start.", b.peak),
            ("waiting", "Reservations waiting for memory now.", b.waiting),
        ):
            yield GaugeMetricFamily(f"logbus_memory_budget_{name}", doc, value=value)
        yield CounterMetricFamily(
            "logbus_memory_budget_waits", "Reservations that had to wait.", value=b.waits
        )
        yield CounterMetricFamily(
            "logbus_memory_budget_trims",
            "Times free malloc memory was returned to the system.",
            value=b.trims,
        )


class Reservation:
    """Bytes held from a budget until :meth:`release` (idempotent; shrinking allowed)."""

    __slots__ = ("_budget", "size")

    def __init__(self, budget: MemoryBudget, size: int) -> None:
        self._budget = budget
        self.size = size

    def shrink(self, size: int) -> None:
        """Hold ``size`` bytes from now on, if that is less than what is held."""
        if 0 <= size < self.size:
            self._budget._give_back(self.size - size)
            self.size = size

    def grow(self, size: int) -> None:
        """Hold ``size`` more bytes, granted or not: for bytes that are already in memory
        (a chunked body's chunk as it arrives). The budget may go over; :attr:`MemoryBudget.over`
        tells the caller to stop taking more."""
        self._budget._take(size)
        self.size += size

    def absorb(self, other: Reservation) -> None:
        """Hold ``other``'s bytes as this reservation's (``other`` ends empty)."""
        self.size += other.size
        other.size = 0

    def release(self) -> None:
        if self.size:
            size, self.size = self.size, 0
            self._budget._give_back(size)


class _Waiter:
    __slots__ = ("callback", "cancelled", "size")

    def __init__(self, size: int, callback: Callable[[Reservation], None]) -> None:
        self.size = size
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class MemoryBudget:
    """At most ``limit`` bytes reserved at once, waiters served first in, first out."""

    def __init__(self, limit: int, wait_timeout_s: float = 30.0) -> None:
        self.limit = limit
        self.wait_timeout_s = wait_timeout_s
        self.used = 0
        self.peak = 0
        self.waits = 0
        self._waiters: deque[_Waiter] = deque()
        self._released_since_trim = 0
        self._closed_since_trim = 0
        self._trim_scheduled = False
        self.trims = 0

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.cancelled)

    @property
    def over(self) -> bool:
        return self.used > self.limit

    def _take(self, size: int) -> None:
        self.used += size
        self.peak = max(self.peak, self.used)

    def _fits(self, size: int) -> bool:
        if size <= SMALL_BYTES:
            return self.used + size <= self.limit
        return self.used == 0 or self.used + size <= self.limit - self.limit // SMALL_SHARE

    def _grant(self, size: int) -> Reservation:
        self._take(size)
        return Reservation(self, size)

    def try_reserve(self, size: int) -> Reservation | None:
        """``size`` bytes now, or None (nobody waiting is overtaken)."""
        size = max(0, min(size, self.limit))
        if (self._waiters and size > SMALL_BYTES) or not self._fits(size):
            return None
        return self._grant(size)

    def reserve_later(self, size: int, callback: Callable[[Reservation], None]) -> _Waiter:
        """Queue for ``size`` bytes; ``callback(reservation)`` runs once they are granted
        (from the loop, never inside this call). Cancel the returned waiter to give up."""
        waiter = _Waiter(max(0, min(size, self.limit)), callback)
        self._waiters.append(waiter)
        self.waits += 1
        return waiter

    async def reserve(self, size: int, timeout_s: float | None = -1.0) -> Reservation:
        """``size`` bytes, waiting while the budget is in use; :class:`MemoryWaitTimeout`
        after ``timeout_s`` (negative: ``wait_timeout_s``; None: no limit)."""
        granted = self.try_reserve(size)
        if granted is not None:
            return granted
        future: asyncio.Future[Reservation] = asyncio.get_running_loop().create_future()

        def done(reservation: Reservation) -> None:
            if future.done():  # cancelled meanwhile: give the bytes back
                reservation.release()
            else:
                future.set_result(reservation)

        waiter = self.reserve_later(size, done)
        wait = self.wait_timeout_s if timeout_s is not None and timeout_s < 0 else timeout_s
        try:
            await asyncio.wait_for(asyncio.shield(future), wait)
        except TimeoutError:
            pass
        except BaseException:
            # Cancelled after the grant arrived but before this task resumed (a crowd of
            # subscribers leaving at once as others release): nobody else will release it.
            if future.done() and not future.cancelled():
                future.result().release()
            raise
        finally:
            waiter.cancel()
            if not future.done():
                future.cancel()  # a grant arriving later is released by `done`
        if future.cancelled():
            raise MemoryWaitTimeout(size, self.limit, round((wait or 0) * 1000))
        return future.result()

    def _give_back(self, size: int) -> None:
        self.used -= size
        self._released_since_trim += size
        self._serve_waiters()
        if self._released_since_trim >= TRIM_AFTER_BYTES:
            self._schedule_trim()

    def connection_closed(self) -> None:
        """A connection ended (its buffers are free now): after ``TRIM_AFTER_CLOSES`` of them,
        the next quiet moment hands free memory back. Called from the event loop."""
        self._closed_since_trim += 1
        if self._closed_since_trim >= TRIM_AFTER_CLOSES:
            self._schedule_trim()

    def _serve_waiters(self) -> None:
        while self._waiters:
            head = self._waiters[0]
            if head.cancelled:
                self._waiters.popleft()
                continue
            if not self._fits(head.size):
                return
            self._waiters.popleft()
            reservation = self._grant(head.size)
            asyncio.get_running_loop().call_soon(head.callback, reservation)

    def _schedule_trim(self) -> None:
        if self._trim_scheduled:
            return
        self._trim_scheduled = True
        # A moment later: a burst of releases (many clients leaving) trims once.
        asyncio.get_running_loop().call_later(1.0, self._trim)

    def _trim(self) -> None:
        self._trim_scheduled = False
        if self.used > self.limit // 2:
            return  # busy: the next quiet moment trims
        self._released_since_trim = 0
        self._closed_since_trim = 0
        # First the collector: what closed connections left in reference cycles (WebSocket
        # handlers, tasks, exceptions with tracebacks) is freed only by a collection, and the
        # served process's collector runs rarely (gc_young_threshold, app/api/server.py).
        # Measured: 1,000 never-reading subscribers coming and going three times grew RSS
        # by ~33 MB without it. After gc.freeze a full collection walks only what was
        # promoted since startup (a few ms), at most once a second here.
        gc.collect()
        if release_free_memory():
            self.trims += 1
            logger.debug("memory budget idle: free malloc arena pages returned to the system")


class HeldJSON(Response):
    """A JSON answer that holds its memory reservation until the client has taken it.

    Released when the transport's buffer has drained (through the listener's
    ``logbus.drained`` scope extension, :mod:`app.api.protocol`), or when the connection is
    lost; without the extension (another server, a test transport) once it is sent."""

    media_type = "application/json"

    def __init__(self, body: bytes, held: Reservation, headers: Mapping[str, str]) -> None:
        super().__init__(body, headers=headers)
        self._held = held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        on_drained = scope.get("extensions", {}).get(DRAINED_EXTENSION, {}).get("on_drained")
        try:
            await super().__call__(scope, receive, send)
        finally:
            if on_drained is None:
                self._held.release()
            else:
                on_drained(self._held.release)


async def held_json(
    budget: MemoryBudget,
    estimate: int,
    render: Callable[[], Awaitable[bytes]],
    headers: Mapping[str, str],
    gone: Callable[[], Awaitable[bool]] | None = None,
) -> Response:
    """``render()`` under a reservation of ``estimate`` bytes (waiting for the budget),
    answered as a :class:`HeldJSON` that holds the rendered size until the client has
    taken it. ``gone``: whether the client has left, asked once memory is granted: a
    client that left while waiting costs no render (an empty answer nobody reads)."""
    held = budget.try_reserve(estimate)
    waited = held is None
    if held is None:
        held = await budget.reserve(estimate)
    try:
        if waited and gone is not None and await gone():
            held.release()
            return Response(status_code=204)
        body = await render()
    except BaseException:
        held.release()
        raise
    held.shrink(len(body))
    return HeldJSON(body, held, headers)
