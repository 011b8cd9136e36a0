"""Confluent Schema Registry's REST API under ``/schema-registry``, over
:class:`app.registry.service.SchemaRegistry`.

``SchemaRegistryClient({"url": "http://HOST:PORT/schema-registry"})`` from confluent-kafka
(and Confluent-API clients in other languages) work unchanged: the paths, query
parameters, bodies and answers are Confluent's
(https://docs.confluent.io/platform/current/schema-registry/develop/api.html). Bodies may
be ``application/vnd.schemaregistry.v1+json``, ``application/vnd.schemaregistry+json``
or ``application/json``; answers are ``application/vnd.schemaregistry.v1+json``. Errors are
Confluent's ``{"error_code": 40401, "message": ...}``, mapped in
``app/api/registry_errors.py``. Properties newer clients send that Logbus does not use
(``metadata``, ``ruleSet``, ...) are accepted and ignored.

Every broker answers. A write at a broker that does not lead ``_schemas``, and a read that
found nothing there, are forwarded to the leader server-side
(``app/api/registry_forward.py``): the rule is the service's (``RegistryNotLeader``,
``leader_elsewhere``), this module only carries the request (:class:`RegistryRoute`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import HTTPConnection
from starlette.responses import Response

from app.api.deps import serving_coordinator, start_into_state, stop_from_state
from app.api.openapi_docs import DocumentedRoute
from app.api.registry_errors import MEDIA_TYPE, MEDIA_TYPES, error_docs, example, response_for
from app.api.registry_forward import RegistryForwarder
from app.api.state import AppState
from app.common import schemas
from app.common.schema_errors import (
    RegistryNotLeader,
    SchemaNotFound,
    SubjectNotFound,
    VersionNotFound,
)
from app.common.schemas.types import SCHEMA_TYPES
from app.registry.config import RegistryConfig
from app.registry.records import Reference
from app.registry.service import Registered, SchemaInput, SchemaRegistry, schema_json
from app.registry.storage import SchemasLog

PREFIX = "/schema-registry"
TAG = "schema-registry"
INT32_MAX = 2**31 - 1
MAX_SUBJECT_LENGTH = 1024


class RegistryRoute(DocumentedRoute):
    """A registry route: its errors answer in Confluent's shape, and what the service
    says belongs to the ``_schemas`` leader is forwarded there (module docstring)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def app(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                return await _on_error(request, exc)

        return app


async def _on_error(request: Request, exc: Exception) -> Response:
    try:
        if isinstance(exc, RegistryNotLeader):
            return await _forwarder(request).forward(request, exc.leader_url)
        if isinstance(exc, SubjectNotFound | VersionNotFound | SchemaNotFound):
            registry: SchemaRegistry | None = getattr(request.app.state, "schema_registry", None)
            leader = registry.leader_elsewhere() if registry is not None else None
            if leader is not None:
                return await _forwarder(request).forward(request, leader)
    except Exception as forward_exc:
        return response_for(forward_exc)
    return response_for(exc)


def _forwarder(request: Request) -> RegistryForwarder:
    forwarder: RegistryForwarder | None = getattr(request.app.state, "registry_forwarder", None)
    if forwarder is None:
        forwarder = RegistryForwarder(request.app.state.logbus)
        request.app.state.registry_forwarder = forwarder
    return forwarder


router = APIRouter(prefix=PREFIX, tags=[TAG], route_class=RegistryRoute)


# -- lifecycle (called from the app's lifespan) ---------------------------------------------


def registry_config(state: AppState) -> RegistryConfig:
    s = state.settings
    return RegistryConfig(
        max_schema_bytes=s.schema_registry_max_schema_bytes,
        max_subjects=s.schema_registry_max_subjects,
        max_versions=s.schema_registry_max_versions,
        max_references_depth=s.schema_registry_max_references_depth,
        max_references=s.schema_registry_max_references,
        default_compatibility=s.schema_registry_default_compatibility,
        replication_factor=s.schema_registry_topic_replication_factor,
        write_timeout_ms=s.schema_registry_write_timeout_ms,
    )


async def start_registry(app: FastAPI, state: AppState) -> None:
    """Rebuild the registry from this broker's replica of ``_schemas``."""
    config = registry_config(state)
    schemas_log = SchemasLog(
        state.topology,
        state.settings.broker_id,
        state.settings.url,
        config.replication_factor,
        config.write_timeout_ms,
    )
    # The parsers' own bounds follow the registry's settings (process-wide).
    schemas.set_limits(
        max_schema_bytes=config.max_schema_bytes,
        max_references=config.max_references,
        max_reference_depth=config.max_references_depth,
        max_zero_width_items=state.settings.typed_records_max_zero_width_items,
        max_zero_byte_values=state.settings.schema_registry_max_zero_byte_values,
    )
    # Any failure to load: the broker serves on; the registry answers 503 (not serving)
    # until restarted.
    registry = SchemaRegistry(schemas_log, config)
    if await start_into_state(
        app, "schema_registry", registry, "the schema registry could not load _schemas", Exception
    ):
        state.schema_validation.registry = registry


async def stop_registry(app: FastAPI) -> None:
    app.state.schema_registry = None
    app.state.logbus.schema_validation.registry = None
    await app.state.logbus.schema_validation.close()
    await stop_from_state(app, "registry_forwarder", "close")


def get_registry(request: HTTPConnection) -> SchemaRegistry:
    registry: SchemaRegistry = serving_coordinator(request, "schema_registry", "schema registry")
    return registry


# -- models ---------------------------------------------------------------------------------


class ReferenceBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(
        min_length=1,
        max_length=4096,
        description="How the schema names it (an Avro full name, a JSON Schema $ref, a "
        ".proto import path).",
        examples=["com.example.Address"],
    )
    subject: str = Field(min_length=1, max_length=MAX_SUBJECT_LENGTH, examples=["address"])
    version: int = Field(ge=1, le=INT32_MAX, examples=[1])


class SchemaRequest(BaseModel):
    """A schema to register, look up or check (Confluent's RegisterSchemaRequest)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    schema_text: str = Field(
        alias="schema",
        min_length=1,
        description="The schema's text: Avro JSON, a JSON Schema, or a .proto file.",
    )
    schema_type: str = Field(
        default="AVRO",
        alias="schemaType",
        description="AVRO (the default), JSON or PROTOBUF.",
    )
    references: list[ReferenceBody] = Field(default_factory=list, max_length=10_000)
    id: int | None = Field(
        default=None, ge=1, le=INT32_MAX, description="IMPORT mode only: the id to store."
    )
    version: int | None = Field(
        default=None, ge=1, le=INT32_MAX, description="IMPORT mode only: the version to store."
    )
    metadata: Any = Field(default=None, description="Accepted, not used by Logbus.")
    rule_set: Any = Field(default=None, alias="ruleSet", description="Accepted, not used.")

    def schema_input(self) -> SchemaInput:
        """The schema as the registry's calls take it."""
        refs = tuple(Reference(r.name, r.subject, r.version) for r in self.references)
        return SchemaInput(self.schema_text, self.schema_type, refs)


class ConfigRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    compatibility: str = Field(
        description="NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL "
        "or FULL_TRANSITIVE.",
        examples=["FULL"],
    )


class ModeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    mode: str = Field(description="READWRITE, READONLY or IMPORT.", examples=["READONLY"])


class SchemaById(BaseModel):
    schema_text: str = Field(alias="schema")
    schemaType: str | None = Field(default=None, description="Absent for AVRO.")
    references: list[ReferenceBody] | None = None
    maxId: int | None = Field(default=None, description="With fetchMaxId=true.")


class RegisteredSchema(BaseModel):
    subject: str
    version: int
    id: int
    schemaType: str | None = Field(default=None, description="Absent for AVRO.")
    references: list[ReferenceBody] | None = None
    schema_text: str = Field(alias="schema")


class SubjectVersion(BaseModel):
    subject: str
    version: int


class CompatibilityAnswer(BaseModel):
    is_compatible: bool
    messages: list[str] | None = Field(default=None, description="With verbose=true.")


class ConfigAnswer(BaseModel):
    compatibilityLevel: str


class ConfigSet(BaseModel):
    compatibility: str


class ModeAnswer(BaseModel):
    mode: str


# -- docs and answers -----------------------------------------------------------------------

_NOT_FOUND = example(40401, "Subject 'orders-value' not found.")
_ERRORS: dict[int, tuple[str, list[dict[str, Any]]]] = {
    404: (
        "40401 subject not found, 40402 version not found, 40403 schema not found, 40404 "
        "subject soft-deleted, 40405 subject not soft-deleted, 40406 version soft-deleted, "
        "40407 version not soft-deleted, 40408/40409 no subject-level compatibility/mode.",
        [
            _NOT_FOUND,
            example(40402, "Version 7 not found for subject 'orders-value'."),
            example(40403, "Schema 42 not found"),
        ],
    ),
    409: (
        "40901: the schema is incompatible with an earlier version at the subject's level.",
        [
            example(
                40901,
                "Schema being registered is incompatible with an earlier schema for subject "
                '"orders-value", details: [...]',
            )
        ],
    ),
    422: (
        "42201 invalid schema (the parser's message; also too large or too deeply "
        "nested), 42202 invalid version, 42203 invalid compatibility level, 42204 invalid "
        "mode, 42205 operation not permitted (READONLY, an id outside IMPORT), 42206 the "
        "version is referenced by another schema; 422: a body or parameter that cannot be "
        "read.",
        [
            example(42201, "Invalid schema: ..."),
            example(42202, "The specified version 'x' is not a valid version id."),
            example(42206, "One or more references exist to the schema"),
        ],
    ),
    500: (
        "50001 store error: _schemas has no leader or a write was not replicated in time "
        "(retriable).",
        [example(50001, "the write to _schemas was not acknowledged by its in-sync replicas")],
    ),
}


def _errors(*statuses: int) -> dict[int | str, Any]:
    return error_docs({s: _ERRORS[s] for s in statuses})


def _ok(model: type[BaseModel] | None, example_value: Any, *errors: int) -> dict[int | str, Any]:
    """``responses=`` of a route: its 200 in the registry media types, and ``errors``."""
    content: dict[str, Any] = {}
    for media in MEDIA_TYPES:
        entry: dict[str, Any] = {"example": example_value}
        if model is not None:
            entry["schema"] = {"$ref": f"#/components/schemas/{model.__name__}"}
        content[media] = entry
    docs: dict[int | str, Any] = {200: {"description": "OK", "content": content}}
    if model is not None:
        docs[200]["model"] = model
    # Any route: a parameter that cannot be read (422), no _schemas leader to ask (500).
    docs.update(_errors(*sorted({*errors, 422, 500})))
    return docs


def _body_doc(model: str, example_value: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra``: the body in every registry media type."""
    schema = {"$ref": f"#/components/schemas/{model}"}
    return {
        "requestBody": {
            "required": True,
            "content": {m: {"schema": schema, "example": example_value} for m in MEDIA_TYPES},
        }
    }


def answer(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type=MEDIA_TYPE)


def raw(text: str) -> Response:
    """A schema's text as the body (``.../schema`` endpoints, as Confluent)."""
    return Response(text.encode(), media_type=MEDIA_TYPE)


_AVRO_EXAMPLE = '{"type":"record","name":"Click","fields":[{"name":"page","type":"string"}]}'
_REGISTER_EXAMPLE = {"schema": _AVRO_EXAMPLE, "schemaType": "AVRO"}
_REGISTERED_EXAMPLE = {"subject": "clicks-value", "version": 1, "id": 1, "schema": _AVRO_EXAMPLE}

Subject = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_SUBJECT_LENGTH,
        description="The subject (e.g. `<topic>-value`).",
        examples=["clicks-value"],
    ),
]
VersionId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        description="A version number (1..2^31-1), or `latest` (-1 too).",
        examples=["latest"],
    ),
]
SchemaId = Annotated[int, Path(ge=1, le=INT32_MAX, description="A schema id.", examples=[1])]
Deleted = Annotated[bool, Query(description="Include soft-deleted versions.")]
SchemaFormat = Annotated[
    str | None,
    Query(
        alias="format",
        max_length=64,
        description="Output form, by schema type (Confluent's): `serialized` gives a PROTOBUF "
        "schema as its base64 FileDescriptorProto (confluent-kafka's Protobuf serializer and "
        "deserializer ask for it); other values, and other types, the schema as registered.",
    ),
]
Normalize = Annotated[bool, Query(description="Normalize the schema before using it.")]
Permanent = Annotated[bool, Query(description="Hard delete (after a soft delete).")]
SubjectPrefix = Annotated[str, Query(alias="subjectPrefix", max_length=MAX_SUBJECT_LENGTH)]
DefaultToGlobal = Annotated[bool, Query(alias="defaultToGlobal")]

