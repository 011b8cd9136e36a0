"""Authorization on the Kafka door: Kafka's authorizer table, one check helper.

Every check goes to the same :class:`~app.core.security.acl.Authorizer` (and super users)
HTTP uses (:mod:`app.kafka.security`), with the connection's principal and address; a
refusal is the error tree's ``*AuthorizationFailed`` (audited), answered by the handler
where Kafka answers per item (a topic's partitions, a group, a transactional id) with
TOPIC_/GROUP_/TRANSACTIONAL_ID_/CLUSTER_AUTHORIZATION_FAILED, exactly as any other
per-item error is. Without an authorizer every check passes and costs one attribute test.

Kafka's table (KIP-11, ``AclAuthorizer``/``KafkaApis``), as applied here:

===================== ====================================================================
API                   operations checked
===================== ====================================================================
Produce               WRITE topic (per topic); WRITE transactional id for a transactional
                      request, which transactional batches need (else every partition is
                      TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
Fetch                 READ topic (per partition)
ListOffsets           DESCRIBE topic (per partition)
OffsetForLeaderEpoch  DESCRIBE topic (per partition)
Metadata              DESCRIBE topic: unlisted when all topics are asked, else
                      TOPIC_AUTHORIZATION_FAILED; auto-creation needs CREATE cluster or topic
FindCoordinator       DESCRIBE group / transactional id
JoinGroup, SyncGroup, READ group
Heartbeat, LeaveGroup
OffsetCommit          READ group, READ topic (per partition)
OffsetFetch           DESCRIBE group, DESCRIBE topic (per partition)
OffsetDelete          DELETE group, READ topic (per partition)
DescribeGroups        DESCRIBE group (per group)
ListGroups            DESCRIBE cluster, else only the groups it may DESCRIBE
DeleteGroups          DELETE group (per group)
InitProducerId        WRITE transactional id; without one IDEMPOTENT_WRITE cluster or
                      WRITE on some topic (KIP-679)
AddPartitionsToTxn    WRITE transactional id, WRITE topic (per partition)
AddOffsetsToTxn       WRITE transactional id, READ group
EndTxn                WRITE transactional id
TxnOffsetCommit       WRITE transactional id, READ group, READ topic (per partition)
DescribeTransactions  DESCRIBE transactional id (per id)
ListTransactions      only the ids it may DESCRIBE
DescribeProducers     READ topic (per partition)
CreateTopics          CREATE cluster or CREATE topic (per topic)
DeleteTopics          DELETE topic (per topic)
DeleteRecords         DELETE topic (per partition)
CreatePartitions      ALTER topic (per topic)
DescribeConfigs       DESCRIBE_CONFIGS topic / cluster (per resource)
AlterConfigs,         ALTER_CONFIGS topic / cluster (per resource)
IncrementalAlter...
DescribeLogDirs       DESCRIBE cluster
DescribeCluster       none (as Kafka: the brokers are what Metadata tells anyone)
DescribeAcls          DESCRIBE cluster
CreateAcls,           ALTER cluster
DeleteAcls
DescribeClientQuotas  DESCRIBE_CONFIGS cluster
AlterClientQuotas     ALTER_CONFIGS cluster (every entry)
DescribeUserScram...  DESCRIBE cluster
AlterUserScram...     ALTER cluster (every user)
ConsumerGroup-        READ group, DESCRIBE topic (each subscribed name); a regex
Heartbeat             subscription matches only topics it may DESCRIBE
ConsumerGroup-        DESCRIBE group (per group), DESCRIBE topic (each topic its members
Describe              subscribe to, own or are to own)
===================== ====================================================================

Where a request asks for them (``include_*_authorized_operations``), Metadata,
DescribeCluster, DescribeGroups and ConsumerGroupDescribe answer the principal's
authorized operations on each resource (:func:`authorized_operations`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from app.common.errors import (
    AuthorizationFailed,
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
)
from app.core.security import audit
from app.core.security.acl import (
    CLUSTER,
    VALID_OPERATIONS,
    Action,
    Operation,
    Resource,
    ResourceType,
)

if TYPE_CHECKING:
    from app.kafka.apis.base import Context

# Kafka's AclOperation wire codes (org.apache.kafka.common.acl.AclOperation), those the
# model keeps; DescribeAcls/CreateAcls/DeleteAcls decode with them, and an authorized-
# operations bit field sets bit ``code`` for each operation allowed.
OPERATIONS: Final = {
    1: Operation.ANY,
    2: Operation.ALL,
    3: Operation.READ,
    4: Operation.WRITE,
    5: Operation.CREATE,
    6: Operation.DELETE,
    7: Operation.ALTER,
    8: Operation.DESCRIBE,
    9: Operation.CLUSTER_ACTION,
    10: Operation.DESCRIBE_CONFIGS,
    11: Operation.ALTER_CONFIGS,
    12: Operation.IDEMPOTENT_WRITE,
}
# Per resource type, the operations an authorized-operations answer reports on: Kafka's
# ``AclEntry.supportedOperations`` (the valid ones but ALL), with their bits.
_SUPPORTED: Final = {
    resource_type: tuple(
        (op, 1 << code) for code, op in OPERATIONS.items() if op in ops and op is not Operation.ALL
    )
    for resource_type, ops in VALID_OPERATIONS.items()
}


def _action(op: Operation, resource_type: ResourceType | None, name: str) -> Action:
    resource = CLUSTER if resource_type is None else Resource(resource_type, name)
    return Action(op, resource)


def permitted(
    ctx: Context, op: Operation, resource_type: ResourceType | None, name: str = ""
) -> bool:
    """Whether the connection's principal may do ``op`` (``resource_type`` None: the cluster)."""
    security = ctx.security
    if security is None or not security.authorizing:
        return True
    session = ctx.session
    return security.allowed(
        session.principal,
        session.mechanism or "none",
        session.host,
        _action(op, resource_type, name),
    )


