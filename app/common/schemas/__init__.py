"""Schema types for the registry and typed records: AVRO, JSON (JSON Schema), PROTOBUF.

``parse`` turns a schema's text (and its resolved references) into a ``ParsedSchema``
with its canonical and normalized forms; ``check_compatibility`` applies a compatibility
level to a new schema against the earlier versions; ``wire`` frames records in Confluent's
wire format. Each type's library (fastavro + avro, jsonschema-rs, protobuf + grpcio-tools)
is imported by its provider on first use, so importing this package costs nothing.

Compatibility is decided as reader/writer pairs, as Avro's resolution rules state it:
BACKWARD means the new schema reads data written with the previous one; FORWARD, the
previous reads the new; FULL, both. ``*_TRANSITIVE`` checks every earlier version, the
others only the last.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.common.schema_errors import InvalidSchema
from app.common.schemas.types import (
    COMPATIBILITY_LEVELS,
    LIMITS,
    SCHEMA_TYPES,
    Codec,
    ParsedSchema,
    ResolvedReference,
    SchemaLimits,
    set_limits,
)

__all__ = [
    "COMPATIBILITY_LEVELS",
    "LIMITS",
    "SCHEMA_TYPES",
    "InvalidSchema",
    "ParsedSchema",
    "ResolvedReference",
    "SchemaLimits",
    "check_compatibility",
    "parse",
    "set_limits",
]


def parse(
    schema_type: str, schema: str, references: Sequence[ResolvedReference] = ()
) -> ParsedSchema:
    """Parse ``schema`` (text as registered) of ``schema_type`` with its resolved references.

    Raises ``InvalidSchema`` with the parser's message for anything its library refuses,
    and for text, nesting or reference trees over ``LIMITS`` (and reference cycles).
    """
    refs = tuple(references)
    kind = (schema_type or "AVRO").upper()
    if not isinstance(schema, str):
        raise InvalidSchema(kind, "the schema must be a string")
    if kind == "AVRO":
        from app.common.schemas._avro import AvroSchema

        return AvroSchema(schema, refs)
    if kind == "JSON":
        from app.common.schemas._json import JsonSchema

        return JsonSchema(schema, refs)
    if kind == "PROTOBUF":
        from app.common.schemas._protobuf import ProtobufSchema

        return ProtobufSchema(schema, refs)
    raise InvalidSchema(kind, f"unknown schema type; expected one of {', '.join(SCHEMA_TYPES)}")


def check_compatibility(
    new: ParsedSchema, previous: Sequence[ParsedSchema], level: str
) -> list[str]:
    """Why ``new`` may not follow ``previous`` (every earlier live version, oldest first)
    under ``level``; ``[]`` when it may. Non-transitive levels use only the last version.
    A previous schema of another type is incompatible (Confluent's rule)."""
    level = level.upper()
    if level not in COMPATIBILITY_LEVELS:
        raise ValueError(f"unknown compatibility level {level!r}")
    if level == "NONE" or not previous:
        return []
    against = list(previous) if level.endswith("_TRANSITIVE") else [previous[-1]]
    base = level.removesuffix("_TRANSITIVE")
    reasons: list[str] = []
    for old in reversed(against):
        label = "the previous version" if old is previous[-1] else "an earlier version"
        if old.schema_type != new.schema_type:
            reasons.append(
                f"{label} is a {old.schema_type} schema; the new one is {new.schema_type}"
            )
            continue
        if base in ("BACKWARD", "FULL"):
            for why in _codec(new).reader_incompatibilities(old):
                reasons.append(f"BACKWARD ({label}'s data read with the new schema): {why}")
        if base in ("FORWARD", "FULL"):
            for why in _codec(old).reader_incompatibilities(new):
                reasons.append(f"FORWARD (the new schema's data read with {label}): {why}")
    return reasons


def _codec(parsed: Any) -> Codec:
    if not isinstance(parsed, Codec):
        raise TypeError(f"{type(parsed).__name__} was not made by app.common.schemas.parse")
    return parsed