# The request bodies' documentation, in every registry media type.
_SCHEMA_BODY = _body_doc("SchemaRequest", _REGISTER_EXAMPLE)
_CONFIG_BODY = _body_doc("ConfigRequest", {"compatibility": "FULL"})
_MODE_BODY = _body_doc("ModeRequest", {"mode": "READONLY"})


def _registered(r: Registered) -> dict[str, Any]:
    return r.as_json()


# -- schemas --------------------------------------------------------------------------------


@router.get("/schemas/types", responses=_ok(None, ["JSON", "PROTOBUF", "AVRO"]))
async def list_schema_types(request: Request) -> Response:
    """The schema types this registry takes."""
    get_registry(request)
    return answer(list(SCHEMA_TYPES))


@router.get("/schemas", responses=_ok(None, [_REGISTERED_EXAMPLE]))
async def list_schemas(
    request: Request,
    subject_prefix: SubjectPrefix = "",
    deleted: Deleted = False,
    latest_only: Annotated[bool, Query(alias="latestOnly")] = False,
) -> Response:
    """Every version of every subject (with `latestOnly`, the newest of each)."""
    found = get_registry(request).all_schemas(
        subject_prefix, deleted=deleted, latest_only=latest_only
    )
    return answer([_registered(r) for r in found])