def authorized_operations(ctx: Context, resource_type: ResourceType, name: str = "") -> int:
    """Kafka's authorized-operations bit field for one resource (``AuthHelper.
    authorizedOperations``): bit ``code`` set for each operation of the resource type the
    principal may do, every one without an authorizer. Answered where a request asks for
    it (``include_*_authorized_operations``: Metadata v8+, DescribeCluster, DescribeGroups
    v3+, ConsumerGroupDescribe); not audited, as Kafka does not log these checks."""
    kind = None if resource_type is ResourceType.CLUSTER else resource_type
    return sum(bit for op, bit in _SUPPORTED[resource_type] if permitted(ctx, op, kind, name))


def unreadable_topics(ctx: Context, topics: Iterable[Any]) -> set[str]:
    """The names of the request's ``topics`` (entries with ``name``) the principal may not
    READ: OffsetCommit and OffsetDelete answer their partitions TOPIC_AUTHORIZATION_FAILED
    and go on with the rest, as Kafka does."""
    return {
        t.name for t in topics if not permitted(ctx, Operation.READ, ResourceType.TOPIC, t.name)
    }


def check(ctx: Context, op: Operation, resource_type: ResourceType | None, name: str = "") -> None:
    """Raise the error tree's AuthorizationFailed (audited) unless :func:`permitted`."""
    if permitted(ctx, op, resource_type, name):
        return
    principal, host = ctx.session.principal, ctx.session.host
    kind = "cluster" if resource_type is None else resource_type.value
    audit.denied(principal, host, op.value, f"{kind.upper()}:{name or CLUSTER.name}")
    error: type[AuthorizationFailed] = {
        ResourceType.TOPIC: TopicAuthorizationFailed,
        ResourceType.GROUP: GroupAuthorizationFailed,
        ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailed,
    }.get(resource_type, ClusterAuthorizationFailed)  # type: ignore[arg-type]
    what = kind.lower().replace("_", " ")
    raise error(
        f"{principal} may not {op.value} {what} {name or CLUSTER.name!r}",
        resource_type=kind.upper(),
        resource_name=name or CLUSTER.name,
        operation=op.value,
    )


def permitted_any_topic(ctx: Context, op: Operation) -> bool:
    """Kafka's ``authorizeByResourceType`` on topics (KIP-679's idempotent producer)."""
    security = ctx.security
    if security is None or not security.authorizing:
        return True
    guard = security.guard
    assert guard is not None and guard.authorizer is not None
    return guard.authorizer.authorize_any(
        ctx.session.principal, ctx.session.host, op, ResourceType.TOPIC
    )
