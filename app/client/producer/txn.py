"""TransactionManager: a transactional producer's state and its calls to the coordinator.

Owns, for ``Producer(transactional_id=...)`` and ``AsyncProducer`` alike (written once;
the facades only decide how they wait: the blocking one hops onto its sender's loop):

* the state, Kafka's client-side machine (``TransactionManager.State`` in Kafka's Java
  producer)::

      UNINITIALIZED --init_transactions--> READY --begin_transaction--> IN_TRANSACTION
      IN_TRANSACTION --commit_transaction--> COMMITTING --> READY
      COMMITTING --EndTxn failed retriably (timeout, coordinator moving)--> COMMITTING
                 (the outcome is unknown: the caller calls commit_transaction again)
      IN_TRANSACTION | ABORTABLE_ERROR --abort_transaction--> ABORTING --> READY
      IN_TRANSACTION --a batch, AddPartitionsToTxn or offsets failed--> ABORTABLE_ERROR
      any --PRODUCER_FENCED, an ACL refusal, ...--> FATAL_ERROR (for good: close it)

  A call the state forbids raises :class:`~app.common.errors.InvalidTxnState` (Kafka's
  IllegalStateException): ``send`` outside a transaction, ``begin_transaction`` twice,
  ``commit_transaction`` after an error (which raises that error: abort instead). In
  FATAL_ERROR every call raises the fatal error (:class:`ProducerFenced`, a newer
  instance took the id over; :class:`TransactionalIdAuthorizationFailed`...); a partition's
  INVALID_PRODUCER_EPOCH is reported as :class:`ProducerFenced`, as Kafka's producer does;
* the partitions added to the current transaction on the broker: the sender calls
  :meth:`ensure_added` before a partition's first batch goes out, and the partitions
  waiting meanwhile go in one AddPartitionsToTxn request;
* the calls: InitProducerId with the id (``POST /producers``), AddPartitionsToTxn,
  AddOffsetsToTxn + TxnOffsetCommit (``send_offsets_to_transaction``), EndTxn; each at
  the id's coordinator (:func:`app.client._cluster.txn_route`), retried while retriable
  until ``max_block_ms``.

After an abort that followed a failed batch, the producer asks InitProducerId again with
its id and epoch (KIP-360): the epoch is bumped and sequences start again at 0, so a
batch whose fate was unknown cannot leave a sequence gap in the next transaction.

Concurrency: the ``state`` checks (``check_send``, ``begin``, ``begin_abort``) run on the
caller's thread; the coroutines run on the sender's event loop (the blocking producer's
background loop, or the caller's). ``state`` is one attribute written by either: the
facades call one transactional method at a time, as Kafka's producer requires.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import httpx

from app.client import _cluster
from app.client._cluster import Cluster
from app.client._http import Call, txn_path
from app.client.errors import TransactionAborted
from app.client.producer.accumulator import RecordAccumulator
from app.client.producer.config import ProducerConfig
from app.client.types import ConsumerGroupMetadata, TopicPartition
from app.common.errors import (
    ClusterAuthorizationFailed,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidTxnState,
    LogbusError,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
    TransactionCoordinatorFenced,
)

UNINITIALIZED = "UNINITIALIZED"
READY = "READY"
IN_TRANSACTION = "IN_TRANSACTION"
COMMITTING = "COMMITTING_TRANSACTION"
ABORTING = "ABORTING_TRANSACTION"
ABORTABLE_ERROR = "ABORTABLE_ERROR"
FATAL_ERROR = "FATAL_ERROR"

# Errors after which this producer instance can never write again (Kafka's fatal ones).
FATAL = (
    InvalidProducerEpoch,  # ProducerFenced too
    InvalidProducerIdMapping,
    TransactionCoordinatorFenced,
    TransactionalIdAuthorizationFailed,
    ClusterAuthorizationFailed,
)
# (A topic's or a group's ACL refusal only aborts the transaction, as in Kafka.)
# Between retries of a coordinator call (CONCURRENT_TRANSACTIONS lasts one marker write).
TXN_BACKOFF_S = 0.02


def as_fenced(exc: BaseException) -> BaseException:
    """A partition's INVALID_PRODUCER_EPOCH as PRODUCER_FENCED (what Kafka's transactional
    producer raises for it); other errors as they are."""
    if not isinstance(exc, InvalidProducerEpoch) or isinstance(exc, ProducerFenced):
        return exc
    fenced = ProducerFenced.__new__(ProducerFenced)
    LogbusError.__init__(fenced, exc.message, **exc.fields())
    fenced.__cause__ = exc
    return fenced


def _answer(body: Any) -> dict[str, Any]:
    return dict(body)


class TransactionManager:
    """The transactional state of one producer (see the module docs)."""

    def __init__(self, acc: RecordAccumulator, cfg: ProducerConfig, cluster: Cluster) -> None:
        assert cfg.transactional_id is not None
        self.transactional_id = cfg.transactional_id
        self.acc = acc
        self.cfg = cfg
        self.cluster = cluster
        self.state = UNINITIALIZED
        self.error: BaseException | None = None  # ABORTABLE_ERROR's or FATAL_ERROR's cause
        self.added: set[TopicPartition] = set()  # on the broker, in this transaction
        self._pending: set[TopicPartition] = set()
        self._adding: asyncio.Future[None] | None = None
        self._started = False  # the broker has a transaction open for us
        self._bump = False  # a batch failed: bump the epoch after the abort (KIP-360)

    # ---- the rules, on the caller's thread (no I/O) ----

    def _raise_if_failed(self) -> None:
        if self.state == FATAL_ERROR or self.state == ABORTABLE_ERROR:
            assert self.error is not None
            raise self.error

    def _require(self, *states: str, doing: str) -> None:
        if self.state == FATAL_ERROR:
            self._raise_if_failed()
        if self.state not in states:
            if self.state == ABORTABLE_ERROR:
                self._raise_if_failed()
            raise InvalidTxnState(
                f"transactional producer {self.transactional_id!r}: cannot {doing} in state "
                f"{self.state} (expected {' or '.join(states)})",
                transactional_id=self.transactional_id,
                state=self.state,
            )

    def check_send(self) -> None:
        """``send`` is allowed only inside a transaction (the error of a failed one, else)."""
        if self.state != IN_TRANSACTION:
            self._require(IN_TRANSACTION, doing="send outside a transaction (begin_transaction)")

    def begin(self) -> None:
        self._require(READY, doing="begin a transaction")
        self.state = IN_TRANSACTION

    def check_commit(self) -> None:
        # COMMITTING: an EndTxn that failed with a retriable error (a timeout, a coordinator
        # moving) may be sent again; the coordinator answers a repeated commit of a
        # transaction it already committed with success (Kafka's commitTransaction after a
        # TimeoutException).
        self._require(IN_TRANSACTION, COMMITTING, doing="commit")

    def begin_abort(self) -> None:
        """Abort: what is not sent yet is dropped (its futures fail with TransactionAborted);
        the caller then waits for what is in flight and calls :meth:`end`."""
        self._require(IN_TRANSACTION, ABORTABLE_ERROR, ABORTING, doing="abort")
        self.state = ABORTING
        self.acc.drop_unsent(TransactionAborted("the transaction was aborted"))

    def _fail(self, exc: BaseException) -> BaseException:
        """Record a failure; what the caller should raise."""
        exc = as_fenced(exc)
        if isinstance(exc, FATAL):
            if self.state != FATAL_ERROR:
                self.state, self.error = FATAL_ERROR, exc
                # send/flush raise it from now on; sealing the open batches sends every
                # later send through the Python path, which checks the state.
                self.acc.fatal = exc
                self.acc.seal_all()
            return exc
        if self.state in (IN_TRANSACTION, COMMITTING):
            self.state, self.error = ABORTABLE_ERROR, exc
            self.acc.seal_all()
        return exc

    def batch_failed(self, exc: BaseException) -> None:
        """The sender gave up on a batch of the transaction: it must be aborted."""
        if self.state != ABORTING:
            self._bump = True
            self._fail(exc)

    # ---- the calls, on the sender's loop ----

    async def _run(self, client: httpx.AsyncClient, call: Call[Any]) -> Any:
        deadline = time.monotonic() + self.cfg.max_block_ms / 1000
        route = _cluster.txn_route(
            self.cluster, self.transactional_id, call, TXN_BACKOFF_S, deadline
        )
        return await _cluster.run_async(client, route)

    def _producer(self) -> dict[str, int]:
        return {"producer_id": self.acc.producer_id, "producer_epoch": self.acc.producer_epoch}

    async def init(self, client: httpx.AsyncClient, bump: bool = False) -> None:
        """InitProducerId with the id: fences every older instance and completes or aborts
        what it left open; ``bump``: KIP-360's epoch bump of this instance."""
        if not bump:
            self._require(UNINITIALIZED, doing="init_transactions")
        body: dict[str, Any] = {
            "transactional_id": self.transactional_id,
            "transaction_timeout_ms": self.cfg.transaction_timeout_ms,
        }
        if bump:
            body.update(self._producer())
        call = Call(
            "POST",
            "/producers",
            lambda b: (int(b["producer_id"]), int(b["producer_epoch"])),
            json=body,
        )
        try:
            producer_id, epoch = await self._run(client, call)
        except LogbusError as exc:
            if isinstance(exc, FATAL):
                raise self._fail(exc) from None
            raise
        self.acc.set_producer(producer_id, epoch, transactional=True)
        self.state = READY

    async def ensure_added(self, client: httpx.AsyncClient, tp: TopicPartition) -> None:
        """AddPartitionsToTxn for ``tp`` before its first batch of the transaction goes out;
        the partitions waiting meanwhile share one request."""
        while tp not in self.added:
            if self.state == ABORTING:
                raise TransactionAborted("the transaction was aborted")
            self._raise_if_failed()
            self._pending.add(tp)
            if self._adding is None:
                self._adding = asyncio.ensure_future(self._add_pending(client))
            await asyncio.shield(self._adding)

    async def _add_pending(self, client: httpx.AsyncClient) -> None:
        wanted, self._pending = self._pending, set()
        topics: dict[str, list[int]] = {}
        for tp in sorted(wanted):
            topics.setdefault(tp.topic, []).append(tp.partition)
        call = Call(
            "POST",
            txn_path(self.transactional_id, "/partitions"),
            _answer,
            json={
                **self._producer(),
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        try:
            await self._run(client, call)
        except LogbusError as exc:
            raise self._fail(exc) from None
        finally:
            self._adding = None
        self._started = True
        self.added |= wanted

    async def send_offsets(
        self,
        client: httpx.AsyncClient,
        offsets: Mapping[TopicPartition, int],
        group: str | ConsumerGroupMetadata,
    ) -> None:
        """AddOffsetsToTxn at the transaction's coordinator, then TxnOffsetCommit at the
        group's (one broker alone is both): the offsets count once the transaction commits."""
        self._require(IN_TRANSACTION, doing="send offsets outside a transaction")
        meta = ConsumerGroupMetadata(group) if isinstance(group, str) else group
        if not offsets:
            return
        try:
            await self._run(
                client,
                Call(
                    "POST",
                    txn_path(self.transactional_id, "/groups"),
                    _answer,
                    json={**self._producer(), "group_id": meta.group_id},
                ),
            )
            self._started = True
            body: dict[str, Any] = {
                **self._producer(),
                "group_id": meta.group_id,
                "offsets": [
                    {"topic": tp.topic, "partition": tp.partition, "offset": int(offset)}
                    for tp, offset in offsets.items()
                ],
            }
            if meta.member_id:
                body.update(member_id=meta.member_id, member_epoch=meta.member_epoch)
            call = Call("POST", txn_path(self.transactional_id, "/offsets"), _answer, json=body)
            route = _cluster.group_route(self.cluster, meta.group_id, call, TXN_BACKOFF_S)
            await _cluster.run_async(client, route)
        except LogbusError as exc:
            raise self._fail(exc) from None

    async def end(self, client: httpx.AsyncClient, commit: bool) -> None:
        """EndTxn, after the facade flushed (commit) or dropped and waited (abort)."""
        if commit:
            self.check_commit()
            self.state = COMMITTING
        try:
            if self._started:
                action = "/commit" if commit else "/abort"
                call = Call(
                    "POST", txn_path(self.transactional_id, action), _answer, json=self._producer()
                )
                await self._run(client, call)
            if not commit and self._bump:
                await self.init(client, bump=True)
        except LogbusError as exc:
            if exc.retriable and self.state in (COMMITTING, ABORTING):
                # Undecided from here: the caller retries the same call (state kept).
                raise
            raise self._fail(exc) from None
        self.added.clear()
        self._started = self._bump = False
        self.error = None
        self.state = READY