@router.get("/schemas/ids/{schema_id}", responses=_ok(SchemaById, {"schema": _AVRO_EXAMPLE}, 404))
async def get_schema_by_id(
    request: Request,
    schema_id: SchemaId,
    subject: Annotated[str | None, Query(max_length=MAX_SUBJECT_LENGTH)] = None,
    fetch_max_id: Annotated[bool, Query(alias="fetchMaxId")] = False,
    fmt: SchemaFormat = None,
) -> Response:
    """The schema with this id (its type when not AVRO, its references)."""
    registry = get_registry(request)
    stored = registry.formatted(registry.schema_by_id(schema_id), fmt)
    body = schema_json(stored)
    if fetch_max_id:
        body["maxId"] = registry.max_id()
    return answer(body)


@router.get("/schemas/ids/{schema_id}/schema", responses=_ok(None, {"type": "string"}, 404))
async def get_schema_text_by_id(
    request: Request, schema_id: SchemaId, fmt: SchemaFormat = None
) -> Response:
    """The text of the schema with this id, as the body."""
    registry = get_registry(request)
    return raw(registry.formatted(registry.schema_by_id(schema_id), fmt).schema)


@router.get("/schemas/ids/{schema_id}/subjects", responses=_ok(None, ["clicks-value"], 404))
async def get_schema_subjects(
    request: Request, schema_id: SchemaId, deleted: Deleted = False
) -> Response:
    """The subjects that use this id."""
    versions = get_registry(request).id_versions(schema_id, deleted=deleted)
    return answer(sorted({v.subject for v in versions}))


