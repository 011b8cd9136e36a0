"""InitProducerId and the transaction APIs, on the transaction coordinator HTTP uses.

Each handler translates one Kafka request into the :class:`app.txn.TransactionCoordinator`
call the HTTP routes of ``app/api/routers/transactions.py`` make (FindCoordinator of a
transactional id, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit, DescribeTransactions, ListTransactions); the rules (states, fencing,
markers, append permits) are the coordinator's, answered here with Kafka's error codes
(:func:`app.kafka.encode.error_code`, by the error's Kafka name). Two translations are
the door's, as Kafka's broker makes them per version:

* a transactional id the coordinator does not know is TRANSACTIONAL_ID_NOT_FOUND in the
  one error tree (HTTP's 404); Kafka answers INVALID_PRODUCER_ID_MAPPING to a producer's
  AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit for it (clients treat
  that as abortable), and TRANSACTIONAL_ID_NOT_FOUND only from DescribeTransactions;
* PRODUCER_FENCED is answered to the versions that know it (KIP-588: InitProducerId v4,
  AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2, TxnOffsetCommit v3), older ones get
  INVALID_PRODUCER_EPOCH, as Kafka does.

DescribeProducers asks no coordinator: per partition, the producers the leader log's
producer state keeps (:meth:`app.core.log.log.Log.active_producers`, read under the log's
lock in one worker thread for the request), found through the ``Topology`` as any leader
read is: a partition led elsewhere NOT_LEADER_OR_FOLLOWER, one that does not exist
UNKNOWN_TOPIC_OR_PARTITION, and without READ on the topic TOPIC_AUTHORIZATION_FAILED
(Kafka's ``KafkaApis.handleDescribeProducersRequest``). ``last_timestamp`` is the
producer's last append time on this broker's clock (Kafka's is its last batch's
timestamp).

Versions stop before KIP-890's (AddPartitionsToTxn v4+ batches transactions for brokers,
EndTxn v4+/AddOffsetsToTxn v4+/TxnOffsetCommit v4+ add TRANSACTION_ABORTABLE): see
:mod:`app.kafka.versions`.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from app.common.errors import (
    BrokerNotAvailable,
    InvalidRequest,
    InvalidTopic,
    LogbusError,
    TransactionalIdNotFound,
    UnknownTopicOrPartition,
)
from app.core.security.acl import Operation, ResourceType
from app.groups.placement import INTERNAL_TOPICS
from app.kafka import authorize
from app.kafka.apis.base import (
    NO_THROTTLE,
    Context,
    offset_commits,
    per_partition_answer,
    response_module,
    timestamp,
)
from app.kafka.encode import build, error_code, per_partition
from app.kafka.versions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    INIT_PRODUCER_ID,
    LIST_TRANSACTIONS,
    TXN_OFFSET_COMMIT,
)

if TYPE_CHECKING:
    from app.core.log.log import Log
    from app.core.log.producer_state import ActiveProducer
    from app.txn import TransactionCoordinator

# The first version of each API that knows PRODUCER_FENCED (KIP-588); older versions
# get INVALID_PRODUCER_EPOCH, as Kafka answers them.
_FENCED_SINCE = {
    INIT_PRODUCER_ID: 4,
    ADD_PARTITIONS_TO_TXN: 2,
    ADD_OFFSETS_TO_TXN: 2,
    END_TXN: 2,
    TXN_OFFSET_COMMIT: 3,
}
# Kafka's -1 "no transaction started" as a kio timestamp (its writer rounds to -1 ms).
_NO_START = datetime.datetime.fromtimestamp(-0.001, datetime.UTC)


def txn_coordinator(ctx: Context) -> TransactionCoordinator:
    coordinator: TransactionCoordinator | None = ctx.txn()
    if coordinator is None or not ctx.state.ready:
        raise BrokerNotAvailable(
            "the transaction coordinator is not serving (starting or stopping)"
        )
    return coordinator


def producer_code(exc: BaseException, api_key: int, version: int) -> ErrorCode:
    """The Kafka code answered to a transactional producer's request (module docstring)."""
    if isinstance(exc, TransactionalIdNotFound):
        return ErrorCode.invalid_producer_id_mapping
    code = error_code(exc)
    if code is ErrorCode.producer_fenced and version < _FENCED_SINCE.get(api_key, 0):
        return ErrorCode.invalid_producer_epoch
    return code


