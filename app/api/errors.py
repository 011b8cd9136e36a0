"""The one place where errors become HTTP answers.

Every error body is ``{"error_code", "message", "retriable", ...fields()}``:
``error_code`` is the Kafka error name clients switch on, ``retriable`` says
whether the same request may succeed later, and the core error's ``fields()``
add what explains it (both offset bounds for OFFSET_OUT_OF_RANGE, the config
name for INVALID_CONFIG, ...). Bad input is always a 4xx; only a bug is a 500.

Storage failures are a retriable 503 KAFKA_STORAGE_ERROR whichever path meets
them: a :class:`~app.common.errors.KafkaStorageError` the core raised, or an
``OSError`` from the disk that reached a handler unwrapped (a full disk while a
group commit rolls a segment). Their answers never carry filesystem paths:
the client is told what failed and why (``No space left on device``), the
broker's log keeps the paths for the operator.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from app.api import limits
from app.api.schema_validation import SchemaValidationFailed
from app.common import errors as core
from app.common import group_errors
from app.common import schema_errors as registry

log = logging.getLogger(__name__)

# Most specific class first: the first isinstance match wins.
STATUS_BY_ERROR: tuple[tuple[type[core.LogbusError], int], ...] = (
    (core.OffsetOutOfRange, 416),
    # Damage on the broker's disk, found while reading: not the client's fault.
    (core.StoredBatchCorrupt, 503),
    (core.UnknownTopicOrPartition, 404),
    (core.TopicAlreadyExists, 409),
    # Idempotent producers: the batch conflicts with what the partition already holds.
    (core.OutOfOrderSequence, 409),
    (core.InvalidProducerEpoch, 409),
    (core.RecordTooLarge, 413),  # PayloadTooLarge included
    (core.RequestTimedOut, 504),
    (core.NotLeaderOrFollower, 421),  # 307 when the leader is known (response_for)
    (core.LeaderNotAvailable, 503),
    (core.OffsetNotAvailable, 503),  # a new leader's high watermark still lags
    (core.LeaderEpochMismatch, 409),  # FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH
    (core.NotCoordinator, 421),
    # Transactions: an unknown id 404; the rest are conflicts with its state (409).
    (core.TransactionalIdNotFound, 404),
    (core.TransactionError, 409),
    (core.NotEnoughReplicas, 503),
    (core.BrokerNotAvailable, 503),
    (core.KafkaStorageError, 503),
    (core.SaslAuthenticationFailed, 401),
    (core.AuthorizationFailed, 403),  # TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_...
    # Consumer groups: fencing and membership conflicts are 409, unknown group/member 404.
    (group_errors.GroupIdNotFound, 404),
    (group_errors.UnknownMemberId, 404),
    (group_errors.CoordinatorLoadInProgress, 503),
    (group_errors.CoordinatorNotAvailable, 503),
    (group_errors.UnsupportedAssignor, 400),
    (group_errors.InvalidGroupId, 400),
    (group_errors.GroupError, 409),
    (core.InvalidRequest, 400),
    (core.CorruptRecord, 400),
    (core.InvalidRecord, 400),
    (core.UnsupportedMessageFormat, 400),
    (core.UnsupportedCompressionType, 400),
    # The schema registry's errors: its routes answer Confluent's bodies
    # (app/api/registry_errors.py); met elsewhere, each is the status of its Confluent code.
    (registry.SubjectNotFound, 404),
    (registry.VersionNotFound, 404),
    (registry.SchemaNotFound, 404),
    (registry.SubjectSoftDeleted, 404),
    (registry.SubjectNotSoftDeleted, 404),
    (registry.VersionSoftDeleted, 404),
    (registry.VersionNotSoftDeleted, 404),
    (registry.SubjectCompatibilityNotConfigured, 404),
    (registry.SubjectModeNotConfigured, 404),
    (registry.IncompatibleSchema, 409),
    (registry.InvalidSchemaVersion, 422),
    (registry.InvalidCompatibilityLevel, 422),
    (registry.InvalidMode, 422),
    (registry.OperationNotPermitted, 422),
    (registry.ReferenceExists, 422),
    (registry.SchemaTooLarge, 422),
    (registry.RegistryNotLeader, 503),
    (registry.RegistryStoreError, 503),
    (registry.SchemaRegistryError, 503),
)


class NotAcceptable(core.InvalidRequest):
    """The client asked (``Accept``) for a representation we don't produce."""

    def __init__(self, accept: str, offered: Sequence[str]) -> None:
        super().__init__(
            f"cannot answer with {accept!r}; acceptable: {', '.join(offered)}",
            acceptable=list(offered),
        )