@router.get(
    "/schemas/ids/{schema_id}/versions",
    responses=_ok(None, [{"subject": "clicks-value", "version": 1}], 404),
)
async def get_schema_versions(
    request: Request, schema_id: SchemaId, deleted: Deleted = False
) -> Response:
    """The (subject, version) pairs that use this id."""
    versions = get_registry(request).id_versions(schema_id, deleted=deleted)
    return answer([{"subject": v.subject, "version": v.version} for v in versions])


# -- subjects -------------------------------------------------------------------------------


@router.get("/subjects", responses=_ok(None, ["clicks-value"]))
async def list_subjects(
    request: Request,
    subject_prefix: SubjectPrefix = "",
    deleted: Deleted = False,
) -> Response:
    """Subjects with a live version (with `deleted`, soft-deleted ones too)."""
    return answer(get_registry(request).subjects(subject_prefix, deleted=deleted))


@router.get("/subjects/{subject}/versions", responses=_ok(None, [1, 2], 404))
async def list_subject_versions(
    request: Request, subject: Subject, deleted: Deleted = False
) -> Response:
    """The subject's version numbers."""
    return answer(get_registry(request).versions(subject, deleted=deleted))


@dataclasses.dataclass(frozen=True, slots=True)
class VersionRead:
    """What both reads of ``/subjects/{subject}/versions/{version}`` (the version and its
    ``.../schema`` text) take, declared once: FastAPI reads these fields as the routes'
    parameters."""

    subject: Subject
    version: VersionId
    deleted: Deleted = False
    fmt: SchemaFormat = None

    def found(self, request: Request) -> Registered:
        """The version, its schema in the ``format`` asked for."""
        registry = get_registry(request)
        found = registry.get_version(self.subject, self.version, deleted=self.deleted)
        return dataclasses.replace(found, schema=registry.formatted(found.schema, self.fmt))