async def txn_coordinator_node(ctx: Context, key: str) -> int:
    """FindCoordinator of a transactional id (key type 1): the broker id of the leader of
    the id's ``__transaction_state`` partition (the topic created on first use);
    COORDINATOR_NOT_AVAILABLE (retriable) while it has none. The answer itself is
    :func:`app.kafka.apis.groups.find_coordinator`'s, as for a group."""
    authorize.check(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key)
    node_id, _ = await txn_coordinator(ctx).find_coordinator(key)
    return node_id


async def init_producer_id(ctx: Context, body: Any, version: int) -> Any:
    """An idempotent producer's id and epoch (the HTTP ``POST /producers``'s two paths): a
    transactional id goes to the transaction coordinator, else the broker's id block."""
    m = response_module(INIT_PRODUCER_ID, version)
    # -1/-1 (and versions before 3): a new producer; Logbus's services take None for that,
    # and refuse half a pair (INVALID_REQUEST, as Kafka): an id with epoch -1 passed on as
    # -1 would match a last epoch of -1 and bump past the instance that fenced it.
    raw_id = int(getattr(body, "producer_id", -1))
    raw_epoch = int(getattr(body, "producer_epoch", -1))
    given_id = None if raw_id < 0 else raw_id
    given_epoch = None if raw_epoch < 0 else raw_epoch
    try:
        if body.transactional_id is not None:
            authorize.check(
                ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id
            )
            timeout_ms = int(body.transaction_timeout.total_seconds() * 1000)
            pid, epoch = await txn_coordinator(ctx).init_producer_id(
                body.transactional_id, timeout_ms, given_id, given_epoch
            )
        else:
            # KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
            if not authorize.permitted_any_topic(ctx, Operation.WRITE):
                authorize.check(ctx, Operation.IDEMPOTENT_WRITE, None)
            assert ctx.state.manager is not None
            # A new block of ids is persisted (fsync) once per thousand ids: off the loop.
            pid, epoch = await asyncio.to_thread(
                ctx.state.manager.producer_ids.init_producer, given_id, given_epoch
            )
        code = ErrorCode.none
    except LogbusError as exc:
        pid, epoch = -1, -1
        code = error_code(exc)
        if code is ErrorCode.producer_fenced and version < _FENCED_SINCE[INIT_PRODUCER_ID]:
            code = ErrorCode.invalid_producer_epoch
    return build(
        m.InitProducerIdResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        producer_id=pid,
        producer_epoch=epoch,
    )


def _partition_error(ctx: Context, topic: str, partition: int) -> LogbusError | None:
    """Why the coordinator refused this partition of an AddPartitionsToTxn, if it did:
    the per-partition part of its all-or-nothing refusal (Kafka names the bad partitions
    and answers OPERATION_NOT_ATTEMPTED for the others)."""
    if topic in INTERNAL_TOPICS:
        return InvalidTopic(topic, "it is internal to the broker")
    try:
        if partition < 0 or partition >= ctx.state.topology.partition_count(topic):
            return UnknownTopicOrPartition(topic, partition)
    except LogbusError as exc:
        return exc
    return None


async def add_partitions_to_txn(ctx: Context, body: Any, version: int) -> Any:
    """AddPartitionsToTxn (client versions, v0-v3): the partitions join the producer's
    transaction (:meth:`TransactionCoordinator.add_partitions`, all or none). When it
    refuses because of some partitions (unknown, internal), those carry the error and the
    rest OPERATION_NOT_ATTEMPTED; any other error is every partition's, as Kafka answers."""
    m = response_module(ADD_PARTITIONS_TO_TXN, version)
    topics = body.v3_and_below_topics
    wanted = [(t.name, int(p)) for t in topics for p in t.partitions]
    codes: dict[tuple[str, int], ErrorCode] = {}
    try:
        authorize.check(
            ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.v3_and_below_transactional_id
        )
        denied = {
            t.name
            for t in topics
            if not authorize.permitted(ctx, Operation.WRITE, ResourceType.TOPIC, t.name)
        }
        if denied:
            # Kafka's answer: the refused topics' partitions, the others not attempted.
            for tp in wanted:
                codes[tp] = (
                    ErrorCode.topic_authorization_failed
                    if tp[0] in denied
                    else ErrorCode.operation_not_attempted
                )
            wanted = []
        if wanted:
            await txn_coordinator(ctx).add_partitions(
                body.v3_and_below_transactional_id,
                int(body.v3_and_below_producer_id),
                int(body.v3_and_below_producer_epoch),
                wanted,
            )
    except (UnknownTopicOrPartition, InvalidTopic) as exc:
        for tp in wanted:
            bad = _partition_error(ctx, *tp)
            codes[tp] = ErrorCode.operation_not_attempted if bad is None else error_code(bad)
        if all(c is ErrorCode.operation_not_attempted for c in codes.values()):
            codes = dict.fromkeys(wanted, error_code(exc))
    except LogbusError as exc:
        codes = dict.fromkeys(wanted, producer_code(exc, ADD_PARTITIONS_TO_TXN, version))
    return build(
        m.AddPartitionsToTxnResponse,
        throttle_time=NO_THROTTLE,
        results_by_topic_v3_and_below=per_partition(
            topics,
            m.AddPartitionsToTxnTopicResult,
            m.AddPartitionsToTxnPartitionResult,
            lambda topic, p: codes.get((topic, p), ErrorCode.none),
            partitions_field="results_by_partition",
            code_field="partition_error_code",
        ),
    )


