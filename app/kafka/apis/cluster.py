"""ApiVersions, Metadata and DescribeCluster: what a client learns before anything else."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity

from app.api.produce_service import check_not_internal, create_planned
from app.common.errors import (
    InvalidRequest,
    LogbusError,
    UnknownTopicId,
    UnknownTopicOrPartition,
)
from app.core.security.acl import Operation, ResourceType
from app.core.topology import topic_id_text
from app.groups.placement import INTERNAL_TOPICS
from app.kafka import authorize
from app.kafka.apis.base import (
    NO_THROTTLE,
    OPERATIONS_OMITTED,
    ZERO_UUID,
    Context,
    TopicIdNames,
    kafka_brokers,
    response_module,
)
from app.kafka.encode import build, error_code
from app.kafka.versions import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    METADATA,
    SUPPORTED,
)

if TYPE_CHECKING:
    pass


async def api_versions(ctx: Context, body: Entity | None, version: int) -> Any:
    m = response_module(API_VERSIONS, version)
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
    m = response_module(API_VERSIONS, 0)
    return m.ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=api_keys(m))


def controller_of(ctx: Context, listeners: dict[int, tuple[str, int]]) -> int:
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


# Metadata v12 may name a topic by id (v10 and v11 have the field, which Kafka never
# served: a request using it is INVALID_REQUEST).
TOPIC_ID_LOOKUP_VERSION = 12


async def metadata(ctx: Context, body: Any, version: int) -> Any:
    """Kafka's Metadata from the topology: every live broker with a Kafka listener
    (:func:`kafka_brokers`; node id, host, port, rack null) and each partition's leader,
    leader epoch, replicas, ISR and offline replicas. A partition with no leader (an
    election under way) or led by a broker not in the brokers list (no Kafka listener, or
    not registered yet) answers LEADER_NOT_AVAILABLE with leader -1, as Kafka answers for
    a leader it has no endpoint for: the client retries its metadata refresh.

    From v10 each topic carries its id (:meth:`Topology.topic_id`: the same on every
    broker, kept across restarts). v12 may ask for a topic by id alone (name null): an
    unknown id answers UNKNOWN_TOPIC_ID, a topic the principal may not DESCRIBE
    TOPIC_AUTHORIZATION_FAILED, both with the name left null (a name is not revealed
    to whoever guessed an id); ids never auto-create. v10 and v11 requests using ids are
    INVALID_REQUEST for every topic, as Kafka answers them."""
    m = response_module(METADATA, version)
    state = ctx.state
    topology = state.topology
    wanted: list[tuple[str | None, Any]]  # (name, id) as asked
    if body.topics is None or (version == 0 and not body.topics):
        # All topics: those the principal may not DESCRIBE are left out, as Kafka does.
        wanted = [
            (n, None)
            for n in sorted(topology.topics())
            if authorize.permitted(ctx, Operation.DESCRIBE, ResourceType.TOPIC, n)
        ]
    else:
        wanted = [(t.name, getattr(t, "topic_id", None)) for t in body.topics]
    allow_create = getattr(body, "allow_auto_topic_creation", True)
    listeners = kafka_brokers(ctx)
    by_id_refused = version < TOPIC_ID_LOOKUP_VERSION and any(
        name is None or (topic_id is not None and topic_id != ZERO_UUID)
        for name, topic_id in wanted
    )
    topics = []
    ids = TopicIdNames(topology)  # thousands of unknown ids cost one pass over the topics
    for name, topic_id in wanted:
        if by_id_refused:
            topics.append(
                _topic_error(
                    m,
                    name or "",
                    topic_id,
                    InvalidRequest(
                        f"Metadata v{version} cannot name topics by id (v{TOPIC_ID_LOOKUP_VERSION}+)"
                    ),
                )
            )
        elif name is None:
            topics.append(_topic_by_id(ctx, m, ids, topic_id, listeners))
        else:
            topics.append(await _topic_metadata(ctx, m, name, allow_create, listeners))
    if getattr(body, "include_topic_authorized_operations", False):
        # v8+: what the principal may do with each topic answered (Kafka's bit field).
        topics = [
            dataclasses.replace(
                t,
                topic_authorized_operations=authorize.authorized_operations(
                    ctx, ResourceType.TOPIC, t.name
                ),
            )
            if t.error_code is ErrorCode.none
            else t
            for t in topics
        ]
    brokers = tuple(
        build(m.MetadataResponseBroker, node_id=broker_id, host=host, port=port, rack=None)
        for broker_id, (host, port) in listeners.items()
    )
    return build(
        m.MetadataResponse,
        throttle_time=NO_THROTTLE,
        brokers=brokers,
        cluster_id=topology.cluster_id,
        controller_id=controller_of(ctx, listeners),
        topics=tuple(topics),
        cluster_authorized_operations=_cluster_operations(ctx, body),
    )


def _cluster_operations(ctx: Context, body: Any) -> int:
    """Metadata v8-10's and DescribeCluster's ``cluster_authorized_operations``: the bit
    field when the request asks for it, else Kafka's "omitted"."""
    if getattr(body, "include_cluster_authorized_operations", False):
        return authorize.authorized_operations(ctx, ResourceType.CLUSTER)
    return OPERATIONS_OMITTED


