"""DescribeAcls, CreateAcls and DeleteAcls on the one ACL store HTTP's ``/acls`` uses.

The bindings are :mod:`app.core.security.acl`'s, written through the broker's
:class:`~app.core.security.store.AclStore` (a file, or ZooKeeper in a cluster) and put
in the shared :class:`~app.core.security.acl.Authorizer` at once, exactly as
``app/api/routers/acls.py`` does: an ACL created through one door holds on the other.
Authorized as Kafka's ``AclApis``: DescribeAcls needs DESCRIBE on the cluster (else a
top-level CLUSTER_AUTHORIZATION_FAILED), CreateAcls and DeleteAcls ALTER on the cluster
(else every result CLUSTER_AUTHORIZATION_FAILED). A broker without an authorizer
answers SECURITY_DISABLED, as Kafka does without ``authorizer.class.name``. Every
change goes to the audit log.

Kafka's wire codes (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType``) map to the model's names. What the model does not keep:
resource types DELEGATION_TOKEN and USER, operations CREATE_TOKENS, DESCRIBE_TOKENS and
TWO_PHASE_COMMIT (Logbus has no delegation tokens, user quotas by ACL, nor KIP-939).
Creating such a binding is answered INVALID_REQUEST with a message saying so; a filter
naming them matches nothing (there are none). UNKNOWN (0) or out-of-range codes are
INVALID_REQUEST, as Kafka answers them; so are bindings the model refuses (ANY or MATCH
in a binding, an operation that does not apply to the resource type, a principal that
is not ``TYPE:NAME``, the cluster not named ``kafka-cluster``). CreateAcls answers per
creation and stores the valid ones (Kafka's rule; HTTP's ``POST /acls`` is all or none).
A request with more creations (DeleteAcls: filters) than the setting
``kafka_acl_max_changes_per_request`` (1000) is answered INVALID_REQUEST for each, with
the limit in the message, and changes nothing.

Concurrency: event loop; the store's blocking calls run in a worker thread.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final

from kio.schema.errors import ErrorCode

from app.common.errors import ClusterAuthorizationFailed, LogbusError
from app.core.security import audit
from app.core.security.acl import (
    AclBinding,
    AclFilter,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from app.kafka import authorize
from app.kafka.apis.base import NO_THROTTLE, Context, response_module
from app.kafka.encode import build, error_code
from app.kafka.versions import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS

if TYPE_CHECKING:
    from app.core.security.acl import Authorizer
    from app.core.security.store import AclStore

# Kafka's wire codes, as org.apache.kafka.common.resource/acl name them.
RESOURCE_TYPES: Final = {
    1: ResourceType.ANY,
    2: ResourceType.TOPIC,
    3: ResourceType.GROUP,
    4: ResourceType.CLUSTER,
    5: ResourceType.TRANSACTIONAL_ID,
}
PATTERN_TYPES: Final = {
    1: PatternType.ANY,
    2: PatternType.MATCH,
    3: PatternType.LITERAL,
    4: PatternType.PREFIXED,
}
OPERATIONS: Final = authorize.OPERATIONS
PERMISSIONS: Final = {1: Permission.ANY, 2: Permission.DENY, 3: Permission.ALLOW}
# Kafka's codes the model has no counterpart for: filters naming them match nothing.
UNKEPT_RESOURCE_TYPES: Final = {6: "DELEGATION_TOKEN", 7: "USER"}
UNKEPT_OPERATIONS: Final = {13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS", 15: "TWO_PHASE_COMMIT"}

_CODES: Final[dict[Any, int]] = {
    value: code
    for table in (RESOURCE_TYPES, PATTERN_TYPES, OPERATIONS, PERMISSIONS)
    for code, value in table.items()
}


def _code(value: ResourceType | PatternType | Operation | Permission) -> int:
    """Kafka's wire code of a model value (enum members of different types never collide
    as keys: they compare by identity)."""
    return _CODES[value]


class Unkept(Exception):
    """A wire code Kafka defines and the ACL model does not keep (module docstring)."""


def _decode(table: dict[int, Any], unkept: dict[int, str], code: int, what: str) -> Any:
    found = table.get(code)
    if found is not None:
        return found
    if code in unkept:
        raise Unkept(f"Logbus keeps no ACLs with {what} {unkept[code]}")
    raise InvalidAcl(f"{what} code {code} is not valid")


def _filter(f: Any, pattern_field: str) -> AclFilter:
    """The model's filter of a DescribeAclsRequest or a DeleteAclsFilter."""
    return AclFilter(
        _decode(
            RESOURCE_TYPES, UNKEPT_RESOURCE_TYPES, int(f.resource_type_filter), "resource type"
        ),
        f.resource_name_filter,
        _decode(PATTERN_TYPES, {}, int(getattr(f, pattern_field)), "pattern type"),
        f.principal_filter,
        f.host_filter,
        _decode(OPERATIONS, UNKEPT_OPERATIONS, int(f.operation), "operation"),
        _decode(PERMISSIONS, {}, int(f.permission_type), "permission type"),
    )


