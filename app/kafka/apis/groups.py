"""The group APIs, on the group coordinator HTTP and WebSocket use.

FindCoordinator, OffsetCommit, OffsetFetch, OffsetDelete; the classic protocol (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup: :mod:`app.groups.classic`, the clients' own assignors
run by the leader member); ListGroups, DescribeGroups, DeleteGroups. Committed offsets are
the one store every door uses (``__consumer_offsets``); a classic group is listed,
described, lagged and reset through HTTP like any other. Errors are answered in the
response's error fields with the Kafka code of the error tree's class.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from kio.schema.consumer_protocol_assignment.v0.data import (
    ConsumerProtocolAssignment,
    TopicPartition,
)
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.serial import entity_writer
from kio.static.primitive import i32

from app.common.errors import InvalidRequest, LogbusError, UnknownTopicOrPartition
from app.common.group_errors import (
    CoordinatorNotAvailable,
    GroupIdNotFound,
    MemberIdRequired,
    UnstableOffsetCommit,
)
from app.core.security.acl import Operation, ResourceType
from app.groups.classic import JoinRequest
from app.kafka import authorize
from app.kafka.apis.base import (
    NO_THROTTLE,
    OPERATIONS_OMITTED,
    ZERO_UUID,
    Context,
    error_answer,
    group_coordinator,
    kafka_brokers,
    named_topics,
    offset_commits,
    ok_answer,
    per_partition_answer,
    response_module,
)
from app.kafka.apis.txn import txn_coordinator_node
from app.kafka.encode import build, error_code
from app.kafka.versions import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)

if TYPE_CHECKING:
    from app.groups.model import Group


async def find_coordinator(ctx: Context, body: Any, version: int) -> Any:
    """The coordinator of a group (key type 0): its broker's Kafka listener, from the
    same list as Metadata (:func:`kafka_brokers`). A coordinator with no Kafka listener
    known (none configured, or its registration not seen yet) answers
    COORDINATOR_NOT_AVAILABLE, which clients retry. Transactional ids (key type 1) are
    answered the same way from :func:`app.kafka.apis.txn.txn_coordinator_node`; any other
    key type INVALID_REQUEST."""
    m = response_module(FIND_COORDINATOR, version)
    key_type = int(getattr(body, "key_type", 0))
    try:
        if key_type == 0:
            authorize.check(ctx, Operation.DESCRIBE, ResourceType.GROUP, body.key)
            node_id = (await group_coordinator(ctx).find_coordinator(body.key, "group")).node_id
            what = f"group {body.key!r}"
        elif key_type == 1:
            node_id = await txn_coordinator_node(ctx, body.key)
            what = f"transactional id {body.key!r}"
        else:
            raise InvalidRequest(f"key_type {key_type}: groups (0) and transactions (1) only")
        listener = kafka_brokers(ctx).get(node_id)
        if listener is None:
            raise CoordinatorNotAvailable(
                f"{what} is coordinated by broker {node_id}, which has no Kafka listener known here"
            )
        host, port = listener
        return ok_answer(m.FindCoordinatorResponse, node_id=node_id, host=host, port=port)
    except LogbusError as exc:
        return error_answer(m.FindCoordinatorResponse, exc, node_id=-1, host="", port=-1)


async def offset_commit(ctx: Context, body: Any, version: int) -> Any:
    """Commit through the group coordinator HTTP's ``POST /groups/{g}/offsets`` uses: one
    store for every door. A Kafka client outside any group (``assign``) commits with
    generation -1 and no member id, which the coordinator takes while the group has no
    members (as Kafka does); all partitions answer the one outcome (all or nothing).
    v10 names topics by id: an id that names no topic answers UNKNOWN_TOPIC_ID for its
    partitions, and the others commit."""
    m = response_module(OFFSET_COMMIT, version)
    topics = named_topics(ctx, body.topics)
    known = [t for t in topics if t.name is not None]
    # Topics the principal may not READ answer TOPIC_AUTHORIZATION_FAILED; the rest commit.
    denied = authorize.unreadable_topics(ctx, known)
    offsets = offset_commits(known, skip=denied)
    try:
        authorize.check(ctx, Operation.READ, ResourceType.GROUP, body.group_id)
        await group_coordinator(ctx).commit_offsets(
            body.group_id,
            body.member_id,
            int(body.generation_id_or_member_epoch),
            offsets,
            getattr(body, "group_instance_id", None),
        )
        code = ErrorCode.none
    except LogbusError as exc:
        code = error_code(exc)
    return per_partition_answer(
        m,
        "OffsetCommit",
        topics,
        lambda topic, _: (
            ErrorCode.unknown_topic_id
            if topic is None
            else ErrorCode.topic_authorization_failed
            if topic in denied
            else code
        ),
    )


# OffsetFetch v8+ asks for several groups, each answered with its own error; v9 adds the
# member's id and epoch (KIP-848), v10 names topics by id.
OFFSET_FETCH_GROUPS_VERSION = 8


async def offset_fetch(ctx: Context, body: Any, version: int) -> Any:
    """Committed offsets from the one store (HTTP's ``GET /groups/{g}/offsets``); -1 where
    nothing is committed, every committed partition when ``topics`` is null. With
    ``require_stable`` (v7, KIP-447; librdkafka sets it for read_committed consumers) a
    partition whose offsets an open transaction committed answers UNSTABLE_OFFSET_COMMIT
    (retriable: the client asks again) instead of an offset, as Kafka does. From v8 a
    request names several groups, each answered on its own (its error its own); from v9 a
    consumer group's member gives its id and epoch, checked as Kafka checks them
    (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH); from v10 topics go by id (an unknown id
    answers UNKNOWN_TOPIC_ID for its partitions)."""
    m = response_module(OFFSET_FETCH, version)
    stable = bool(getattr(body, "require_stable", False))
    if version < OFFSET_FETCH_GROUPS_VERSION:
        code, topics = await _fetched_group(ctx, m, body.group_id, body.topics, stable)
        return build(
            m.OffsetFetchResponse, throttle_time=NO_THROTTLE, error_code=code, topics=topics
        )
    groups = []
    for g in body.groups:
        member_id = getattr(g, "member_id", None)
        epoch = int(getattr(g, "member_epoch", -1))
        code, topics = await _fetched_group(
            ctx, m, g.group_id, g.topics, stable, member_id, epoch, by_id=version >= 10
        )
        groups.append(
            build(m.OffsetFetchResponseGroup, group_id=g.group_id, topics=topics, error_code=code)
        )
    return build(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))


async def _fetched_group(
    ctx: Context,
    m: Any,
    group_id: str,
    asked: Any,
    require_stable: bool,
    member_id: str | None = None,
    member_epoch: int = -1,
    *,
    by_id: bool = False,
) -> tuple[ErrorCode, tuple[Any, ...]]:
    """One group of an OffsetFetch answer: its error code and its topics."""
    named = None if asked is None else named_topics(ctx, asked)
    unknown_ids = [] if named is None else [t for t in named if t.name is None]
    wanted = (
        None if named is None else {t.name: set(t.partitions) for t in named if t.name is not None}
    )
    topics = None if wanted is None else list(wanted)
    unstable: set[tuple[str, int]] = set()
    try:
        authorize.check(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id)
        coordinator = group_coordinator(ctx)
        try:
            # The offset store itself: its fetch takes v9's member id and epoch.
            found = await coordinator.offsets.fetch_committed_offsets(
                group_id, topics, require_stable, member_id, member_epoch
            )
        except UnstableOffsetCommit as exc:
            unstable = {(p["topic"], p["partition"]) for p in exc.fields()["partitions"]}
            found = await coordinator.fetch_committed_offsets(group_id, topics)
        code = ErrorCode.none
    except LogbusError as exc:
        found, code = [], error_code(exc)
    by_topic: dict[str, dict[int, Any]] = {}
    for c in found:
        by_topic.setdefault(c.topic, {})[c.partition] = c
    # Topics the principal may not DESCRIBE: left out of "all", refused when named.
    denied = {
        t
        for t in by_topic
        if not authorize.permitted(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t)
    }
    if wanted is None:
        for topic in denied:
            del by_topic[topic]
    if wanted is not None:
        for topic, partitions in wanted.items():
            seen = by_topic.setdefault(topic, {})
            by_topic[topic] = {p: seen.get(p) for p in sorted(partitions)}
            if not authorize.permitted(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic):
                denied.add(topic)
    topic_cls = getattr(m, "OffsetFetchResponseTopics", None) or m.OffsetFetchResponseTopic
    partition_cls = (
        getattr(m, "OffsetFetchResponsePartitions", None) or m.OffsetFetchResponsePartition
    )
    topology = ctx.state.topology
    out = []
    for topic, parts in sorted(by_topic.items()):
        try:
            topic_id = topology.topic_id(topic)
        except UnknownTopicOrPartition:
            if by_id:
                continue  # deleted since: no id to answer it by
            topic_id = ZERO_UUID
        out.append(
            build(
                topic_cls,
                name=topic,
                topic_id=topic_id,
                partitions=tuple(
                    _offset_partition(
                        partition_cls,
                        p,
                        c,
                        ErrorCode.topic_authorization_failed
                        if topic in denied
                        else ErrorCode.unstable_offset_commit
                        if (topic, p) in unstable
                        else ErrorCode.none,
                    )
                    for p, c in sorted(parts.items())
                ),
            )
        )
    for t in unknown_ids:
        out.append(
            build(
                topic_cls,
                topic_id=t.topic_id,
                partitions=tuple(
                    _offset_partition(partition_cls, int(p), None, ErrorCode.unknown_topic_id)
                    for p in t.partitions
                ),
            )
        )
    return code, tuple(out)


def _offset_partition(cls: Any, partition: int, c: Any, code: ErrorCode) -> Any:
    """One partition of an OffsetFetch answer: its offset, or -1 with the reason (``c``
    None: nothing committed; ``code`` an error: not told)."""
    hidden = c is None or code is not ErrorCode.none
    return build(
        cls,
        partition_index=partition,
        committed_offset=-1 if hidden else c.offset,
        committed_leader_epoch=-1 if hidden else c.leader_epoch,
        metadata="" if hidden else c.metadata,
        error_code=code,
    )


def _ms(value: Any, default: int = -1) -> int:
    return default if value is None else int(value.total_seconds() * 1000)


async def join_group(ctx: Context, body: Any, version: int) -> Any:
    """JoinGroup: the member waits here until the generation forms (the classic state
    machine answers when every member has joined or the rebalance timeout runs out). v0
    has no rebalance timeout: the session timeout stands for it, as in Kafka; from v4 a
    new dynamic member gets MEMBER_ID_REQUIRED with its id first (KIP-394)."""
    m = response_module(JOIN_GROUP, version)
    session_ms = _ms(body.session_timeout)
    rebalance_ms = _ms(getattr(body, "rebalance_timeout", None))
    request = JoinRequest(
        member_id=body.member_id,
        protocol_type=body.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms if rebalance_ms >= 0 else session_ms,
        instance_id=getattr(body, "group_instance_id", None),
        # As Kafka describes members: the header's client.id, the address as "/<ip>".
        client_id=ctx.session.client_id,
        client_host=f"/{ctx.session.host}" if ctx.session.host != "*" else "",
        require_known_member_id=version >= 4,
    )
    try:
        authorize.check(ctx, Operation.READ, ResourceType.GROUP, body.group_id)
        joined = await group_coordinator(ctx).classic.join(body.group_id, request)
    except LogbusError as exc:
        member_id = exc.member_id if isinstance(exc, MemberIdRequired) else body.member_id
        return error_answer(
            m.JoinGroupResponse,
            exc,
            generation_id=-1,
            protocol_type=None,
            protocol_name="" if version < 7 else None,
            leader="",
            skip_assignment=False,
            member_id=member_id,
            members=(),
        )
    return ok_answer(
        m.JoinGroupResponse,
        generation_id=joined.generation,
        protocol_type=joined.protocol_type,
        protocol_name=joined.protocol_name,
        leader=joined.leader,
        skip_assignment=joined.skip_assignment,
        member_id=joined.member_id,
        members=tuple(
            build(
                m.JoinGroupResponseMember,
                member_id=member_id,
                group_instance_id=instance_id,
                metadata=metadata,
            )
            for member_id, instance_id, metadata in joined.members
        ),
    )


async def sync_group(ctx: Context, body: Any, version: int) -> Any:
    """SyncGroup: the leader's carries every member's assignment; each member waits here
    for its own (answered at once in a Stable generation)."""
    m = response_module(SYNC_GROUP, version)
    try:
        authorize.check(ctx, Operation.READ, ResourceType.GROUP, body.group_id)
        synced = await group_coordinator(ctx).classic.sync(
            body.group_id,
            int(body.generation_id),
            body.member_id,
            getattr(body, "group_instance_id", None),
            getattr(body, "protocol_type", None),
            getattr(body, "protocol_name", None),
            {a.member_id: bytes(a.assignment) for a in body.assignments},
        )
    except LogbusError as exc:
        return error_answer(
            m.SyncGroupResponse, exc, protocol_type=None, protocol_name=None, assignment=b""
        )
    return ok_answer(
        m.SyncGroupResponse,
        protocol_type=synced.protocol_type,
        protocol_name=synced.protocol_name,
        assignment=synced.assignment,
    )


async def heartbeat(ctx: Context, body: Any, version: int) -> Any:
    m = response_module(HEARTBEAT, version)
    try:
        authorize.check(ctx, Operation.READ, ResourceType.GROUP, body.group_id)
        await group_coordinator(ctx).classic.heartbeat(
            body.group_id,
            int(body.generation_id),
            body.member_id,
            getattr(body, "group_instance_id", None),
        )
        code = ErrorCode.none
    except LogbusError as exc:
        code = error_code(exc)
    return build(m.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=code)


async def leave_group(ctx: Context, body: Any, version: int) -> Any:
    """LeaveGroup: one member (v0-2) or a batch of them by member or instance id (v3+,
    each with its own error)."""
    m = response_module(LEAVE_GROUP, version)
    leaving = (
        [(body.member_id, None)]
        if version < 3
        else [(x.member_id, x.group_instance_id) for x in body.members]
    )
    try:
        authorize.check(ctx, Operation.READ, ResourceType.GROUP, body.group_id)
        errors = await group_coordinator(ctx).classic.leave(body.group_id, leaving)
        code = ErrorCode.none
    except LogbusError as exc:
        errors, code = [exc] * len(leaving), error_code(exc)
    if version < 3:
        first = errors[0] if errors else None
        return build(
            m.LeaveGroupResponse,
            throttle_time=NO_THROTTLE,
            error_code=code if first is None else error_code(first),
        )
    return build(
        m.LeaveGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        members=tuple(
            build(
                m.MemberResponse,
                member_id=member_id,
                group_instance_id=instance_id,
                error_code=ErrorCode.none if err is None else error_code(err),
            )
            for (member_id, instance_id), err in zip(leaving, errors, strict=True)
        ),
    )


async def list_groups(ctx: Context, body: Any, version: int) -> Any:
    """ListGroups: the groups this broker coordinates (as Kafka, each broker lists its
    own), filtered by state (v4+) and type (v5+: classic, consumer), case-insensitively."""
    m = response_module(LIST_GROUPS, version)
    states = {s.lower() for s in getattr(body, "states_filter", ())}
    types = {t.lower() for t in getattr(body, "types_filter", ())}
    try:
        listed = group_coordinator(ctx).list_groups()
        # DESCRIBE on the cluster lists every group; else those it may DESCRIBE (Kafka's).
        if not authorize.permitted(ctx, Operation.DESCRIBE, None):
            listed = [
                g
                for g in listed
                if authorize.permitted(ctx, Operation.DESCRIBE, ResourceType.GROUP, g["group"])
            ]
        code = ErrorCode.none
    except LogbusError as exc:
        listed, code = [], error_code(exc)
    return build(
        m.ListGroupsResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        groups=tuple(
            build(
                m.ListedGroup,
                group_id=g["group"],
                protocol_type=g["protocol_type"],
                group_state=g["state"],
                group_type=g["protocol"],
            )
            for g in listed
            if (not states or g["state"].lower() in states)
            and (not types or g["protocol"].lower() in types)
        ),
    )


async def describe_groups(ctx: Context, body: Any, version: int) -> Any:
    """DescribeGroups: state, protocol and members with their metadata and assignment
    bytes (a classic member's as it sent them; a consumer-protocol member's encoded as the
    consumer protocol's, as Kafka 4 answers for its consumer groups). A group that does
    not exist is Dead with no error before v6, GROUP_ID_NOT_FOUND from v6 (Kafka's)."""
    m = response_module(DESCRIBE_GROUPS, version)
    with_operations = bool(getattr(body, "include_authorized_operations", False))
    described = []
    for group_id in body.groups:
        try:
            authorize.check(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id)
            ops = (
                authorize.authorized_operations(ctx, ResourceType.GROUP, group_id)
                if with_operations
                else OPERATIONS_OMITTED
            )
            coordinator = group_coordinator(ctx)
            group = coordinator.admin.lookup(group_id)
            described.append(_described(m, coordinator, group, ops))
        except GroupIdNotFound as exc:
            if version >= 6:
                described.append(_described_error(m, group_id, exc, "Dead"))
            else:
                described.append(_described_error(m, group_id, ErrorCode.none, "Dead", ops))
        except LogbusError as exc:
            described.append(_described_error(m, group_id, exc, ""))
    return build(m.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(described))


def _described_error(
    m: Any, group_id: str, exc: Any, state: str, ops: int = OPERATIONS_OMITTED
) -> Any:
    return build(
        m.DescribedGroup,
        error_code=exc if isinstance(exc, ErrorCode) else error_code(exc),
        error_message=None if isinstance(exc, ErrorCode) else exc.message,
        group_id=group_id,
        group_state=state,
        protocol_type="",
        protocol_data="",
        members=(),
        authorized_operations=ops,
    )


def _described(m: Any, coordinator: Any, group: Group, ops: int) -> Any:
    cg = group.classic
    if cg is not None and not group.members:
        protocol = cg.protocol_name or ""
        members = tuple(
            build(
                m.DescribedGroupMember,
                member_id=x.member_id,
                group_instance_id=x.instance_id,
                client_id=x.client_id,
                client_host=x.client_host,
                member_metadata=x.metadata(protocol) if protocol else b"",
                member_assignment=x.assignment,
            )
            for x in cg.members.values()
        )
        return build(
            m.DescribedGroup,
            error_code=ErrorCode.none,
            error_message=None,
            group_id=group.group_id,
            group_state=cg.state.value,
            protocol_type=cg.protocol_type or "",
            protocol_data=protocol,
            members=members,
            authorized_operations=ops,
        )
    return build(
        m.DescribedGroup,
        error_code=ErrorCode.none,
        error_message=None,
        group_id=group.group_id,
        group_state=coordinator.state_of(group),
        protocol_type="consumer",
        protocol_data=group.assignor if group.members else "",
        members=tuple(
            build(
                m.DescribedGroupMember,
                member_id=x.member_id,
                group_instance_id=x.instance_id,
                client_id="",
                client_host="",
                member_metadata=encode_subscription(x.subscribed_topics),
                member_assignment=encode_assignment(sorted(x.assigned)),
            )
            for x in group.members.values()
        ),
        authorized_operations=ops,
    )


async def delete_groups(ctx: Context, body: Any, version: int) -> Any:
    """DeleteGroups: each group's offsets and record, refused (NON_EMPTY_GROUP) while it
    has members of either protocol, as ``DELETE /groups/{g}``."""
    m = response_module(DELETE_GROUPS, version)
    results = []
    for group_id in body.groups_names:
        try:
            authorize.check(ctx, Operation.DELETE, ResourceType.GROUP, group_id)
            await group_coordinator(ctx).delete_group(group_id)
            code = ErrorCode.none
        except LogbusError as exc:
            code = error_code(exc)
        results.append(build(m.DeletableGroupResult, group_id=group_id, error_code=code))
    return build(m.DeleteGroupsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


async def offset_delete(ctx: Context, body: Any, version: int) -> Any:
    """OffsetDelete: a group's committed offsets of some partitions, except topics its
    members subscribe to now (GROUP_SUBSCRIBED_TO_TOPIC per partition)."""
    m = response_module(OFFSET_DELETE, version)
    denied = authorize.unreadable_topics(ctx, body.topics)
    wanted = [
        (t.name, int(p.partition_index))
        for t in body.topics
        if t.name not in denied
        for p in t.partitions
    ]
    try:
        authorize.check(ctx, Operation.DELETE, ResourceType.GROUP, body.group_id)
        outcome = await group_coordinator(ctx).offsets.delete_offsets(body.group_id, wanted)
        code = ErrorCode.none
    except LogbusError as exc:
        outcome, code = {}, error_code(exc)
    return per_partition_answer(
        m,
        "OffsetDelete",
        body.topics,
        lambda topic, p: (
            ErrorCode.topic_authorization_failed
            if topic in denied
            else _partition_code(outcome.get((topic, p)))
        ),
        error_code=code,
    )


def _partition_code(exc: LogbusError | None) -> ErrorCode:
    return ErrorCode.none if exc is None else error_code(exc)


# -- the consumer protocol's bytes for consumer-protocol members (DescribeGroups) ----------


def encode_subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0 (int16 version, then kio's writer)."""
    return _versioned(0, ConsumerProtocolSubscription(topics=tuple(topics), user_data=None))


def encode_assignment(tps: list[tuple[str, int]]) -> bytes:
    """ConsumerProtocolAssignment v0, partitions grouped by topic."""
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    value = ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            TopicPartition(topic=TopicName(t), partitions=tuple(i32(p) for p in ps))
            for t, ps in by_topic.items()
        ),
        user_data=None,
    )
    return _versioned(0, value)


def _versioned(version: int, value: Any) -> bytes:
    out = io.BytesIO()
    out.write(version.to_bytes(2, "big"))
    entity_writer(type(value))(out, value)
    return out.getvalue()
