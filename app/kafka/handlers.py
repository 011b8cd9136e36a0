"""The Kafka APIs, each answered from the transport-neutral services HTTP uses.

One handler per API key: ``async (ctx, request body, version) -> response``, the
response a kio message of the request's version (built with :func:`build`, so one body
serves every version). Produce goes through :func:`app.api.produce_service.produce_raw`
(the HTTP binary produce's path: transactional check, auto-create, ``Log.append``'s one
validation and the idempotent producer's checks, acks=all wait); Fetch through
:mod:`app.api.fetch_service` (the same read and long poll as the HTTP fetch), its records
left as file slices for ``os.sendfile`` (:mod:`app.kafka.encode`). Errors are the
:mod:`app.common.errors` classes, answered per partition with their Kafka code.

Concurrency: handlers run on the event loop, one request of a connection at a time
(Kafka's own rule: a broker reads a connection's next request after answering the
previous one), many connections at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity

from app.api.fetch_service import aborted_pairs, lookup_offset, read_log, wait_for_any
from app.api.produce_service import check_not_internal, create_planned, produce_raw
from app.common.errors import (
    BrokerNotAvailable,
    CoordinatorNotAvailable,
    InvalidRecord,
    InvalidRequest,
    InvalidRequiredAcks,
    LogbusError,
    NotLeaderOrFollower,
    UnknownTopicOrPartition,
)
from app.groups.offsets import OffsetCommit
from app.groups.placement import INTERNAL_TOPICS
from app.kafka.encode import SlicedRecords, build, error_code
from app.kafka.versions import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    FETCH,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
    SUPPORTED,
)

if TYPE_CHECKING:
    from app.api.state import AppState

log = logging.getLogger(__name__)

NO_THROTTLE = datetime.timedelta(0)
# Kafka's "not requested" value of authorized-operations fields.
OPERATIONS_OMITTED = -(2**31)
ZERO_UUID = uuid.UUID(int=0)
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
# A request's isolation_level: 0 read_uncommitted, 1 read_committed.
READ_COMMITTED_LEVEL = 1
# Kafka caps a fetch's wait the same way the HTTP fetch does (max_wait_ms).
MAX_WAIT_MS = 60_000


@dataclass(frozen=True, slots=True)
class Context:
    """What the handlers share: the broker's state and where clients reach this broker.
    ``txn`` and ``groups`` give the transaction and group coordinators (None while they
    do not serve: before the lifespan started them, once it stops them)."""

    state: AppState
    advertised: tuple[str, int]
    txn: Callable[[], Any]
    groups: Callable[[], Any]


@cache
def _module(api_key: int, version: int) -> Any:
    """The kio module of this API version's response (its nested message classes)."""
    return import_module(load_response_schema(api_key, version).__module__)


def _ts(ms: int) -> datetime.datetime | None:
    return None if ms < 0 else datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


async def api_versions(ctx: Context, body: Entity | None, version: int) -> Any:
    m = _module(API_VERSIONS, version)
    return build(
        m.ApiVersionsResponse,
        error_code=ErrorCode.none,
        api_keys=api_keys(m),
        throttle_time=NO_THROTTLE,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )


def api_keys(m: Any) -> tuple[Any, ...]:
    return tuple(
        build(m.ApiVersion, api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in sorted(SUPPORTED.items())
    )


def unsupported_api_versions() -> Any:
    """Kafka's answer to an ApiVersions request of a version it does not know: v0 with
    UNSUPPORTED_VERSION and the ranges, from which the client picks a version."""
    m = _module(API_VERSIONS, 0)
    return m.ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=api_keys(m))


def kafka_brokers(ctx: Context) -> dict[int, tuple[str, int]]:
    """The live brokers' advertised Kafka listeners by broker id, sorted: this broker's own
    (``ctx.advertised``, the port actually bound) and the others' from their registrations
    (``/brokers/ids/<id>``'s ``kafka_listener``, through ``Topology.brokers``). A live
    broker without a Kafka listener is left out: a Kafka client could not reach it."""
    topology = ctx.state.topology
    found = {
        broker_id: info.kafka_listener
        for broker_id, info in topology.brokers.items()
        if info.kafka_listener is not None
    }
    found[topology.broker_id] = ctx.advertised
    return dict(sorted(found.items()))


