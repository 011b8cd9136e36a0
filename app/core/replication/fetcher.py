"""Followers pull from their leaders through the ordinary binary fetch API.

One asyncio task per followed partition (cancelled when the partition's
leader or epoch changes, and started again for the new one):

1. Truncate (KIP-101, KIP-279): ask the leader where this replica's latest
   leader epoch ends on the leader (``GET .../epochs/{epoch}/end-offset``, Kafka's
   OffsetsForLeaderEpoch: the leader's largest epoch at or below it, and where
   that ends) and cut the local log there, so a replica that took writes the new
   leader never saw drops them instead of diverging:

   - the leader answers our epoch: cut at the smaller of its end there and ours
     (ours is the log end when it is our latest epoch);
   - it answers an older epoch we also had: it never had the epochs between, so
     cut at the smaller of its end and ours of that epoch;
   - it answers an epoch we never had: everything from the end of our last epoch
     below it is in epochs the leader never had; cut there and ask again about
     that epoch (the epoch asked only goes down, so this ends);
   - it knows no epoch at or below ours, or we know none: cut to the high
     watermark (Kafka's fallback).

   Every cut also forgets our epochs that start at or after it, even one that
   began at the log end and holds no batch yet.
2. Fetch from the log end offset with ``replica_id`` and ``leader_epoch``
   (``GET .../records``, ``Accept: application/octet-stream``, and this broker's
   inter-broker credential, :mod:`.auth`), read the answer as every fetcher does
   (:func:`app.common.fetch_answer.interpret`), append the
   batches verbatim, take the leader's high watermark and follow its log start
   offset (DeleteRecords: :meth:`ReplicaFetcher._follow_start`). The fetch offset
   tells the leader how far this replica is; that drives the leader's ISR and high
   watermark; the fetch's ``log_start_offset`` its low watermark. The leader long-polls (``replica.fetch.wait.max.ms``), so an idle
   partition costs two requests a second and a new batch is pulled at once.

Each task keeps one keep-alive connection to its leader and reads an answer
straight into one buffer of its Content-Length (:mod:`app.wire`, the
SDK consumer's fetch path): httpx's 64 KiB reads and joins were about half of
a follower broker's CPU under load. Runs on the broker's event loop; appends
larger than a few pages go to a worker thread. Appends and cuts happen under the
partition's leader/ISR lock, and only while it still follows the leader and
epoch this task serves (:meth:`Partition.following`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlencode

import orjson

from app.common.batch import read_header
from app.common.errors import InvalidRecord
from app.common.fetch_answer import Action, Refused, interpret
from app.common.tls import ClientTls
from app.core.replication import faults
from app.core.replication.partition import FOLLOWER, Partition
from app.wire import AsyncConnection, Endpoint, async_connection

if TYPE_CHECKING:
    from app.core.log.log import Log
    from app.core.replication.auth import ReplicaAuth
    from app.core.replication.config import ReplicaConfig

_log = logging.getLogger(__name__)

OCTET_STREAM = b"application/octet-stream"
INLINE_APPEND_BYTES = 64 * 1024
MAX_BACKOFF_S = 1.0


class _Retry(Exception):
    """The leader refused for now (epoch or leadership moving): wait for the new state."""


class _Diverged(Exception):
    """This replica's log does not line up with the leader's: truncate again."""


def inter_broker_tls(settings: ReplicaConfig) -> ClientTls | None:
    """A follower's TLS options toward its leaders (None: the process default).

    It verifies the leader against ``inter_broker_ca_file`` (else ``ssl_ca_file``)
    and presents its own listener certificate, so a leader that requires client
    certificates (``ssl_client_auth=required``) accepts its followers.
    """
    ca = settings.inter_broker_ca_file or settings.ssl_ca_file
    if ca is None and settings.ssl_certfile is None:
        return None
    return ClientTls(ca, settings.ssl_certfile, settings.ssl_keyfile)


class FetcherOwner(Protocol):
    """What the fetcher asks of the broker's replicas (the
    :class:`~app.core.replication.manager.ReplicaManager` that owns it; named as a
    protocol so the fetcher does not import the manager that imports it)."""

    @property
    def settings(self) -> ReplicaConfig: ...

    @property
    def auth(self) -> ReplicaAuth | None: ...

    def broker_url(self, broker: int) -> str | None: ...

    def truncated(self, log: Log) -> None: ...

    def checkpoint_starts(self) -> None:
        """Write every log's start offset down (blocking: a worker thread)."""
        ...

    def start_moved(self, log: Log) -> None: ...


