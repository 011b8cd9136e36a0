"""The transaction coordinator (Kafka's TransactionCoordinator, KIP-98): the facade
``app.api`` calls.

Operations (each on the coordinator of the transactional id, see
:mod:`app.txn.runtime`; every state change is a ``__transaction_state`` record written
and replicated before it is answered):

* :meth:`init_producer_id` (InitProducerId with a transactional id): a new id gets a
  producer id and epoch 0; a known one gets its epoch bumped, which fences every older
  instance. An open transaction of the old instance is first aborted with the bumped
  epoch (its markers carry it, so the partitions refuse the zombie's late writes with
  INVALID_PRODUCER_EPOCH), then the epoch is bumped once more for the caller, as Kafka
  does. Kafka answers CONCURRENT_TRANSACTIONS and lets the client retry while it
  aborts; over stateless HTTP the abort is finished before answering when it can be.
  An exhausted epoch gets a fresh producer id.
* :meth:`add_partitions` (AddPartitionsToTxn) and :meth:`add_offsets` (AddOffsetsToTxn:
  the group's ``__consumer_offsets`` partition) start or extend the transaction
  (Ongoing).
* :meth:`end_txn` (EndTxn): PrepareCommit/PrepareAbort is written (the decision), then
  the markers (:mod:`app.txn.markers`), then CompleteCommit/CompleteAbort. The answer
  comes once the decision is durable and, when every partition took its marker at
  once, the transaction complete; markers that could not be written are retried by
  the timer, and the id answers CONCURRENT_TRANSACTIONS until they are.
* :meth:`check_produce`: a transactional batch is accepted by a partition only from the
  current epoch of a producer whose Ongoing transaction added that partition (Kafka's
  KIP-890 verification): else INVALID_TXN_STATE, PRODUCER_FENCED or
  INVALID_PRODUCER_EPOCH. The produce path holds an append permit
  (:meth:`append_permit`, :mod:`app.txn.permits`) from the check until its append
  returned; EndTxn (or an abort) closes the producer id to new permits and waits for
  those out before writing its decision, so an append (maybe on a worker thread) never
  lands after the transaction's marker, where it would open a transaction nobody ends
  (Kafka's "hanging transaction"). A batch checked while the decision is being written
  is refused (CONCURRENT_TRANSACTIONS, retriable; then INVALID_TXN_STATE).
* Timer: every ``abort_check_interval_ms`` an Ongoing transaction older than its
  ``transaction.timeout.ms`` is aborted with a bumped epoch (its producer is fenced),
  and prepared transactions whose markers are missing are completed.
* On load (start, or leadership of a ``__transaction_state`` partition) prepared
  transactions are completed at once: a restarted broker, or a new coordinator,
  finishes what the old one decided.

Fencing and errors: a producer id other than the id's is INVALID_PRODUCER_ID_MAPPING, an
older epoch PRODUCER_FENCED, a newer one INVALID_PRODUCER_EPOCH; an operation while
another one on the same id is being written, or while its markers are being written, is
CONCURRENT_TRANSACTIONS (retriable).

Concurrency: on the event loop; an id being changed is in ``_busy`` across the awaits of
its write, so two requests never interleave on one id.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from app.common.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTopic,
    InvalidTransactionTimeout,
    InvalidTxnState,
    LogbusError,
    ProducerFenced,
    TransactionalIdNotFound,
    TxnNotCoordinator,
    UnknownTopicOrPartition,
)
from app.common.group_errors import CoordinatorLoadInProgress, CoordinatorNotAvailable
from app.core.log.producer_ids import MAX_EPOCH
from app.groups.placement import OFFSETS_TOPIC
from app.txn.markers import MarkerWriter
from app.txn.model import (
    MAX_TRANSACTIONAL_ID_LENGTH,
    PREPARED,
    STARTABLE,
    TXN_TOPIC,
    VALID_PREVIOUS,
    TxnConfig,
    TxnMetadata,
    TxnState,
)
from app.txn.permits import AppendPermit, AppendPermits
from app.txn.placement import TxnPlacement
from app.txn.runtime import TxnStateManager

if TYPE_CHECKING:
    from app.core.topology import Topology
    from app.groups.offsets import OffsetCommit
    from app.groups.txn_offsets import TxnOffsetStore

log = logging.getLogger(__name__)

S = TxnState
_DEFAULT_CONFIG = TxnConfig()


class ProducerIds(Protocol):
    """The broker's producer id allocator (:class:`app.core.log.producer_ids.ProducerIdManager`)."""

    def next_id(self) -> int: ...


