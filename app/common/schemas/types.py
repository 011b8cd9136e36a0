"""The schema-type layer's shared vocabulary: type names, compatibility levels, resolved
references, the parsed-schema protocol and the limits every provider enforces.

Nothing here imports a schema library: ``import logbus`` stays light, each provider
(``_avro``, ``_json``, ``_protobuf``) loads its libraries on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
COMPATIBILITY_LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)


@dataclass(frozen=True)
class ResolvedReference:
    """One schema a schema refers to, as the registry resolved it.

    ``name`` is how the referencing schema writes it: an Avro full type name, a .proto
    import path, a JSON Schema ``$ref`` URL. ``references`` are the referenced schema's own
    references, resolved: a tree (the registry stops cycles; ``parse`` refuses one all the
    same, by subject and version along a path).
    """

    name: str
    subject: str
    version: int
    schema_type: str
    schema: str
    references: tuple[ResolvedReference, ...] = ()


@runtime_checkable
class ParsedSchema(Protocol):
    """A schema accepted by its type's library. Immutable; safe to share between threads."""

    schema_type: str
    raw: str
    references: tuple[ResolvedReference, ...]

    def canonical(self) -> str:
        """The text the registry stores and returns (Avro: re-serialized compactly in Avro
        Java's ``Schema.toString()`` key order, as Confluent; JSON Schema and Protobuf: as
        given, so a Protobuf schema registered in Confluent's base64 serialized form stays
        base64)."""
        ...

    def normalized(self) -> str:
        """Confluent's ``normalize=true`` form: equal for semantically equal schemas."""
        ...


class Codec:
    """What ``wire`` and ``check_compatibility`` need of a provider's parsed schema: every
    provider's class derives from it (a nominal base: ``isinstance`` on it is a pointer
    comparison, not a runtime Protocol's attribute walk, on the per-record path)."""

    def encode_payload(self, obj: Any, message_name: str | None) -> bytes:
        """The bytes after the 5-byte header (Protobuf: the message indexes, then the
        message). Raises ``RecordInvalid`` naming the field path."""
        raise NotImplementedError

    def decode_payload(self, payload: memoryview) -> Any:
        """The value of the bytes after the 5-byte header. Raises ``RecordInvalid``."""
        raise NotImplementedError

    def reader_incompatibilities(self, writer: Any) -> list[str]:
        """Why data written with ``writer`` (same type) cannot be read with ``self``."""
        raise NotImplementedError


@dataclass
class SchemaLimits:
    """Bounds on what ``parse`` accepts, so that a hostile schema costs bounded time and
    memory and fails with ``InvalidSchema`` (never ``RecursionError`` or a hang). The
    registry sets them from its settings (``set_limits``); the defaults are safe."""

    # Bytes of one schema's text (each reference counts on its own too).
    max_schema_bytes: int = 1 << 20
    # Nesting of JSON arrays/objects (Avro, JSON Schema) or of braces (.proto).
    max_depth: int = 64
    # References in the whole tree, and its depth.
    max_references: int = 256
    max_reference_depth: int = 16
    # Seconds the .proto compiler may run for one schema (it runs in a child process).
    protoc_timeout: float = 20.0
    # Avro decode: array items that take no bytes in one value, a record of them counting 1
    # plus its fields (the C decoder refuses more).
    max_zero_width_items: int = 1 << 20
    # Avro parse: the most values one datum of any type in a schema may build from no bytes
    # (a record 1 plus its fields, a null or a fixed of size 0 one; see
    # _avro_shape.zero_byte_values): more is InvalidSchema, so records of records of nulls cannot
    # make one value build 2**k objects.
    max_zero_byte_values: int = 10_000


LIMITS = SchemaLimits()


def set_limits(**values: Any) -> None:
    """Change the process-wide limits (the registry calls it once from its settings)."""
    for name, value in values.items():
        if not hasattr(LIMITS, name):
            raise TypeError(f"unknown schema limit {name!r}")
        setattr(LIMITS, name, type(getattr(LIMITS, name))(value))
