"""The exactly-once sink's side of Logbus transactions: what a task and the driver ask the
broker over its stateless transaction API (``app/api/routers/transactions.py``).

A sink task (:class:`TaskTransaction`) writes under the transactional id
``{prefix}-{Spark partition id}-{attempt number}``:

1. ``POST /producers`` with the id (InitProducerId): a new epoch, which fences the
   id's previous holder (the same task of an earlier micro-batch, or of a killed
   driver's run) and aborts its open transaction, so nothing it wrote reaches
   ``read_committed`` readers; a retried attempt does the same to the ids of the
   attempts before it. One id per attempt, rather than per partition, because a failed
   attempt's Python worker may still be starting after Spark launched the retry: with
   a shared id its late InitProducerId would fence the retry (seen in tests);
2. ``GET /groups/{prefix}-{partition}/offsets``: the micro-batch this task last
   committed. The group holds, per topic written, offset = batch id and metadata
   ``{"query": ..., "batch": N}``; when the query's batch N (or a later one) is
   there, the task of a replayed batch writes nothing;
3. its rows as RecordBatch v2 batches with the transactional flag, the producer's id,
   epoch and a sequence per partition (``POST /topics/{t}/partitions/{p}/batches``,
   acks=all), each partition added to the transaction first (AddPartitionsToTxn);
4. ``POST /transactions/{id}/offsets`` (TxnOffsetCommit): the batch marker of step 2,
   inside the transaction, so it counts exactly when the rows do.

The task does not commit: it hands ``(id, producer id, epoch)`` to the driver, which
commits every task's transaction once all tasks succeeded
(:func:`end_transactions`; a commit is idempotent, so a retried one is harmless) or
aborts them. The API keeps no connection state, so the driver can end a transaction
an executor began.

In a cluster each call goes where Kafka sends it, through the SDK's routing
(:mod:`app.client._cluster`, bootstrapped from every ``logbus.url``): InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn to the id's coordinator
(:func:`~app.client._cluster.txn_route`, which follows 421 NOT_COORDINATOR), the
batches to each partition's leader (``leader_route``, which follows
NOT_LEADER_OR_FOLLOWER and re-reads the metadata), OffsetFetch and TxnOffsetCommit to
the marker group's coordinator (``group_route``). Retriable errors are retried for up
to :data:`RETRY_FOR_S` per call; a single broker takes the same path.

One object per task, used from the task's thread only; nothing is shared.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import orjson

from app.client._cluster import (
    Cluster,
    group_route,
    leader_route,
    refresh_route,
    run_sync,
    txn_route,
)
from app.client._http import Call, group_path, sync_client, topic_path, txn_path
from app.client.errors import is_retriable
from app.client.producer._speedups import HeaderList, RecordBuffer, RecordBufferLike
from app.client.producer.txn import TXN_BACKOFF_S
from app.client.types import TopicPartition
from app.common.batch import stamp_producer
from app.common.errors import LogbusError, UnknownTopicOrPartition
from app.spark.lookup import BACKOFF_MAX_S, BACKOFF_S

log = logging.getLogger(__name__)
T = TypeVar("T")

# Kafka's producer default transaction.timeout.ms: a micro-batch's transactions stay
# open from its tasks' start to the driver's commit and must end within it.
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
# How long one call retries errors that may pass (CONCURRENT_TRANSACTIONS while the
# previous transaction completes, a broker restarting, a coordinator loading).
RETRY_FOR_S = 30.0
REQUEST_TIMEOUT_MS = 30_000
# A partition's pending records are sent once this large (and at each Arrow batch's end).
BATCH_BYTES = 512 * 1024


def retrying(what: str, call: Callable[[], T], retry_for_s: float = RETRY_FOR_S) -> T:
    """``call()``, retried with backoff while it fails with a retriable error, for up to
    ``retry_for_s``; then its last error."""
    deadline = time.monotonic() + retry_for_s
    pause = BACKOFF_S
    while True:
        try:
            return call()
        except LogbusError as exc:
            if not is_retriable(exc) or time.monotonic() + pause > deadline:
                raise
            log.info("%s: %s; retrying in %.2f s", what, exc, pause)
        time.sleep(pause)
        pause = min(pause * 2, BACKOFF_MAX_S)


@dataclass(frozen=True)
class Marker:
    """What a sink task's transaction records in its group: the query and the micro-batch."""

    query: str
    batch: int

    def metadata(self) -> str:
        return orjson.dumps({"query": self.query, "batch": self.batch}).decode()

    @classmethod
    def parse(cls, metadata: str) -> Marker | None:
        try:
            found = orjson.loads(metadata)
            return cls(str(found["query"]), int(found["batch"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None  # not the sink's: some other writer's offsets in the group


class TaskTransaction:
    """One Spark task's transaction under ``transactional_id`` (see the module doc)."""

    def __init__(
        self, url: str, prefix: str, partition: int, attempt: int, timeout_ms: int
    ) -> None:
        # Every broker of ``logbus.url`` bootstraps; the calls go where they belong.
        self.cluster = Cluster(url)
        self.prefix = f"{prefix}-{partition}"
        self.attempt = attempt
        self.transactional_id = f"{self.prefix}-{attempt}"
        # The group holding the task's batch markers, shared by its attempts.
        self.group = self.prefix
        self.timeout_ms = timeout_ms
        self.http = _client(self.cluster)
        self.producer_id = -1
        self.epoch = -1
        self.added: set[tuple[str, int]] = set()
        self.sequences: dict[tuple[str, int], int] = {}
        self.buffers: dict[tuple[str, int], RecordBufferLike] = {}
        self.partition_counts: dict[str, int] = {}

    def close(self) -> None:
        self.http.close()

    def _coordinated(self, transactional_id: str, call: Call[T]) -> T:
        """``call`` at ``transactional_id``'s coordinator (InitProducerId, AddPartitionsToTxn,
        AddOffsetsToTxn), NOT_COORDINATOR followed and retriable errors retried."""
        return at_coordinator(self.http, self.cluster, transactional_id, call)

    def _at_group(self, what: str, call: Call[T]) -> T:
        """``call`` at the marker group's coordinator (OffsetFetch, TxnOffsetCommit)."""
        return retrying(
            f"{self.transactional_id}: {what}",
            lambda: run_sync(self.http, group_route(self.cluster, self.group, call, BACKOFF_S)),
        )

    def _producer(self) -> dict[str, int]:
        return {"producer_id": self.producer_id, "producer_epoch": self.epoch}

    def _init(self, transactional_id: str) -> tuple[int, int]:
        return self._coordinated(
            transactional_id,
            Call(
                "POST",
                "/producers",
                lambda b: (int(b["producer_id"]), int(b["producer_epoch"])),
                json={
                    "transactional_id": transactional_id,
                    "transaction_timeout_ms": self.timeout_ms,
                },
            ),
        )

    def init(self) -> None:
        """InitProducerId: this attempt's epoch, fencing (and aborting) the id's previous holder."""
        self.producer_id, self.epoch = self._init(self.transactional_id)

    def fence_earlier_attempts(self) -> None:
        """InitProducerId on the ids of this task's earlier attempts: what a failed one left
        open is aborted now rather than at its timeout (a zombie that inits after this
        still can open one, which ends when it fails or times out, never committed)."""
        for attempt in range(self.attempt):
            self._init(f"{self.prefix}-{attempt}")

    def committed(self, query: str) -> int:
        """The last micro-batch of ``query`` this id committed, -1 if none."""
        offsets = self._at_group(
            "OffsetFetch",
            Call(
                "GET",
                f"{group_path(self.group)}/offsets",
                lambda b: [o["metadata"] for o in b["offsets"] if o["offset"] >= 0],
            ),
        )
        markers = [m for m in map(Marker.parse, offsets) if m is not None]
        return max((m.batch for m in markers if m.query == query), default=-1)

    def _learn(self, topic: str) -> None:
        """The metadata of ``topic`` (partition count, leaders), when unknown or stale."""
        if self.cluster.partition_count(topic) is None or self.cluster.needs_refresh([topic]):
            retrying(
                f"{self.transactional_id}: metadata of {topic}",
                lambda: run_sync(self.http, refresh_route(self.cluster, [topic])),
            )

    def partition_count(self, topic: str) -> int:
        """``topic``'s partition count, learnt once per task (asked per row: a dict lookup;
        and keys keep their partition for the whole task)."""
        n = self.partition_counts.get(topic)
        if n is None:
            self._learn(topic)
            n = self.cluster.partition_count(topic)
            if n is None:
                raise UnknownTopicOrPartition(topic)
            self.partition_counts[topic] = n
        return n

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: HeaderList | None,
        timestamp_ms: int,
    ) -> None:
        """Add a record for ``topic``-``partition``; a partition's batch is sent once it
        reaches :data:`BATCH_BYTES`, the rest by :meth:`flush`."""
        tp = (topic, partition)
        buffer = self.buffers.get(tp)
        if buffer is None:
            buffer = self.buffers[tp] = RecordBuffer(BATCH_BYTES, 0)
        if buffer.append(timestamp_ms, key, value, headers) is None:  # full
            self._send(tp, buffer)
            buffer = self.buffers[tp] = RecordBuffer(BATCH_BYTES, 0)
            buffer.append(timestamp_ms, key, value, headers)  # the first always fits

    def flush(self) -> None:
        """Send every partition's pending records."""
        buffers, self.buffers = self.buffers, {}
        for tp, buffer in buffers.items():
            self._send(tp, buffer)

    def _send(self, tp: tuple[str, int], buffer: RecordBufferLike) -> None:
        """``buffer`` as one transactional batch of the transaction (acks=all) at the
        partition's leader, the partition added to the transaction first."""
        topic, partition = tp
        if tp not in self.added:
            self._coordinated(
                self.transactional_id,
                Call(
                    "POST",
                    txn_path(self.transactional_id, "/partitions"),
                    lambda b: b,
                    json={
                        **self._producer(),
                        "topics": [{"topic": topic, "partitions": [partition]}],
                    },
                ),
            )
            self.added.add(tp)
        sequence = self.sequences.get(tp, 0)
        count = buffer.count
        # The SDK producer's record encoding (compiled where built), then the
        # transactional flag and producer fields stamped in (with the CRC).
        body = bytearray(buffer.build())
        stamp_producer(body, 0, self.producer_id, self.epoch, sequence, transactional=True)
        # A retry resends the same sequence: the broker answers a duplicate as done.
        call: Call[Any] = Call(
            "POST",
            f"{topic_path(topic)}/partitions/{partition}/batches",
            lambda b: b,
            params={"acks": "all"},
            content=bytes(body),
        )
        self._learn(topic)  # the leaders, before the first batch goes out
        where = TopicPartition(topic, partition)
        retrying(
            f"{self.transactional_id}: produce {topic}-{partition}",
            lambda: run_sync(self.http, leader_route(self.cluster, where, call, BACKOFF_S)),
        )
        self.sequences[tp] = (sequence + count) & 0x7FFFFFFF

    def commit_marker(self, marker: Marker) -> None:
        """``marker`` for each topic written (its partition 0) in the transaction: the group
        added at the transaction's coordinator (AddOffsetsToTxn), then TxnOffsetCommit at
        the group's (one broker alone is both), as Kafka's sendOffsetsToTransaction."""
        self._coordinated(
            self.transactional_id,
            Call(
                "POST",
                txn_path(self.transactional_id, "/groups"),
                lambda b: b,
                json={**self._producer(), "group_id": self.group},
            ),
        )
        topics = sorted({t for t, _ in self.added})
        self._at_group(
            "TxnOffsetCommit",
            Call(
                "POST",
                txn_path(self.transactional_id, "/offsets"),
                lambda b: b,
                json={
                    **self._producer(),
                    "group_id": self.group,
                    "offsets": [
                        {
                            "topic": t,
                            "partition": 0,
                            "offset": marker.batch,
                            "metadata": marker.metadata(),
                        }
                        for t in topics
                    ],
                },
            ),
        )

    @property
    def open(self) -> bool:
        """Whether a transaction was begun (some partition added)."""
        return bool(self.added)

    def pending(self) -> Pending:
        return Pending(self.transactional_id, self.producer_id, self.epoch)


def _client(cluster: Cluster) -> httpx.Client:
    """The blocking client the routes drive (each call names its broker's URL)."""
    return sync_client(cluster.default_url, REQUEST_TIMEOUT_MS, authorization=cluster.authorization)


def at_coordinator(http: httpx.Client, cluster: Cluster, transactional_id: str, call: Call[T]) -> T:
    """``call`` at ``transactional_id``'s coordinator: the SDK's
    :func:`~app.client._cluster.txn_route` (any broker first, then the one a 421
    NOT_COORDINATOR names), retriable answers retried for up to :data:`RETRY_FOR_S`."""
    deadline = time.monotonic() + RETRY_FOR_S
    return run_sync(http, txn_route(cluster, transactional_id, call, TXN_BACKOFF_S, deadline))


@dataclass(frozen=True)
class Pending:
    """A task's transaction left open for the driver to end."""

    transactional_id: str
    producer_id: int
    epoch: int


def end_transactions(url: str, pending: Iterable[Pending], commit: bool) -> None:
    """Commit (or abort) each pending transaction, several at once; the first error is
    raised once all were tried. Ending a transaction twice is answered as once, so a
    retried commit (or a replayed batch's) is harmless."""
    what = "commit" if commit else "abort"
    todo = list(pending)
    if not todo:
        return
    # One cluster view for every id: the threads share what they learn (it is locked).
    cluster = Cluster(url)
    with _client(cluster) as http:

        def end(p: Pending) -> None:
            call: Call[Any] = Call(
                "POST",
                txn_path(p.transactional_id, f"/{what}"),
                lambda b: b,
                json={"producer_id": p.producer_id, "producer_epoch": p.epoch},
            )
            at_coordinator(http, cluster, p.transactional_id, call)

        with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
            futures = [pool.submit(end, p) for p in todo]
        errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        raise errors[0]  # type: ignore[misc]