def _controller(ctx: Context, listeners: dict[int, tuple[str, int]]) -> int:
    """The controller's broker id when a Kafka client can reach it (it is in
    ``listeners``), else this broker's own: as a KRaft cluster names a broker to its
    clients. librdkafka sends its admin requests to the named controller and waits
    forever for one it has no endpoint for (seen: DescribeCluster timed out while the
    controller was a broker without a Kafka listener); every admin request the door
    serves is answered by any broker. -1 while there is no controller at all (Kafka's
    "unknown")."""
    controller = ctx.state.topology.controller_id
    if controller is None:
        return -1
    return controller if controller in listeners else ctx.state.topology.broker_id


async def metadata(ctx: Context, body: Any, version: int) -> Any:
    """Kafka's Metadata from the topology: every live broker with a Kafka listener
    (:func:`kafka_brokers`; node id, host, port, rack null) and each partition's leader,
    leader epoch, replicas, ISR and offline replicas. A partition with no leader (an
    election under way) or led by a broker not in the brokers list (no Kafka listener, or
    not registered yet) answers LEADER_NOT_AVAILABLE with leader -1, as Kafka answers for
    a leader it has no endpoint for: the client retries its metadata refresh."""
    m = _module(METADATA, version)
    state = ctx.state
    topology = state.topology
    if body.topics is None or (version == 0 and not body.topics):
        names = sorted(topology.topics())
    else:
        names = [t.name for t in body.topics]
    allow_create = getattr(body, "allow_auto_topic_creation", True)
    listeners = kafka_brokers(ctx)
    topics = [await _topic_metadata(ctx, m, name, allow_create, listeners) for name in names]
    brokers = tuple(
        build(m.MetadataResponseBroker, node_id=broker_id, host=host, port=port, rack=None)
        for broker_id, (host, port) in listeners.items()
    )
    return build(
        m.MetadataResponse,
        throttle_time=NO_THROTTLE,
        brokers=brokers,
        cluster_id=topology.cluster_id,
        controller_id=_controller(ctx, listeners),
        topics=tuple(topics),
        cluster_authorized_operations=OPERATIONS_OMITTED,
    )


async def _topic_metadata(
    ctx: Context, m: Any, name: str, allow_create: bool, listeners: dict[int, tuple[str, int]]
) -> Any:
    state = ctx.state
    topology = state.topology
    try:
        try:
            count = topology.partition_count(name)
        except UnknownTopicOrPartition:
            # Kafka's auto.create.topics.enable, with the HTTP produce's own creation.
            if not (allow_create and state.settings.auto_create_topics_enable):
                raise
            check_not_internal(name)
            assert state.manager is not None
            count = await create_planned(state, state.manager, name)
        partitions = []
        for p in range(count):
            info = topology.partition_info(name, p)
            leader = int(info["leader"])
            reachable = leader in listeners
            partitions.append(
                build(
                    m.MetadataResponsePartition,
                    error_code=ErrorCode.none if reachable else ErrorCode.leader_not_available,
                    partition_index=p,
                    leader_id=leader if reachable else -1,
                    leader_epoch=info["leader_epoch"],
                    replica_nodes=tuple(info["replicas"]),
                    isr_nodes=tuple(info["isr"]),
                    offline_replicas=tuple(topology.offline_replicas(name, p)),
                )
            )
        code = ErrorCode.none
    except LogbusError as exc:
        partitions, code = [], error_code(exc)
    return build(
        m.MetadataResponseTopic,
        error_code=code,
        name=name,
        topic_id=ZERO_UUID,
        is_internal=name in INTERNAL_TOPICS,
        partitions=tuple(partitions),
        topic_authorized_operations=OPERATIONS_OMITTED,
    )


async def describe_cluster(ctx: Context, body: Any, version: int) -> Any:
    """The cluster id, the controller (:func:`_controller`) and the live brokers'
    Kafka listeners, the same list as Metadata's (:func:`kafka_brokers`)."""
    m = _module(DESCRIBE_CLUSTER, version)
    topology = ctx.state.topology
    listeners = kafka_brokers(ctx)
    return build(
        m.DescribeClusterResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,  # brokers
        cluster_id=topology.cluster_id,
        controller_id=_controller(ctx, listeners),
        brokers=tuple(
            build(m.DescribeClusterBroker, broker_id=broker_id, host=host, port=port)
            for broker_id, (host, port) in listeners.items()
        ),
        cluster_authorized_operations=OPERATIONS_OMITTED,
    )


