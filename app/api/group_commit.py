"""Group commit: produce requests to one partition that arrive together share one write.

The requests joined are concatenated (each request's RecordBatch stays a batch of its
own, with its own base offset and CRC) and appended with one
``Topology.append_to_leaders`` call, which validates them all, assigns consecutive
offsets and writes them with one ``pwrite`` (and, on a topic that fsyncs per append,
one fsync). Each request is answered with its own slice of the result: its batch's
first and last offsets (the group's first offset plus the records of the batches
before it), so offsets are per request, consecutive within it, and in the order the
requests joined.

Where it is used (``append_json_records``):

- **Appends that go to a worker thread** (acks=all, a topic with ``flush.messages``, or
  batches over ``inline_append_max_bytes``): always. Such a request waits for a thread hop
  anyway; requests for the partition that arrive while a group is being written form
  the next group, so N concurrent requests cost one hop, one write and one fsync per
  group instead of N (a database's group commit).
- **Small appends made on the event loop**: with ``group_commit_inline`` (the
  default). The group is written one loop turn after its first request
  (``loop.call_soon``: after every task ready in that turn has run, so requests whose
  bodies arrived in the same read of the sockets join it), and each request waits for
  it. A first measurement found that wait (one suspension and resumption of the
  request's whole ASGI stack) dearer than the appends it saved; it was confounded by
  the garbage collector (requests held across a turn were promoted and collected).
  With the collector settled (``app/api/server.py: settle_collector``) the joined path
  cost a third less broker CPU per one-record request at 8 and 64 connections, with a
  lower p99 (bench/RESULTS.md), so it is on by default; ``false`` appends each small
  request alone, at once.

What is never joined, and why:

- Batches of idempotent or transactional producers (binary produce): a partition's
  producer state checks and deduplicates by batch, and a group is answered as one
  append, so a retry or a sequence error of one producer would decide the answer of
  another's request. Only broker-built JSON batches (no producer id) join.
- Requests writing to several partitions, in a cluster: their leadership and
  min-ISR checks are all or none across partitions
  (:meth:`Topology.append_to_leaders`), which separate per-partition groups cannot
  keep (leadership may move between two groups' writes); they are appended alone.
  On a lone broker (``not Topology.leadership_moves``) a small one
  (on the loop, acks 0 or 1) joins each of its partitions' groups
  (:meth:`GroupCommit.append_partitions`, setting ``group_commit_partitions``), except
  to a compacted topic, whose log refuses keyless records at the append: such a
  request keeps its one sequential append. A 10-record request spread by the
  partitioner over 4 partitions made 4 appends; joined, the partitions' groups make
  about 4 per loop turn for all the turn's requests.
- acks=all with other acks: a cluster checks min.insync.replicas under the
  partition's lock for acks=all appends only, so the two never share an append.
  After the write each request waits for its own acks (acks=all: until the in-sync
  replicas hold *its* last offset); acks=0 answers as soon as its batch is written.

Failures: the log checks every batch before writing any, so a refused group wrote
nothing. A refused group of several requests is appended again one request at a time,
so a request that the log refuses (say a keyless record to a compacted topic) fails
alone and the others are written. Any other error (a disk error) fails every request
of the group, none of which has been answered. Crash safety is the log's: an answer
is sent only after its group's write returned, as for a lone append.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.api.metrics import GROUP_COMMIT_APPENDS, GROUP_COMMIT_REQUESTS
from app.common.errors import LogbusError
from app.core.log.results import AppendInfo

if TYPE_CHECKING:
    from app.core.topology import LeaderReplica, Topology


@dataclass(slots=True)
class _Member:
    data: bytes
    records: int
    future: asyncio.Future[AppendInfo]


@dataclass(slots=True)
class _Group:
    topology: Topology
    replica: LeaderReplica
    epoch: int
    acks_all: bool
    members: list[_Member] = field(default_factory=list)
    size: int = 0


# A group takes no more requests once it holds this many bytes: the next request opens
# a new group, so one write never grows past about this much (or one request's body).
MAX_GROUP_BYTES = 1024 * 1024

_Key = tuple[int, int, bool, bool]


class GroupCommit:
    """The queued groups of one app, by (log, leader epoch, acks=all, off the loop).
    Loop-only state: every method but :func:`_write` runs on the event loop thread."""

    def __init__(self) -> None:
        self._queues: dict[_Key, deque[_Group]] = {}
        # The running drains (the loop keeps only weak references to tasks).
        self._drains: set[asyncio.Task[None]] = set()

    async def append_partitions(
        self,
        topology: Topology,
        work: Sequence[tuple[LeaderReplica, int, bytes, int]],
    ) -> list[AppendInfo]:
        """A lone broker's small request to several partitions, appended on the loop
        (acks 0 or 1): each ``(replica, epoch, batch, records)`` joins its partition's
        group of this loop turn; the partitions' infos, in ``work``'s order.

        Only for a topology whose leadership never moves (``Topology.leadership_moves``
        false, a lone broker), so the one all-or-none rule of a multi-partition append (a failed
        leadership or min-ISR check writes nothing anywhere) cannot be broken by writing
        the partitions in separate appends. A partition the log refuses raises that
        error (the first in ``work``'s order) after every group of the turn was written:
        the request's other partitions are written, as a sequential append leaves the
        partitions before a refused one written. The request is answered only once every
        one of its groups was written (or refused).
        """
        futures = [
            self.append(topology, replica, epoch, data, records, acks_all=False, off_loop=False)
            for replica, epoch, data, records in work
        ]
        infos: list[AppendInfo] = []
        error: Exception | None = None
        try:
            for future in futures:
                try:
                    infos.append(await future)
                except Exception as exc:
                    if error is None:
                        error = exc
        finally:
            # Cancelled meanwhile (the client left): the rest is written anyway, and
            # nobody reads the outcomes: _settle leaves a cancelled future alone, and an
            # error already set is marked as seen (asyncio would log it as lost).
            for future in futures:
                if not future.cancel() and not future.cancelled():
                    future.exception()
        if error is not None:
            raise error
        return infos

    def append(
        self,
        topology: Topology,
        replica: LeaderReplica,
        epoch: int,
        data: bytes,
        records: int,
        *,
        acks_all: bool,
        off_loop: bool,
    ) -> asyncio.Future[AppendInfo]:
        """Append one request's batch (``records`` records, no producer id) together with
        the other requests for the same partition that join its group: the future of its
        own offsets, as if it had been appended alone (awaited at once by the caller).
        It joins the partition's open group, opening one and scheduling its write when
        none is open. ``off_loop``: the group is written on a worker thread, and requests
        arriving meanwhile form the next group."""
        # The log, not the replica object: a lone broker hands out a new LocalReplica
        # per request. A queued group holds the log, so its id cannot be reused meanwhile.
        key = (id(replica.log), epoch, acks_all, off_loop)
        loop = asyncio.get_running_loop()
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            if off_loop:
                task = loop.create_task(self._drain(key, queue))
                self._drains.add(task)
                task.add_done_callback(self._drains.discard)
            else:
                loop.call_soon(self._flush, key, queue)
        if not queue or queue[-1].size + len(data) > MAX_GROUP_BYTES:
            queue.append(_Group(topology, replica, epoch, acks_all))
        group = queue[-1]
        future: asyncio.Future[AppendInfo] = loop.create_future()
        group.members.append(_Member(data, records, future))
        group.size += len(data)
        return future

    def _flush(self, key: _Key, queue: deque[_Group]) -> None:
        """On the loop, one turn after the first request: every group of the turn."""
        del self._queues[key]
        for group in queue:
            _settle(group, _write(group))

    async def _drain(self, key: _Key, queue: deque[_Group]) -> None:
        """Off the loop: one group at a time, each joined by the requests that arrived
        while the one before was being written (one thread hop, one write, one fsync)."""
        try:
            while queue:
                group = queue.popleft()
                try:
                    outcomes = await asyncio.to_thread(_write, group)
                except BaseException as exc:
                    _fail(group, exc)
                    raise
                _settle(group, outcomes)
        except BaseException as exc:
            for group in queue:
                _fail(group, exc)
            raise
        finally:
            # No await since the queue was found empty: nobody joined it meanwhile.
            del self._queues[key]


def _write(group: _Group) -> list[AppendInfo | Exception]:
    """Append the group: one append of every batch, or, when the log refuses that (it
    wrote nothing then), one append per request so that each is judged on its own."""
    members = group.members
    append = group.topology.append_to_leaders
    if len(members) > 1:
        data = b"".join(m.data for m in members)
        try:
            GROUP_COMMIT_APPENDS.inc()
            (info,) = append([(group.replica, group.epoch, data)], acks_all=group.acks_all)
        except LogbusError:
            pass  # judged one by one below
        except Exception as exc:
            return [exc] * len(members)
        else:
            outcomes: list[AppendInfo | Exception] = []
            first = info.first_offset
            # The group's info, sliced per member (the constructor: dataclasses.replace
            # cost more than the append it saved). Batches without a producer id: never
            # duplicates.
            max_ts, append_time, log_start = (
                info.max_timestamp,
                info.log_append_time,
                info.log_start_offset,
            )
            for member in members:
                last = first + member.records - 1
                outcomes.append(
                    AppendInfo(first, last, member.records, max_ts, append_time, log_start)
                )
                first = last + 1
            return outcomes
    alone: list[AppendInfo | Exception] = []
    for member in members:
        try:
            GROUP_COMMIT_APPENDS.inc()
            (info,) = append([(group.replica, group.epoch, member.data)], acks_all=group.acks_all)
            alone.append(info)
        except Exception as exc:
            alone.append(exc)
    return alone


def _settle(group: _Group, outcomes: list[AppendInfo | Exception]) -> None:
    GROUP_COMMIT_REQUESTS.inc(len(group.members))
    for member, outcome in zip(group.members, outcomes, strict=True):
        # A request whose client went away was cancelled; its records are written anyway.
        if member.future.done():
            continue
        if isinstance(outcome, Exception):
            member.future.set_exception(outcome)
        else:
            member.future.set_result(outcome)


def _fail(group: _Group, exc: BaseException) -> None:
    for member in group.members:
        if not member.future.done():
            member.future.set_exception(exc)