def _start_at_first_batch(log: Log, data: bytes | bytearray | memoryview) -> None:
    """An empty log whose start falls inside the first batch fetched (the follower started
    over at its leader's start, which DeleteRecords put in the middle of a batch: the
    leader answers the whole batch holding it) starts again at that batch's base offset,
    so the batch can be appended whole, as Kafka's follower does
    (``Partition.appendRecordsToFollowerOrFutureReplica`` on UnexpectedAppendOffset).
    The start moves back up to the leader's right after (:meth:`ReplicaFetcher._follow_start`,
    in the same fetch); the checkpoint still holds it, so a crash in between loses
    nothing either. Without this the append failed, the fetcher took it for a
    divergence and fetched the same batch again, forever: the replica never caught up.
    Under the log's replica lock (the caller's ``following``)."""
    end = log.log_end_offset
    if end != log.log_start_offset:
        return
    first = read_header(data, 0)
    if first.base_offset < end <= first.last_offset:
        _log.info(
            "%s-%d: log start %d is inside the leader's batch %d-%d: starting at %d",
            log.topic,
            log.partition,
            end,
            first.base_offset,
            first.last_offset,
            first.base_offset,
        )
        log.truncate_fully_and_start_at(first.base_offset)


class ReplicaFetcher:
    def __init__(self, replicas: FetcherOwner) -> None:
        self.replicas = replicas
        settings = replicas.settings
        self.broker_id = settings.broker_id
        self.wait_ms = settings.replica_fetch_wait_max_ms
        self.max_bytes = settings.replica_fetch_max_bytes
        self.require_tls = bool(settings.inter_broker_tls)
        self.tls_options = inter_broker_tls(settings)
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        self.timeout_s = self.wait_ms / 1000 + 10.0
        self.fetches = 0
        self.truncations = 0

    def follow(self, part: Partition) -> None:
        key = (part.topic, part.partition)
        self.unfollow(key)
        task = asyncio.create_task(
            self._run(part, part.leader, part.leader_epoch),
            name=f"logbus-fetch-{part.topic}-{part.partition}",
        )
        self._tasks[key] = task
        task.add_done_callback(
            lambda t: self._tasks.pop(key, None) if self._tasks.get(key) is t else None
        )

    def unfollow(self, key: tuple[str, int]) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _credentials(self) -> bytes:
        """This broker's inter-broker credential header, on every request to a leader."""
        auth = self.replicas.auth
        return b"" if auth is None else auth.header(self.broker_id)

    def _current(self, part: Partition, leader: int, epoch: int) -> bool:
        return part.role == FOLLOWER and part.leader == leader and part.leader_epoch == epoch

    async def _run(self, part: Partition, leader: int, epoch: int) -> None:
        truncated = False
        backoff = 0.05
        conn: AsyncConnection | None = None
        conn_url = ""
        try:
            while self._current(part, leader, epoch):
                url = self.replicas.broker_url(leader)
                if url is None:
                    await asyncio.sleep(0.2)  # the leader's registration has not reached us
                    continue
                if self.require_tls and not url.startswith("https://"):
                    # inter_broker_tls: never send a follower's credentials or read a
                    # leader's records in the clear; the leader must advertise https.
                    _log.warning("not fetching %s from %s: inter_broker_tls needs https", part, url)
                    await asyncio.sleep(MAX_BACKOFF_S)
                    continue
                if conn is None or conn_url != url:
                    if conn is not None:
                        conn.close()
                    conn_url = url
                    conn = async_connection(
                        replace(
                            Endpoint.parse(url),
                            extra_headers=self._credentials(),
                            tls_options=self.tls_options,
                        ),
                        self.timeout_s,
                        self.max_bytes + (1 << 20),
                    )
                base = f"/topics/{part.topic}/partitions/{part.partition}"
                await faults.hold_fetches(self.broker_id)
                try:
                    if not truncated:
                        await self._truncate(part, conn, base, leader, epoch)
                        truncated = True
                    await self._fetch(part, conn, base, leader, epoch)
                    backoff = 0.05
                except _Diverged:
                    truncated = False
                except _Retry:
                    await asyncio.sleep(0.1)
                except (OSError, ValueError, TimeoutError) as exc:
                    _log.debug("fetch of %s from broker %d failed: %s", part, leader, exc)
                    await asyncio.sleep(backoff)
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    _log.exception("replica fetcher of %s failed; retrying", part)
                    await asyncio.sleep(MAX_BACKOFF_S)
        finally:
            if conn is not None:
                conn.close()

    async def _truncate(
        self, part: Partition, conn: AsyncConnection, base: str, leader: int, epoch: int
    ) -> None:
        log = part.log
        cache = log.leader_epoch_cache
        asked = cache.latest_epoch
        while True:
            if asked is None:
                target = log.high_watermark
                break
            leader_epoch, leader_end = await self._epoch_end(conn, base, asked, epoch)
            if leader_epoch < 0 or leader_end < 0:
                target = log.high_watermark
                break
            own_epoch, own_end = cache.end_offset_for(leader_epoch)
            if own_end < 0:
                target = leader_end
                break
            if own_epoch == leader_epoch:
                target = min(own_end, leader_end)
                break
            # The leader answered an epoch we never had: ours below it ended at own_end,
            # and whatever follows was written in epochs the leader never had.
            await self._cut(part, own_end, leader, epoch)
            asked = own_epoch
        await self._cut(part, target, leader, epoch)

    async def _epoch_end(
        self, conn: AsyncConnection, base: str, asked: int, epoch: int
    ) -> tuple[int, int]:
        """The leader's OffsetsForLeaderEpoch answer for ``asked``: (its largest epoch at or
        below it, where that ends), or (-1, -1)."""
        query = urlencode({"current_leader_epoch": epoch})
        response = await conn.fetch(
            f"{base}/epochs/{asked}/end-offset?{query}", b"application/json"
        )
        if response.status != 200:
            raise _Retry()
        answer = orjson.loads(response.body)
        return int(answer["leader_epoch"]), int(answer["end_offset"])

    async def _cut(self, part: Partition, offset: int, leader: int, epoch: int) -> None:
        log = part.log
        if offset < log.log_end_offset:
            _log.info(
                "%s-%d: truncating %d -> %d to match the leader",
                part.topic,
                part.partition,
                log.log_end_offset,
                offset,
            )
            self.truncations += 1

        def cut() -> None:
            with part.following(leader, epoch) as current:
                if not current:
                    raise _Retry()
                log.truncate_to(offset)

        await asyncio.to_thread(cut)
        self.replicas.truncated(log)

    async def _fetch(
        self, part: Partition, conn: AsyncConnection, base: str, leader: int, epoch: int
    ) -> None:
        log = part.log
        offset = log.log_end_offset
        query = urlencode(
            {
                "offset": offset,
                "replica_id": self.broker_id,
                "leader_epoch": epoch,
                "max_wait_ms": self.wait_ms,
                "min_bytes": 1,
                "max_bytes": self.max_bytes,
                # Kafka's FetchRequest log_start_offset: the leader's low watermark.
                "log_start_offset": log.log_start_offset,
            }
        )
        response = await conn.fetch(f"{base}/records?{query}", OCTET_STREAM)
        self.fetches += 1
        # The bytes are appended verbatim and checked by the append (a damaged batch is a
        # divergence to truncate away), so the CRCs are not checked twice.
        outcome = interpret(response, part.topic, part.partition, check_crcs=False)
        if isinstance(outcome, Refused):
            if outcome.action is not Action.OUT_OF_RANGE:
                raise _Retry()  # leadership or the epoch moving, or the leader not ready
            start = int(getattr(outcome.error, "log_start_offset", 0))
            if offset < start:
                # Retention or DeleteRecords on the leader removed what we would fetch next:
                # start over there. Written down before the next fetch tells the leader this
                # start (the low watermark a DeleteRecords answers), as _follow_start does.
                def restart() -> None:
                    with part.following(leader, epoch) as current:
                        if not current:
                            return
                        log.truncate_fully_and_start_at(start)
                    self.replicas.checkpoint_starts()

                await asyncio.to_thread(restart)
                self.replicas.truncated(log)
                return
            raise _Diverged()
        data = outcome.body
        if data:

            def append() -> None:
                with part.following(leader, epoch) as current:
                    # The leader or epoch changed while we waited: not ours to keep.
                    if current:
                        if log.log_end_offset != offset:
                            raise _Diverged()
                        _start_at_first_batch(log, data)
                        log.append_as_follower(data)

            try:
                if len(data) > INLINE_APPEND_BYTES:
                    await asyncio.to_thread(append)
                else:
                    append()
            except InvalidRecord:
                raise _Diverged() from None
        if self._current(part, leader, epoch):
            hw = outcome.high_watermark or 0
            log.high_watermark = min(hw, log.log_end_offset)
            leader_start = outcome.log_start_offset
            if leader_start is not None and leader_start > log.log_start_offset:
                await self._follow_start(part, leader_start, leader, epoch)

    async def _follow_start(self, part: Partition, start: int, leader: int, epoch: int) -> None:
        """Move this replica's log start offset up to the leader's (DeleteRecords there, or
        its retention), as Kafka's follower does (``maybeIncrementLogStartOffset``), but
        never past this replica's own high watermark: records above it may not be the
        leader's yet, and the leader's start is at or below its high watermark anyway.
        Written down (the start offset checkpoint) before the next fetch tells the leader,
        so the low watermark a DeleteRecords answers survives a crash of this broker."""
        log = part.log

        def move() -> bool:
            with part.following(leader, epoch) as current:
                target = min(start, log.high_watermark)
                if not current or target <= log.log_start_offset:
                    return False
                log.delete_records(target)
            self.replicas.checkpoint_starts()
            return True

        if await asyncio.to_thread(move):
            self.replicas.start_moved(log)
