"""The transaction state manager (Kafka's TransactionStateManager): which
``__transaction_state`` partitions this broker serves, loading them, the cache of
transactional ids, and the writes that make a state change durable.

* **Placement.** A transactional id belongs to partition
  ``abs(javaHashCode(id)) % partitions`` of ``__transaction_state``
  (:func:`app.groups.hashing.partition_for`, Kafka's hashing, 50 partitions by default);
  its coordinator is that partition's leader. The topic is created on first use.
* **Loading.** A lone broker replays every partition at start (:meth:`load_all`, in a
  worker thread). In a cluster a partition is loaded when this broker becomes its leader
  (:meth:`on_leadership`) and its ids are forgotten when it stops leading it; requests
  meanwhile answer COORDINATOR_LOAD_IN_PROGRESS, and ids led elsewhere NOT_COORDINATOR
  naming the leader. The records are Kafka's (:mod:`app.txn.records`); the latest value
  per id wins, a tombstone forgets it, a record that does not parse is skipped (anyone
  may produce to the topic). Loaded ids get the partition's leader epoch as their
  coordinator epoch, so markers from an older coordinator are fenced by the partitions.
  ``on_loaded`` is then called with them (the coordinator completes the prepared ones).
* **Writes.** :meth:`write` appends one record for an id and returns once every in-sync
  replica holds it (acks=-1); alone there is nothing to wait for.

Concurrency: on the event loop, except a log's replay, which runs in a worker thread on
a dict of its own and is installed on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.common.batch import decode_records, iter_headers
from app.common.errors import (
    CoordinatorLoadInProgress,
    CoordinatorNotAvailable,
    CorruptRecord,
    NotEnoughReplicas,
    NotLeaderOrFollower,
    RequestTimedOut,
    TopicAlreadyExists,
    TxnNotCoordinator,
)
from app.groups.hashing import partition_for
from app.txn.model import TXN_TOPIC, TxnConfig, TxnMetadata, TxnState
from app.txn.placement import TxnPlacement
from app.txn.records import TxnLogValue, decode_key, decode_value, encode_key, encode_value

if TYPE_CHECKING:
    from app.core.log.log import Log

log = logging.getLogger(__name__)

_READ_CHUNK = 1 << 20
LOADING = "loading"
LOADED = "loaded"


def replay_log(part_log: Log, coordinator_epoch: int) -> dict[str, TxnMetadata]:
    """Every transactional id of one ``__transaction_state`` partition, as its latest
    record says (blocking: run in a worker thread)."""
    found: dict[str, TxnMetadata] = {}
    offset = part_log.log_start_offset
    end = part_log.log_end_offset
    while offset < end:
        buf = part_log.read(offset, _READ_CHUNK, max_offset=end).read_bytes()
        next_offset = offset
        for _, header in iter_headers(buf):
            next_offset = header.next_offset
        if next_offset <= offset:
            break
        for record in decode_records(buf, min_offset=offset):
            if record.key is None:
                continue
            try:
                tid = decode_key(record.key)
                value = decode_value(record.value)
            except CorruptRecord as exc:
                log.warning("skipped %s offset %d: %s", TXN_TOPIC, record.offset, exc)
                continue
            if value is None:
                found.pop(tid, None)
                continue
            found[tid] = from_value(tid, value, coordinator_epoch)
        offset = next_offset
    return found


def from_value(tid: str, value: TxnLogValue, coordinator_epoch: int) -> TxnMetadata:
    meta = TxnMetadata(
        transactional_id=tid,
        producer_id=value.producer_id,
        producer_epoch=value.producer_epoch,
        timeout_ms=value.timeout_ms,
        state=value.state,
        partitions=set(value.partitions),
        start_ms=value.start_ms,
        last_update_ms=value.last_update_ms,
        coordinator_epoch=coordinator_epoch,
    )
    if value.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        meta.pending_markers = set(value.partitions)
    return meta


def to_value(meta: TxnMetadata) -> TxnLogValue:
    partitions = frozenset() if meta.state is TxnState.EMPTY else frozenset(meta.partitions)
    return TxnLogValue(
        producer_id=meta.producer_id,
        producer_epoch=meta.producer_epoch,
        timeout_ms=meta.timeout_ms,
        state=meta.state,
        partitions=partitions,
        last_update_ms=meta.last_update_ms,
        start_ms=meta.start_ms,
    )


class TxnStateManager:
    """The transactional ids this broker coordinates; see the module docstring."""

    def __init__(self, placement: TxnPlacement, config: TxnConfig) -> None:
        self.placement = placement
        self.config = config
        self.txns: dict[str, TxnMetadata] = {}
        # producer id -> transactional id, for the produce path's check.
        self.by_producer: dict[int, str] = {}
        self.on_loaded: Callable[[list[TxnMetadata]], None] = lambda metas: None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.running = False
        self.loaded = False
        self.topic_ready = False
        self._topic_lock: asyncio.Lock | None = None
        self._partitions: dict[int, str] = {}
        self._generation: dict[int, int] = {}
        self.load_tasks: dict[int, asyncio.Task[None]] = {}
        self._known_count: int | None = None

    # -- the cache -------------------------------------------------------------------------

    def get(self, tid: str) -> TxnMetadata | None:
        return self.txns.get(tid)

    def put(self, meta: TxnMetadata) -> None:
        old = self.txns.get(meta.transactional_id)
        if old is not None and self.by_producer.get(old.producer_id) == meta.transactional_id:
            del self.by_producer[old.producer_id]
        self.txns[meta.transactional_id] = meta
        self.by_producer[meta.producer_id] = meta.transactional_id

    def for_producer(self, producer_id: int) -> TxnMetadata | None:
        tid = self.by_producer.get(producer_id)
        return None if tid is None else self.txns.get(tid)

    def _install(self, metas: dict[str, TxnMetadata]) -> list[TxnMetadata]:
        for meta in metas.values():
            self.put(meta)
        return list(metas.values())

    # -- placement -------------------------------------------------------------------------

    def num_partitions(self) -> int:
        count = self.placement.txn_partitions()
        if count is not None:
            self._known_count = count
            return count
        if self._known_count is not None:
            return self._known_count
        return self.config.num_partitions

    def partition_of(self, tid: str) -> int:
        return partition_for(tid, self.num_partitions())

    async def ensure_topic(self) -> None:
        """Create ``__transaction_state`` on first use, as Kafka does."""
        if self.topic_ready:
            return
        if self.placement.txn_partitions() is not None:
            self.topic_ready = True
            return
        if self._topic_lock is None:
            self._topic_lock = asyncio.Lock()
        async with self._topic_lock:
            if self.topic_ready:
                return
            with contextlib.suppress(TopicAlreadyExists):
                await self.placement.create_txn_topic(self.config.num_partitions)
            self.topic_ready = True
            if not self.placement.clustered:
                return
            count = self.num_partitions()
            for partition in range(count):
                if self.placement.leads(partition):
                    self.on_leadership(TXN_TOPIC, partition, True)
            loads = list(self.load_tasks.values())
            if loads:
                # Empty new partitions load at once: the creating request need not answer
                # COORDINATOR_LOAD_IN_PROGRESS.
                await asyncio.wait(loads, timeout=5)

    def route(self, tid: str) -> int:
        """The id's partition when this broker coordinates it now; else NOT_COORDINATOR
        naming the leader (COORDINATOR_LOAD_IN_PROGRESS while loading)."""
        if not self.loaded:
            raise CoordinatorLoadInProgress(
                f"the transaction coordinator is loading {TXN_TOPIC}", transactional_id=tid
            )
        partition = self.partition_of(tid)
        if not self.placement.clustered:
            return partition
        status = self._partitions.get(partition)
        if status == LOADED:
            return partition
        if status == LOADING:
            raise CoordinatorLoadInProgress(
                f"loading the transactions of {TXN_TOPIC}-{partition}; retry shortly",
                transactional_id=tid,
            )
        leader, url = self.placement.leader_of(partition)
        if leader == self.config.node_id:
            raise CoordinatorLoadInProgress(
                f"this broker is taking over {TXN_TOPIC}-{partition}; retry shortly",
                transactional_id=tid,
            )
        raise TxnNotCoordinator(tid, leader, url)

    # -- loading ---------------------------------------------------------------------------

    def load_all(self) -> list[TxnMetadata]:
        """A lone broker: replay every partition (blocking); the metadata loaded. Call
        :meth:`install` on the loop with the result."""
        found: dict[str, TxnMetadata] = {}
        count = self.placement.txn_partitions() or 0
        for partition in range(count):
            part_log, epoch = self.placement.txn_log(partition)
            found.update(replay_log(part_log, epoch))
        return list(found.values())

    def install(self, metas: list[TxnMetadata]) -> None:
        self._install({m.transactional_id: m for m in metas})

    def on_leadership(self, topic: str, partition: int, leads: bool) -> None:
        """Cluster mode: load a partition this broker now leads, forget one it lost."""
        if topic != TXN_TOPIC or not self.running or self.loop is None:
            return
        if leads and partition in self._partitions:
            return
        self._generation[partition] = generation = self._generation.get(partition, 0) + 1
        task = self.load_tasks.pop(partition, None)
        if task is not None:
            task.cancel()
        if leads:
            self._partitions[partition] = LOADING
            self.load_tasks[partition] = self.loop.create_task(
                self._load_partition(partition, generation), name=f"load-{TXN_TOPIC}-{partition}"
            )
        else:
            self._partitions.pop(partition, None)
            self._unload(partition)

    def _current(self, partition: int, generation: int) -> bool:
        return (
            self.running
            and self._generation.get(partition) == generation
            and self._partitions.get(partition) == LOADING
        )

    async def _load_partition(self, partition: int, generation: int) -> None:
        delay = 0.1
        while True:
            try:
                part_log, epoch = self.placement.txn_log(partition)
                found = await asyncio.to_thread(replay_log, part_log, epoch)
                break
            except NotLeaderOrFollower:
                return
            except Exception:
                log.exception("loading %s-%d failed; retrying", TXN_TOPIC, partition)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            if not self._current(partition, generation):
                return
        if not self._current(partition, generation):
            return
        self.load_tasks.pop(partition, None)
        loaded = self._install(found)
        self._partitions[partition] = LOADED
        log.info("coordinating %d transactional ids of %s-%d", len(loaded), TXN_TOPIC, partition)
        self.on_loaded(loaded)

    def _unload(self, partition: int) -> None:
        count = self.num_partitions()
        gone = [tid for tid in self.txns if partition_for(tid, count) == partition]
        for tid in gone:
            meta = self.txns.pop(tid)
            if self.by_producer.get(meta.producer_id) == tid:
                del self.by_producer[meta.producer_id]

    @property
    def coordinated_partitions(self) -> list[int]:
        return sorted(p for p, s in self._partitions.items() if s == LOADED)

    async def stop(self) -> None:
        self.running = False
        self.loaded = False
        tasks = list(self.load_tasks.values())
        self.load_tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- writes ----------------------------------------------------------------------------

    async def forget(self, meta: TxnMetadata) -> None:
        """Write the id's tombstone (it expired: Kafka's Dead) and drop it from the cache."""
        await self._append(meta.transactional_id, None)
        tid = meta.transactional_id
        if self.txns.get(tid) is meta:
            del self.txns[tid]
            if self.by_producer.get(meta.producer_id) == tid:
                del self.by_producer[meta.producer_id]

    async def write(self, meta: TxnMetadata) -> None:
        """Append ``meta``'s state to its partition and wait for the in-sync replicas.
        TxnNotCoordinator (leadership moved) or CoordinatorNotAvailable (too few in-sync
        replicas, or they did not acknowledge in time)."""
        await self._append(meta.transactional_id, encode_value(to_value(meta)))

    async def _append(self, tid: str, value: bytes | None) -> None:
        partition = self.partition_of(tid)
        record = (encode_key(tid), value)
        try:
            last = self.placement.append(partition, [record])
            if self.placement.clustered:
                await self.placement.replicated(partition, last, self.config.write_timeout_ms)
        except NotLeaderOrFollower as exc:
            leader, url = exc.leader, exc.leader_url
            if leader is None:
                leader, url = self.placement.leader_of(partition)
            if leader == self.config.node_id:
                leader, url = None, None
            raise TxnNotCoordinator(tid, leader, url) from None
        except (NotEnoughReplicas, RequestTimedOut) as exc:
            raise CoordinatorNotAvailable(
                f"transactional id {tid!r}: the write to {TXN_TOPIC}-{partition} was not "
                f"acknowledged by every in-sync replica: {exc.message}",
                transactional_id=tid,
            ) from None