@router.get(
    "/subjects/{subject}/versions/{version}",
    responses=_ok(RegisteredSchema, _REGISTERED_EXAMPLE, 404, 422),
)
async def get_subject_version(
    request: Request, read: Annotated[VersionRead, Depends()]
) -> Response:
    """A version of the subject (`latest`: the newest live one)."""
    return answer(_registered(read.found(request)))


@router.get(
    "/subjects/{subject}/versions/{version}/schema",
    responses=_ok(None, {"type": "string"}, 404, 422),
)
async def get_subject_version_schema(
    request: Request, read: Annotated[VersionRead, Depends()]
) -> Response:
    """The text of a version's schema, as the body."""
    return raw(read.found(request).schema.schema)


@router.get(
    "/subjects/{subject}/versions/{version}/referencedby",
    responses=_ok(None, [2], 404, 422),
)
async def get_referenced_by(request: Request, subject: Subject, version: VersionId) -> Response:
    """The ids of the live schemas whose references name this version."""
    return answer(get_registry(request).referenced_by(subject, version))


@router.post(
    "/subjects/{subject}/versions",
    responses=_ok(RegisteredSchema, _REGISTERED_EXAMPLE, 404, 409, 422, 500),
    openapi_extra=_SCHEMA_BODY,
)
async def register_schema(
    request: Request, subject: Subject, body: SchemaRequest, normalize: Normalize = False
) -> Response:
    """Register a schema under the subject.

    The same schema already registered under the subject answers its version; under
    another subject it gets the same id. Checked against the subject's earlier versions
    at its compatibility level (409/40901). `id` and `version` only in IMPORT mode."""
    registered = await get_registry(request).register(
        subject,
        body.schema_input(),
        normalize=normalize,
        schema_id=body.id,
        version=body.version,
    )
    return answer(_registered(registered))


@router.post(
    "/subjects/{subject}",
    responses=_ok(RegisteredSchema, _REGISTERED_EXAMPLE, 404, 422),
    openapi_extra=_SCHEMA_BODY,
)
async def lookup_schema(
    request: Request,
    subject: Subject,
    body: SchemaRequest,
    normalize: Normalize = False,
    deleted: Deleted = False,
) -> Response:
    """Which version of the subject holds this schema (40403 none does)."""
    found = get_registry(request).lookup(
        subject,
        body.schema_input(),
        normalize=normalize,
        deleted=deleted,
    )
    return answer(_registered(found))


@router.delete("/subjects/{subject}", responses=_ok(None, [1, 2], 404, 422, 500))
async def delete_subject(
    request: Request, subject: Subject, permanent: Permanent = False
) -> Response:
    """Soft-delete every version of the subject (then, with `permanent`, for good).

    Answers the versions deleted. 42206 while a live schema references one of them."""
    return answer(await get_registry(request).delete_subject(subject, permanent=permanent))


@router.delete("/subjects/{subject}/versions/{version}", responses=_ok(None, 1, 404, 422, 500))
async def delete_subject_version(
    request: Request, subject: Subject, version: VersionId, permanent: Permanent = False
) -> Response:
    """Soft-delete a version (then, with `permanent`, for good); answers its number."""
    return answer(await get_registry(request).delete_version(subject, version, permanent=permanent))


# -- compatibility --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class CompatibilityCheck:
    """What both compatibility routes take beside the subject (and version), declared
    once: the schema (the body) and the ``normalize`` and ``verbose`` flags."""

    body: SchemaRequest
    normalize: Normalize = False
    verbose: bool = False

    def against(self, request: Request, subject: str, version: str | None) -> Response:
        """Whether the schema may follow ``version`` (None: every version) of the subject."""
        reasons = get_registry(request).check_compatibility(
            subject, version, self.body.schema_input(), normalize=self.normalize
        )
        answered: dict[str, Any] = {"is_compatible": not reasons}
        if self.verbose:
            answered["messages"] = reasons
        return answer(answered)


Check = Annotated[CompatibilityCheck, Depends()]


@router.post(
    "/compatibility/subjects/{subject}/versions/{version}",
    responses=_ok(CompatibilityAnswer, {"is_compatible": True}, 404, 422),
    openapi_extra=_SCHEMA_BODY,
)
async def check_compatibility(
    request: Request, subject: Subject, version: VersionId, check: Check
) -> Response:
    """Whether the schema may follow this version at the subject's level."""
    return check.against(request, subject, version)


