"""The one place where errors become Confluent Schema Registry answers (the routes of
``app/api/routers/schema_registry.py``), as ``app/api/errors.py`` is for the rest of the
API.

Confluent's body is ``{"error_code": <int>, "message": <str>}``; ``error_code`` is the
registry's code (40401 subject not found, 42201 invalid schema, 40901 incompatible...)
and the HTTP status its first three digits (Confluent's rule), so a Confluent client
(``SchemaRegistryClient``) sees what it would from Confluent. Errors of the rest of
Logbus met on the way keep their status (``app/api/errors.py: status_for``) with that
status as the code (a 503 of a broker still starting is ``{"error_code": 503, ...}``);
a request body or parameter FastAPI refuses is 422 with code 422, as Confluent answers
a body it cannot read; anything unforeseen is 500/50001 (logged).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from app.api.errors import describe_validation_errors, request_errors, status_for
from app.common import errors as core

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
# The media types a registry body may have and an answer may be given in (Confluent's).
MEDIA_TYPES = (MEDIA_TYPE, "application/vnd.schemaregistry+json", "application/json")


class RegistryErrorBody(BaseModel):
    """Confluent Schema Registry's error answer."""

    error_code: int = Field(
        description="Confluent's code: 40401 subject not found, 40402 version not found, "
        "40403 schema not found, 40404 subject soft-deleted, 40405 subject not "
        "soft-deleted, 40406 version soft-deleted, 40407 version not soft-deleted, "
        "40408/40409 no subject-level compatibility/mode, 40901 incompatible schema, "
        "42201 invalid schema, 42202 invalid version, 42203 invalid compatibility level, "
        "42204 invalid mode, 42205 operation not permitted, 42206 referenced by another "
        "schema, 50001 store error; else the HTTP status.",
        examples=[40401],
    )
    message: str = Field(examples=["Subject 'orders-value' not found."])


def confluent_code(exc: core.LogbusError) -> tuple[int, int]:
    """(HTTP status, Confluent error code) of an error."""
    code = getattr(exc, "confluent_code", None)
    if isinstance(code, int):
        return code // 100, code
    status = status_for(exc)
    return status, status


def body(status: int, code: int, message: str) -> Response:
    return Response(
        orjson.dumps({"error_code": code, "message": message}),
        status_code=status,
        media_type=MEDIA_TYPE,
    )


def response_for(exc: Exception) -> Response:
    """The Confluent answer for any exception a registry route raised."""
    if isinstance(exc, core.LogbusError):
        status, code = confluent_code(exc)
        if status >= 500:
            log.warning("schema registry answered %d: %s", status, exc.message)
        return body(status, code, exc.message)
    if isinstance(exc, RequestValidationError):
        return body(422, 422, describe_validation_errors(request_errors(exc)))
    if isinstance(exc, StarletteHTTPException) and exc.status_code < 500:
        # FastAPI's "There was an error parsing the body" (not UTF-8, not JSON): a body
        # that cannot be read, as a RequestValidationError.
        return body(422, 422, f"the body cannot be read: {exc.detail}")
    log.exception("unhandled error in the schema registry", exc_info=exc)
    return body(500, 50001, f"internal error: {type(exc).__name__}")


def example(code: int, message: str) -> dict[str, Any]:
    return {"error_code": code, "message": message}


def error_docs(entries: dict[int, tuple[str, Sequence[dict[str, Any]]]]) -> dict[int | str, Any]:
    """OpenAPI ``responses`` for the given statuses: description and named examples, the
    :class:`RegistryErrorBody` schema in each registry media type."""
    docs: dict[int | str, Any] = {}
    for status, (description, examples) in entries.items():
        named = {str(e["error_code"]): {"summary": e["message"], "value": e} for e in examples}
        content = {media: {"examples": named} if named else {} for media in MEDIA_TYPES}
        docs[status] = {"model": RegistryErrorBody, "description": description, "content": content}
    return docs
