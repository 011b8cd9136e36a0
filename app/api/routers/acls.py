"""ACLs: Kafka's CreateAcls, DescribeAcls and DeleteAcls over HTTP.

A binding is ``{"resource_type", "resource_name", "pattern_type", "principal", "host",
"operation", "permission"}`` with Kafka's names (``app/core/security/acl.py``). Filters
(describe, delete) take the same fields as query parameters, each optional (absent:
any), and ``pattern_type=MATCH`` selects every binding that applies to the named
resource. Creating and deleting need ALTER on the cluster, describing DESCRIBE
(``app/api/security.py``); every change goes to the audit log.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from app.api.errors import error_responses
from app.api.security import identity_of, security_of
from app.api.util import JSONBytes
from app.common.errors import InvalidRequest, SecurityDisabled
from app.core.security import audit
from app.core.security.acl import (
    AclBinding,
    AclFilter,
    Authorizer,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from app.core.security.store import AclStore

router = APIRouter(tags=["acls"])

ResourceTypeName = Literal["TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"]
OperationName = Literal[
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
]


class AclBody(BaseModel):
    """One ACL binding (Kafka's AclBinding)."""

    resource_type: ResourceTypeName
    resource_name: str = Field(min_length=1, max_length=255, description="`*`: every one.")
    pattern_type: Literal["LITERAL", "PREFIXED"] = "LITERAL"
    principal: str = Field(min_length=3, max_length=255, examples=["User:alice"])
    host: str = Field(default="*", min_length=1, max_length=255)
    operation: OperationName
    permission: Literal["ALLOW", "DENY"] = "ALLOW"

    def binding(self) -> AclBinding:
        return AclBinding.from_json(self.model_dump())


class CreateAclsBody(BaseModel):
    acls: list[AclBody] = Field(min_length=1, max_length=1000)


class AclList(BaseModel):
    acls: list[AclBody]


def _acls(request: Request) -> tuple[AclStore, Authorizer]:
    """The broker's ACL store and authorizer; SecurityDisabled when it has none."""
    security = security_of(request)
    if security is None or security.store is None or security.authorizer is None:
        raise SecurityDisabled("no authorizer is configured on this broker (authorizer=acl)")
    return security.store, security.authorizer


RT = Annotated[
    Literal["ANY", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"] | None,
    Query(description="Absent or ANY: every type."),
]
PT = Annotated[
    Literal["ANY", "MATCH", "LITERAL", "PREFIXED"] | None,
    Query(description="MATCH: every binding that applies to `resource_name`."),
]
OP = Annotated[Literal["ANY", OperationName] | None, Query()]
PERM = Annotated[Literal["ANY", "ALLOW", "DENY"] | None, Query()]
NAME = Annotated[str | None, Query(max_length=255)]


def _filter(
    resource_type: RT = None,
    resource_name: NAME = None,
    pattern_type: PT = None,
    principal: NAME = None,
    host: NAME = None,
    operation: OP = None,
    permission: PERM = None,
) -> AclFilter:
    """The filter the query names (a dependency of describe and delete): an absent field
    matches any value."""
    return AclFilter(
        ResourceType(resource_type or "ANY"),
        resource_name,
        PatternType(pattern_type or "ANY"),
        principal,
        host,
        Operation(operation or "ANY"),
        Permission(permission or "ANY"),
    )


AclFilterQuery = Annotated[AclFilter, Depends(_filter)]


@router.post(
    "/acls",
    status_code=201,
    summary="Create ACLs (CreateAcls)",
    description="Adds the bindings (those already present stay once); all or none: one "
    "invalid binding (an operation that does not apply to its resource type, a principal "
    "that is not TYPE:NAME) refuses the request with 400 and adds nothing.",
    response_model=AclList,
    responses=error_responses(400, 401, 403),
)
async def create_acls(request: Request, body: CreateAclsBody) -> Response:
    store, authorizer = _acls(request)
    try:
        bindings = [b.binding().validate() for b in body.acls]
    except InvalidAcl as exc:
        raise InvalidRequest(str(exc)) from None
    snapshot = await asyncio.to_thread(store.create, bindings)
    authorizer.update(snapshot)
    audit.changed(
        identity_of(request).principal, "CREATE_ACLS", [str(b.to_json()) for b in bindings]
    )
    return JSONBytes({"acls": [b.to_json() for b in bindings]}, status_code=201)


@router.get(
    "/acls",
    summary="Describe ACLs (DescribeAcls)",
    description="The bindings the filter selects, sorted.",
    response_model=AclList,
    responses=error_responses(400, 401, 403),
)
async def describe_acls(request: Request, filt: AclFilterQuery) -> Response:
    _, authorizer = _acls(request)
    return JSONBytes({"acls": [a.to_json() for a in authorizer.snapshot.select(filt)]})


@router.delete(
    "/acls",
    summary="Delete ACLs (DeleteAcls)",
    description="Removes every binding the filter selects and answers them. A filter with "
    "no field removes every ACL.",
    response_model=AclList,
    responses=error_responses(400, 401, 403),
)
async def delete_acls(request: Request, filt: AclFilterQuery) -> Response:
    store, authorizer = _acls(request)
    matched, snapshot = await asyncio.to_thread(store.delete, [filt])
    authorizer.update(snapshot)
    gone = matched[0]
    audit.changed(identity_of(request).principal, "DELETE_ACLS", [str(a.to_json()) for a in gone])
    return JSONBytes({"acls": [a.to_json() for a in gone]})