async def produce(ctx: Context, body: Any, version: int) -> Any:
    """Each partition's batches appended as they are; partitions appended concurrently,
    each answered with its own error code. acks=0: no answer at all (Kafka's rule).

    From v10 (KIP-951), a NOT_LEADER_OR_FOLLOWER partition carries its current leader
    and epoch as this broker knows them, and the answer lists those leaders' Kafka
    listeners (``node_endpoints``), so the client retries there without a metadata round trip; a
    leader unknown or without a Kafka listener is left at Kafka's defaults (-1), and the
    client refreshes its metadata as before v10."""
    m = _module(PRODUCE, version)
    state = ctx.state
    assert state.manager is not None
    manager = state.manager
    acks = int(body.acks)
    timeout_ms = max(0, int(body.timeout.total_seconds() * 1000))
    coordinator = ctx.txn()
    hint = hasattr(m, "LeaderIdAndEpoch")  # the version has KIP-951's fields
    endpoints: dict[int, tuple[str, int]] = {}

    def current_leader(exc: LogbusError, topic: str, partition: int) -> dict[str, Any]:
        if not (hint and isinstance(exc, NotLeaderOrFollower)):
            return {}
        leader = exc.leader
        listeners = kafka_brokers(ctx)  # only on this error: off the hot path
        if leader is None or leader not in listeners:
            return {}
        try:
            epoch = int(state.topology.partition_info(topic, partition)["leader_epoch"])
        except LogbusError:
            return {}
        endpoints[leader] = listeners[leader]
        return {"current_leader": build(m.LeaderIdAndEpoch, leader_id=leader, leader_epoch=epoch)}

    async def one(topic: str, partition: int, records: bytes | None) -> Any:
        try:
            if acks not in (0, 1, -1):
                raise InvalidRequiredAcks(f"acks must be 0, 1 or -1, got {acks}")
            if not records:
                raise InvalidRecord(f"no record batches for {topic}-{partition}")
            info = await produce_raw(
                state, manager, topic, partition, bytearray(records), acks, timeout_ms, coordinator
            )
        except LogbusError as exc:
            return build(
                m.PartitionProduceResponse,
                index=partition,
                error_code=error_code(exc),
                base_offset=-1,
                log_append_time=None,
                log_start_offset=-1,
                record_errors=(),
                error_message=exc.message,
                **current_leader(exc, topic, partition),
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
            log_append_time=_ts(info.log_append_time),
            log_start_offset=info.log_start_offset,
            record_errors=(),
            error_message=None,
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
        node_endpoints=tuple(
            build(m.NodeEndpoint, node_id=node, host=host, port=port, rack=None)
            for node, (host, port) in sorted(endpoints.items())
        ),
    )


async def fetch(ctx: Context, body: Any, version: int) -> Any:
    """Each partition read from its leader log; when the whole answer holds fewer than
    ``min_bytes``, a long poll woken by an append to any of them (the answer read again
    after each). Records stay file slices (zero-copy)."""
    m = _module(FETCH, version)
    state = ctx.state
    committed = int(body.isolation_level) == READ_COMMITTED_LEVEL
    budget = min(int(body.max_bytes), state.settings.fetch_max_bytes)
    wait_ms = min(MAX_WAIT_MS, max(0, int(body.max_wait.total_seconds() * 1000)))
    min_bytes = int(body.min_bytes)

    def read_all() -> tuple[list[tuple[str, list[Any]]], int]:
        remaining, total, out = budget, 0, []
        for topic in body.topics:
            parts = []
            for p in topic.partitions:
                data = _read_partition(
                    ctx,
                    m,
                    topic.topic,
                    p,
                    min(int(p.partition_max_bytes), remaining),
                    committed,
                )
                parts.append(data)
                size = len(data.records) if data.records is not None else 0
                total += size
                remaining -= size
            out.append((topic.topic, parts))
        return out, total

    found, total = read_all()
    if total < min_bytes and wait_ms > 0:
        # Woken by an append to any partition asked for, as Kafka's delayed fetch is.
        logs = []
        for topic in body.topics:
            for p in topic.partitions:
                with contextlib.suppress(LogbusError):  # its error is in the answer already
                    logs.append(state.topology.leader_partition(topic.topic, int(p.partition)).log)
        if logs:
            found = await wait_for_any(state.waiters, logs, read_all, min_bytes, wait_ms)
    return build(
        m.FetchResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(
            build(m.FetchableTopicResponse, topic=name, partitions=tuple(parts))
            for name, parts in found
        ),
    )