class GroupHooks(Protocol):
    """What the transaction coordinator needs of the group coordinator
    (:class:`app.groups.coordinator.GroupCoordinator` provides it): its store of offsets
    in transactions, whose methods it calls as they are (the group's
    ``__consumer_offsets`` partition, TxnOffsetCommit, the marker that ends it)."""

    @property
    def txn_offsets(self) -> TxnOffsetStore: ...


def wall_ms() -> int:
    return int(time.time() * 1000)


def validate_transactional_id(tid: str) -> None:
    if not tid or len(tid) > MAX_TRANSACTIONAL_ID_LENGTH:
        raise InvalidRequest(
            f"a transactional id needs 1 to {MAX_TRANSACTIONAL_ID_LENGTH} characters, "
            f"got {len(tid)}"
        )


class TransactionCoordinator:
    """See the module docstring."""

    def __init__(
        self,
        topology: Topology,
        producer_ids: ProducerIds,
        config: TxnConfig = _DEFAULT_CONFIG,
        *,
        groups: GroupHooks | None = None,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self.config = config
        self.placement = TxnPlacement(
            topology, config.node_id, config.url, config.replication_factor
        )
        self.state = TxnStateManager(self.placement, config)
        self.markers = MarkerWriter(self.placement, config)
        self.producer_ids = producer_ids
        # The group coordinator's offsets in transactions (None: no groups on this broker).
        self.group_offsets = None if groups is None else groups.txn_offsets
        if self.group_offsets is not None:
            self.markers.on_offsets_marker = self.group_offsets.completed
        self.clock_ms = clock_ms
        self._busy: set[str] = set()
        # A permit per checked transactional append in flight (its append may run after
        # awaits, or on a worker thread): a transaction is decided only once its
        # producer's permits are back, so no batch lands after its marker (permits.py).
        self.permits = AppendPermits()
        self._timer: asyncio.Task[None] | None = None
        self._completions: set[asyncio.Task[None]] = set()
        self.state.on_loaded = self._on_loaded

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Load ``__transaction_state`` (alone: all of it now; in a cluster: the partitions
        led here, as leadership arrives) and start the timer."""
        st = self.state
        st.loop = asyncio.get_running_loop()
        st.running = True
        # In a cluster the partitions led here load as leadership arrives; alone, now.
        following = self.placement.follow_leadership(st.on_leadership)
        if not following and self.placement.partitions() is not None:
            st.topic_ready = True
            metas = await asyncio.to_thread(st.load_all)
            st.install(metas)
            self._on_loaded(metas)
        st.loaded = True
        self._timer = asyncio.create_task(self._timer_loop(), name="transaction-timer")

    async def stop(self) -> None:
        tasks = [t for t in (self._timer, *self._completions) if t is not None]
        self._timer = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.state.stop()

    def _on_loaded(self, metas: list[TxnMetadata]) -> None:
        prepared = [m.transactional_id for m in metas if m.state in PREPARED]
        if not prepared:
            return
        log.info("completing %d prepared transactions found on load", len(prepared))
        task = asyncio.get_running_loop().create_task(
            self._complete_ids(prepared), name="transactions-complete-loaded"
        )
        self._completions.add(task)
        task.add_done_callback(self._completions.discard)

    async def _complete_ids(self, tids: Iterable[str]) -> None:
        for tid in tids:
            meta = self.state.get(tid)
            if meta is None or meta.state not in PREPARED or tid in self._busy:
                continue
            with self._holding(tid):
                try:
                    await self._complete(meta)
                except LogbusError as exc:
                    log.warning("transaction %r not completed yet: %s", tid, exc.message)

    # -- helpers ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _holding(self, tid: str) -> Iterator[None]:
        if tid in self._busy:
            raise ConcurrentTransactions(
                f"transactional id {tid!r} is being changed by another request; retry", tid
            )
        self._busy.add(tid)
        try:
            yield
        finally:
            self._busy.discard(tid)

    def _known(self, tid: str) -> TxnMetadata:
        validate_transactional_id(tid)
        self.state.route(tid)
        meta = self.state.get(tid)
        if meta is None:
            raise TransactionalIdNotFound(tid)
        return meta

    @staticmethod
    def _check_producer(meta: TxnMetadata, producer_id: int, epoch: int) -> None:
        tid = meta.transactional_id
        if producer_id != meta.producer_id:
            raise InvalidProducerIdMapping(
                f"transactional id {tid!r} holds producer id {meta.producer_id}, not {producer_id}",
                tid,
                producer_id=producer_id,
                current_producer_id=meta.producer_id,
            )
        if epoch < meta.producer_epoch:
            raise ProducerFenced.of_transaction(tid, producer_id, epoch, meta.producer_epoch)
        if epoch > meta.producer_epoch:
            raise InvalidProducerEpoch.of_transaction(tid, producer_id, epoch, meta.producer_epoch)

    async def _save(self, meta: TxnMetadata, to: TxnState, **changes: Any) -> TxnMetadata:
        """Write ``meta`` moved to state ``to`` with ``changes``; install it once durable."""
        if meta.state not in VALID_PREVIOUS[to]:
            raise AssertionError(
                f"transaction {meta.transactional_id!r}: {meta.state.kafka_name} -> "
                f"{to.kafka_name} is not a valid transition"
            )
        new = dataclasses.replace(
            meta,
            state=to,
            partitions=set(changes.pop("partitions", meta.partitions)),
            pending_markers=set(changes.pop("pending_markers", meta.pending_markers)),
            last_update_ms=self.clock_ms(),
            **changes,
        )
        await self.state.write(new)
        self.state.put(new)
        return new

    async def _complete(self, meta: TxnMetadata) -> bool:
        """Write the missing markers of a prepared transaction, then Complete*. True when
        the transaction is complete."""
        commit = meta.state is S.PREPARE_COMMIT
        if not await self.markers.write(meta, commit):
            return False
        await self._save(
            meta,
            S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT,
            partitions=set(),
            pending_markers=set(),
        )
        return True

    async def _abort(self, meta: TxnMetadata, *, fence: bool) -> bool:
        """Abort the Ongoing transaction of ``meta``; with ``fence`` under a bumped epoch
        (Kafka's PrepareEpochFence), so that its producer is fenced everywhere."""
        epoch = meta.producer_epoch
        last = meta.last_producer_epoch
        if fence and epoch < MAX_EPOCH:
            last, epoch = epoch, epoch + 1
        async with self._deciding(meta.producer_id):
            prepared = await self._save(
                meta,
                S.PREPARE_ABORT,
                producer_epoch=epoch,
                last_producer_epoch=last,
                pending_markers=set(meta.partitions),
            )
        return await self._complete(prepared)

    # -- InitProducerId --------------------------------------------------------------------

    async def init_producer_id(
        self,
        tid: str,
        timeout_ms: int,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
    ) -> tuple[int, int]:
        """(producer id, epoch) for ``tid``; see the module docstring."""
        validate_transactional_id(tid)
        if not 1 <= timeout_ms <= self.config.max_timeout_ms:
            raise InvalidTransactionTimeout(
                f"transaction_timeout_ms must be 1 to {self.config.max_timeout_ms} "
                f"(transaction.max.timeout.ms), got {timeout_ms}"
            )
        if (producer_id is None) != (producer_epoch is None):
            raise InvalidRequest("producer_id and producer_epoch go together: give both or neither")
        await self.state.ensure_topic()
        self.state.route(tid)
        with self._holding(tid):
            meta = self.state.get(tid)
            if meta is None:
                pid = await asyncio.to_thread(self.producer_ids.next_id)
                partition = self.state.route(tid)  # still ours after the await
                # The coordinator epoch of an id loaded from this partition now (Kafka's):
                # its markers must not be fenced by, or fence, those of ids loaded with it.
                _, coordinator_epoch = self.state.placement.txn_log(partition)
                fresh = TxnMetadata(
                    tid,
                    pid,
                    0,
                    timeout_ms,
                    last_update_ms=self.clock_ms(),
                    coordinator_epoch=coordinator_epoch,
                )
                await self.state.write(fresh)
                self.state.put(fresh)
                return pid, 0
            if producer_id is not None and producer_epoch is not None:
                # KIP-360: a producer asking for a bump names what it has.
                if producer_id != meta.producer_id:
                    raise InvalidProducerIdMapping(
                        f"transactional id {tid!r} holds producer id {meta.producer_id}, not "
                        f"{producer_id}",
                        tid,
                        producer_id=producer_id,
                        current_producer_id=meta.producer_id,
                    )
                if producer_epoch not in (meta.producer_epoch, meta.last_producer_epoch):
                    raise ProducerFenced.of_transaction(
                        tid, producer_id, producer_epoch, meta.producer_epoch
                    )
            if meta.state in PREPARED and not await self._complete(meta):
                raise ConcurrentTransactions(
                    f"transactional id {tid!r}: the previous transaction's markers are "
                    "still being written; retry",
                    tid,
                )
            meta = self._current(tid)
            if meta.state is S.ONGOING and not await self._abort(meta, fence=True):
                raise ConcurrentTransactions(
                    f"transactional id {tid!r}: the fenced producer's transaction is being "
                    "aborted; retry",
                    tid,
                )
            meta = self._current(tid)
            pid, epoch = meta.producer_id, meta.producer_epoch + 1
            if epoch >= MAX_EPOCH:
                # As Kafka: an exhausted epoch gets a fresh producer id.
                pid, epoch = await asyncio.to_thread(self.producer_ids.next_id), 0
                self.state.route(tid)
            new = await self._save(
                meta,
                S.EMPTY,
                producer_id=pid,
                producer_epoch=epoch,
                # KIP-360: a bump the producer asked for with its epoch keeps that epoch, so
                # a retry of it is recognised; a new instance's (no epoch given) keeps none,
                # else the instance it fenced could ask with its old epoch and fence it back.
                last_producer_epoch=-1 if producer_id is None else meta.producer_epoch,
                timeout_ms=timeout_ms,
                partitions=set(),
                pending_markers=set(),
                start_ms=-1,
            )
            return new.producer_id, new.producer_epoch

    def _current(self, tid: str) -> TxnMetadata:
        meta = self.state.get(tid)
        if meta is None:  # unloaded by a leadership change meanwhile
            self.state.route(tid)
            raise TransactionalIdNotFound(tid)
        return meta

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------

    async def add_partitions(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> None:
        wanted = set(partitions)
        for topic, _ in wanted:
            if topic in (TXN_TOPIC, OFFSETS_TOPIC):
                raise InvalidTopic(
                    topic, "it is internal to the broker; add offsets with AddOffsetsToTxn"
                )
        await self._add(tid, producer_id, producer_epoch, wanted)

    async def add_offsets(self, tid: str, producer_id: int, producer_epoch: int, group: str) -> int:
        """Add the group's ``__consumer_offsets`` partition; that partition."""
        if self.group_offsets is None:
            raise InvalidRequest("this broker has no group coordinator")
        self._check_producer(self._known(tid), producer_id, producer_epoch)
        partition = await self.group_offsets.offsets_partition(group)
        await self._add(tid, producer_id, producer_epoch, {(OFFSETS_TOPIC, partition)})
        return partition

    async def _add(
        self, tid: str, producer_id: int, producer_epoch: int, wanted: set[tuple[str, int]]
    ) -> None:
        if not wanted:
            raise InvalidRequest("no partitions to add")
        meta = self._known(tid)
        with self._holding(tid):
            meta = self._current(tid)
            self._check_producer(meta, producer_id, producer_epoch)
            if meta.state in PREPARED:
                raise ConcurrentTransactions(
                    f"transactional id {tid!r}: the previous transaction is being completed; retry",
                    tid,
                )
            if meta.state not in STARTABLE and meta.state is not S.ONGOING:
                raise InvalidTxnState(
                    f"transactional id {tid!r} is {meta.state.kafka_name}: no partitions can "
                    "be added",
                    transactional_id=tid,
                )
            for topic, partition in wanted:
                if topic == OFFSETS_TOPIC:
                    continue
                if partition < 0 or partition >= self.placement.partition_count(topic):
                    raise UnknownTopicOrPartition(topic, partition)
            added = wanted - meta.partitions
            if meta.state is S.ONGOING and not added:
                return
            start = meta.start_ms if meta.state is S.ONGOING else self.clock_ms()
            await self._save(
                meta,
                S.ONGOING,
                partitions=meta.partitions | added if meta.state is S.ONGOING else wanted,
                pending_markers=set(),
                start_ms=start,
            )

    async def txn_offset_commit(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: Sequence[OffsetCommit],
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> int:
        """TxnOffsetCommit, for every door: the group's offsets written in the producer's
        transaction (pending in ``__consumer_offsets`` until the marker); the group's
        offsets partition.

        When this broker coordinates ``tid`` the group's partition is added first
        (AddOffsetsToTxn, a no-op when the client added it already, as a Kafka client
        does) and the producer's epoch checked again (a fence may have happened
        meanwhile), under an append permit held until the offsets are written (EndTxn
        waits for it, so they never land after the marker). When another broker
        coordinates ``tid`` (a cluster; TxnNotCoordinator) the offsets are written
        unverified, as Kafka's group coordinator does after the client's AddOffsetsToTxn
        at the transaction coordinator."""
        if self.group_offsets is None:
            raise InvalidRequest("this broker has no group coordinator")
        permit: AppendPermit | None = None
        try:
            partition = await self.add_offsets(tid, producer_id, producer_epoch, group_id)
            permit = self.append_permit(producer_id)
            try:
                self.check_produce(OFFSETS_TOPIC, partition, producer_id, producer_epoch)
            except BaseException:
                permit.release()
                raise
        except TxnNotCoordinator:
            partition = await self.group_offsets.offsets_partition(group_id)
        with permit if permit is not None else contextlib.nullcontext():
            await self.group_offsets.commit(
                group_id, producer_id, producer_epoch, offsets, member_id, member_epoch
            )
        return partition

    async def find_coordinator(self, tid: str) -> tuple[int, str | None]:
        """FindCoordinator for a transactional id: (broker id, its URL) of the leader of
        the id's ``__transaction_state`` partition (the topic created on first use, as
        Kafka does); this broker when alone. COORDINATOR_NOT_AVAILABLE (retriable) while
        that partition has no leader."""
        validate_transactional_id(tid)
        await self.state.ensure_topic()
        if self.placement.coordinates_every_key:
            return self.config.node_id, self.config.url
        partition = self.state.partition_of(tid)
        leader, url = self.placement.leader_of(partition)
        if leader is None:
            raise CoordinatorNotAvailable(
                f"{TXN_TOPIC}-{partition}, which holds transactional id {tid!r}, has no "
                "leader yet (election under way); retry shortly",
                transactional_id=tid,
            )
        return leader, url

    # -- EndTxn ----------------------------------------------------------------------------

    async def end_txn(self, tid: str, producer_id: int, producer_epoch: int, commit: bool) -> str:
        """Commit or abort; the state the id is in afterwards (Kafka's name)."""
        with self._holding(tid):
            meta = self._known(tid)
            self._check_producer(meta, producer_id, producer_epoch)
            done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
            deciding = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            if meta.state is done:
                return meta.state.kafka_name  # a retry of an EndTxn that completed
            if meta.state is deciding:
                await self._complete(meta)
                return self._current(tid).state.kafka_name
            if meta.state is not S.ONGOING:
                what = "commit" if commit else "abort"
                raise InvalidTxnState(
                    f"transactional id {tid!r} is {meta.state.kafka_name}: nothing to {what}"
                    + (
                        " (the transaction was already decided the other way)"
                        if meta.state in PREPARED or meta.state in STARTABLE
                        else ""
                    ),
                    transactional_id=tid,
                    state=meta.state.kafka_name,
                )
            async with self._deciding(producer_id):
                prepared = await self._save(meta, deciding, pending_markers=set(meta.partitions))
            await self._complete(prepared)
            return self._current(tid).state.kafka_name

    # -- the produce path ------------------------------------------------------------------

    def check_produce(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        epoch: int,
        transactional_id: str | None = None,
    ) -> None:
        """A transactional batch of (``producer_id``, ``epoch``) for ``topic-partition``:
        see the module docstring. ``transactional_id``: the id the request names (Kafka's
        Produce, whose principal may WRITE that id only); the producer must be its
        producer, else INVALID_PRODUCER_ID_MAPPING (KIP-890's verification answers so)."""
        meta = self.state.for_producer(producer_id)
        if meta is None:
            if not self.placement.coordinates_every_key:
                # The id's coordinator may be another broker: not verified here (yet).
                return
            raise InvalidTxnState(
                f"producer {producer_id} holds no transactional id: get one with POST "
                "/producers and a transactional_id, then add the partition to its transaction",
                producer_id=producer_id,
                topic=topic,
                partition=partition,
            )
        tid = meta.transactional_id
        if transactional_id is not None and transactional_id != tid:
            raise InvalidProducerIdMapping(
                f"producer {producer_id} is the producer of transactional id {tid!r}, not of "
                f"{transactional_id!r}, which the request names",
                transactional_id,
                producer_id=producer_id,
            )
        if epoch < meta.producer_epoch:
            raise ProducerFenced.of_transaction(tid, producer_id, epoch, meta.producer_epoch)
        if epoch > meta.producer_epoch:
            raise InvalidProducerEpoch.of_transaction(tid, producer_id, epoch, meta.producer_epoch)
        if meta.state is not S.ONGOING or (topic, partition) not in meta.partitions:
            raise InvalidTxnState(
                f"{topic}-{partition} is not in an ongoing transaction of {tid!r} "
                f"({meta.state.kafka_name}): add it first (AddPartitionsToTxn)",
                transactional_id=tid,
                topic=topic,
                partition=partition,
            )

    def append_permit(self, producer_id: int) -> AppendPermit:
        """A permit for appending ``producer_id``'s transactional batches, to hold from
        :meth:`check_produce` until the append returned (``with``; see
        :mod:`app.txn.permits`). ConcurrentTransactions (retriable) while its transaction
        is being decided. On the loop; the permit may be released on any thread."""
        meta = self.state.for_producer(producer_id)
        return self.permits.acquire(producer_id, None if meta is None else meta.transactional_id)

    def _deciding(self, producer_id: int) -> contextlib.AbstractAsyncContextManager[None]:
        """Around the write of a decision (PrepareCommit/PrepareAbort): no new append
        permit for the producer, and its permits out released first, waited for up to
        the write timeout (then the decision goes on: an append stuck that long is not
        let to hold the transaction open)."""
        return self.permits.deciding(producer_id, self.config.write_timeout_ms / 1000)

    # -- timer -----------------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        interval = self.config.abort_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.abort_timed_out()
                await self.expire_ids()
            except Exception:
                log.exception("aborting timed-out transactions failed")

    async def abort_timed_out(self, now_ms: int | None = None) -> int:
        """Abort (with an epoch bump) every Ongoing transaction past its timeout and complete
        prepared ones; the number aborted."""
        now = self.clock_ms() if now_ms is None else now_ms
        aborted = 0
        for tid in list(self.state.txns):
            # Read again each time: an earlier abort awaited, and requests ran meanwhile.
            meta = self.state.get(tid)
            if meta is None or tid in self._busy:
                continue
            if meta.state is S.ONGOING and now - meta.start_ms > meta.timeout_ms:
                with self._holding(tid):
                    try:
                        log.info(
                            "aborting transaction %r of producer %d: over its %d ms timeout",
                            tid,
                            meta.producer_id,
                            meta.timeout_ms,
                        )
                        await self._abort(meta, fence=True)
                        aborted += 1
                    except LogbusError as exc:
                        log.warning("timed-out transaction %r not aborted: %s", tid, exc.message)
            elif meta.state in PREPARED:
                await self._complete_ids([tid])
        return aborted

    async def expire_ids(self, now_ms: int | None = None) -> int:
        """Forget ids with no open transaction whose last change is older than
        ``transactional.id.expiration.ms`` (Kafka moves them to Dead and writes a
        tombstone); the number forgotten. An InitProducerId with the id later starts
        afresh, with a new producer id."""
        now = self.clock_ms() if now_ms is None else now_ms
        gone = 0
        for tid in list(self.state.txns):
            meta = self.state.get(tid)
            if meta is None or tid in self._busy or meta.state not in STARTABLE:
                continue
            if now - meta.last_update_ms < self.config.id_expiration_ms:
                continue
            with self._holding(tid):
                try:
                    await self.state.forget(meta)
                    gone += 1
                except LogbusError as exc:
                    log.warning("transactional id %r not expired: %s", tid, exc.message)
        if gone:
            log.info("expired %d transactional ids", gone)
        return gone

    # -- describe and list ------------------------------------------------------------------

    def describe(self, tid: str) -> dict[str, Any]:
        """Kafka's DescribeTransactions fields for one id."""
        meta = self._known(tid)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.pending_markers or meta.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return {
            "transactional_id": tid,
            "transaction_state": meta.state.kafka_name,
            "transaction_timeout_ms": meta.timeout_ms,
            "transaction_start_time_ms": meta.start_ms,
            "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            "coordinator": self.config.node_id,
        }

    def list_transactions(
        self,
        states: Sequence[str] = (),
        producer_ids: Sequence[int] = (),
        duration_ms: int | None = None,
    ) -> dict[str, Any]:
        """Kafka's ListTransactions: ids coordinated here, filtered by state names, producer
        ids and (KIP-994) running longer than ``duration_ms``; unknown state names are
        reported back, as Kafka does."""
        if not self.state.loaded:
            raise CoordinatorLoadInProgress(f"the transaction coordinator is loading {TXN_TOPIC}")
        known = {s.kafka_name for s in TxnState}
        unknown = [s for s in states if s not in known]
        wanted = {s for s in states if s in known}
        now = self.clock_ms()
        out = []
        for tid, meta in sorted(self.state.txns.items()):
            if wanted and meta.state.kafka_name not in wanted:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if duration_ms is not None and (
                meta.state is not S.ONGOING or now - meta.start_ms < duration_ms
            ):
                continue
            out.append(
                {
                    "transactional_id": tid,
                    "producer_id": meta.producer_id,
                    "transaction_state": meta.state.kafka_name,
                }
            )
        return {"unknown_state_filters": unknown, "transaction_states": out}
