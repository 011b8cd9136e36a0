"""ACLs: Kafka's CreateAcls, DescribeAcls and DeleteAcls over HTTP.

A binding is ``{"resource_type", "resource_name", "pattern_type", "principal", "host",
"operation", "permission"}`` with Kafka's names (``app/core/security/acl.py``). Filters
(describe, delete) take the same fields as query parameters, each optional (absent:
any), and ``pattern_type=MATCH`` selects every binding that applies to the named
resource; DeleteAcls also takes several filters at once as a JSON body. Creating and
deleting need ALTER on the cluster, describing DESCRIBE (``app/api/security.py``); every
change goes to the audit log.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from app.api.errors import error_responses
from app.api.openapi_docs import DocumentedRoute
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

router = APIRouter(tags=["acls"], route_class=DocumentedRoute)
# Filters one DeleteAcls call may carry (each is matched against every binding).
MAX_DELETE_FILTERS = 100

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


class FilterResult(BaseModel):
    """What one filter of a DeleteAcls call matched (Kafka's DeleteAclsFilterResult)."""

    acls: list[AclBody]


class DeletedAcls(AclList):
    """``acls``: every binding removed, once; ``filter_results``: per filter, in order,
    the bindings it matched (one binding may be matched by several filters)."""

    filter_results: list[FilterResult]


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


class AclFilterBody(BaseModel):
    """One of Kafka's AclBindingFilters: each field absent (or ANY) matches any value;
    ``pattern_type`` MATCH selects every binding that applies to ``resource_name``
    (literal, ``*`` and prefixes of it), ANY every pattern type with exactly that name."""

    model_config = ConfigDict(extra="forbid")

    resource_type: Literal["ANY", ResourceTypeName] | None = None
    resource_name: str | None = Field(default=None, max_length=255)
    pattern_type: Literal["ANY", "MATCH", "LITERAL", "PREFIXED"] | None = None
    principal: str | None = Field(default=None, max_length=255)
    host: str | None = Field(default=None, max_length=255)
    operation: Literal["ANY", OperationName] | None = None
    permission: Literal["ANY", "ALLOW", "DENY"] | None = None

    def filter(self) -> AclFilter:
        return _filter(**self.model_dump())


class DeleteAclsBody(BaseModel):
    """Kafka's DeleteAclsRequest: several filters, applied together in one change."""

    filters: list[AclFilterBody] = Field(min_length=1, max_length=MAX_DELETE_FILTERS)


@router.post(
    "/acls", status_code=201, response_model=AclList, responses=error_responses(400, 401, 403)
)
async def create_acls(request: Request, body: CreateAclsBody) -> Response:
    """Create ACLs (CreateAcls)

    Adds the bindings (those already present stay once); all or none: one invalid binding (an
    operation that does not apply to its resource type, a principal that is not TYPE:NAME)
    refuses the request with 400 and adds nothing.
    """
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


@router.get("/acls", response_model=AclList, responses=error_responses(400, 401, 403))
async def describe_acls(request: Request, filt: AclFilterQuery) -> Response:
    """Describe ACLs (DescribeAcls)

    The bindings the filter selects, sorted.
    """
    _, authorizer = _acls(request)
    return JSONBytes({"acls": [a.to_json() for a in authorizer.snapshot.select(filt)]})


@router.delete("/acls", response_model=DeletedAcls, responses=error_responses(400, 401, 403))
async def delete_acls(
    request: Request,
    filt: AclFilterQuery,
    body: Annotated[DeleteAclsBody | None, Body()] = None,
) -> Response:
    """Delete ACLs (DeleteAcls)

    Removes every binding the filters select and answers them. One filter in the query string,
    or several (Kafka's DeleteAcls) as a JSON body `{"filters": [{...}, ...]}` with the same
    fields; not both. A filter with no field removes every ACL. All filters apply in one change.
    """
    store, authorizer = _acls(request)
    filters = [filt]
    if body is not None:
        if request.query_params:
            raise InvalidRequest("name the filters in the query string or in the body, not both")
        filters = [f.filter() for f in body.filters]
    matched, snapshot = await asyncio.to_thread(store.delete, filters)
    authorizer.update(snapshot)
    gone = list(dict.fromkeys(a for found in matched for a in found))
    audit.changed(identity_of(request).principal, "DELETE_ACLS", [str(a.to_json()) for a in gone])
    return JSONBytes(
        {
            "acls": [a.to_json() for a in gone],
            "filter_results": [{"acls": [a.to_json() for a in found]} for found in matched],
        }
    )
