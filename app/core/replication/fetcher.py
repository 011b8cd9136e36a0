"""Followers pull from their leaders through the ordinary binary fetch API.

One asyncio task per followed partition (cancelled when the partition's
leader or epoch changes, and started again for the new one):

1. Truncate (KIP-101): ask the leader where this replica's latest leader epoch
   ends on the leader (``GET .../epochs/{epoch}/end-offset``) and cut the local
   log there, so a replica that took writes the new leader never saw drops
   them instead of diverging. With nothing to compare (no epochs) the log is
   cut to the high watermark.
2. Fetch from the log end offset with ``replica_id`` and ``leader_epoch``
   (``GET .../records``, ``Accept: application/octet-stream``), append the
   batches verbatim, take the leader's high watermark. The fetch offset tells
   the leader how far this replica is; that drives the leader's ISR and high
   watermark. The leader long-polls (``replica.fetch.wait.max.ms``), so an idle
   partition costs two requests a second and a new batch is pulled at once.

Each task keeps one keep-alive connection to its leader and reads an answer
straight into one buffer of its Content-Length (:mod:`app.wire`, the
SDK consumer's fetch path): httpx's 64 KiB reads and joins were about half of
a follower broker's CPU under load. Runs on the broker's event loop; appends
larger than a few pages go to a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import orjson

from app.common.errors import InvalidRecord
from app.core.replication.partition import FOLLOWER, Partition
from app.wire import AsyncConnection, Endpoint, async_connection

if TYPE_CHECKING:
    from app.core.replication.manager import ReplicaManager

_log = logging.getLogger(__name__)

OCTET_STREAM = b"application/octet-stream"
INLINE_APPEND_BYTES = 64 * 1024
MAX_BACKOFF_S = 1.0


class _Retry(Exception):
    """The leader refused for now (epoch or leadership moving): wait for the new state."""


class _Diverged(Exception):
    """This replica's log does not line up with the leader's: truncate again."""


class ReplicaFetcher:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas
        settings = replicas.settings
        self.broker_id = settings.broker_id
        self.wait_ms = settings.replica_fetch_wait_max_ms
        self.max_bytes = settings.replica_fetch_max_bytes
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
                if conn is None or conn_url != url:
                    if conn is not None:
                        conn.close()
                    conn_url = url
                    conn = async_connection(
                        Endpoint.parse(url), self.timeout_s, self.max_bytes + (1 << 20)
                    )
                base = f"/topics/{part.topic}/partitions/{part.partition}"
                try:
                    if not truncated:
                        await self._truncate(part, conn, base)
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

    async def _truncate(self, part: Partition, conn: AsyncConnection, base: str) -> None:
        log = part.log
        latest = log.leader_epoch_cache.latest_epoch
        if latest is None:
            target = log.high_watermark
        else:
            response = await conn.fetch(
                f"{base}/epochs/{latest}/end-offset",
                b"application/json",
            )
            if response.status != 200:
                raise _Retry()
            answer = orjson.loads(response.body)
            leader_epoch, end_offset = int(answer["leader_epoch"]), int(answer["end_offset"])
            if leader_epoch < 0 or end_offset < 0:
                target = log.high_watermark
            else:
                target = end_offset
                if leader_epoch < latest:
                    # The leader never had our latest epoch: cut where its last common one ends.
                    _, own_end = log.leader_epoch_cache.end_offset_for(leader_epoch)
                    if own_end >= 0:
                        target = min(target, own_end)
        if target < log.log_end_offset:
            _log.info(
                "%s-%d: truncating %d -> %d to match the leader",
                part.topic,
                part.partition,
                log.log_end_offset,
                target,
            )
            self.truncations += 1
            await asyncio.to_thread(log.truncate_to, target)
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
            }
        )
        response = await conn.fetch(f"{base}/records?{query}", OCTET_STREAM)
        self.fetches += 1
        if response.status == 416:
            body = orjson.loads(response.body)
            start = int(body.get("log_start_offset", 0))
            if offset < start:
                # Retention on the leader removed what we would fetch next: start over there.
                await asyncio.to_thread(log.truncate_fully_and_start_at, start)
                self.replicas.truncated(log)
                return
            raise _Diverged()
        if response.status != 200:
            raise _Retry()
        if not self._current(part, leader, epoch):
            return  # the leader changed while we waited: these bytes are not ours to keep
        data = response.body
        if data:
            if log.log_end_offset != offset:
                raise _Diverged()
            try:
                if len(data) > INLINE_APPEND_BYTES:
                    await asyncio.to_thread(log.append_as_follower, data)
                else:
                    log.append_as_follower(data)
            except InvalidRecord:
                raise _Diverged() from None
        hw = int(response.headers.get("logbus-high-watermark", "0"))
        log.high_watermark = min(hw, log.log_end_offset)
