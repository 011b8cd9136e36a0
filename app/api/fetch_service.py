r"""Fetch, transport-neutral: what HTTP, WebSocket and the Kafka door share.

:func:`read_log` is one read of a partition for a fetch (to the high watermark, the
last stable offset for read_committed, the log end for a follower) and
:func:`wait_for_data` the long poll on top of it, woken by appends
(:class:`app.api.longpoll.FetchWaiters`), never by a sleep loop. The answer is a
:class:`~app.core.log.log.FetchInfo`: :class:`~app.core.log.fileslice.FileSlice`\ s of the
segment files, which each door sends its own way (``os.sendfile`` for the HTTP binary
fetch and the Kafka door; decoded for JSON and WebSocket). Runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from app.common.aio import wait_event
from app.common.errors import UnknownTopicOrPartition
from app.common.isolation import READ_COMMITTED

T = TypeVar("T")

if TYPE_CHECKING:
    from app.api.longpoll import FetchWaiters
    from app.core.log.log import FetchInfo, Log
    from app.core.log.manager import LogManager

# A read_committed binary answer lists its aborted transactions in a header (~40 bytes
# each at worst), so the head must stay inside what HTTP clients read (the SDK's 64 KiB,
# app/common/http1.py): a read overlapping more than this many transactions that begin
# at or after its offset stops before the first offset of the next one, and the
# reader's next fetch goes on from there. (Those begun before the offset and still
# open there must all be listed; as many producers were in a transaction at once.)
MAX_ABORTED_PER_ANSWER = 1000


def read_log(
    log: Log, offset: int, max_bytes: int, *, replica: bool = False, committed: bool = False
) -> FetchInfo:
    """One read for a fetch: to the log end offset for a follower (``replica``), else to
    the high watermark, or to the last stable offset with ``committed`` (read_committed,
    with the aborted transactions, at most :data:`MAX_ABORTED_PER_ANSWER` of them)."""
    if replica:
        return log.read(offset, max_bytes, max_offset=log.log_end_offset)
    if not committed:
        return log.read(offset, max_bytes)
    info = log.read(offset, max_bytes, isolation=READ_COMMITTED)
    aborted = info.aborted_transactions or ()
    if len(aborted) > MAX_ABORTED_PER_ANSWER:
        later = sorted(a.first_offset for a in aborted if a.first_offset >= offset)
        if len(later) > MAX_ABORTED_PER_ANSWER:
            # First offsets are distinct batch starts, so the bound is past ``offset``
            # and the batch holding it ends below the bound: the read still progresses.
            bound = later[MAX_ABORTED_PER_ANSWER]
            info = log.read(offset, max_bytes, max_offset=bound, isolation=READ_COMMITTED)
    return info


def aborted_pairs(info: FetchInfo) -> list[tuple[int, int]] | None:
    """A read_committed read's aborted transactions as ``(producer_id, first_offset)``;
    None for a read_uncommitted one."""
    found = info.aborted_transactions
    return None if found is None else [(a.producer_id, a.first_offset) for a in found]


async def wait_for_data(
    waiters: FetchWaiters,
    manager: LogManager,
    log: Log,
    offset: int,
    max_bytes: int,
    min_bytes: int,
    max_wait_ms: int,
    *,
    replica: bool = False,
    committed: bool = False,
) -> FetchInfo:
    """Read again after each append until ``min_bytes`` are there or the wait is over.

    Consumers read up to the high watermark (read_committed ones, ``committed``, up to
    the last stable offset: a transaction's marker is an append, so it wakes them); a
    follower (``replica``) up to the log end offset, since what it fetches is what
    moves the high watermark."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    event = waiters.register(log)
    try:
        while True:
            # Clear before reading: an append after this read sets it again.
            event.clear()
            if manager.get_log(log.topic, log.partition) is not log:
                # Deleted (and maybe recreated) while we waited: these offsets are gone.
                raise UnknownTopicOrPartition(log.topic, log.partition)
            info = read_log(log, offset, max_bytes, replica=replica, committed=committed)
            remaining = deadline - loop.time()
            if info.size >= min_bytes or remaining <= 0 or waiters.closed:
                return info
            # Not wait_for(event.wait()): on 3.11 it can drop the cancellation of a
            # long poll whose client went away (app/common/aio.py).
            await wait_event(event, remaining)
    finally:
        waiters.unregister(log, event)


def lookup_offset(log: Log, where: str | int, committed: bool) -> tuple[int, int]:
    """ListOffsets on one log: ``(offset, timestamp)`` for ``"earliest"`` (the log start),
    ``"latest"`` (the high watermark; the last stable offset for read_committed) or a
    timestamp (the first record at or after it; with read_committed only below the LSO;
    ``(-1, -1)`` when there is none, as Kafka answers). Timestamps of earliest/latest: -1.
    """
    if where == "earliest":
        return log.log_start_offset, -1
    end = log.last_stable_offset if committed else log.high_watermark
    if where == "latest":
        return end, -1
    assert isinstance(where, int)
    found = log.offset_for_timestamp(where)
    if found is None or (committed and found[0] >= end):
        return -1, -1
    return found


async def wait_for_any(
    waiters: FetchWaiters,
    logs: Sequence[Log],
    read: Callable[[], tuple[T, int]],
    min_bytes: int,
    max_wait_ms: int,
) -> T:
    """A long poll over several partitions (a Kafka Fetch names many): ``read()`` (the
    answer and its size) again after each append to any of ``logs`` until the size reaches
    ``min_bytes`` or ``max_wait_ms`` is over; the last answer. One event is shared by
    every log, registered before the first read, so no append is missed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    event = asyncio.Event()
    for log in logs:
        waiters.register(log, event)
    try:
        while True:
            event.clear()
            answer, size = read()
            remaining = deadline - loop.time()
            if size >= min_bytes or remaining <= 0 or waiters.closed:
                return answer
            await wait_event(event, remaining)
    finally:
        for log in logs:
            waiters.unregister(log, event)
