"""The registry's settings, compatibility levels and modes.

* :class:`RegistryConfig`: what ``app/api`` reads of ``app.config.Settings``
  (``schema_registry_*``) for the service (``app/registry`` never reads the settings).
* Compatibility: a subject's level is its own CONFIG record, else the global one, else
  ``default_compatibility`` (BACKWARD, Confluent's default).
* Modes: READWRITE (the default), READONLY (no write to the subject, or to any subject
  when global), IMPORT (a registration may name its id and version, no compatibility
  check: Confluent's way to copy a registry); a subject's mode is its own MODE record,
  else the global one.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.registry.store import SchemaStore

READWRITE = "READWRITE"
READONLY = "READONLY"
IMPORT = "IMPORT"
MODES = (READWRITE, READONLY, IMPORT)
DEFAULT_COMPATIBILITY = "BACKWARD"


@dataclass(frozen=True)
class RegistryConfig:
    """The service's limits and defaults (from ``schema_registry_*`` settings)."""

    # Characters of one schema's text; larger: 422 (42201).
    max_schema_bytes: int = 1 << 20
    # Subjects the registry may hold (live or soft-deleted); more: 422 (42205).
    max_subjects: int = 100_000
    # Versions one subject may hold; more: 422 (42205).
    max_versions: int = 10_000
    # References resolved below a schema, deepest chain; deeper: 422 (42201).
    max_references_depth: int = 32
    # References of one schema, the whole tree counted; more: 422 (42201).
    max_references: int = 1_000
    default_compatibility: str = DEFAULT_COMPATIBILITY
    # _schemas: replicas (capped by live brokers) and how long a write waits for them.
    replication_factor: int = 3
    write_timeout_ms: int = 10_000


def compatibility_of(store: SchemaStore, subject: str | None, default: str) -> str:
    """The level that applies to ``subject`` (None: the global one)."""
    if subject is not None and subject in store.configs:
        return store.configs[subject]
    return store.configs.get(None, default)


def mode_of(store: SchemaStore, subject: str | None) -> str:
    """The mode that applies to ``subject`` (None: the global one)."""
    if subject is not None and subject in store.modes:
        return store.modes[subject]
    return store.modes.get(None, READWRITE)