async def add_offsets_to_txn(ctx: Context, body: Any, version: int) -> Any:
    """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction
    (:meth:`TransactionCoordinator.add_offsets`, as ``POST /transactions/{id}/groups``)."""
    m = response_module(ADD_OFFSETS_TO_TXN, version)
    try:
        authorize.check(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
        authorize.check(ctx, Operation.READ, ResourceType.GROUP, body.group_id)
        await txn_coordinator(ctx).add_offsets(
            body.transactional_id, int(body.producer_id), int(body.producer_epoch), body.group_id
        )
        code = ErrorCode.none
    except LogbusError as exc:
        code = producer_code(exc, ADD_OFFSETS_TO_TXN, version)
    return build(m.AddOffsetsToTxnResponse, throttle_time=NO_THROTTLE, error_code=code)


async def end_txn(ctx: Context, body: Any, version: int) -> Any:
    """EndTxn: commit or abort (:meth:`TransactionCoordinator.end_txn`, as ``POST
    /transactions/{id}/commit`` and ``/abort``). Answered once the decision is durable;
    markers a partition could not take yet are written by the coordinator's timer (the
    id answers CONCURRENT_TRANSACTIONS, retriable, meanwhile)."""
    m = response_module(END_TXN, version)
    try:
        authorize.check(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
        await txn_coordinator(ctx).end_txn(
            body.transactional_id,
            int(body.producer_id),
            int(body.producer_epoch),
            bool(body.committed),
        )
        code = ErrorCode.none
    except LogbusError as exc:
        code = producer_code(exc, END_TXN, version)
    return build(m.EndTxnResponse, throttle_time=NO_THROTTLE, error_code=code)


async def txn_offset_commit(ctx: Context, body: Any, version: int) -> Any:
    """TxnOffsetCommit (sent to the group's coordinator): the offsets written in the
    producer's transaction, visible once it commits, through
    :meth:`TransactionCoordinator.txn_offset_commit`, the path ``POST
    /transactions/{id}/offsets`` takes. From v3 (KIP-447) a member id and generation
    name the group member (generation -1: no check). One outcome for every partition."""
    m = response_module(TXN_OFFSET_COMMIT, version)
    offsets = offset_commits(body.topics)
    generation = int(getattr(body, "generation_id", -1))
    try:
        if not offsets:
            raise InvalidRequest("TxnOffsetCommit names no partitions")
        authorize.check(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
        authorize.check(ctx, Operation.READ, ResourceType.GROUP, body.group_id)
        for topic in {o.topic for o in offsets}:
            authorize.check(ctx, Operation.READ, ResourceType.TOPIC, topic)
        await txn_coordinator(ctx).txn_offset_commit(
            body.transactional_id,
            int(body.producer_id),
            int(body.producer_epoch),
            body.group_id,
            offsets,
            getattr(body, "member_id", None) or None,
            generation if generation >= 0 else -1,
        )
        code = ErrorCode.none
    except LogbusError as exc:
        code = producer_code(exc, TXN_OFFSET_COMMIT, version)
    return per_partition_answer(m, "TxnOffsetCommit", body.topics, lambda _topic, _p: code)


async def describe_transactions(ctx: Context, body: Any, version: int) -> Any:
    """DescribeTransactions: each id as ``GET /transactions/{id}`` describes it
    (:meth:`TransactionCoordinator.describe`), or its error (TRANSACTIONAL_ID_NOT_FOUND,
    NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)."""
    m = response_module(DESCRIBE_TRANSACTIONS, version)
    states = []
    for tid in body.transactional_ids:
        try:
            authorize.check(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid)
            d = txn_coordinator(ctx).describe(tid)
            start = d["transaction_start_time_ms"]
            states.append(
                build(
                    m.TransactionState,
                    error_code=ErrorCode.none,
                    transactional_id=tid,
                    transaction_state=d["transaction_state"],
                    transaction_timeout=datetime.timedelta(
                        milliseconds=d["transaction_timeout_ms"]
                    ),
                    transaction_start_time=timestamp(start) or _NO_START,
                    producer_id=d["producer_id"],
                    producer_epoch=d["producer_epoch"],
                    topics=tuple(
                        build(m.TopicData, topic=t["topic"], partitions=tuple(t["partitions"]))
                        for t in d["topics"]
                    ),
                )
            )
        except LogbusError as exc:
            states.append(
                build(
                    m.TransactionState,
                    error_code=error_code(exc),
                    transactional_id=tid,
                    transaction_state="",
                    transaction_timeout=datetime.timedelta(0),
                    transaction_start_time=_NO_START,
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=(),
                )
            )
    return build(
        m.DescribeTransactionsResponse, throttle_time=NO_THROTTLE, transaction_states=tuple(states)
    )


async def list_transactions(ctx: Context, body: Any, version: int) -> Any:
    """ListTransactions: the ids this broker coordinates (Kafka's admin clients ask every
    broker), filtered by states, producer ids and, from v1 (KIP-994), running longer than
    ``duration_filter`` ms (-1: any); unknown state names are reported back. As ``GET
    /transactions``."""
    m = response_module(LIST_TRANSACTIONS, version)
    duration = int(getattr(body, "duration_filter", -1))
    try:
        listed = txn_coordinator(ctx).list_transactions(
            tuple(body.state_filters),
            tuple(int(p) for p in body.producer_id_filters),
            None if duration < 0 else duration,
        )
        code = ErrorCode.none
    except LogbusError as exc:
        listed, code = {"unknown_state_filters": [], "transaction_states": []}, error_code(exc)
    return build(
        m.ListTransactionsResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        unknown_state_filters=tuple(listed["unknown_state_filters"]),
        transaction_states=tuple(
            build(
                m.TransactionState,
                transactional_id=t["transactional_id"],
                producer_id=t["producer_id"],
                transaction_state=t["transaction_state"],
            )
            for t in listed["transaction_states"]
            if authorize.permitted(
                ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t["transactional_id"]
            )
        ),
    )


async def describe_producers(ctx: Context, body: Any, version: int) -> Any:
    """The active producers of each partition asked, or its error (module docstring)."""
    m = response_module(DESCRIBE_PRODUCERS, version)
    topology = ctx.state.topology
    # Per (topic, partition) in the request's order: the leader's log, or the error.
    found: list[tuple[str, list[tuple[int, Log | LogbusError]]]] = []
    for t in body.topics:
        refusal: LogbusError | None = None
        try:
            authorize.check(ctx, Operation.READ, ResourceType.TOPIC, t.name)
        except LogbusError as exc:
            refusal = exc
        partitions: list[tuple[int, Log | LogbusError]] = []
        for index in t.partition_indexes:
            partition = int(index)
            if refusal is not None:
                partitions.append((partition, refusal))
                continue
            try:
                partitions.append((partition, topology.leader_partition(t.name, partition).log))
            except LogbusError as exc:
                partitions.append((partition, exc))
        found.append((t.name, partitions))

    def read() -> list[list[list[ActiveProducer] | LogbusError]]:
        return [
            [got if isinstance(got, LogbusError) else got.active_producers() for _, got in parts]
            for _, parts in found
        ]

    states = await asyncio.to_thread(read)

    def partition_answer(index: int, state: list[ActiveProducer] | LogbusError) -> Any:
        if isinstance(state, LogbusError):
            return build(
                m.PartitionResponse,
                partition_index=index,
                error_code=error_code(state),
                error_message=state.message,
                active_producers=(),
            )
        return build(
            m.PartitionResponse,
            partition_index=index,
            error_code=ErrorCode.none,
            error_message=None,
            active_producers=tuple(
                build(
                    m.ProducerState,
                    producer_id=p.producer_id,
                    producer_epoch=p.producer_epoch,
                    last_sequence=p.last_sequence,
                    last_timestamp=p.last_timestamp,
                    coordinator_epoch=p.coordinator_epoch,
                    current_txn_start_offset=p.current_txn_start_offset,
                )
                for p in state
            ),
        )

    return build(
        m.DescribeProducersResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            build(
                m.TopicResponse,
                name=name,
                partitions=tuple(
                    partition_answer(index, state)
                    for (index, _), state in zip(parts, answered, strict=True)
                ),
            )
            for (name, parts), answered in zip(found, states, strict=True)
        ),
    )