@router.post(
    "/compatibility/subjects/{subject}/versions",
    responses=_ok(CompatibilityAnswer, {"is_compatible": True}, 422),
    openapi_extra=_SCHEMA_BODY,
)
async def check_compatibility_all(request: Request, subject: Subject, check: Check) -> Response:
    """Whether the schema may follow the subject's versions at its level."""
    return check.against(request, subject, None)


# -- config and mode ------------------------------------------------------------------------


@router.get("/config", responses=_ok(ConfigAnswer, {"compatibilityLevel": "BACKWARD"}))
async def get_global_config(request: Request) -> Response:
    """The global compatibility level."""
    return answer({"compatibilityLevel": get_registry(request).compatibility(None)})


@router.put(
    "/config",
    responses=_ok(ConfigSet, {"compatibility": "FULL"}, 422, 500),
    openapi_extra=_CONFIG_BODY,
)
async def set_global_config(request: Request, body: ConfigRequest) -> Response:
    """Set the global compatibility level."""
    level = await get_registry(request).set_compatibility(None, body.compatibility)
    return answer({"compatibility": level})


@router.delete("/config", responses=_ok(ConfigAnswer, {"compatibilityLevel": "FULL"}, 500))
async def delete_global_config(request: Request) -> Response:
    """Reset the global level to the default; answers the level it had."""
    return answer({"compatibilityLevel": await get_registry(request).delete_compatibility(None)})


@router.get("/config/{subject}", responses=_ok(ConfigAnswer, {"compatibilityLevel": "FULL"}, 404))
async def get_subject_config(
    request: Request,
    subject: Subject,
    default_to_global: DefaultToGlobal = False,
) -> Response:
    """The subject's compatibility level (40408 when it has none of its own)."""
    level = get_registry(request).compatibility(subject, default_to_global=default_to_global)
    return answer({"compatibilityLevel": level})


@router.put(
    "/config/{subject}",
    responses=_ok(ConfigSet, {"compatibility": "FULL"}, 422, 500),
    openapi_extra=_CONFIG_BODY,
)
async def set_subject_config(request: Request, subject: Subject, body: ConfigRequest) -> Response:
    """Set the subject's compatibility level."""
    level = await get_registry(request).set_compatibility(subject, body.compatibility)
    return answer({"compatibility": level})


@router.delete(
    "/config/{subject}", responses=_ok(ConfigAnswer, {"compatibilityLevel": "FULL"}, 404, 500)
)
async def delete_subject_config(request: Request, subject: Subject) -> Response:
    """Unset the subject's level (the global one applies); answers the level it had."""
    level = await get_registry(request).delete_compatibility(subject)
    return answer({"compatibilityLevel": level})


@router.get("/mode", responses=_ok(ModeAnswer, {"mode": "READWRITE"}))
async def get_global_mode(request: Request) -> Response:
    """The global mode."""
    return answer({"mode": get_registry(request).mode(None)})


@router.put(
    "/mode",
    responses=_ok(ModeAnswer, {"mode": "READONLY"}, 422, 500),
    openapi_extra=_MODE_BODY,
)
async def set_global_mode(request: Request, body: ModeRequest, force: bool = False) -> Response:
    """Set the global mode (IMPORT on a registry holding subjects needs `force`)."""
    return answer({"mode": await get_registry(request).set_mode(None, body.mode, force=force)})


@router.get("/mode/{subject}", responses=_ok(ModeAnswer, {"mode": "READWRITE"}, 404))
async def get_subject_mode(
    request: Request,
    subject: Subject,
    default_to_global: DefaultToGlobal = False,
) -> Response:
    """The subject's mode (40409 when it has none of its own)."""
    return answer(
        {"mode": get_registry(request).mode(subject, default_to_global=default_to_global)}
    )


@router.put(
    "/mode/{subject}",
    responses=_ok(ModeAnswer, {"mode": "READONLY"}, 422, 500),
    openapi_extra=_MODE_BODY,
)
async def set_subject_mode(
    request: Request, subject: Subject, body: ModeRequest, force: bool = False
) -> Response:
    """Set the subject's mode."""
    mode = await get_registry(request).set_mode(subject, body.mode, force=force)
    return answer({"mode": mode})


@router.delete("/mode/{subject}", responses=_ok(ModeAnswer, {"mode": "READONLY"}, 404, 500))
async def delete_subject_mode(request: Request, subject: Subject) -> Response:
    """Unset the subject's mode (the global one applies); answers the mode it had."""
    return answer({"mode": await get_registry(request).delete_mode(subject)})