def _read_partition(
    ctx: Context, m: Any, topic: str, p: Any, max_bytes: int, committed: bool
) -> Any:
    partition = int(p.partition)
    try:
        part = ctx.state.topology.leader_partition(topic, partition)
        epoch = int(getattr(p, "current_leader_epoch", -1))
        part.check_epoch(None if epoch < 0 else epoch)
        if max_bytes <= 0:
            # The request's max_bytes is spent on the partitions before: offsets only, as
            # Kafka answers (a first batch larger than max_bytes is still served whole, so
            # a consumer always progresses).
            log_ = part.log
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
            )
        info = read_log(part.log, int(p.fetch_offset), max_bytes, committed=committed)
    except LogbusError as exc:
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


async def list_offsets(ctx: Context, body: Any, version: int) -> Any:
    m = _module(LIST_OFFSETS, version)
    committed = int(getattr(body, "isolation_level", 0)) == READ_COMMITTED_LEVEL
    topics = []
    for topic in body.topics:
        answers = []
        for p in topic.partitions:
            partition = int(p.partition_index)
            try:
                part = ctx.state.topology.leader_partition(topic.name, partition)
                epoch = int(getattr(p, "current_leader_epoch", -1))
                part.check_epoch(None if epoch < 0 else epoch)
                ts = int(p.timestamp)
                where: str | int = (
                    "latest"
                    if ts == LATEST_TIMESTAMP
                    else "earliest"
                    if ts == EARLIEST_TIMESTAMP
                    else ts
                )
                if isinstance(where, int) and where < 0:
                    raise UnknownTopicOrPartition(topic.name, partition)  # unsupported specials
                offset, found_ts = lookup_offset(part.log, where, committed)
                answers.append(
                    build(
                        m.ListOffsetsPartitionResponse,
                        partition_index=partition,
                        error_code=ErrorCode.none,
                        timestamp=found_ts,
                        offset=offset,
                        leader_epoch=part.leader_epoch,
                    )
                )
            except LogbusError as exc:
                answers.append(
                    build(
                        m.ListOffsetsPartitionResponse,
                        partition_index=partition,
                        error_code=error_code(exc),
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    )
                )
        topics.append(build(m.ListOffsetsTopicResponse, name=topic.name, partitions=tuple(answers)))
    return build(m.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


# (context, request body, version) -> response message, or None for no answer (acks=0)
async def init_producer_id(ctx: Context, body: Any, version: int) -> Any:
    """An idempotent producer's id and epoch (the HTTP ``POST /producers``'s two paths): a
    transactional id goes to the transaction coordinator, else the broker's id block."""
    m = _module(INIT_PRODUCER_ID, version)
    # -1/-1 (and versions before 3): a new producer; Logbus's services take None for that.
    raw_id = int(getattr(body, "producer_id", -1))
    raw_epoch = int(getattr(body, "producer_epoch", -1))
    given_id = None if raw_id < 0 else raw_id
    given_epoch = None if raw_id < 0 else raw_epoch
    try:
        if body.transactional_id is not None:
            coordinator = ctx.txn()
            if coordinator is None:
                raise BrokerNotAvailable("the transaction coordinator is not serving")
            timeout_ms = int(body.transaction_timeout.total_seconds() * 1000)
            pid, epoch = await coordinator.init_producer_id(
                body.transactional_id, timeout_ms, given_id, given_epoch
            )
        else:
            assert ctx.state.manager is not None
            # A new block of ids is persisted (fsync) once per thousand ids: off the loop.
            pid, epoch = await asyncio.to_thread(
                ctx.state.manager.producer_ids.init_producer, given_id, given_epoch
            )
        code = ErrorCode.none
    except LogbusError as exc:
        pid, epoch, code = -1, -1, error_code(exc)
    return build(
        m.InitProducerIdResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        producer_id=pid,
        producer_epoch=epoch,
    )


def _groups(ctx: Context) -> Any:
    coordinator = ctx.groups()
    if coordinator is None or not ctx.state.ready:
        raise CoordinatorNotAvailable(
            "the group coordinator is not serving yet (starting) or stopping"
        )
    return coordinator


async def find_coordinator(ctx: Context, body: Any, version: int) -> Any:
    """The coordinator of a group (key type 0): its broker's Kafka listener, from the
    same list as Metadata (:func:`kafka_brokers`). A coordinator with no Kafka listener
    known (none configured, or its registration not seen yet) answers
    COORDINATOR_NOT_AVAILABLE, which clients retry. Transactional ids (key type 1) come
    with the transaction APIs, a later increment: INVALID_REQUEST until then."""
    m = _module(FIND_COORDINATOR, version)
    key_type = int(getattr(body, "key_type", 0))
    try:
        if key_type != 0:
            # Transactions through the Kafka door are a later increment (README).
            raise InvalidRequest(f"key_type {key_type}: only groups (0) are served here yet")
        info = await _groups(ctx).find_coordinator(body.key, "group")
        listener = kafka_brokers(ctx).get(info.node_id)
        if listener is None:
            raise CoordinatorNotAvailable(
                f"group {body.key!r} is coordinated by broker {info.node_id}, "
                "which has no Kafka listener known here"
            )
        host, port = listener
        return build(
            m.FindCoordinatorResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            node_id=info.node_id,
            host=host,
            port=port,
        )
    except LogbusError as exc:
        return build(
            m.FindCoordinatorResponse,
            throttle_time=NO_THROTTLE,
            error_code=error_code(exc),
            error_message=exc.message,
            node_id=-1,
            host="",
            port=-1,
        )


async def offset_commit(ctx: Context, body: Any, version: int) -> Any:
    """Commit through the group coordinator HTTP's ``POST /groups/{g}/offsets`` uses: one
    store for every door. A Kafka client outside any group (``assign``) commits with
    generation -1 and no member id, which the coordinator takes while the group has no
    members (as Kafka does); all partitions answer the one outcome (all or nothing)."""
    m = _module(OFFSET_COMMIT, version)
    offsets = [
        OffsetCommit(
            t.name,
            int(p.partition_index),
            int(p.committed_offset),
            int(getattr(p, "committed_leader_epoch", -1)),
            p.committed_metadata or "",
        )
        for t in body.topics
        for p in t.partitions
    ]
    try:
        await _groups(ctx).commit_offsets(
            body.group_id, body.member_id, int(body.generation_id_or_member_epoch), offsets
        )
        code = ErrorCode.none
    except LogbusError as exc:
        code = error_code(exc)
    return build(
        m.OffsetCommitResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            build(
                m.OffsetCommitResponseTopic,
                name=t.name,
                partitions=tuple(
                    build(
                        m.OffsetCommitResponsePartition,
                        partition_index=p.partition_index,
                        error_code=code,
                    )
                    for p in t.partitions
                ),
            )
            for t in body.topics
        ),
    )


