"""KIP-848's consumer group protocol on the Kafka door: ConsumerGroupHeartbeat (api key 68)
and ConsumerGroupDescribe (69), on the group coordinator HTTP's ``POST
/groups/{g}/heartbeat`` and WebSocket groups use (:mod:`app.groups.membership`: member
epochs, server-side assignment, revocation before hand-over). So a Kafka client with
``group.protocol=consumer`` (librdkafka 2.4+) and HTTP or WebSocket members share one
group, one target assignment and one offset store.

The protocol names topics by id (KIP-516): the owned partitions a member reports and the
assignment it is answered are ``(topic id, partitions)``, translated at this door through
:meth:`Topology.topic_id` and :meth:`Topology.topic_named_by` (an owned partition of an id
that names no topic any more is left out: the member no longer owns anything there).

Request fields (Kafka's meaning, which the coordinator's :class:`HeartbeatRequest` has
too): ``subscribed_topic_names``, ``subscribed_topic_regex`` (v1), ``server_assignor``,
``topic_partitions`` null when unchanged since the member's last heartbeat;
``rebalance_timeout`` -1 when unchanged; ``member_epoch`` 0 joins, -1 leaves, -2 is a
static member's temporary leave. v1 members make their own member id (KIP-1082): an
empty one is INVALID_REQUEST; v0 ones may join with it empty for the coordinator to
make. What Kafka's coordinator refuses whatever the group's state is INVALID_REQUEST
here too (:func:`_invalid`: empty group, instance or rack ids, a join reporting owned
partitions, -2 without an instance id, an epoch below -2). ``rack_id`` is read and not used (the assignors are not rack-aware). Errors are
the answer's top-level code and message (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH,
UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, INCONSISTENT_GROUP_PROTOCOL for a classic
group with members, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...). The answer always
carries the member's current assignment (Kafka leaves it null when unchanged; a client
takes an unchanged one as no change).

A ``subscribed_topic_regex`` RE2 refuses (Kafka's RE2J rules) is answered
INVALID_REGULAR_EXPRESSION, as Kafka answers it from v1, not INVALID_REQUEST.

Authorization as Kafka's: READ on the group to heartbeat, and DESCRIBE on each topic of
``subscribed_topic_names`` (TOPIC_AUTHORIZATION_FAILED otherwise: else the assignment
would tell whether a topic the principal may not see exists, its id and its partitions);
a regex subscription matches only the topics the principal may DESCRIBE. DESCRIBE on the
group to describe it, and a group whose members subscribe to, own or are to own a topic
the principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED without its
members (Kafka's rule: the description would name those topics).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from app.common.errors import (
    InvalidRequest,
    LogbusError,
    TopicAuthorizationFailed,
    UnknownTopicOrPartition,
)
from app.common.group_errors import GroupError, GroupIdNotFound
from app.core.patterns import compile_client_pattern
from app.core.security.acl import Operation, ResourceType
from app.groups.model import JOIN_EPOCH, STATIC_LEAVE_EPOCH, HeartbeatRequest, TopicPartition
from app.kafka import authorize
from app.kafka.apis.base import (
    NO_THROTTLE,
    OPERATIONS_OMITTED,
    Context,
    TopicIdNames,
    error_answer,
    group_coordinator,
    ok_answer,
    response_module,
)
from app.kafka.encode import build, error_code
from app.kafka.versions import CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT

# KIP-1082: from v1 the member makes its own id.
CLIENT_MEMBER_ID_VERSION = 1
# ConsumerGroupDescribe's member_type (v1): a consumer-protocol member.
CONSUMER_MEMBER = 1
# Kafka's message for a described group that names topics the principal may not DESCRIBE.
UNDESCRIBABLE_TOPICS = (
    "The group has described topic(s) that the client is not authorized to describe."
)


class InvalidRegularExpression(InvalidRequest):
    """A ``subscribed_topic_regex`` RE2 refuses: ConsumerGroupHeartbeat answers it with
    Kafka's INVALID_REGULAR_EXPRESSION (:data:`REGEX_REFUSED`), the door's own code for
    it (the error tree's is INVALID_REQUEST, as the HTTP door answers it)."""


REGEX_REFUSED = ErrorCode.invalid_regular_expression


class NotAConsumerGroup(GroupIdNotFound):
    """ConsumerGroupDescribe of a classic group: Kafka's GROUP_ID_NOT_FOUND."""

    def __init__(self, group: str) -> None:
        GroupError.__init__(
            self,
            f"group {group!r} is a classic group (JoinGroup members), not a consumer group",
            group,
        )


def _topic_partitions(ctx: Context, m: Any, tps: list[TopicPartition]) -> Any:
    """An assignment as the protocol writes it: by topic id (and name, where the
    version's message has it)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(tps):
        by_topic.setdefault(topic, []).append(partition)
    out = []
    for topic, partitions in by_topic.items():
        try:
            topic_id = ctx.state.topology.topic_id(topic)
        except UnknownTopicOrPartition:
            continue  # deleted since: nothing to consume there
        out.append(
            build(
                m.TopicPartitions,
                topic_id=topic_id,
                topic_name=topic,
                partitions=tuple(partitions),
            )
        )
    return build(m.Assignment, topic_partitions=tuple(out))


def _owned(ctx: Context, body: Any) -> list[TopicPartition] | None:
    if body.topic_partitions is None:
        return None
    owned: list[TopicPartition] = []
    names = TopicIdNames(ctx.state.topology)
    for tp in body.topic_partitions:
        name = names.name_of(tp.topic_id)
        if name is None:
            continue
        owned.extend((name, int(p)) for p in tp.partitions)
    return owned


def _describable(ctx: Context) -> Callable[[str], bool] | None:
    """The topics a regex subscription may match: those the principal may DESCRIBE
    (None without an authorizer: every topic)."""
    security = ctx.security
    if security is None or not security.authorizing:
        return None
    return lambda topic: authorize.permitted(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic)


def _invalid(body: Any, version: int, epoch: int) -> str | None:
    """Why a heartbeat is INVALID_REQUEST whatever the group's state, as Kafka's
    coordinator checks it first, or None: empty group, instance or rack ids; an empty
    member id where the member must have one (from v1 always, KIP-1082; in v0 to
    heartbeat or leave); a join (epoch 0) reporting owned partitions; a static leave
    (-2) without an instance id; an epoch below -2."""
    if not body.group_id:
        return "group_id must not be empty"
    if body.instance_id == "":
        return "instance_id must not be empty (null for a dynamic member)"
    if getattr(body, "rack_id", None) == "":
        return "rack_id must not be empty (null for none)"
    if epoch < STATIC_LEAVE_EPOCH:
        return f"member_epoch {epoch} is not valid"
    if not body.member_id and (version >= CLIENT_MEMBER_ID_VERSION or epoch != JOIN_EPOCH):
        return "member_id must not be empty (KIP-1082: from v1 the member makes its own id)"
    if epoch == JOIN_EPOCH and body.topic_partitions:
        return "topic_partitions must be empty when (re-)joining"
    if epoch == STATIC_LEAVE_EPOCH and body.instance_id is None:
        return "member_epoch -2 (a static member's temporary leave) needs an instance_id"
    return None


def _ms(value: datetime.timedelta) -> int:
    return int(value.total_seconds() * 1000)


async def consumer_group_heartbeat(ctx: Context, body: Any, version: int) -> Any:
    """Join, heartbeat or leave (the module docstring); the answer's assignment is what
    the member may consume now."""
    m = response_module(CONSUMER_GROUP_HEARTBEAT, version)
    # librdkafka sends "" beside its topic names: Kafka's "no regex".
    regex = getattr(body, "subscribed_topic_regex", None) or None
    topics = body.subscribed_topic_names
    try:
        authorize.check(ctx, Operation.READ, ResourceType.GROUP, body.group_id)
        for topic in topics or ():
            authorize.check(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic)
        if regex is not None:
            try:
                compile_client_pattern(regex, "subscribed_topic_regex")
            except InvalidRequest as exc:
                raise InvalidRegularExpression(exc.message) from None
        epoch = int(body.member_epoch)
        invalid = _invalid(body, version, epoch)
        if invalid is not None:
            raise InvalidRequest(f"ConsumerGroupHeartbeat v{version}: {invalid}")
        rebalance_timeout_ms = _ms(body.rebalance_timeout)
        answer = await group_coordinator(ctx).heartbeat(
            body.group_id,
            HeartbeatRequest(
                member_id=body.member_id,
                member_epoch=epoch,
                instance_id=body.instance_id,
                subscribed_topics=None if topics is None else list(topics),
                subscribed_topic_regex=regex,
                server_assignor=body.server_assignor,
                owned_partitions=_owned(ctx, body),
                rebalance_timeout_ms=None if rebalance_timeout_ms < 0 else rebalance_timeout_ms,
                topic_filter=_describable(ctx),
            ),
        )
    except LogbusError as exc:
        refused = error_answer(
            m.ConsumerGroupHeartbeatResponse,
            exc,
            member_id=None,
            member_epoch=-1,
            heartbeat_interval=datetime.timedelta(0),
            assignment=None,
        )
        if isinstance(exc, InvalidRegularExpression):
            return dataclasses.replace(refused, error_code=REGEX_REFUSED)
        return refused
    return ok_answer(
        m.ConsumerGroupHeartbeatResponse,
        member_id=answer.member_id,
        member_epoch=answer.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=answer.heartbeat_interval_ms),
        # A member that left has no assignment to be told.
        assignment=None
        if answer.member_epoch < 0
        else _topic_partitions(ctx, m, answer.assignment),
    )


async def consumer_group_describe(ctx: Context, body: Any, version: int) -> Any:
    """Each group as ``GET /groups/{g}`` describes it: state, group and assignment
    epochs, assignor, each member's epoch, subscription, assignment and target
    assignment (topics by id and name). A classic group (JoinGroup members) or an unknown
    one answers GROUP_ID_NOT_FOUND, as Kafka answers for a group that is not a consumer
    group. ``client_id`` and ``client_host`` are "" (the coordinator does not keep
    them: members also join over HTTP and WebSocket); ``rack_id`` null."""
    m = response_module(CONSUMER_GROUP_DESCRIBE, version)
    groups = []
    for group_id in body.group_ids:
        try:
            groups.append(_described(ctx, m, body, group_id))
        except LogbusError as exc:
            groups.append(
                build(
                    m.DescribedGroup,
                    error_code=error_code(exc),
                    error_message=exc.message,
                    group_id=group_id,
                    group_state="",
                    group_epoch=-1,
                    assignment_epoch=-1,
                    assignor_name="",
                    members=(),
                    authorized_operations=OPERATIONS_OMITTED,
                )
            )
    return build(m.ConsumerGroupDescribeResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _described(ctx: Context, m: Any, body: Any, group_id: str) -> Any:
    """One group of a ConsumerGroupDescribe answer; an error raised here is the group's
    answer instead (the handler's, so that one group's error leaves the others)."""
    authorize.check(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id)
    ops = (
        authorize.authorized_operations(ctx, ResourceType.GROUP, group_id)
        if body.include_authorized_operations
        else OPERATIONS_OMITTED
    )
    coordinator = group_coordinator(ctx)
    described = coordinator.describe_group(group_id)
    group = coordinator.group(group_id)
    if group is None:
        raise GroupIdNotFound(group_id)
    if group.classic is not None and not group.members:
        raise NotAConsumerGroup(group_id)
    if not all(
        authorize.permitted(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic)
        for topic in _topics_named(described["members"])
    ):
        raise TopicAuthorizationFailed(
            UNDESCRIBABLE_TOPICS,
            resource_type="TOPIC",
            resource_name="",
            operation=Operation.DESCRIBE.value,
        )
    members = tuple(
        build(
            m.Member,
            member_id=member["member_id"],
            instance_id=member["instance_id"],
            rack_id=None,
            member_epoch=member["member_epoch"],
            client_id="",
            client_host="",
            subscribed_topic_names=tuple(member["subscribed_topics"]),
            subscribed_topic_regex=member["subscribed_topic_regex"],
            assignment=_topic_partitions(ctx, m, _flat(member["assignment"])),
            target_assignment=_topic_partitions(ctx, m, _flat(member["target_assignment"])),
            member_type=CONSUMER_MEMBER,
        )
        for member in described["members"]
    )
    return build(
        m.DescribedGroup,
        error_code=ErrorCode.none,
        error_message=None,
        group_id=group_id,
        group_state=described["state"],
        group_epoch=described["group_epoch"],
        assignment_epoch=described["assignment_epoch"],
        assignor_name=described["assignor"],
        members=members,
        authorized_operations=ops,
    )


def _flat(by_topic: list[dict[str, Any]]) -> list[TopicPartition]:
    return [(t["topic"], int(p)) for t in by_topic for p in t["partitions"]]


def _topics_named(members: list[dict[str, Any]]) -> set[str]:
    """Every topic a description of ``members`` names: subscribed to, assigned, or in
    the target assignment."""
    named: set[str] = set()
    for member in members:
        named.update(member["subscribed_topics"])
        for key in ("assignment", "target_assignment"):
            named.update(t["topic"] for t in member[key])
    return named
