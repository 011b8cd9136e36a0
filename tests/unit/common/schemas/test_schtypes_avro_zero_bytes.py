"""AVRO's bound on what one datum builds from no bytes (``_avro_shape.zero_byte_values``, checked
when a schema is parsed: ``LIMITS.max_zero_byte_values``): on random schemas the memoized
count over fastavro's parsed form is a brute-force count's (every named type expanded
again at every use, no memo, over the schema's own JSON), and where the root itself takes
no bytes, the number of values fastavro's reader builds from an empty payload."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_schtypes_avro_native import avro_schemas

from app.common import schemas
from app.common.schema_errors import InvalidSchema
from app.common.schemas._avro_shape import zero_byte_values


def brute_force(schema: Any) -> tuple[int, int]:
    """The most values one datum of any type of ``schema`` builds from no bytes, and the
    root's own count (the whole value, when the root takes no bytes): each use
    of a named type expanded anew (exponential, fine for small schemas), every sub-schema
    of the JSON visited. Its own walk, not the code under test's: a null or a fixed of size
    0 builds 1, a record 1 plus its fields, anything else reads a byte first (0)."""
    named: dict[str, Any] = {}

    def define(node: Any) -> None:
        if isinstance(node, list):
            for branch in node:
                define(branch)
        elif isinstance(node, dict):
            if node["type"] in ("record", "enum", "fixed"):
                named[node["name"]] = node
            for field in node.get("fields", []):
                define(field["type"])
            for key in ("items", "values"):
                if key in node:
                    define(node[key])

    define(schema)

    def zero(node: Any) -> int:
        if isinstance(node, str):
            return zero(named[node]) if node in named else int(node == "null")
        if isinstance(node, list):
            return 0
        kind = node["type"]
        if kind == "record":
            return 1 + sum(zero(f["type"]) for f in node["fields"])
        if kind == "fixed":
            return int(node["size"] == 0)
        if isinstance(kind, str) and "logicalType" in node:
            return int(kind == "null")
        return 0

    def every(node: Any) -> list[Any]:
        out = [node]
        if isinstance(node, list):
            for branch in node:
                out += every(branch)
        elif isinstance(node, dict):
            for field in node.get("fields", []):
                out += every(field["type"])
            for key in ("items", "values"):
                if key in node:
                    out += every(node[key])
        elif node in named:
            out += every(named[node])
        return out

    return max(zero(node) for node in every(schema)), zero(schema)


@st.composite
def doubling_schemas(draw: st.DrawFn) -> Any:
    """Records of nulls, zero-size fixed, earlier records by name (so counts multiply),
    now and then a field that takes bytes or a union, array or map of an earlier type."""
    defined: list[str] = []
    made = [0]

    def field_type(depth: int) -> Any:
        choices = ["null", "null", "int", "fixed0"]
        if defined:
            choices += ["by name"] * 4 + ["union", "array", "map"]
        if depth < 3:
            choices += ["record"] * 2
        kind = draw(st.sampled_from(choices))
        made[0] += 1
        if kind == "fixed0":
            defined.append(f"F{made[0]}")
            return {
                "type": "fixed",
                "name": f"F{made[0]}",
                "size": draw(st.sampled_from([0, 0, 1])),
            }
        if kind == "by name":
            return draw(st.sampled_from(defined))
        if kind == "union":
            return ["null", draw(st.sampled_from(defined))]
        if kind == "array":
            return {"type": "array", "items": draw(st.sampled_from(defined))}
        if kind == "map":
            return {"type": "map", "values": draw(st.sampled_from(defined))}
        if kind == "record":
            return record(depth + 1)
        return kind

    def record(depth: int) -> Any:
        made[0] += 1
        name = f"N{made[0]}"
        fields = [
            {"name": f"f{i}", "type": field_type(depth)} for i in range(draw(st.integers(0, 3)))
        ]
        defined.append(name)  # after its fields: never recursive
        return {"type": "record", "name": name, "fields": fields}

    # Definitions first (each a field of the root, or an array's items: not counted in
    # the root's own run), then fields that use them by name.
    fields: list[Any] = []
    for i in range(draw(st.integers(0, 4))):
        definition = record(1)
        if draw(st.booleans()):
            definition = {"type": "array", "items": definition}
        fields.append({"name": f"d{i}", "type": definition})
    for i in range(draw(st.integers(0, 3))):
        fields.append({"name": f"r{i}", "type": field_type(1)})
    return {"type": "record", "name": "Root", "fields": fields}


def _values(value: Any) -> int:
    """The Python objects a decoded value is made of (a dict 1 plus its values')."""
    if isinstance(value, dict):
        return 1 + sum(_values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(v) for v in value)
    return 1


def _check(schema: Any) -> None:
    expected, root = brute_force(schema)
    text = json.dumps(schema)
    named: dict[str, Any] = {}
    parsed = fastavro.parse_schema(schema, named_schemas=named)
    assert zero_byte_values(parsed, named)[0] == expected
    if expected > schemas.LIMITS.max_zero_byte_values:
        with pytest.raises(InvalidSchema, match="values from no bytes"):
            schemas.parse("AVRO", text)
        return
    assert schemas.parse("AVRO", text).zero_byte_values == expected  # type: ignore[attr-defined]
    try:
        value = fastavro.schemaless_reader(io.BytesIO(b""), parsed, None)
    except (EOFError, StopIteration, IndexError, ValueError):
        return  # the root reads a byte: its runs start below it
    # The root took no bytes: its value is all built from none.
    assert _values(value) == root <= expected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doubling_schemas(), st.sampled_from([8, 30, 10_000]))
