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

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.common.batch import decode_records
from app.common.errors import CorruptRecord, TxnNotCoordinator
from app.common.group_errors import CoordinatorLoadInProgress, CoordinatorNotAvailable
from app.groups.hashing import partition_for
from app.groups.internal_topic import InternalTopicRuntime, read_chunks
from app.txn.model import TXN_TOPIC, TxnConfig, TxnMetadata, TxnState
from app.txn.placement import TxnPlacement
from app.txn.records import TxnLogValue, decode_key, decode_value, encode_key, encode_value

if TYPE_CHECKING:
    from app.core.log.log import Log

log = logging.getLogger(__name__)


def replay_log(part_log: Log, coordinator_epoch: int) -> dict[str, TxnMetadata]:
    """Every transactional id of one ``__transaction_state`` partition, as its latest
    record says (blocking: run in a worker thread)."""
    found: dict[str, TxnMetadata] = {}
    for buf, offset in read_chunks(part_log):
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


class TxnStateManager(InternalTopicRuntime[dict[str, TxnMetadata]]):
    """The transactional ids this broker coordinates; see the module docstring.

    Partition states, loading on leadership and routing: :mod:`app.groups.internal_topic`."""

    def __init__(self, placement: TxnPlacement, config: TxnConfig) -> None:
        super().__init__(placement, config.num_partitions)
        self.placement: TxnPlacement = placement
        self.config = config
        self.txns: dict[str, TxnMetadata] = {}
        # producer id -> transactional id, for the produce path's check.
        self.by_producer: dict[int, str] = {}
        self.on_loaded: Callable[[list[TxnMetadata]], None] = lambda metas: None
        self.loaded = False

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

    def partition_of(self, tid: str) -> int:
        return partition_for(tid, self.num_partitions())

    def route(self, tid: str) -> int:
        """The id's partition when this broker coordinates it now; else NOT_COORDINATOR
        naming the leader (COORDINATOR_LOAD_IN_PROGRESS while loading)."""
        if not self.loaded:
            raise CoordinatorLoadInProgress(
                f"the transaction coordinator is loading {TXN_TOPIC}", transactional_id=tid
            )
        partition = self.partition_of(tid)
        self._served(
            tid, partition, f"loading the transactions of {TXN_TOPIC}-{partition}; retry shortly"
        )
        return partition

    # -- loading ---------------------------------------------------------------------------

    def load_all(self) -> list[TxnMetadata]:
        """A lone broker: replay every partition (blocking); the metadata loaded. Call
        :meth:`install` on the loop with the result."""
        found: dict[str, TxnMetadata] = {}
        for partition in range(self.placement.partitions() or 0):
            part_log, epoch = self.placement.txn_log(partition)
            found.update(replay_log(part_log, epoch))
        return list(found.values())

    def install(self, metas: list[TxnMetadata]) -> None:
        self._install({m.transactional_id: m for m in metas})

    def _reader(self, partition: int) -> Callable[[], dict[str, TxnMetadata]]:
        part_log, epoch = self.placement.txn_log(partition)
        return lambda: replay_log(part_log, epoch)

    def _install_partition(self, partition: int, loaded: dict[str, TxnMetadata]) -> None:
        metas = self._install(loaded)
        log.info("coordinating %d transactional ids of %s-%d", len(metas), TXN_TOPIC, partition)
        self.on_loaded(metas)

    def _load_in_progress(self, key: str, message: str) -> CoordinatorLoadInProgress:
        return CoordinatorLoadInProgress(message, transactional_id=key)

    def _not_coordinator(self, key: str, leader: int | None, url: str | None) -> TxnNotCoordinator:
        return TxnNotCoordinator(key, leader, url)

    def _not_available(self, key: str, message: str) -> CoordinatorNotAvailable:
        return CoordinatorNotAvailable(message, transactional_id=key)

    def _unload(self, partition: int) -> None:
        count = self.num_partitions()
        gone = [tid for tid in self.txns if partition_for(tid, count) == partition]
        for tid in gone:
            meta = self.txns.pop(tid)
            if self.by_producer.get(meta.producer_id) == tid:
                del self.by_producer[meta.producer_id]

    async def stop(self) -> None:
        self.loaded = False
        await self.stop_loading()

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

        async def write() -> None:
            last = self.placement.append_records(partition, [record])
            # Returns at once on a lone broker (the only in-sync replica wrote it).
            await self.placement.replicated(partition, last, self.config.write_timeout_ms)

        await self._acknowledged(tid, f"transactional id {tid!r}", partition, write())