async def offset_fetch(ctx: Context, body: Any, version: int) -> Any:
    """Committed offsets from the one store (HTTP's ``GET /groups/{g}/offsets``); -1 where
    nothing is committed, every committed partition when ``topics`` is null."""
    m = _module(OFFSET_FETCH, version)
    wanted = (
        None if body.topics is None else {t.name: set(t.partition_indexes) for t in body.topics}
    )
    try:
        found = await _groups(ctx).fetch_committed_offsets(
            body.group_id, None if wanted is None else list(wanted)
        )
        code = ErrorCode.none
    except LogbusError as exc:
        found, code = [], error_code(exc)
    by_topic: dict[str, dict[int, Any]] = {}
    for c in found:
        by_topic.setdefault(c.topic, {})[c.partition] = c
    if wanted is not None:
        for topic, partitions in wanted.items():
            seen = by_topic.setdefault(topic, {})
            by_topic[topic] = {p: seen.get(p) for p in sorted(partitions)}
    return build(
        m.OffsetFetchResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        topics=tuple(
            build(
                m.OffsetFetchResponseTopic,
                name=topic,
                partitions=tuple(
                    build(
                        m.OffsetFetchResponsePartition,
                        partition_index=p,
                        committed_offset=-1 if c is None else c.offset,
                        committed_leader_epoch=-1 if c is None else c.leader_epoch,
                        metadata="" if c is None else c.metadata,
                        error_code=ErrorCode.none,
                    )
                    for p, c in sorted(parts.items())
                ),
            )
            for topic, parts in sorted(by_topic.items())
        ),
    )


Handler = Callable[[Context, Any, int], Awaitable[Any]]

HANDLERS: dict[int, Handler] = {
    API_VERSIONS: api_versions,
    METADATA: metadata,
    DESCRIBE_CLUSTER: describe_cluster,
    PRODUCE: produce,
    FETCH: fetch,
    LIST_OFFSETS: list_offsets,
    INIT_PRODUCER_ID: init_producer_id,
    FIND_COORDINATOR: find_coordinator,
    OFFSET_COMMIT: offset_commit,
    OFFSET_FETCH: offset_fetch,
}
