"""AVRO's compiled encoder (``app.common.schemas._avroenc``, the C twin of the generated
Python encoder): on random schemas of the constructs it takes and random values of them,
its bytes are fastavro's ``schemaless_writer``'s; on values with wrong leaves, the outcome
(bytes, or the error's kind, field path and message) is the Python path's."""

from __future__ import annotations

import gc
import io
import json
import weakref
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.common import schemas
from app.common.schema_errors import RecordInvalid

_avroenc = pytest.importorskip("app.common.schemas._avroenc")  # CI requires it built

PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "string", "bytes"]
LOGICAL = [
    {"type": "int", "logicalType": "date"},
    {"type": "long", "logicalType": "timestamp-millis"},
]
INT = st.integers(-(1 << 31), (1 << 31) - 1)
LONG = st.integers(-(1 << 63), (1 << 63) - 1)
# Wrong leaves: other types, ints out of range, a lone surrogate, a bool for an int.
JUNK = st.sampled_from(["x", "\ud800", 1.5, True, None, b"zz", [], {}, (1,), {"x": 1}])
# Just past the edges: ints just out of the int and long ranges, floats too large for a
# float, one byte too many or few for a fixed, symbols and map keys that are not strings.
NEAR_MISS = st.sampled_from(
    [1 << 31, -(1 << 31) - 1, 1 << 63, -(1 << 63) - 1, 1e39, 1 << 1100, b"", b"abcde", "S9",
     {1: 1}, [None, "x"], "N0"]
)  # fmt: skip


@st.composite
def avro_schemas(draw: st.DrawFn) -> Any:
    """A schema of records, enums, fixed, arrays, maps, unions with null and the
    primitives, named types defined once and used again by name."""
    defined: list[str] = []
    made = [0]

    def node(depth: int) -> Any:
        choices = ["primitive", "logical"]
        if defined:
            choices.append("by name")
        if depth < 4:
            choices += ["record", "enum", "fixed", "array", "map", "union"]
        kind = draw(st.sampled_from(choices))
        if kind == "primitive":
            return draw(st.sampled_from(PRIMITIVES))
        if kind == "logical":
            return draw(st.sampled_from(LOGICAL))
        if kind == "by name":
            return draw(st.sampled_from(defined))
        made[0] += 1
        name = f"N{made[0]}"
        if kind == "record":
            count = draw(st.integers(0, 4))
            fields = [{"name": f"f{i}", "type": node(depth + 1)} for i in range(count)]
            defined.append(name)  # after its fields: never recursive
            return {"type": "record", "name": name, "fields": fields}
        if kind == "enum":
            defined.append(name)
            symbols = [f"S{i}" for i in range(draw(st.integers(1, 4)))]
            return {"type": "enum", "name": name, "symbols": symbols}
        if kind == "fixed":
            defined.append(name)
            return {"type": "fixed", "name": name, "size": draw(st.integers(0, 4))}
        if kind == "array":
            return {"type": "array", "items": node(depth + 1)}
        if kind == "map":
            return {"type": "map", "values": node(depth + 1)}
        known = len(defined)
        other = node(depth + 1)
        if other == "null" or isinstance(other, list):
            # A union holds null and one other type, never a union; names defined in the
            # branch dropped are undefined again (a later use would not parse).
            del defined[known:]
            other = "long"
        return draw(st.sampled_from([["null", other], [other, "null"]]))

    fields = [{"name": f"top{i}", "type": node(1)} for i in range(draw(st.integers(1, 4)))]
    return {"type": "record", "name": "Root", "namespace": "t", "fields": fields}


def named_types(schema: Any, found: dict[str, Any]) -> dict[str, Any]:
    """The named types ``schema`` defines, by name."""
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, found)
    elif isinstance(schema, dict):
        if schema["type"] in ("record", "enum", "fixed"):
            found[schema["name"]] = schema
        for field in schema.get("fields", []):
            named_types(field["type"], found)
        named_types(schema.get("items"), found)
        named_types(schema.get("values"), found)
    return found