class UnsupportedMediaType(core.InvalidRequest):
    """The request body's ``Content-Type`` is not one the endpoint takes (``app.api.guards``)."""

    def __init__(self, content_type: str | None, accepted: Sequence[str]) -> None:
        given = "no Content-Type" if content_type is None else f"Content-Type {content_type!r}"
        super().__init__(
            f"a body with {given} is not accepted here; send {' or '.join(accepted)}",
            content_type=content_type,
            acceptable=list(accepted),
        )


class RecordRefused(core.InvalidRecord):
    """A record of a typed produce (``value_format`` avro, jsonschema, protobuf) that does
    not match its schema: the whole request is refused (422), nothing of it written."""

    def __init__(self, index: int, field: str, path: str, reason: str) -> None:
        super().__init__(
            f"body.records.{index}.{field}: {reason}", index=index, field=field, path=path
        )


API_STATUS: tuple[tuple[type[core.LogbusError], int], ...] = (
    (NotAcceptable, 406),
    (RecordRefused, 422),
    (SchemaValidationFailed, 422),
    (UnsupportedMediaType, 415),
    # The listener's limits (app/api/limits.py), answered before a request reaches the app.
    (limits.ConnectionQuotaExceeded, 429),
    (limits.HeadersTooLarge, 431),
    (limits.RequestReadTimeout, 408),
)


def status_for(exc: core.LogbusError) -> int:
    for cls, status in API_STATUS + STATUS_BY_ERROR:
        if isinstance(exc, cls):
            return status
    return 500


class ErrorBody(BaseModel):
    """Every error answer. Extra fields depend on the error (see each endpoint's examples)."""

    model_config = ConfigDict(extra="allow")

    error_code: str = Field(
        description="Kafka error name, e.g. UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE.",
        examples=["UNKNOWN_TOPIC_OR_PARTITION"],
    )
    message: str = Field(description="What went wrong, for humans.")
    retriable: bool = Field(description="Whether the same request may succeed if retried.")