def _acls(ctx: Context) -> tuple[AclStore, Authorizer] | None:
    """The broker's ACL store and authorizer, None when it has none (SECURITY_DISABLED)."""
    security = ctx.security
    guard = None if security is None else security.guard
    if guard is None or guard.store is None or guard.authorizer is None:
        return None
    return guard.store, guard.authorizer


NO_AUTHORIZER = "no authorizer is configured on this broker (authorizer=acl)"


def _refusal(ctx: Context, op: Operation) -> LogbusError | None:
    try:
        authorize.check(ctx, op, None)
    except ClusterAuthorizationFailed as exc:
        return exc
    return None


async def describe_acls(ctx: Context, body: Any, version: int) -> Any:
    """The bindings the filter selects, grouped by resource pattern, sorted."""
    m = response_module(DESCRIBE_ACLS, version)

    def answer(code: ErrorCode, message: str | None, found: list[AclBinding]) -> Any:
        resources: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
        for acl in found:
            resources.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(acl)
        return build(
            m.DescribeAclsResponse,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            resources=tuple(
                build(
                    m.DescribeAclsResource,
                    resource_type=_code(rtype),
                    resource_name=name,
                    pattern_type=_code(ptype),
                    acls=tuple(
                        build(
                            m.AclDescription,
                            principal=a.principal,
                            host=a.host,
                            operation=_code(a.operation),
                            permission_type=_code(a.permission),
                        )
                        for a in acls
                    ),
                )
                for (rtype, name, ptype), acls in resources.items()
            ),
        )

    acls = _acls(ctx)
    if acls is None:
        return answer(ErrorCode.security_disabled, NO_AUTHORIZER, [])
    refused = _refusal(ctx, Operation.DESCRIBE)
    if refused is not None:
        return answer(error_code(refused), refused.message, [])
    try:
        filt = _filter(body, "pattern_type_filter")
    except Unkept:
        return answer(ErrorCode.none, None, [])
    except InvalidAcl as exc:
        return answer(ErrorCode.invalid_request, str(exc), [])
    return answer(ErrorCode.none, None, acls[1].snapshot.select(filt))


def _too_many(ctx: Context, count: int, what: str) -> str | None:
    """Why a request with ``count`` creations (or filters) is refused whole, or None: at
    most ``kafka_acl_max_changes_per_request`` (each request is checked and written as one
    change of the store, held in memory and, in a cluster, one ZooKeeper write)."""
    cap = ctx.state.settings.kafka_acl_max_changes_per_request
    if count <= cap:
        return None
    return (
        f"{count} ACL {what} in one request, more than kafka_acl_max_changes_per_request "
        f"({cap}); nothing was changed: send them in smaller requests"
    )