def test_the_count_is_the_brute_force_count_on_doubling_schemas(schema: Any, limit: int) -> None:
    """Under low limits too, so that schemas over them are refused (and only those)."""
    saved = schemas.LIMITS.max_zero_byte_values
    try:
        schemas.set_limits(max_zero_byte_values=limit)
        _check(schema)
    finally:
        schemas.set_limits(max_zero_byte_values=saved)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(avro_schemas())
def test_the_count_is_the_brute_force_count_on_random_schemas(schema: Any) -> None:
    _check(schema)


def test_the_count_is_linear_in_the_schema() -> None:
    """200 records, each two fields of the previous one by name: 2**202 values from no
    bytes, counted over 200 nodes (capped), refused at once."""
    fields = [{"name": "a", "type": "null"}, {"name": "b", "type": "null"}]
    defs: list[Any] = [{"name": "d0", "type": {"type": "record", "name": "R0", "fields": fields}}]
    for i in range(1, 200):
        defs.append({"name": f"d{i}", "type": {"type": "array", "items": {
            "type": "record", "name": f"R{i}", "fields": [
                {"name": "a", "type": f"R{i - 1}"}, {"name": "b", "type": f"R{i - 1}"}]}}})  # fmt: skip
    text = json.dumps({"type": "record", "name": "Top", "fields": defs})
    with pytest.raises(InvalidSchema, match=r"record 'R\d+' builds over 4,611,686,018,427,387,904"):
        schemas.parse("AVRO", text)


def test_the_limit_follows_its_setting() -> None:
    text = json.dumps({"type": "record", "name": "R", "fields": [
        {"name": f"n{i}", "type": "null"} for i in range(20)]})  # fmt: skip
    assert schemas.parse("AVRO", text).zero_byte_values == 21  # type: ignore[attr-defined]
    saved = schemas.LIMITS.max_zero_byte_values
    try:
        schemas.set_limits(max_zero_byte_values=20)
        with pytest.raises(InvalidSchema, match=r"builds 21 values from no bytes.*limit of 20"):
            schemas.parse("AVRO", text)
    finally:
        schemas.set_limits(max_zero_byte_values=saved)
