"""The registry's limits (``schema_registry_*`` settings) refuse with a 4xx code, never a
crash: a schema over the size limit, too many subjects or versions, references nested
deeper than allowed; and ``normalize`` stores the normalized form. A real service over a
real one-broker topology."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.common.schema_errors import InvalidSchema, OperationNotPermitted, SchemaTooLarge
from app.core.local_topology import LocalTopology
from app.core.log import LogManager
from app.registry.config import RegistryConfig
from app.registry.records import Reference
from app.registry.service import SchemaInput, SchemaRegistry
from app.registry.storage import SchemasLog


def record(name: str, field_type: str = "string") -> str:
    return json.dumps(
        {"type": "record", "name": name, "fields": [{"name": "f", "type": field_type}]}
    )


Make = Callable[..., tuple[SchemaRegistry, asyncio.AbstractEventLoop]]


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Make]:
    loop = asyncio.new_event_loop()
    manager = LogManager(tmp_path / "data")
    manager.start()

    def build(**limits: int) -> tuple[SchemaRegistry, asyncio.AbstractEventLoop]:
        topology = LocalTopology(manager, 0, "http://b0")
        registry = SchemaRegistry(
            SchemasLog(topology, 0, "http://b0", 1, 1000), RegistryConfig(**limits)
        )
        loop.run_until_complete(registry.start())
        return registry, loop

    yield build
    loop.close()
    manager.shutdown()


def test_limits_refuse_with_registry_codes(make: Make) -> None:
    registry, loop = make(
        max_subjects=2, max_versions=2, max_schema_bytes=200, max_references_depth=2
    )
    run = loop.run_until_complete
    run(registry.register("a", SchemaInput(record("A"))))
    run(registry.register("b", SchemaInput(record("B"))))
    with pytest.raises(OperationNotPermitted, match="schema_registry_max_subjects"):
        run(registry.register("c", SchemaInput(record("C"))))
    run(registry.set_compatibility("a", "NONE"))
    run(registry.register("a", SchemaInput(record("A", "int"))))
    with pytest.raises(OperationNotPermitted, match="schema_registry_max_versions"):
        run(registry.register("a", SchemaInput(record("A", "long"))))
    with pytest.raises(SchemaTooLarge) as too_large:
        run(registry.register("b", SchemaInput(record("B" * 300))))
    assert too_large.value.confluent_code == 42201


def test_reference_depth_and_missing_references(make: Make) -> None:
    registry, loop = make(max_references_depth=2)
    run = loop.run_until_complete
    run(registry.register("l0", SchemaInput(record("L0"))))
    previous = "L0"
    for level in range(1, 4):
        text = json.dumps(
            {"type": "record", "name": f"L{level}", "fields": [{"name": "x", "type": previous}]}
        )
        refs = [Reference(previous, f"l{level - 1}", 1)]
        if level < 3:
            run(registry.register(f"l{level}", SchemaInput(text, references=refs)))
        else:
            with pytest.raises(SchemaTooLarge, match="schema_registry_max_references_depth"):
                run(registry.register(f"l{level}", SchemaInput(text, references=refs)))
        previous = f"L{level}"
    with pytest.raises(InvalidSchema, match="does not exist"):
        run(
            registry.register("m", SchemaInput(record("M"), references=[Reference("X", "nope", 1)]))
        )


def test_normalize_stores_one_form_for_equal_schemas(make: Make) -> None:
    registry, loop = make()
    run = loop.run_until_complete
    spaced = json.dumps(json.loads(record("N")), indent=2)
    first = run(registry.register("n", SchemaInput(record("N")), normalize=True))
    again = run(registry.register("n", SchemaInput(spaced), normalize=True))
    assert (again.id, again.version) == (first.id, first.version)
    found = registry.lookup("n", SchemaInput(spaced), normalize=True)
    assert found.id == first.id


def doubling(k: int) -> str:
    """R_0 two nulls, R_i two fields of type R_(i-1) (by name): a value of R_k takes no
    bytes and decodes to 2**(k+1) - 1 records and 2**(k+1) nulls."""
    fields = [{"name": "a", "type": "null"}, {"name": "b", "type": "null"}]
    schema: dict[str, object] = {"type": "record", "name": "R0", "fields": fields}
    for i in range(1, k + 1):
        schema = {"type": "record", "name": f"R{i}",
                  "fields": [{"name": "a", "type": schema}, {"name": "b", "type": f"R{i - 1}"}]}  # fmt: skip
    return json.dumps(schema)


def test_a_schema_building_too_much_from_no_bytes_is_refused(make: Make) -> None:
    """k = 20: 4,194,303 values from no bytes, over the default 10,000: 42201 naming the
    type, the count, the limit and its setting. k = 11 (8,191) is under it."""
    registry, loop = make()
    run = loop.run_until_complete
    with pytest.raises(InvalidSchema) as refused:
        run(registry.register("bomb-value", SchemaInput(doubling(20))))
    assert refused.value.confluent_code == 42201
    message = refused.value.message
    assert "record 'R20' builds 4,194,303 values from no bytes" in message, message
    assert (
        "over the limit of 10,000" in message and "schema_registry_max_zero_byte_values" in message
    )
    assert "Give these records fields that take bytes" in message
    assert run(registry.register("fine-value", SchemaInput(doubling(11)))).version == 1
    # Behind a union (one byte picks the branch): counted the same.
    union = json.dumps({"type": "record", "name": "U", "fields": [
        {"name": "u", "type": ["null", json.loads(doubling(13))]}]})  # fmt: skip
    with pytest.raises(InvalidSchema, match="record 'R13' builds 32,767"):
        run(registry.register("union-value", SchemaInput(union)))


def test_a_stored_version_over_a_limit_is_named_when_a_new_one_cannot_be_checked(
    make: Make,
) -> None:
    """A version stored before the zero-byte bound (an older broker, or the limit
    lowered since) no longer parses: registering another schema under its subject is
    refused (40901) naming that version and what to do, not blaming the new schema; with
    compatibility NONE the new schema registers."""
    from app.common.schema_errors import IncompatibleSchema
    from app.common.schemas import LIMITS, set_limits

    registry, loop = make()
    run = loop.run_until_complete
    default = LIMITS.max_zero_byte_values
    set_limits(max_zero_byte_values=10**8)
    try:
        old = run(registry.register("old-value", SchemaInput(doubling(20))))
    finally:
        set_limits(max_zero_byte_values=default)
    with pytest.raises(IncompatibleSchema) as refused:
        run(registry.register("old-value", SchemaInput(doubling(5))))
    message = str(refused.value)
    assert f"version 1 (schema id {old.id}) cannot be checked against" in message, message
    assert "record 'R20'" in message and "compatibility to NONE" in message
    (reason,) = registry.check_compatibility("old-value", None, SchemaInput(doubling(5)))
    assert reason.startswith("version 1 (schema id")
    run(registry.set_compatibility("old-value", "NONE"))
    assert run(registry.register("old-value", SchemaInput(doubling(5)))).version == 2