def error_response(
    status: int,
    error_code: str,
    message: str,
    retriable: bool = False,
    extra: dict[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    body: dict[str, Any] = {"error_code": error_code, "message": message, "retriable": retriable}
    if extra:
        body.update(extra)
    return Response(
        _dumps(body),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _dumps(body: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(body, default=str)
    except TypeError:
        # An error about an out-of-range input can carry it (an offset beyond 64 bits,
        # which orjson refuses): such integers are rendered as strings rather than
        # turning the 4xx into a 500.
        return orjson.dumps(_big_ints_as_str(body), default=str)


def _big_ints_as_str(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _big_ints_as_str(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_big_ints_as_str(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return str(value)
    return value


# An absolute path in a message: "/" then path characters, at least two components.
_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.])/[\w.@%+=,-]+(?:/[\w.@%+=,-]+)+/?")


def without_paths(message: str) -> str:
    """``write to /srv/logbus/orders-0/00000000000000000000.log failed`` ->
    ``write to 00000000000000000000.log failed``: a path names the broker's disk
    layout, which is no client's business; the file name is enough to say what failed."""
    return _ABSOLUTE_PATH.sub(lambda m: m.group(0).rstrip("/").rsplit("/", 1)[-1], message)


def storage_error(exc: OSError) -> core.KafkaStorageError:
    """An ``OSError`` from the disk as the retriable KAFKA_STORAGE_ERROR, without its paths."""
    reason = exc.strerror or type(exc).__name__
    return core.KafkaStorageError(f"storage error: {reason}; retry later", errno=exc.errno)


def is_storage_error(exc: BaseException) -> bool:
    """An ``OSError`` from a file operation, not from a socket (a peer that hung up)."""
    return (
        isinstance(exc, OSError)
        and exc.errno is not None
        and not isinstance(exc, ConnectionError | TimeoutError | socket.gaierror)
    )


def response_for(exc: core.LogbusError) -> Response:
    status = status_for(exc)
    if status >= 500 and status not in (503, 504):
        log.error("unmapped core error %s", exc, exc_info=exc)
    message = exc.message
    if isinstance(exc, core.KafkaStorageError):
        log.warning("storage error answered with 503: %s", exc)
        message = without_paths(message)
    headers = None
    if isinstance(exc, core.SaslAuthenticationFailed) and exc.challenge:
        headers = {"WWW-Authenticate": exc.challenge}
    return error_response(status, exc.error_code, message, exc.retriable, exc.fields(), headers)


def describe_validation_errors(errors: Sequence[Any]) -> str:
    """``query.offset: Input should be a valid integer; body.records.0.key: ...``"""
    parts = []
    for err in errors:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
        msg = err.get("msg", "invalid value")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts) or "invalid request"


def _invalid_fields(errors: Sequence[Any]) -> list[str]:
    return [".".join(str(p) for p in err.get("loc", ())) for err in errors]


# FastAPI lists a request's validation errors as it resolves the parameters: those of a
# dependency (a dataclass of parameters several routes share) before the endpoint's own,
# each group path, query, header, cookie, then body. Answers list them by that kind alone,
# so where a parameter is declared (the endpoint or a shared dependency) changes no answer.
_LOCATION_ORDER = {"path": 0, "query": 1, "header": 2, "cookie": 3, "body": 4}


def request_errors(exc: RequestValidationError) -> list[Any]:
    """``exc``'s errors, path ones first, then query, header, cookie and body ones (the
    order of an endpoint's own parameters; each kind in declaration order)."""

    def kind(err: Any) -> int:
        loc = err.get("loc") or ("",)
        return _LOCATION_ORDER.get(str(loc[0]), len(_LOCATION_ORDER))

    return sorted(exc.errors(), key=kind)


def validation_response(exc: RequestValidationError) -> Response:
    errs = request_errors(exc)
    message = describe_validation_errors(errs)
    if any(e.get("type") == "json_invalid" for e in errs):
        message = f"malformed JSON body: {message}"
    return error_response(400, "INVALID_REQUEST", message, extra={"fields": _invalid_fields(errs)})


async def _logbus_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, core.LogbusError)
    if isinstance(exc, core.NotLeaderOrFollower) and exc.leader_url:
        return redirect_to_leader(request, exc)
    return response_for(exc)


def redirect_to_leader(request: Request, exc: core.NotLeaderOrFollower) -> Response:
    """307 to the same path and query on the leader: ``curl -L`` (and any client following
    redirects) re-sends the request there; the body still names the leader for SDKs."""
    assert exc.leader_url
    location = exc.leader_url.rstrip("/") + request.url.path
    if request.url.query:
        location += "?" + request.url.query
    return error_response(
        307,
        exc.error_code,
        exc.message,
        exc.retriable,
        exc.fields(),
        headers={"Location": location},
    )


async def _validation_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return validation_response(exc)


async def _http_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    # Unknown routes and wrong methods still answer in the one error shape.
    code = "INVALID_REQUEST"
    message = str(exc.detail)
    if exc.status_code == 404:
        message = f"no such endpoint: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    return error_response(exc.status_code, code, message, headers=exc.headers)


async def _disconnect_handler(request: Request, exc: Exception) -> Response:
    # The client hung up mid-body: nobody will read this answer, and it is not a server fault.
    return error_response(400, "INVALID_REQUEST", "the client disconnected before the body ended")


async def _os_error_handler(request: Request, exc: Exception) -> Response:
    # Answered here (Starlette's handler for Exception re-raises after answering, and
    # the server then drops the keep-alive connection): a failing disk is no bug.
    assert isinstance(exc, OSError)
    if not is_storage_error(exc):
        raise exc
    log.error("storage error on %s %s", request.method, request.url.path, exc_info=exc)
    return response_for(storage_error(exc))


async def _unhandled_handler(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(
        500, "UNKNOWN_SERVER_ERROR", f"internal error: {type(exc).__name__}", retriable=False
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(core.LogbusError, _logbus_handler)
    app.add_exception_handler(RequestValidationError, _validation_handler)
    app.add_exception_handler(StarletteHTTPException, _http_handler)
    app.add_exception_handler(ClientDisconnect, _disconnect_handler)
    app.add_exception_handler(OSError, _os_error_handler)
    app.add_exception_handler(Exception, _unhandled_handler)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the given error statuses, all with the ErrorBody model."""
    return {status: ERROR_DOCS[status] for status in statuses}


def schema_validation_doc() -> dict[str, Any]:
    """The 422 of the binary produce endpoint: broker-side schema validation."""
    return _doc(
        "The topic has `confluent.value.schema.validation` (or `confluent.key.schema."
        "validation`) on and a record's value (key) does not start with Confluent's wire-format "
        "header (magic byte 0, a 4-byte schema id) naming an id registered under `<topic>-value` "
        "(`-key`). `index` is the record's place among the body's records, `field` key or "
        "value. Nothing of the request was written.",
        (
            "INVALID_RECORD",
            {
                "error_code": "INVALID_RECORD",
                "message": "record 1 of the request to orders: the value's schema id 7 is not "
                "registered under subject 'orders-value'",
                "retriable": False,
                "index": 1,
                "field": "value",
            },
        ),
    )


def producer_conflict_doc() -> dict[str, Any]:
    """The 409 of the binary produce endpoint: idempotent-producer conflicts."""
    return _doc(
        "An idempotent producer's batch conflicts with the partition's producer state: "
        "a sequence gap (OUT_OF_ORDER_SEQUENCE_NUMBER) or an epoch older than the newest "
        "seen (INVALID_PRODUCER_EPOCH). Not retriable; nothing was written.",
        (
            "OUT_OF_ORDER_SEQUENCE_NUMBER",
            {
                "error_code": "OUT_OF_ORDER_SEQUENCE_NUMBER",
                "message": "orders-0: batch of producer 1000 (epoch 0) starts at sequence 12, "
                "expected 10: sequence gap",
                "retriable": False,
                "topic": "orders",
                "partition": 0,
                "producer_id": 1000,
                "producer_epoch": 0,
                "sequence": 12,
                "expected_sequence": 10,
            },
        ),
        (
            "INVALID_PRODUCER_EPOCH",
            {
                "error_code": "INVALID_PRODUCER_EPOCH",
                "message": "orders-0: producer 1000 has epoch 2; a batch with the older "
                "epoch 1 is fenced",
                "retriable": False,
                "topic": "orders",
                "partition": 0,
                "producer_id": 1000,
                "producer_epoch": 1,
                "current_epoch": 2,
            },
        ),
    )


def offsets_unavailable_doc() -> dict[str, Any]:
    """The 503 of an offset lookup: the broker is not ready, or a newly elected leader's
    high watermark still lags the start of its epoch (OFFSET_NOT_AVAILABLE)."""
    return _doc(
        "The broker is not ready (starting or stopping) or its storage failed; or this "
        "broker was just elected "
        "leader and its high watermark has not caught up with the start of its leader "
        "epoch yet, so it cannot say where the log ends (OFFSET_NOT_AVAILABLE, as Kafka's "
        "ListOffsets; `earliest` is always answered). Retry shortly.",
        (
            "OFFSET_NOT_AVAILABLE",
            error_example(
                "OFFSET_NOT_AVAILABLE",
                "the offsets of orders-0 are not available yet: its high watermark (0) lags "
                "behind the start offset of leader epoch 3 (50) after a leader election; "
                "retry shortly",
                True,
                topic="orders",
                partition=0,
                high_watermark=0,
                epoch_start_offset=50,
                leader_epoch=3,
            ),
        ),
        (
            "BROKER_NOT_AVAILABLE",
            error_example("BROKER_NOT_AVAILABLE", "the broker is starting", True),
        ),
        (
            "KAFKA_STORAGE_ERROR",
            error_example(
                "KAFKA_STORAGE_ERROR",
                "read of 00000000000000000000.timeindex failed: [Errno 5] Input/output error",
                True,
            ),
        ),
    )


def _doc(description: str, *examples: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """One status's OpenAPI ``responses`` entry: the ErrorBody model, what the status
    means, and named example bodies (none: no ``content``)."""
    entry: dict[str, Any] = {"model": ErrorBody, "description": description}
    if examples:
        entry["content"] = {
            "application/json": {
                "examples": {name: {"summary": name, "value": value} for name, value in examples}
            }
        }
    return entry


def error_example(
    code: str, message: str, retriable: bool = False, **fields: Any
) -> dict[str, Any]:
    """An error body as the broker answers it, for an OpenAPI example."""
    return {"error_code": code, "message": message, "retriable": retriable, **fields}


def router_error_responses(
    descriptions: Mapping[int, str], examples: Mapping[int, Sequence[dict[str, Any]]] | None = None
) -> Callable[..., dict[int | str, dict[str, Any]]]:
    """:func:`error_responses` for a router whose statuses mean something of its own (the
    groups' 409 is a fencing, the transactions' a producer conflict): ``responses(*statuses)``
    documents each with the router's ``descriptions`` and ``examples`` (error bodies from
    :func:`error_example`, named by their ``error_code``)."""
    examples = examples or {}

    def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
        return {
            s: _doc(descriptions[s], *((e["error_code"], e) for e in examples.get(s, ())))
            for s in statuses
        }

    return responses


ERROR_DOCS: dict[int, dict[str, Any]] = {
    422: _doc(
        "A record of a typed produce (`value_format` or `key_format` avro, jsonschema, "
        "protobuf) does not match its schema: the whole request is refused and nothing of it "
        "is written. `index` is the record's place in `records`, `field` key or value, "
        "`path` the field inside it. The same answer, without `path`, for a record on a topic "
        "with `confluent.value.schema.validation` (or the key variant) whose value (key) does "
        "not carry a schema id registered under `<topic>-value` (`-key`).",
        (
            "INVALID_RECORD",
            {
                "error_code": "INVALID_RECORD",
                "message": "body.records.2.value: record does not match its schema: at "
                "ship.zip: 75001 (int) is not a valid string",
                "retriable": False,
                "index": 2,
                "field": "value",
                "path": "ship.zip",
            },
        ),
    ),
    400: _doc(
        "Bad input: malformed JSON, a wrong type, bad base64, an invalid topic name or config, "
        "a corrupt or truncated record batch.",
        (
            "INVALID_REQUEST",
            {
                "error_code": "INVALID_REQUEST",
                "message": "query.offset: Input should be a valid integer",
                "retriable": False,
                "fields": ["query.offset"],
            },
        ),
        (
            "CORRUPT_MESSAGE",
            {
                "error_code": "CORRUPT_MESSAGE",
                "message": "CRC-32C mismatch in record batch at byte 0",
                "retriable": False,
            },
        ),
    ),
    401: _doc(
        "Authentication is on and the request carries no credentials, or credentials the "
        "broker refused (unknown user, wrong password, a bearer token expired or wrongly "
        "signed). `WWW-Authenticate` names the accepted schemes; nothing was done.",
        (
            "SASL_AUTHENTICATION_FAILED",
            {
                "error_code": "SASL_AUTHENTICATION_FAILED",
                "message": "Basic: unknown user or wrong password",
                "retriable": False,
            },
        ),
    ),
    403: _doc(
        "An ACL refuses the principal the operation on the resource named in the body "
        "(TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED); or, in cluster "
        "mode, a call only brokers make (a fetch with `replica_id`) came without valid "
        "inter-broker credentials for the broker it names. Nothing changed.",
        (
            "TOPIC_AUTHORIZATION_FAILED",
            {
                "error_code": "TOPIC_AUTHORIZATION_FAILED",
                "message": "User:alice may not WRITE topic 'orders'",
                "retriable": False,
                "resource_type": "TOPIC",
                "resource_name": "orders",
                "operation": "WRITE",
            },
        ),
        (
            "CLUSTER_AUTHORIZATION_FAILED",
            {
                "error_code": "CLUSTER_AUTHORIZATION_FAILED",
                "message": "a fetch claiming replica_id 2 must carry broker 2's inter-broker "
                "credentials (Logbus-Replica-Auth)",
                "retriable": False,
            },
        ),
    ),
    404: _doc(
        "The topic or partition does not exist.",
        (
            "UNKNOWN_TOPIC_OR_PARTITION",
            {
                "error_code": "UNKNOWN_TOPIC_OR_PARTITION",
                "message": "partition orders-7 does not exist",
                "retriable": False,
                "topic": "orders",
                "partition": 7,
            },
        ),
    ),
    406: _doc(
        "The Accept header asks for a representation this endpoint does not produce.",
        (
            "INVALID_REQUEST",
            {
                "error_code": "INVALID_REQUEST",
                "message": "cannot answer with 'text/html'; acceptable: application/json",
                "retriable": False,
                "acceptable": ["application/json", "application/octet-stream"],
            },
        ),
    ),
    409: _doc(
        "The topic already exists.",
        (
            "TOPIC_ALREADY_EXISTS",
            {
                "error_code": "TOPIC_ALREADY_EXISTS",
                "message": "topic 'orders' already exists",
                "retriable": False,
                "topic": "orders",
            },
        ),
    ),
    413: _doc(
        "The request body is over the server's limit, or a batch is over max.message.bytes.",
        (
            "MESSAGE_TOO_LARGE",
            {
                "error_code": "MESSAGE_TOO_LARGE",
                "message": "request body of 104857601 bytes exceeds the limit of 104857600 bytes",
                "retriable": False,
                "size": 104857601,
                "limit": 104857600,
            },
        ),
    ),
    415: _doc(
        "The body's Content-Type is not one this endpoint takes (JSON endpoints take "
        "application/json, binary produce application/octet-stream); nothing was read.",
        (
            "INVALID_REQUEST",
            {
                "error_code": "INVALID_REQUEST",
                "message": "a body with Content-Type 'text/plain' is not accepted here; "
                "send application/json",
                "retriable": False,
                "content_type": "text/plain",
                "acceptable": ["application/json"],
            },
        ),
    ),
    416: _doc(
        "The offset is outside the partition's log; the body carries both bounds.",
        (
            "OFFSET_OUT_OF_RANGE",
            {
                "error_code": "OFFSET_OUT_OF_RANGE",
                "message": "offset 99 is out of range for orders-0: valid offsets are 0 to 42",
                "retriable": False,
                "topic": "orders",
                "partition": 0,
                "offset": 99,
                "log_start_offset": 0,
                "log_end_offset": 42,
            },
        ),
    ),
    307: _doc(
        "Cluster mode: another broker leads this partition. `Location` is the same request "
        "on the leader (`curl -L` follows it); the body names the leader for SDKs, which "
        "refresh their metadata instead.",
        (
            "NOT_LEADER_OR_FOLLOWER",
            {
                "error_code": "NOT_LEADER_OR_FOLLOWER",
                "message": "this broker does not lead orders-0; its leader is broker 2 "
                "(http://10.0.0.2:8080)",
                "retriable": True,
                "topic": "orders",
                "partition": 0,
                "leader": 2,
                "leader_url": "http://10.0.0.2:8080",
            },
        ),
    ),
    421: _doc(
        "Cluster mode: this broker does not lead the partition (or coordinate the group) and "
        "the leader is not known yet (an election is under way): refresh metadata and retry.",
        (
            "NOT_LEADER_OR_FOLLOWER",
            {
                "error_code": "NOT_LEADER_OR_FOLLOWER",
                "message": "this broker does not lead orders-0; its leader is no broker yet "
                "(election)",
                "retriable": True,
                "topic": "orders",
                "partition": 0,
                "leader": None,
                "leader_url": None,
            },
        ),
        (
            "NOT_COORDINATOR",
            {
                "error_code": "NOT_COORDINATOR",
                "message": "this broker does not coordinate group 'billing'; its coordinator "
                "is broker 1 (http://10.0.0.1:8080)",
                "retriable": True,
                "group": "billing",
                "coordinator": 1,
                "coordinator_url": "http://10.0.0.1:8080",
            },
        ),
    ),
    503: _doc(
        "The broker is not ready (starting or stopping) or its storage failed; or, with "
        "acks=all, the partition has fewer in-sync replicas than min.insync.replicas "
        "(nothing written); retry.",
        (
            "BROKER_NOT_AVAILABLE",
            {
                "error_code": "BROKER_NOT_AVAILABLE",
                "message": "the broker is starting",
                "retriable": True,
            },
        ),
        (
            "KAFKA_STORAGE_ERROR",
            {
                "error_code": "KAFKA_STORAGE_ERROR",
                "message": "write to 00000000000000000000.log failed: [Errno 28] No space left "
                "on device",
                "retriable": True,
            },
        ),
        (
            "NOT_ENOUGH_REPLICAS",
            {
                "error_code": "NOT_ENOUGH_REPLICAS",
                "message": "orders-0 has 1 in-sync replicas ([1]), fewer than "
                "min.insync.replicas=2; nothing was written",
                "retriable": True,
            },
        ),
    ),
    504: _doc(
        "acks=all: the in-sync replicas did not all confirm the write within timeout_ms; "
        "it may still be replicated.",
        (
            "REQUEST_TIMED_OUT",
            {
                "error_code": "REQUEST_TIMED_OUT",
                "message": "orders-0: offset 41 was not replicated to every in-sync replica "
                "within 100 ms",
                "retriable": True,
            },
        ),
    ),
}
