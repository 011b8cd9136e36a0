"""Sender: drains the accumulator into ``POST .../partitions/{p}/batches`` requests.

Owns everything between a sealed batch and its answer:

* the send loop (``run``): asks the accumulator for what may go out, starts one
  task per request, sleeps until woken (a new or sealed batch, an answer) or
  until the next linger deadline;
* requests in flight per partition (``in_flight``, at most
  ``max_in_flight_per_partition``) and partitions being retried (``retrying``,
  which get nothing new until the retry is over);
* retries: exponential backoff with jitter, up to ``retries`` attempts and
  ``delivery_timeout_ms`` from the first batch's creation; a 307/421 leader hint
  is tried once at once; a dead leader in a cluster is looked up again after at
  most :data:`CONNECTION_RETRY_MAX_S`;
* whether a failed request may have been appended (then its sequence numbers
  are never given back, see :meth:`RecordAccumulator.rewind`);
* metadata: partition counts (``partition_counts``, shared with the facade,
  which reads it without a lock: a dict read is atomic) and leaders, refreshed
  on demand and in the background;
* InitProducerId (idempotence) before the first batch goes out; for a transactional
  producer, AddPartitionsToTxn before a partition's first batch of a transaction
  (:class:`~app.client.producer.txn.TransactionManager`, which also hears of every
  batch given up on: the transaction must then be aborted).

Concurrency: everything runs on one event loop, the facade's: a background
thread's loop for :class:`~app.client.producer.Producer`, the caller's for
:class:`~app.client.producer.AsyncProducer`. ``wake`` and ``stop`` must be
called on that loop (the blocking producer hops with ``call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

import httpx
import orjson

from app.client import _cluster, _http
from app.client._cluster import Cluster, error_code
from app.client.errors import (
    DeliveryTimeout,
    UnsupportedByBroker,
    error_from_body,
    is_connection_error,
    is_retriable,
)
from app.client.producer.accumulator import RecordAccumulator
from app.client.producer.batch import ProducerBatch
from app.client.producer.config import ProducerConfig
from app.client.producer.txn import TransactionManager, as_fenced
from app.client.types import TopicPartition
from app.common.aio import wait_event
from app.common.errors import (
    AuthorizationFailed,
    InvalidRequest,
    LogbusError,
    UnknownTopicOrPartition,
)

log = logging.getLogger(__name__)

# A dead leader in a cluster: how long to wait at most before asking the metadata again
# (an election takes about a ZooKeeper session timeout; a long backoff would overshoot it).
CONNECTION_RETRY_MAX_S = 0.2


async def init_idempotence(
    client: httpx.AsyncClient, acc: RecordAccumulator, cfg: ProducerConfig, cluster: Cluster
) -> None:
    """InitProducerId, which turns on sequence numbers in every batch (see :mod:`app.client.producer`)."""
    if cfg.enable_idempotence is False or cfg.acks == "0" or cfg.transactional_id is not None:
        return  # (a transactional producer's id comes from init_transactions)
    try:
        producer_id, epoch = await _cluster.run_async(
            client, _cluster.any_route(cluster, _http.init_producer_call())
        )
    except LogbusError as exc:
        if getattr(exc, "status", None) not in (404, 405):
            raise
        if cfg.enable_idempotence is None:
            log.info("the broker has no POST /producers: producing without idempotence")
            return
        raise UnsupportedByBroker(
            "this broker has no POST /producers endpoint, so it cannot deduplicate "
            "retries; create the producer with enable_idempotence=False"
        ) from exc
    acc.producer_id, acc.producer_epoch = producer_id, epoch


class Sender:
    """Drains the accumulator into HTTP requests; runs on one event loop."""

    def __init__(
        self,
        acc: RecordAccumulator,
        cfg: ProducerConfig,
        client: httpx.AsyncClient,
        partition_counts: dict[str, int],
        cluster: Cluster,
        txn: TransactionManager | None = None,
    ) -> None:
        self.acc = acc
        self.txn = txn
        self.cfg = cfg
        self.client = client
        self.partition_counts = partition_counts
        self.cluster = cluster
        self._refreshing: asyncio.Task[None] | None = None
        self.in_flight: dict[TopicPartition, int] = {}
        self.retrying: dict[TopicPartition, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._stopping = False
        self._params = {"acks": cfg.acks, "timeout_ms": str(cfg.request_timeout_ms)}
        self._rng = random.Random()

    def wake(self) -> None:
        self._wake.set()

    def _can_send(self, tp: TopicPartition) -> int:
        if tp in self.retrying:
            # Nothing new overtakes a retry: the broker can only recognise a retried
            # batch among the last few it appended for the partition.
            return 0
        return self.cfg.max_in_flight_per_partition - self.in_flight.get(tp, 0)

    async def _start(self) -> None:
        """InitProducerId before the first batch goes out; retriable failures are retried."""
        deadline = time.monotonic() + self.cfg.delivery_timeout_ms / 1000
        attempt = 0
        while True:
            attempt += 1
            try:
                await init_idempotence(self.client, self.acc, self.cfg, self.cluster)
                return
            except LogbusError as exc:
                pause = self._backoff(attempt)
                if not is_retriable(exc) or self._stopping or time.monotonic() + pause > deadline:
                    raise
                log.debug("InitProducerId failed (%s); retrying in %.3f s", exc, pause)
                # stop() sets the wake-up: closing must not wait out the backoff.
                self._wake.clear()
                await wait_event(self._wake, pause)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await self._start()
        except LogbusError as exc:
            # Nothing can be sent as configured: every record fails with the reason. An
            # ACL refusing InitProducerId (ClusterAuthorizationFailed, or
            # TransactionalIdAuthorizationFailed) is Kafka's fatal error: send and flush
            # raise it from now on; other reasons close the producer (ProducerClosed).
            self.acc.closed_reason = f"the producer could not start: {exc}"
            if isinstance(exc, AuthorizationFailed):
                self.acc.fatal = exc
            self.acc.fail_all(exc)
            return
        while True:
            self._wake.clear()
            groups, deadline = self.acc.take(time.monotonic(), self._can_send)
            for tp, batches in groups:
                self.in_flight[tp] = self.in_flight.get(tp, 0) + 1
                task = loop.create_task(self._send(tp, batches))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            if self._stopping and not self.tasks and not self.acc.incomplete:
                if self._refreshing is not None:
                    self._refreshing.cancel()
                return
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if deadline is not None:
                self._timer = loop.call_at(
                    loop.time() + max(0.0, deadline - time.monotonic()), self._wake.set
                )
            await self._wake.wait()

    def stop(self) -> None:
        """Finish what is buffered, then return from run()."""
        self._stopping = True
        self.acc.begin_flush()
        self._wake.set()

    async def refresh(self, topic: str) -> int:
        """The topic's partition count and leaders from ``GET /metadata`` (creating the topic
        if the broker allows it, as Kafka's producer metadata request)."""
        body = await _cluster.run_async(
            self.client, _cluster.refresh_route(self.cluster, [topic], auto_create=True)
        )
        for t in body["topics"]:
            if t["name"] == topic:
                n = len(t["partitions"])
                self.partition_counts[topic] = n
                return n
        raise UnknownTopicOrPartition(topic)

    def _refresh_soon(self) -> None:
        """Refresh every known topic's leaders in the background (once at a time)."""
        if self._refreshing is not None and not self._refreshing.done():
            return
        self._refreshing = asyncio.get_running_loop().create_task(
            self._refresh_quietly(list(self.partition_counts))
        )

    async def _refresh_quietly(self, topics: list[str]) -> None:
        try:
            await _cluster.run_async(self.client, _cluster.refresh_route(self.cluster, topics))
        except LogbusError as exc:
            log.debug("metadata refresh failed: %s", exc)
            return
        for topic in topics:
            n = self.cluster.partition_count(topic)
            if n is not None and n > self.partition_counts.get(topic, 0):
                self.partition_counts[topic] = n

    async def _still_there(self, tp: TopicPartition) -> bool:
        """After NOT_LEADER / UNKNOWN_TOPIC_OR_PARTITION: look again; retry only if the
        partition still exists (it may have moved, or the topic been recreated)."""
        try:
            return tp.partition < await self.refresh(tp.topic)
        except LogbusError as refresh_error:
            return is_retriable(refresh_error)

    def _backoff(self, attempt: int) -> float:
        base = float(
            min(
                self.cfg.retry_backoff_max_ms, self.cfg.retry_backoff_ms * 2 ** min(attempt - 1, 30)
            )
        )
        # +-20% jitter, as Kafka's, so producers hit by one outage do not retry in step.
        return base * self._rng.uniform(0.8, 1.2) / 1000

    async def _send(self, tp: TopicPartition, batches: list[ProducerBatch]) -> None:
        try:
            if self.txn is not None and tp not in self.txn.added:
                try:
                    await self.txn.ensure_added(self.client, tp)
                except LogbusError as exc:
                    self.acc.rewind(batches)  # never sent
                    self._fail(batches, exc)
                    return
            await self._deliver(tp, batches)
        except Exception as exc:  # a bug here must not leave futures hanging forever
            log.exception("sending to %s failed unexpectedly", tp)
            self._fail(batches, exc)
        finally:
            for batch in batches:
                self.acc.release(batch)
            left = self.in_flight[tp] - 1
            if left:
                self.in_flight[tp] = left
            else:
                del self.in_flight[tp]
            self._wake.set()

    async def _deliver(self, tp: TopicPartition, batches: list[ProducerBatch]) -> None:
        """Send until answered or given up; while retrying, hold ``retrying[tp]``."""
        held: list[bool] = []
        try:
            await self._attempts(tp, batches, held)
        finally:
            if held:
                left = self.retrying[tp] - 1
                if left:
                    self.retrying[tp] = left
                else:
                    del self.retrying[tp]

    async def _attempts(
        self, tp: TopicPartition, batches: list[ProducerBatch], held: list[bool]
    ) -> None:
        body = ProducerBatch.build_all(batches)
        path = f"{_http.topic_path(tp.topic)}/partitions/{tp.partition}/batches"
        headers = {"content-type": "application/octet-stream"}
        deadline = batches[0].created + self.cfg.delivery_timeout_ms / 1000
        # Went out while an earlier request of the partition was still out (idempotence only).
        sent_behind_others = self.in_flight.get(tp, 0) > 1
        attempt = 0
        # An earlier attempt may have been appended (its answer lost, or a 504): then
        # the sequence numbers must never be given back.
        maybe_appended = False
        # A leader named by a 307/421 answer, tried at once (once in a row: two brokers
        # naming each other are waited out with the backoff).
        redirect: str | None = None
        moved = short_backoff = False
        while True:
            attempt += 1
            if self.cluster.needs_refresh():
                self._refresh_soon()  # metadata_max_age_ms
            url = redirect or self.cluster.leader_url(tp)
            redirected, redirect = redirect is not None, None
            error: BaseException
            try:
                response = await self.client.post(
                    url + path, content=body, params=self._params, headers=headers
                )
            except httpx.HTTPError as exc:
                error = _http.transport_error(exc, url)
                maybe_appended = maybe_appended or not getattr(error, "connect_failed", False)
            else:
                if response.status_code < 300:
                    self._complete(batches, response)
                    return
                error = error_from_body(response.status_code, response.content)
            retriable = is_retriable(error)
            code = error_code(error)
            if code in ("REQUEST_TIMED_OUT", "NOT_ENOUGH_REPLICAS_AFTER_APPEND"):
                maybe_appended = True  # on the leader, not yet on enough replicas
            if code == "OUT_OF_ORDER_SEQUENCE_NUMBER" and sent_behind_others:
                # With several requests of a partition out at once (idempotence only),
                # a later batch can reach the broker first; once the earlier one is in
                # it fits.
                retriable = True
            elif code == "NOT_LEADER_OR_FOLLOWER":
                # Stale metadata, never a redirect to follow blindly: the body's leader
                # serves one retry at once, and the metadata is looked up again.
                hint = self.cluster.leader_hint(tp, error)
                if hint is not None and hint != url and not redirected:
                    redirect = hint
                    self._refresh_soon()
                else:
                    retriable = await self._still_there(tp)
            elif code == "LEADER_NOT_AVAILABLE" or isinstance(error, UnknownTopicOrPartition):
                retriable = await self._still_there(tp)
            elif is_connection_error(error):
                self.cluster.failed(url)
                if self.cluster.is_multi():
                    # The leader may be down: ask the other brokers who leads now.
                    await self._refresh_quietly([tp.topic])
                    if self.cluster.leader_url(tp) != url:
                        moved = True  # a new leader is known: go there now
                    else:
                        # Still the dead one until the cluster elects (a session timeout):
                        # look again soon rather than after a long backoff.
                        short_backoff = True
            for batch in batches:
                batch.attempts = attempt
            if not retriable or attempt > self.cfg.retries:
                if getattr(error, "status", 500) < 500 and not maybe_appended:
                    self.acc.rewind(batches)
                self._fail(batches, error)
                return
            pause = 0.0 if redirect is not None or moved else self._backoff(attempt)
            if short_backoff:
                pause = min(pause, CONNECTION_RETRY_MAX_S)
            moved = short_backoff = False
            if time.monotonic() + pause > deadline:
                timeout = DeliveryTimeout(
                    f"{sum(b.count for b in batches)} records to {tp.topic}-{tp.partition} "
                    f"not acknowledged within delivery_timeout_ms={self.cfg.delivery_timeout_ms} "
                    f"after {attempt} attempts; last error: {error}"
                )
                timeout.__cause__ = error
                self._fail(batches, timeout)
                return
            log.debug("retrying %s in %.3f s after %s", tp, pause, error)
            if not held:
                held.append(True)
                self.retrying[tp] = self.retrying.get(tp, 0) + 1
            if pause:
                await asyncio.sleep(pause)

    def _complete(self, batches: list[ProducerBatch], response: httpx.Response) -> None:
        if response.status_code == 204 or not response.content:  # acks=0
            for batch in batches:
                batch.complete(-1, -1, None)
            return
        answer = orjson.loads(response.content)
        appended = answer["batches"]
        append_time = int(answer.get("log_append_time", -1))
        if len(appended) != len(batches):
            error = InvalidRequest(
                f"the broker acknowledged {len(appended)} batches, {len(batches)} were sent"
            )
            self._fail(batches, error)
            return
        for batch, info in zip(batches, appended, strict=True):
            batch.complete(int(info["base_offset"]), append_time, None)

    def _fail(self, batches: list[ProducerBatch], error: BaseException) -> None:
        if self.txn is not None:
            self.txn.batch_failed(error)
            error = as_fenced(error)
        for batch in batches:
            batch.complete(-1, -1, error)
