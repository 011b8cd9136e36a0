"""Produce, Fetch and ListOffsets, on the transport-neutral services HTTP uses.

Produce goes through :func:`app.api.produce_service.produce_raw` (the HTTP binary
produce's path: transactional check, auto-create, ``Log.append``'s one validation and the
idempotent producer's checks, acks=all wait); Fetch through :mod:`app.api.fetch_service`
(the same read and long poll as the HTTP fetch), its records left as file slices for
``os.sendfile`` (:mod:`app.kafka.encode`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from app.api.fetch_service import aborted_pairs, lookup_offset, read_log, wait_for_any
from app.api.produce_service import produce_raw, transactional_headers
from app.api.schema_validation import SchemaValidationFailed
from app.common.errors import (
    FencedLeaderEpoch,
    InvalidRecord,
    InvalidRequiredAcks,
    LogbusError,
    NotLeaderOrFollower,
    OffsetOutOfRange,
    TransactionalIdAuthorizationFailed,
    UnknownTopicId,
    UnknownTopicOrPartition,
)
from app.core.security.acl import Operation, ResourceType
from app.core.topology import topic_id_text
from app.kafka import authorize
from app.kafka.apis.base import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_WAIT_MS,
    NO_THROTTLE,
    READ_COMMITTED_LEVEL,
    ZERO_UUID,
    Context,
    TopicIdNames,
    kafka_brokers,
    partition_answers,
    response_module,
    timestamp,
)
from app.kafka.encode import SlicedRecords, build, error_code
from app.kafka.fetch_sessions import CachedPartition, FetchPlan, Key, SessionError
from app.kafka.versions import (
    FETCH,
    LIST_OFFSETS,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
)

if TYPE_CHECKING:
    pass

# Fetch v7 adds session_id and session_epoch (KIP-227).
SESSIONS_VERSION = 7
# Fetch v13 names topics by id (KIP-516).
TOPIC_IDS_VERSION = 13


def current_leader(
    ctx: Context, topic: str, partition: int, endpoints: dict[int, tuple[str, int]]
) -> tuple[int, int] | None:
    """KIP-951's hint for a partition this broker does not lead (or leads in another
    epoch than the client's): its current leader and epoch as the topology knows them,
    the leader's Kafka listener added to ``endpoints``; None when there is no leader or
    it has no Kafka listener (the client then refreshes its metadata, as before KIP-951).
    Only called on those errors: off the hot path."""
    try:
        info = ctx.state.topology.partition_info(topic, partition)
    except LogbusError:
        return None
    leader = int(info["leader"])
    listeners = kafka_brokers(ctx)
    if leader not in listeners:
        return None
    endpoints[leader] = listeners[leader]
    return leader, int(info["leader_epoch"])


def node_endpoints(m: Any, endpoints: dict[int, tuple[str, int]]) -> tuple[Any, ...]:
    return tuple(
        build(m.NodeEndpoint, node_id=node, host=host, port=port, rack=None)
        for node, (host, port) in sorted(endpoints.items())
    )


async def produce(ctx: Context, body: Any, version: int) -> Any:
    """Each partition's batches appended as they are; partitions appended concurrently,
    each answered with its own error code. acks=0: no answer at all (Kafka's rule).

    From v10 (KIP-951), a NOT_LEADER_OR_FOLLOWER partition carries its current leader
    and epoch as this broker knows them, and the answer lists those leaders' Kafka
    listeners (``node_endpoints``), so the client retries there without a metadata round trip; a
    leader unknown or without a Kafka listener is left at Kafka's defaults (-1), and the
    client refreshes its metadata as before v10."""
    m = response_module(PRODUCE, version)
    state = ctx.state
    assert state.manager is not None
    manager = state.manager
    acks = int(body.acks)
    timeout_ms = max(0, int(body.timeout.total_seconds() * 1000))
    coordinator = ctx.txn()
    transactional_id = getattr(body, "transactional_id", None)
    hint = hasattr(m, "LeaderIdAndEpoch")  # the version has KIP-951's fields
    endpoints: dict[int, tuple[str, int]] = {}

    def leader_hint(exc: LogbusError, topic: str, partition: int) -> dict[str, Any]:
        if not (hint and isinstance(exc, NotLeaderOrFollower)):
            return {}
        found = current_leader(ctx, topic, partition, endpoints)
        if found is None:
            return {}
        leader, epoch = found
        return {"current_leader": build(m.LeaderIdAndEpoch, leader_id=leader, leader_epoch=epoch)}

    def record_errors(exc: LogbusError) -> tuple[Any, ...]:
        """KIP-467: the record that broker-side schema validation refused, by its index."""
        if not isinstance(exc, SchemaValidationFailed) or not hasattr(
            m, "BatchIndexAndErrorMessage"
        ):
            return ()
        return (
            build(
                m.BatchIndexAndErrorMessage,
                batch_index=exc.index,
                batch_index_error_message=exc.message,
            ),
        )

    async def one(topic: str, partition: int, records: bytes | None) -> Any:
        try:
            if unidentified:
                raise TransactionalIdAuthorizationFailed(
                    "transactional batches need the request's transactional_id (and WRITE on "
                    "it); this request names none",
                    resource_type=ResourceType.TRANSACTIONAL_ID.value.upper(),
                    resource_name="",
                    operation=Operation.WRITE.value,
                )
            authorize.check(ctx, Operation.WRITE, ResourceType.TOPIC, topic)
            if transactional_id is not None:
                authorize.check(
                    ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
                )
            if acks not in (0, 1, -1):
                raise InvalidRequiredAcks(f"acks must be 0, 1 or -1, got {acks}")
            if not records:
                raise InvalidRecord(f"no record batches for {topic}-{partition}")
            info = await produce_raw(
                state,
                manager,
                topic,
                partition,
                bytearray(records),
                acks,
                timeout_ms,
                coordinator,
                transactional_id,
            )
        except LogbusError as exc:
            return build(
                m.PartitionProduceResponse,
                index=partition,
                error_code=error_code(exc),
                base_offset=-1,
                log_append_time=None,
                log_start_offset=-1,
                record_errors=record_errors(exc),
                error_message=exc.message,
                **leader_hint(exc, topic, partition),
            )
        # A retried idempotent batch answers its original offsets (Kafka's
        # DUPLICATE_SEQUENCE handling is the same: success with the first append's offset).
        base = (
            info.duplicates[0][0] if info.duplicates and info.duplicates[0] else info.first_offset
        )
        return build(
            m.PartitionProduceResponse,
            index=partition,
            error_code=ErrorCode.none,
            base_offset=base,
            log_append_time=timestamp(info.log_append_time),
            log_start_offset=info.log_start_offset,
            record_errors=(),
            error_message=None,
        )

    # Kafka's rule (KafkaApis.handleProduceRequest): transactional batches anywhere in the
    # request need its transactional id, WRITE on which ``one`` checks; without one every
    # partition is refused, or a principal with WRITE on the topic alone could write into
    # the transaction of any producer id it learnt.
    unidentified = transactional_id is None and any(
        next(transactional_headers(p.records), None) is not None
        for t in body.topic_data
        for p in t.partition_data
        if p.records
    )
    topics = []
    for topic in body.topic_data:
        answers = await asyncio.gather(
            *(one(topic.name, int(p.index), p.records) for p in topic.partition_data)
        )
        topics.append(
            build(m.TopicProduceResponse, name=topic.name, partition_responses=tuple(answers))
        )
    if acks == 0:
        return None
    return build(
        m.ProduceResponse,
        responses=tuple(topics),
        throttle_time=NO_THROTTLE,
        node_endpoints=node_endpoints(m, endpoints),
    )


async def fetch(ctx: Context, body: Any, version: int) -> Any:
    """Each partition read from its leader log; when the whole answer holds fewer than
    ``min_bytes``, a long poll woken by an append to any of them (the answer read again
    after each). Records stay file slices (zero-copy).

    From v7, fetch sessions (KIP-227, :mod:`app.kafka.fetch_sessions`): the partitions read
    are the session's, and an incremental answer holds only those with records, an error
    or changed offsets; a request the session cache refuses is answered with its error
    code and nothing else.

    From v13 topics are named by id (:class:`TopicIdNames`, one request's lookups): an
    id that names no topic (the zero UUID too), or no longer the topic it named when it
    joined the session (deleted, or created again under its name), answers
    UNKNOWN_TOPIC_ID; a session partition of an id that named nothing is looked up again
    on each fetch. A partition named twice in a request is read once (the last entry). A partition answered
    NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH carries its current leader and epoch
    (``current_leader``, v12+) and, from v16, the answer those leaders' Kafka listeners
    (``node_endpoints``, KIP-951): :func:`current_leader`. From v12 a partition given a
    ``last_fetched_epoch`` is checked for divergence first (:func:`_diverging`). The
    follower-only fields of
    v15+ (``replica_state``, v17's ``replica_directory_id``, v18's high watermark in
    it) are read and ignored: the door serves consumers; followers replicate over the
    brokers' own HTTP fetch."""
    m = response_module(FETCH, version)
    state = ctx.state
    uses_ids = version >= TOPIC_IDS_VERSION
    committed = int(body.isolation_level) == READ_COMMITTED_LEVEL
    budget = min(int(body.max_bytes), state.settings.fetch_max_bytes)
    wait_ms = min(MAX_WAIT_MS, max(0, int(body.max_wait.total_seconds() * 1000)))
    min_bytes = int(body.min_bytes)
    names = TopicIdNames(state.topology)
    wanted = [
        CachedPartition(
            name,
            int(p.partition),
            int(p.fetch_offset),
            int(p.partition_max_bytes),
            int(getattr(p, "current_leader_epoch", -1)),
            topic_id=topic_id,
            last_fetched_epoch=int(getattr(p, "last_fetched_epoch", -1)),
        )
        for topic in body.topics
        for name, topic_id in (_named(names, topic, uses_ids),)
        for p in topic.partitions
    ]
    forgotten: list[Key] = [
        ((t.topic_id or ZERO_UUID) if uses_ids else t.topic, int(p))
        for t in getattr(body, "forgotten_topics_data", ())
        for p in t.partitions
    ]
    sessions = ctx.fetch_sessions
    if sessions is None or version < SESSIONS_VERSION:
        # One entry per partition, as Kafka's request map holds them (the last one
        # named wins, at the first one's place): a partition named twice is read once.
        plan = FetchPlan(list(OrderedDict((p.key, p) for p in wanted).values()))
    else:
        try:
            plan = sessions.open(
                ctx.session.principal,
                int(body.session_id),
                int(body.session_epoch),
                wanted,
                forgotten,
                int(time.monotonic() * 1000),
                uses_topic_ids=uses_ids,
            )
        except SessionError as exc:
            return build(
                m.FetchResponse,
                throttle_time=NO_THROTTLE,
                error_code=exc.code,
                session_id=0,
                responses=(),
            )
    parts = plan.partitions
    for p in parts:
        if p.topic_id is not None and not p.topic:
            # An id no topic had when it joined the session may name one now (a broker
            # that learnt of the topic since), as Kafka's sessions resolve it again.
            p.topic = names.name_of(p.topic_id) or ""
    endpoints: dict[int, tuple[str, int]] = {}

    def read_all() -> tuple[list[Any], int]:
        remaining, total, out = budget, 0, []
        endpoints.clear()
        for p in parts:
            data = _read_partition(ctx, m, p, min(p.max_bytes, remaining), committed, endpoints)
            out.append(data)
            size = len(data.records) if data.records is not None else 0
            total += size
            remaining -= size
        return out, total

    found, total = read_all()
    if total < min_bytes and wait_ms > 0:
        # Woken by an append to any partition asked for, as Kafka's delayed fetch is.
        logs = []
        for p in parts:
            with contextlib.suppress(LogbusError):  # its error is in the answer already
                logs.append(state.topology.leader_partition(p.topic, p.partition).log)
        if logs:
            found = await wait_for_any(state.waiters, logs, read_all, min_bytes, wait_ms)
    session = plan.session
    # By topic id from v13 (two unknown ids have no names to tell them apart).
    by_topic: dict[str | Any, tuple[CachedPartition, list[Any]]] = {}
    for p, data in zip(parts, found, strict=True):
        if session is not None and not session.answered(
            p,
            int(data.error_code),
            int(data.high_watermark),
            int(data.last_stable_offset),
            int(data.log_start_offset),
            len(data.records) if data.records is not None else 0,
            plan.incremental,
        ):
            continue
        by_topic.setdefault(p.topic_id if uses_ids else p.topic, (p, []))[1].append(data)
    return build(
        m.FetchResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=plan.session_id,
        responses=tuple(
            build(
                m.FetchableTopicResponse,
                topic=first.topic,
                topic_id=first.topic_id if first.topic_id is not None else ZERO_UUID,
                partitions=tuple(answers),
            )
            for first, answers in by_topic.values()
        ),
        node_endpoints=node_endpoints(m, endpoints) if hasattr(m, "NodeEndpoint") else (),
    )


def _named(names: TopicIdNames, topic: Any, uses_ids: bool) -> tuple[str, Any]:
    """(name, id) of a request's topic: by name before v13 (id None), by id from v13 (""
    for an id that names no topic, the zero UUID included: its partitions answer
    UNKNOWN_TOPIC_ID)."""
    if not uses_ids:
        return topic.topic, None
    topic_id = topic.topic_id or ZERO_UUID
    return names.name_of(topic_id) or "", topic_id


def _read_partition(
    ctx: Context,
    m: Any,
    p: CachedPartition,
    max_bytes: int,
    committed: bool,
    endpoints: dict[int, tuple[str, int]],
) -> Any:
    topic, partition = p.topic, p.partition
    try:
        if p.topic_id is not None and (not topic or _current_id(ctx, topic) != p.topic_id):
            raise UnknownTopicId(topic_id_text(p.topic_id))
        authorize.check(ctx, Operation.READ, ResourceType.TOPIC, topic)
        part = ctx.state.topology.leader_partition(topic, partition)
        epoch = p.leader_epoch
        part.check_epoch(None if epoch < 0 else epoch)
        if p.last_fetched_epoch >= 0:
            diverging = _diverging(m, part.log, p, committed)
            if diverging is not None:
                return diverging
        if max_bytes <= 0:
            # The request's max_bytes is spent on the partitions before: offsets only, as
            # Kafka answers (a first batch larger than max_bytes is still served whole, so
            # a consumer always progresses).
            return _no_records(m, partition, part.log, committed)
        info = read_log(part.log, p.fetch_offset, max_bytes, committed=committed)
    except LogbusError as exc:
        hint: dict[str, Any] = {}
        if isinstance(exc, (NotLeaderOrFollower, FencedLeaderEpoch)) and hasattr(
            m, "LeaderIdAndEpoch"
        ):
            found = current_leader(ctx, topic, partition, endpoints)
            if found is not None:
                hint["current_leader"] = build(
                    m.LeaderIdAndEpoch, leader_id=found[0], leader_epoch=found[1]
                )
        return build(
            m.PartitionData,
            partition_index=partition,
            error_code=error_code(exc),
            high_watermark=-1,
            last_stable_offset=-1,
            log_start_offset=-1,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=None,
            **hint,
        )
    aborted = aborted_pairs(info)
    lso = info.last_stable_offset if committed else part.log.last_stable_offset
    return build(
        m.PartitionData,
        partition_index=partition,
        error_code=ErrorCode.none,
        high_watermark=info.high_watermark,
        last_stable_offset=lso,
        log_start_offset=info.log_start_offset,
        aborted_transactions=None
        if aborted is None
        else tuple(
            build(m.AbortedTransaction, producer_id=pid, first_offset=first)
            for pid, first in aborted
        ),
        preferred_read_replica=-1,
        records=SlicedRecords(info.slices),
    )


def _diverging(m: Any, log_: Any, p: CachedPartition, committed: bool) -> Any:
    """KIP-595/KIP-320's divergence check of Fetch v12+, as Kafka's ``Partition.readRecords``
    makes it: where the client's ``last_fetched_epoch`` ends in this log (the epoch cache,
    as OffsetForLeaderEpoch answers); an epoch this log cannot place, or a fetch offset
    below the log start, is OFFSET_OUT_OF_RANGE; an epoch that ended before the fetch
    offset (or a smaller epoch found) answers no records and ``diverging_epoch``, from
    which the client truncates. None when the fetch goes on as usual."""
    epoch, end = log_.leader_epoch_cache.end_offset_for(p.last_fetched_epoch)
    if epoch < 0 or end < 0 or p.fetch_offset < log_.log_start_offset:
        raise OffsetOutOfRange(
            p.topic, p.partition, p.fetch_offset, log_.log_start_offset, log_.log_end_offset
        )
    if epoch >= p.last_fetched_epoch and end >= p.fetch_offset:
        return None
    return _no_records(
        m,
        p.partition,
        log_,
        committed,
        diverging_epoch=build(m.EpochEndOffset, epoch=epoch, end_offset=end),
    )


def _no_records(m: Any, partition: int, log_: Any, committed: bool, **extra: Any) -> Any:
    """A partition answered with its log's offsets and no records (and ``extra``'s
    fields): when the request's max_bytes is spent, or with a divergence."""
    return build(
        m.PartitionData,
        partition_index=partition,
        error_code=ErrorCode.none,
        high_watermark=log_.high_watermark,
        last_stable_offset=log_.last_stable_offset,
        log_start_offset=log_.log_start_offset,
        aborted_transactions=() if committed else None,
        preferred_read_replica=-1,
        records=SlicedRecords(()),
        **extra,
    )


def _current_id(ctx: Context, topic: str) -> Any:
    try:
        return ctx.state.topology.topic_id(topic)
    except UnknownTopicOrPartition:
        return None


async def list_offsets(ctx: Context, body: Any, version: int) -> Any:
    m = response_module(LIST_OFFSETS, version)
    committed = int(getattr(body, "isolation_level", 0)) == READ_COMMITTED_LEVEL

    async def offset_of(topic: str, partition: int, p: Any) -> dict[str, Any]:
        authorize.check(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic)
        part = ctx.state.topology.leader_partition(topic, partition)
        epoch = int(getattr(p, "current_leader_epoch", -1))
        part.check_epoch(None if epoch < 0 else epoch)
        ts = int(p.timestamp)
        where: str | int = (
            "latest" if ts == LATEST_TIMESTAMP else "earliest" if ts == EARLIEST_TIMESTAMP else ts
        )
        if isinstance(where, int) and where < 0:
            raise UnknownTopicOrPartition(topic, partition)  # unsupported specials
        offset, found_ts = lookup_offset(part.log, where, committed)
        return {"timestamp": found_ts, "offset": offset, "leader_epoch": part.leader_epoch}

    topics = await partition_answers(
        body.topics,
        m.ListOffsetsTopicResponse,
        m.ListOffsetsPartitionResponse,
        offset_of,
        {"timestamp": -1, "offset": -1, "leader_epoch": -1},
    )
    return build(m.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=topics)


async def offset_for_leader_epoch(ctx: Context, body: Any, version: int) -> Any:
    """Where a leader epoch ends, per partition, from the leader log's epoch cache (as
    ``GET /topics/{t}/partitions/{p}/epochs/{e}/end-offset``): the largest epoch at or
    below the one asked for and its end offset (the next epoch's start, or the log end
    for the current epoch), -1/-1 when unknown. A client checks after a leader change
    that its position was not truncated away (KIP-320). The caller's
    ``current_leader_epoch`` is checked as Fetch checks it (FENCED_LEADER_EPOCH,
    UNKNOWN_LEADER_EPOCH); a partition led elsewhere answers NOT_LEADER_OR_FOLLOWER."""
    m = response_module(OFFSET_FOR_LEADER_EPOCH, version)

    async def epoch_end(topic: str, partition: int, p: Any) -> dict[str, Any]:
        authorize.check(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic)
        part = ctx.state.topology.leader_partition(topic, partition)
        current = int(p.current_leader_epoch)
        part.check_epoch(None if current < 0 else current)
        epoch, end = part.log.leader_epoch_cache.end_offset_for(int(p.leader_epoch))
        return {"leader_epoch": epoch, "end_offset": end}

    topics = await partition_answers(
        body.topics,
        m.OffsetForLeaderTopicResult,
        m.EpochEndOffset,
        epoch_end,
        {"leader_epoch": -1, "end_offset": -1},
        name_field="topic",
        index_field="partition",
    )
    return build(m.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE, topics=topics)


# (context, request body, version) -> response message, or None for no answer (acks=0)
