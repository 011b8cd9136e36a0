"""Group commit: small produce requests to one partition, arriving together, appended as one write.

Many clients sending one record per request (web backends, webhooks, functions)
would otherwise cost the log one ``Log.append`` each: a lock, a pwrite, index
and producer-state bookkeeping and a wake-up of the partition's long polls. Here
the requests that reach the same partition in the same turn of the event loop
are joined: their RecordBatches are concatenated (each request's batch stays a
batch of its own, with its own base offset and CRC) and appended with one
``Topology.append_to_leaders`` call, which validates them all, assigns
consecutive offsets and writes them with one ``pwrite``.

How a request joins (all on the event loop, so no lock is needed):

1. The first request for a (partition's log, leader epoch, acks=all?) key opens a group and
   schedules its flush with ``loop.call_soon``: the flush runs after every task that
   is ready in this loop turn has run, so the requests whose bodies arrived in the
   same read of the sockets join it. A lone request waits one loop turn, no timer.
2. Each request adds its batch and awaits its own future.
3. The flush appends the group's batches in arrival order. Each request is answered
   with its own slice of the result: its batch's first and last offsets (the
   group's first offset plus the records of the batches before it), so offsets are
   per request and in the order the requests joined.

What is never joined, and why:

- Batches of idempotent or transactional producers (binary produce): a partition's
  producer state checks and deduplicates by batch, and a group is answered as one
  append, so a retry or a sequence error of one producer would decide the answer
  of another's request. Only broker-built JSON batches (no producer id) join.
- Requests writing to several partitions: their appends are all or none across
  partitions (:meth:`Topology.append_to_leaders`), which a per-partition group
  cannot keep; they are appended alone, as before.
- acks=all with other acks: a cluster checks min.insync.replicas under the
  partition's lock for acks=all appends only, so the two never share an append.
  After the write each request waits for its own acks (acks=all: until the in-sync
  replicas hold *its* last offset); acks=0 answers as soon as its batch is written.
- Work that belongs off the loop (a body over ``inline_append_max_bytes`` or a
  partition that fsyncs per append): the caller appends it alone on a worker thread.

Failures: the log checks every batch before writing any, so a refused group wrote
nothing. A refused group of several requests is appended again one request at a
time, so a request that the log refuses (say a keyless record to a compacted
topic) fails alone and the others are written. Any other error (a disk error)
fails every request of the group, none of which has been answered.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from app.api.metrics import GROUP_COMMIT_APPENDS, GROUP_COMMIT_REQUESTS
from app.common.errors import LogbusError

if TYPE_CHECKING:
    from app.core.log.results import AppendInfo
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
# a new group, so one loop turn never writes more than about this much inline.
MAX_GROUP_BYTES = 1024 * 1024


class GroupCommit:
    """The open groups of one app, by (log, leader epoch, acks=all). Loop-only state:
    every method runs on the event loop thread."""

    def __init__(self) -> None:
        self._open: dict[tuple[int, int, bool], _Group] = {}

    async def append(
        self,
        topology: Topology,
        replica: LeaderReplica,
        epoch: int,
        data: bytes,
        records: int,
        *,
        acks_all: bool,
    ) -> AppendInfo:
        """Append one request's batch (``records`` records, no producer id) with the
        other requests for the same partition that arrive in this loop turn; its own
        offsets, as if it had been appended alone."""
        # The log, not the replica object: a lone broker hands out a new LocalReplica
        # per request. The open group holds the log, so its id cannot be reused meanwhile.
        key = (id(replica.log), epoch, acks_all)
        loop = asyncio.get_running_loop()
        group = self._open.get(key)
        if group is not None and group.size + len(data) > MAX_GROUP_BYTES:
            del self._open[key]  # full: its flush still runs, this request opens a new one
            group = None
        if group is None:
            group = self._open[key] = _Group(topology, replica, epoch, acks_all)
            loop.call_soon(self._flush, key, group)
        future: asyncio.Future[AppendInfo] = loop.create_future()
        group.members.append(_Member(data, records, future))
        group.size += len(data)
        return await future

    def _flush(self, key: tuple[int, int, bool], group: _Group) -> None:
        if self._open.get(key) is group:
            del self._open[key]
        members = group.members
        GROUP_COMMIT_REQUESTS.inc(len(members))
        if len(members) == 1:
            self._append_alone(group, members[0])
            return
        data = b"".join(m.data for m in members)
        try:
            GROUP_COMMIT_APPENDS.inc()
            (info,) = group.topology.append_to_leaders(
                [(group.replica, group.epoch, data)], acks_all=group.acks_all
            )
        except LogbusError:
            # Nothing was written: let each request be judged on its own batch.
            for member in members:
                self._append_alone(group, member)
            return
        except BaseException as exc:
            for member in members:
                _fail(member.future, exc)
            if not isinstance(exc, Exception):
                raise
            return
        first = info.first_offset
        for member in members:
            last = first + member.records - 1
            _settle(
                member.future,
                replace(info, first_offset=first, last_offset=last, record_count=member.records),
            )
            first = last + 1

    @staticmethod
    def _append_alone(group: _Group, member: _Member) -> None:
        try:
            GROUP_COMMIT_APPENDS.inc()
            (info,) = group.topology.append_to_leaders(
                [(group.replica, group.epoch, member.data)], acks_all=group.acks_all
            )
        except BaseException as exc:
            _fail(member.future, exc)
            if not isinstance(exc, Exception):
                raise
            return
        _settle(member.future, info)


def _settle(future: asyncio.Future[AppendInfo], info: AppendInfo) -> None:
    # A request whose client went away was cancelled; its records are written anyway.
    if not future.done():
        future.set_result(info)


def _fail(future: asyncio.Future[AppendInfo], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
