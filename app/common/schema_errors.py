"""The schema world's branch of the one error tree (:mod:`app.common.errors`): the schema
types' errors (``app/common/schemas``: a schema its library refuses, a value that does
not match it, bytes not in Confluent's wire format) and Confluent Schema Registry's
(``app/registry``). Every class is a :class:`~app.common.errors.LogbusError` with a
Kafka-style ``error_code``; ``app/api/errors.py`` gives each its status once, and
:mod:`app.common.error_body` turns a body naming one back into its class. Kept apart
from ``errors.py`` only for size: one tree, two modules.
"""

from __future__ import annotations

from typing import Any, ClassVar

from app.common.errors import InvalidRecord, InvalidRequest, LogbusError

# -- the schema registry (app/registry) ---------------------------------------------------------
#
# Confluent Schema Registry's errors: each carries ``confluent_code``, the code of
# Confluent's error body (``{"error_code": 40401, "message": ...}``); its HTTP status is
# the code's first three digits (Confluent's rule). ``error_code`` is a Kafka-style name
# for the rest of Logbus. Mapped to Confluent bodies in one place:
# app/api/registry_errors.py. (InvalidSchema, 42201, is the schema-type layer's:
# app/common/schemas.)


class SchemaRegistryError(LogbusError, error_code="SCHEMA_REGISTRY_ERROR"):
    """Base of the registry's errors (50001 unless a subclass says otherwise). A subclass
    states its code as a class keyword beside its ``error_code``: ``confluent_code=40401``."""

    confluent_code: ClassVar[int] = 50001

    def __init_subclass__(cls, *, confluent_code: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if confluent_code is not None:
            cls.confluent_code = confluent_code


class SubjectNotFound(SchemaRegistryError, error_code="SUBJECT_NOT_FOUND", confluent_code=40401):
    """No subject of this name (none ever registered, or permanently deleted)."""

    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' not found.", subject=subject)


class VersionNotFound(SchemaRegistryError, error_code="VERSION_NOT_FOUND", confluent_code=40402):
    """The subject has no such version."""

    def __init__(self, subject: str, version: object) -> None:
        super().__init__(f"Version {version} not found for subject '{subject}'.", subject=subject)


class SchemaNotFound(SchemaRegistryError, error_code="SCHEMA_NOT_FOUND", confluent_code=40403):
    """No schema with this id, or no version of the subject holding this schema."""

    def __init__(self, message: str = "Schema not found", **fields: Any) -> None:
        super().__init__(message, **fields)


class SubjectSoftDeleted(
    SchemaRegistryError, error_code="SUBJECT_SOFT_DELETED", confluent_code=40404
):
    """A soft delete of a subject already soft-deleted (``permanent=true`` deletes it for good)."""


class SubjectNotSoftDeleted(
    SchemaRegistryError, error_code="SUBJECT_NOT_SOFT_DELETED", confluent_code=40405
):
    """A permanent delete of a subject that was not soft-deleted first."""


class VersionSoftDeleted(
    SchemaRegistryError, error_code="SCHEMA_VERSION_SOFT_DELETED", confluent_code=40406
):
    """A soft delete of a version already soft-deleted (``permanent=true`` deletes it for good)."""


class VersionNotSoftDeleted(
    SchemaRegistryError, error_code="SCHEMA_VERSION_NOT_SOFT_DELETED", confluent_code=40407
):
    """A permanent delete of a version that was not soft-deleted first."""


class SubjectCompatibilityNotConfigured(
    SchemaRegistryError,
    error_code="SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED",
    confluent_code=40408,
):
    """The subject has no compatibility level of its own (``defaultToGlobal`` reads the
    global one)."""


class SubjectModeNotConfigured(
    SchemaRegistryError, error_code="SUBJECT_LEVEL_MODE_NOT_CONFIGURED", confluent_code=40409
):
    """The subject has no mode of its own (``defaultToGlobal`` reads the global one)."""


class IncompatibleSchema(
    SchemaRegistryError, error_code="INCOMPATIBLE_SCHEMA", confluent_code=40901
):
    """The schema breaks the subject's compatibility level against earlier versions."""


class InvalidSchemaVersion(SchemaRegistryError, error_code="INVALID_VERSION", confluent_code=42202):
    """A version that is neither a number in 1..2^31-1 nor ``latest`` (or -1)."""

    def __init__(self, version: object) -> None:
        super().__init__(
            f"The specified version '{version}' is not a valid version id. Allowed values "
            'are between [1, 2^31-1] and the string "latest"',
        )


class InvalidCompatibilityLevel(
    SchemaRegistryError, error_code="INVALID_COMPATIBILITY_LEVEL", confluent_code=42203
):
    """A compatibility level that is not one of Confluent's (BACKWARD, FORWARD_TRANSITIVE, ...)."""


class InvalidMode(SchemaRegistryError, error_code="INVALID_MODE", confluent_code=42204):
    """A mode that is not one of Confluent's (READWRITE, READONLY, IMPORT)."""


class OperationNotPermitted(
    SchemaRegistryError, error_code="OPERATION_NOT_PERMITTED", confluent_code=42205
):
    """The subject's or the registry's mode forbids the write (READONLY; an id given
    outside IMPORT), or an import conflicts with what is stored."""


class ReferenceExists(SchemaRegistryError, error_code="REFERENCE_EXISTS", confluent_code=42206):
    """A delete of a schema version that another schema references."""


class SchemaTooLarge(SchemaRegistryError, error_code="SCHEMA_TOO_LARGE", confluent_code=42201):
    """A schema or its references over the registry's limits (``schema_registry_*``)."""


class RegistryStoreError(
    SchemaRegistryError,
    error_code="SCHEMA_REGISTRY_STORE_ERROR",
    confluent_code=50001,
    retriable=True,
):
    """``_schemas`` could not take or give a record (no leader, a write not replicated)."""


class RegistryNotLeader(
    SchemaRegistryError,
    error_code="SCHEMA_REGISTRY_NOT_LEADER",
    confluent_code=50004,
    retriable=True,
):
    """This broker does not lead ``_schemas``: the request belongs to ``leader_url``
    (the API forwards it there; Confluent's clients do not follow redirects)."""

    leader_url: str | None

    def __init__(self, leader_url: str | None) -> None:
        where = leader_url or "unknown (an election is under way)"
        super().__init__(f"the _schemas leader is {where}", leader_url=leader_url)


# --- Schema types (app/common/schemas, issue 18) ---------------------------------------
# InvalidSchema       INVALID_REQUEST (Confluent 42201: the parser's message)
# RecordInvalid       INVALID_RECORD  (a value does not match its schema; names the path)
# NotSchemaFramed     INVALID_RECORD  (bytes without Confluent's magic 0 + schema id)


class InvalidSchema(InvalidRequest):
    """A schema its type's library refuses, or one over a limit (size, depth, references,
    a reference cycle). The message is the parser's, saying what to fix."""

    confluent_code: ClassVar[int] = 42201

    schema_type: str

    def __init__(self, schema_type: str, reason: str) -> None:
        super().__init__(f"invalid {schema_type} schema: {reason}", schema_type=schema_type)


class RecordInvalid(InvalidRecord):
    """A value that does not match its schema (encode), or bytes that do not decode with it.
    ``path`` names the field ("" for the value itself), e.g. ``address.zip`` or ``items[2]``."""

    path: str

    def __init__(self, path: str, message: str) -> None:
        where = f"at {path}: " if path else ""
        super().__init__(f"record does not match its schema: {where}{message}", path=path)


class NotSchemaFramed(InvalidRecord):
    """Bytes that are not in Confluent's wire format (magic byte 0, then a 4-byte schema id)."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"not a schema-framed record ({reason}); expected magic byte 0 and a 4-byte "
            "big-endian schema id before the payload"
        )