async def create_acls(ctx: Context, body: Any, version: int) -> Any:
    """Each creation answered on its own; the valid ones stored in one change."""
    m = response_module(CREATE_ACLS, version)

    def result(code: ErrorCode, message: str | None = None) -> Any:
        return build(m.AclCreationResult, error_code=code, error_message=message)

    def every(code: ErrorCode, message: str) -> Any:
        return build(
            m.CreateAclsResponse,
            throttle_time=NO_THROTTLE,
            results=tuple(result(code, message) for _ in body.creations),
        )

    acls = _acls(ctx)
    if acls is None:
        return every(ErrorCode.security_disabled, NO_AUTHORIZER)
    refused = _refusal(ctx, Operation.ALTER)
    if refused is not None:
        return every(error_code(refused), refused.message)
    too_many = _too_many(ctx, len(body.creations), "creations")
    if too_many is not None:
        return every(ErrorCode.invalid_request, too_many)
    store, authorizer = acls
    results: list[Any] = []
    valid: list[AclBinding] = []
    for c in body.creations:
        try:
            binding = AclBinding(
                _decode(
                    RESOURCE_TYPES, UNKEPT_RESOURCE_TYPES, int(c.resource_type), "resource type"
                ),
                c.resource_name,
                _decode(PATTERN_TYPES, {}, int(c.resource_pattern_type), "pattern type"),
                c.principal,
                c.host,
                _decode(OPERATIONS, UNKEPT_OPERATIONS, int(c.operation), "operation"),
                _decode(PERMISSIONS, {}, int(c.permission_type), "permission type"),
            ).validate()
        except (Unkept, InvalidAcl) as exc:
            results.append(result(ErrorCode.invalid_request, str(exc)))
            continue
        valid.append(binding)
        results.append(result(ErrorCode.none))
    if valid:
        authorizer.update(await asyncio.to_thread(store.create, valid))
        audit.changed(ctx.session.principal, "CREATE_ACLS", [str(b.to_json()) for b in valid])
    return build(m.CreateAclsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


async def delete_acls(ctx: Context, body: Any, version: int) -> Any:
    """Every binding the filters select removed in one change; per filter, what it matched."""
    m = response_module(DELETE_ACLS, version)

    def filter_result(
        code: ErrorCode,
        message: str | None,
        matched: list[AclBinding] = [],  # noqa: B006
    ) -> Any:
        return build(
            m.DeleteAclsFilterResult,
            error_code=code,
            error_message=message,
            matching_acls=tuple(
                build(
                    m.DeleteAclsMatchingAcl,
                    error_code=ErrorCode.none,
                    error_message=None,
                    resource_type=_code(a.resource_type),
                    resource_name=a.name,
                    pattern_type=_code(a.pattern_type),
                    principal=a.principal,
                    host=a.host,
                    operation=_code(a.operation),
                    permission_type=_code(a.permission),
                )
                for a in matched
            ),
        )

    def response(results: list[Any]) -> Any:
        return build(m.DeleteAclsResponse, throttle_time=NO_THROTTLE, filter_results=tuple(results))

    acls = _acls(ctx)
    if acls is None:
        return response(
            [filter_result(ErrorCode.security_disabled, NO_AUTHORIZER)] * len(body.filters)
        )
    refused = _refusal(ctx, Operation.ALTER)
    if refused is not None:
        return response([filter_result(error_code(refused), refused.message)] * len(body.filters))
    too_many = _too_many(ctx, len(body.filters), "filters")
    if too_many is not None:
        return response([filter_result(ErrorCode.invalid_request, too_many)] * len(body.filters))
    store, authorizer = acls
    # Per request filter: its model filter, or the answer it gets without one.
    parsed: list[AclFilter | Any] = []
    for f in body.filters:
        try:
            parsed.append(_filter(f, "pattern_type_filter"))
        except Unkept:
            parsed.append(filter_result(ErrorCode.none, None))  # matches nothing
        except InvalidAcl as exc:
            parsed.append(filter_result(ErrorCode.invalid_request, str(exc)))
    filters = [f for f in parsed if isinstance(f, AclFilter)]
    matched: list[list[AclBinding]] = []
    if filters:
        matched, snapshot = await asyncio.to_thread(store.delete, filters)
        authorizer.update(snapshot)
        gone = list(dict.fromkeys(a for found in matched for a in found))
        audit.changed(ctx.session.principal, "DELETE_ACLS", [str(a.to_json()) for a in gone])
    found = iter(matched)
    return response(
        [
            filter_result(ErrorCode.none, None, next(found)) if isinstance(f, AclFilter) else f
            for f in parsed
        ]
    )
