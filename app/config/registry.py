"""The schema registry's and typed records' settings, part of :class:`app.config.Settings`.

Declared on their own class for size; ``Settings`` inherits them (``LOGBUS_SCHEMA_REGISTRY_*``,
``LOGBUS_TYPED_RECORDS_SCHEMA_CACHE``, ``LOGBUS_SCHEMA_VALIDATION_*``).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class SchemaRegistrySettings(BaseSettings):
    # The schema registry (README "Schema registry"; app/registry): its limits keep a
    # huge or deeply nested schema a 422, never a 5xx.
    schema_registry_max_schema_bytes: int = Field(
        default=1 << 20,
        ge=1,
        le=64 << 20,
        description="The longest schema text the registry takes (characters); longer: 422.",
    )
    schema_registry_max_subjects: int = Field(
        default=100_000, ge=1, description="Subjects the registry may hold (deleted ones too)."
    )
    schema_registry_max_versions: int = Field(
        default=10_000, ge=1, description="Versions one subject may hold (deleted ones too)."
    )
    schema_registry_max_references_depth: int = Field(
        default=32,
        ge=1,
        le=1000,
        description="How deep references may nest below a schema (a reference of a reference...).",
    )
    schema_registry_max_references: int = Field(
        default=1_000, ge=1, description="References in one schema's tree, all levels counted."
    )
    schema_registry_max_zero_byte_values: int = Field(
        default=10_000,
        ge=1,
        le=1 << 30,
        description="AVRO: the most values one datum of any type in a schema may build "
        "from no bytes (a record 1 plus its fields, a null or a zero-size fixed 1; a record "
        "of two records of two records... of nulls doubles with each level); more is 422 "
        "(42201), at registration and wherever a stored schema is parsed for use (typed "
        "produce and fetch). 10,000 is ~1 MB of Python objects and ~1 ms of decode a value; "
        "real schemas count their nested records and null fields, tens to hundreds.",
    )
    schema_registry_default_compatibility: str = Field(
        default="BACKWARD",
        pattern="^(NONE|BACKWARD|BACKWARD_TRANSITIVE|FORWARD|FORWARD_TRANSITIVE|FULL|FULL_TRANSITIVE)$",
        description="The compatibility level of subjects with none of their own while no "
        "global level is set (PUT /schema-registry/config sets one).",
    )
    schema_registry_topic_replication_factor: int = Field(
        default=3,
        ge=1,
        description="Replicas of _schemas (capped by the live brokers when it is created).",
    )
    schema_registry_write_timeout_ms: int = Field(
        default=10_000,
        ge=1,
        description="How long a registry write waits for the in-sync replicas of _schemas.",
    )
    typed_records_schema_cache: int = Field(
        default=1_000,
        ge=1,
        description="Parsed schemas (by id) kept for typed HTTP produce and fetch "
        "(value_format avro/jsonschema/protobuf); an id's schema never changes.",
    )
    typed_records_max_zero_width_items: int = Field(
        default=1 << 20,
        ge=0,
        le=1 << 30,
        description="The broker's Avro decode (typed fetch, WebSocket subscriptions): "
        "values built from no bytes (array items of a type that takes none, records: 1 "
        "plus their fields, nulls, zero-size fixed) that the records of one fetch answer "
        "may build together, beyond one per byte they read; a record over it gets a "
        "per-record error. A few bytes can declare 2**62 items.",
    )
    schema_validation_cache_ms: int = Field(
        default=30_000,
        ge=0,
        description="How long broker-side schema validation (topic config "
        "confluent.value.schema.validation) trusts its cached ids of a subject; an id not "
        "in the cache is always looked up in the registry first, so this bounds only how "
        "long a deleted version's id is still accepted.",
    )
    schema_validation_cache_subjects: int = Field(
        default=10_000,
        ge=1,
        description="Subjects whose ids broker-side schema validation caches (cleared when full).",
    )