def value_of(draw: st.DrawFn, schema: Any, named: dict[str, Any], junk: bool) -> Any:
    """A value of ``schema`` (``named``: its named types); with ``junk``, some values
    replaced by wrong ones."""
    if junk and draw(st.integers(0, 3)) == 0:
        return draw(NEAR_MISS | JUNK)
    if isinstance(schema, list):
        if draw(st.booleans()):
            return None
        return value_of(draw, next(b for b in schema if b != "null"), named, junk)
    if isinstance(schema, str):
        if schema in named:
            return value_of(draw, named[schema], named, junk)
        schema = {"type": schema}
    kind = schema["type"]
    leaf: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": INT,
        "long": LONG,
        "float": st.floats(width=32) | st.integers(-(10**6), 10**6),
        "double": st.floats() | st.integers(-(10**6), 10**6),
        "string": st.text(max_size=8),
        "bytes": st.binary(max_size=8),
    }
    if kind in leaf:
        return draw(leaf[kind])
    if kind == "record":
        return {f["name"]: value_of(draw, f["type"], named, junk) for f in schema["fields"]}
    if kind == "enum":
        return draw(st.sampled_from(schema["symbols"]))
    if kind == "fixed":
        return draw(st.binary(min_size=schema["size"], max_size=schema["size"]))
    count = draw(st.integers(0, 3))
    if kind == "array":
        return [value_of(draw, schema["items"], named, junk) for _ in range(count)]
    keys = draw(st.lists(st.text(max_size=3), min_size=count, max_size=count, unique=True))
    return {k: value_of(draw, schema["values"], named, junk) for k in keys}


def _parse(schema: dict[str, Any]) -> Any:
    parsed = schemas.parse("AVRO", json.dumps(schema))
    assert parsed._program is not None  # the construct set is the C encoder's
    return parsed


def _python_path(schema: dict[str, Any]) -> Any:
    """The same schema encoded without the C encoder (the generated Python encoder, then
    fastavro): the path where _avroenc is not built."""
    parsed = schemas.parse("AVRO", json.dumps(schema))
    parsed._program = None
    return parsed


def _outcome(encode: Any, value: Any) -> tuple[str, Any]:
    try:
        return "bytes", encode(value)
    except RecordInvalid as exc:
        return "RecordInvalid", (exc.path, exc.message)
    except Exception as exc:  # a library's own error (typed.encode_request makes it a 422)
        return type(exc).__name__, str(exc)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(avro_schemas(), st.data())
def test_c_bytes_are_fastavros_bytes(schema: dict[str, Any], data: st.DataObject) -> None:
    parsed = _parse(schema)
    value = value_of(data.draw, schema, named_types(schema, {}), junk=False)
    fastavro.validation.validate(value, parsed._parsed)
    expected = io.BytesIO()
    fastavro.schemaless_writer(expected, parsed._parsed, value)
    encoder = parsed.framed_encoder(258)
    # Written by the C encoder itself (fast() is None where it leaves a value to fastavro).
    assert encoder.fast(value) == b"\x00\x00\x00\x01\x02" + expected.getvalue()
    assert parsed.encode_payload(value, None) == expected.getvalue()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(avro_schemas(), st.data())
def test_wrong_values_get_the_python_paths_verdict(
    schema: dict[str, Any], data: st.DataObject
) -> None:
    value = value_of(data.draw, schema, named_types(schema, {}), junk=True)
    native = _parse(schema).framed_encoder(1)
    python = _python_path(schema).framed_encoder(1)
    assert _outcome(native, value) == _outcome(python, value)


def test_encode_records_is_the_python_loop() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    encode = _parse(schema).framed_encoder(1)
    records = [({"a": 1}, {"a": 2}, None, None, None), (None, {"a": 3}, [("h", "v")], 0, 5)]
    assert _avroenc.encode_records(records, encode, encode) == [
        (encode({"a": 1}), encode({"a": 2}), None, None, None),
        (None, encode({"a": 3}), [("h", "v")], 0, 5),
    ]
    assert _avroenc.encode_records(records, None, encode)[0][0] == {"a": 1}
    with pytest.raises(RecordInvalid):
        _avroenc.encode_records([(None, {"a": "2"}, None, None, None)], None, encode)


@pytest.mark.parametrize(
    "program",
    [
        [],
        [("nope",)],
        [("array", 5)],
        [("array", 0)],  # a cycle
        [("record", (("a", 1),)), ("map", 0)],  # a cycle through two nodes
        [("union", 2, 0)],
        [("fixed", -1)],
        [("enum", ["A"])],
    ],
)
def test_a_malformed_program_is_refused(program: list[Any]) -> None:
    with pytest.raises((ValueError, TypeError)):
        _avroenc.Encoder(program, b"", bytes)


def test_a_schema_and_its_encoders_are_collected() -> None:
    """Its encoders' fallback refers back to the schema: the cycle collector frees both."""
    parsed = _parse({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
    assert parsed.framed_encoder(1)({"a": 1}) == b"\0\0\0\0\1\2"
    gone = weakref.ref(parsed)
    del parsed
    gc.collect()
    assert gone() is None
