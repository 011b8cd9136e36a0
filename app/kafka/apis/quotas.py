"""DescribeClientQuotas and AlterClientQuotas on the broker's client quotas, HTTP's
``/quotas``'s.

The quotas are :mod:`app.core.security.quotas`'s, changed through the same
:class:`~app.core.security.quotas.Quotas` HTTP's ``POST /quotas`` uses (its store a file,
or ZooKeeper in a cluster; the manager holds the new quotas at once, other brokers within
a second; the change audited): what one door sets, the other describes and enforces. The
filter is Kafka's (:class:`~app.core.security.quotas.QuotaFilter`): components match an
entity type's exact name (match_type 0), its default entity (1) or any entity having the
type (2, the default included), and ``strict`` leaves out entities with types the filter
does not name; an unknown, empty or repeated entity type, or a match inconsistent with its
match type, is INVALID_REQUEST for the whole answer (Kafka answers a custom entity type
UNSUPPORTED_VERSION; Logbus keeps to INVALID_REQUEST, as for any filter it cannot read).
Logbus keeps no ``ip`` quotas: a filter on ``ip`` matches nothing, an alteration of an
``ip`` entity is INVALID_REQUEST saying so.

AlterClientQuotas answers each entry on its own (Kafka's rule): an unknown entity type or
quota key (``request_percentage``, Kafka's share of request-thread time, is refused naming
the keys Logbus has: ``request_rate`` counts requests per second), a key twice, a value
not above 0, or an entity twice in the request is INVALID_REQUEST for that entry; the
valid entries are written in one change of the store unless ``validate_only``. A request
with more entries than ``kafka_client_quota_max_entries_per_request`` (1000) is answered
INVALID_REQUEST for each, naming the setting, and changes nothing.

Authorized as Kafka's ``KafkaApis``: DescribeClientQuotas needs DESCRIBE_CONFIGS on the
cluster (else a top-level CLUSTER_AUTHORIZATION_FAILED), AlterClientQuotas ALTER_CONFIGS
on the cluster (else every entry CLUSTER_AUTHORIZATION_FAILED).

Concurrency: event loop; the store's write runs in a worker thread.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from app.common.errors import ClusterAuthorizationFailed, LogbusError
from app.core.security.acl import Operation
from app.core.security.quotas import (
    CLIENT_ID,
    DEFAULT,
    USER,
    Change,
    Entity,
    InvalidQuota,
    QuotaFilter,
    alteration,
)
from app.kafka import authorize
from app.kafka.apis.base import NO_THROTTLE, Context, response_module
from app.kafka.encode import build, error_code
from app.kafka.versions import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS

NO_QUOTAS = "this broker keeps no client quotas"


def _components(m: Any, entity: Entity) -> tuple[Any, ...]:
    """Kafka's entity of the answer: its types, a name None for the default entity."""
    return tuple(
        build(m.EntityData, entity_type=kind, entity_name=None if part == DEFAULT else part)
        for kind, part in ((USER, entity.user), (CLIENT_ID, entity.client_id))
        if part is not None
    )


async def describe_client_quotas(ctx: Context, body: Any, version: int) -> Any:
    """The quotas of every entity the filter selects (module docstring)."""
    m = response_module(DESCRIBE_CLIENT_QUOTAS, version)

    def failed(code: ErrorCode, message: str) -> Any:
        return build(
            m.DescribeClientQuotasResponse,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            entries=None,
        )

    try:
        authorize.check(ctx, Operation.DESCRIBE_CONFIGS, None)
    except ClusterAuthorizationFailed as exc:
        return failed(error_code(exc), exc.message)
    try:
        found = QuotaFilter.parse(
            ((c.entity_type, int(c.match_type), c.match) for c in body.components),
            bool(body.strict),
        )
    except InvalidQuota as exc:
        return failed(ErrorCode.invalid_request, str(exc))
    config = ctx.quotas.manager.config if ctx.quotas is not None else None
    selected = [] if config is None else config.describe(found)
    return build(
        m.DescribeClientQuotasResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        entries=tuple(
            build(
                m.EntryData,
                entity=_components(m, entity),
                values=tuple(
                    build(m.ValueData, key=key, value=value)
                    for key, value in sorted(values.items())
                ),
            )
            for entity, values in selected
        ),
    )


async def alter_client_quotas(ctx: Context, body: Any, version: int) -> Any:
    """Each entry answered on its own; the valid ones written in one change."""
    m = response_module(ALTER_CLIENT_QUOTAS, version)

    def result(entry: Any, code: ErrorCode, message: str | None = None) -> Any:
        return build(
            m.EntryData,
            error_code=code,
            error_message=message,
            entity=tuple(
                build(m.EntityData, entity_type=e.entity_type, entity_name=e.entity_name)
                for e in entry.entity
            ),
        )

    def every(code: ErrorCode, message: str) -> Any:
        return build(
            m.AlterClientQuotasResponse,
            throttle_time=NO_THROTTLE,
            entries=tuple(result(entry, code, message) for entry in body.entries),
        )

    try:
        authorize.check(ctx, Operation.ALTER_CONFIGS, None)
    except ClusterAuthorizationFailed as exc:
        return every(error_code(exc), exc.message)
    quotas = ctx.quotas
    if quotas is None:
        return every(ErrorCode.invalid_request, NO_QUOTAS)
    cap = ctx.state.settings.kafka_client_quota_max_entries_per_request
    if len(body.entries) > cap:
        return every(
            ErrorCode.invalid_request,
            f"{len(body.entries)} entries in one request, more than "
            f"kafka_client_quota_max_entries_per_request ({cap}); nothing was changed: "
            "send them in smaller requests",
        )
    results: list[Any] = []
    changes: list[Change] = []
    for entry in body.entries:
        try:
            change = alteration(
                ((e.entity_type, e.entity_name) for e in entry.entity),
                ((op.key, float(op.value), bool(op.remove)) for op in entry.ops),
            )
        except InvalidQuota as exc:
            results.append(result(entry, ErrorCode.invalid_request, str(exc)))
            continue
        if any(entity == change[0] for entity, _ in changes):
            results.append(
                result(entry, ErrorCode.invalid_request, "the entity appears twice in the request")
            )
            continue
        changes.append(change)
        results.append(result(entry, ErrorCode.none))
    if changes and not body.validate_only:
        try:
            await quotas.alter(changes, ctx.session.principal)
        except LogbusError as exc:  # the store refused the whole change (a damaged node)
            return every(error_code(exc), exc.message)
    return build(m.AlterClientQuotasResponse, throttle_time=NO_THROTTLE, entries=tuple(results))