def _topic_error(m: Any, name: str | None, topic_id: Any, exc: LogbusError) -> Any:
    return build(
        m.MetadataResponseTopic,
        error_code=error_code(exc),
        name=name,
        topic_id=topic_id if topic_id is not None else ZERO_UUID,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=OPERATIONS_OMITTED,
    )


def _topic_by_id(
    ctx: Context, m: Any, ids: TopicIdNames, topic_id: Any, listeners: dict[int, tuple[str, int]]
) -> Any:
    """A v12 lookup by id (see :func:`metadata`)."""
    try:
        name = ids.name_of(topic_id)
        if name is None:
            raise UnknownTopicId(topic_id_text(topic_id if topic_id is not None else ZERO_UUID))
        authorize.check(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name)
        count = ctx.state.topology.partition_count(name)
    except UnknownTopicOrPartition as exc:
        unknown = exc if isinstance(exc, UnknownTopicId) else UnknownTopicId(str(topic_id))
        return _topic_error(m, None, topic_id, unknown)
    except LogbusError as exc:
        return _topic_error(m, None, topic_id, exc)
    return build(
        m.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=name,
        topic_id=topic_id,
        is_internal=name in INTERNAL_TOPICS,
        partitions=_partitions(ctx, m, name, count, listeners),
        topic_authorized_operations=OPERATIONS_OMITTED,
    )


def _partitions(
    ctx: Context, m: Any, name: str, count: int, listeners: dict[int, tuple[str, int]]
) -> tuple[Any, ...]:
    topology = ctx.state.topology
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
    return tuple(partitions)


async def _topic_metadata(
    ctx: Context, m: Any, name: str, allow_create: bool, listeners: dict[int, tuple[str, int]]
) -> Any:
    state = ctx.state
    topology = state.topology
    try:
        authorize.check(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name)
        try:
            count = topology.partition_count(name)
        except UnknownTopicOrPartition:
            # Kafka's auto.create.topics.enable, with the HTTP produce's own creation.
            if not (allow_create and state.settings.auto_create_topics_enable):
                raise
            if not authorize.permitted(ctx, Operation.CREATE, None):
                authorize.check(ctx, Operation.CREATE, ResourceType.TOPIC, name)
            check_not_internal(name)
            assert state.manager is not None
            count = await create_planned(state, state.manager, name)
        partitions = _partitions(ctx, m, name, count, listeners)
        topic_id = topology.topic_id(name)
        code = ErrorCode.none
    except LogbusError as exc:
        partitions, code, topic_id = (), error_code(exc), ZERO_UUID
    return build(
        m.MetadataResponseTopic,
        error_code=code,
        name=name,
        topic_id=topic_id,
        is_internal=name in INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=OPERATIONS_OMITTED,
    )


async def describe_cluster(ctx: Context, body: Any, version: int) -> Any:
    """The cluster id, the controller (:func:`controller_of`) and the live brokers'
    Kafka listeners, the same list as Metadata's (:func:`kafka_brokers`)."""
    m = response_module(DESCRIBE_CLUSTER, version)
    topology = ctx.state.topology
    listeners = kafka_brokers(ctx)
    return build(
        m.DescribeClusterResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,  # brokers
        cluster_id=topology.cluster_id,
        controller_id=controller_of(ctx, listeners),
        brokers=tuple(
            build(m.DescribeClusterBroker, broker_id=broker_id, host=host, port=port)
            for broker_id, (host, port) in listeners.items()
        ),
        cluster_authorized_operations=_cluster_operations(ctx, body),
    )
