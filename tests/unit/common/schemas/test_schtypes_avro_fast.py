"""AVRO's fast encode path (``app.common.schemas._avro_fast`` and fastavro's compiled
functions called directly): the bytes are fastavro's own, values it does not take fall
back to fastavro's validator (same errors, same paths), and decode resolves a writer's
bytes into a reader schema."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.common import schemas
from app.common.schema_errors import RecordInvalid
from app.common.schemas import wire

EVERYTHING = {
    "type": "record",
    "name": "Everything",
    "namespace": "t",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "by", "type": "bytes"},
        {"name": "n", "type": "null"},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "e2", "type": "Color"},
        {"name": "fx", "type": {"type": "fixed", "name": "Two", "size": 2}},
        {"name": "a", "type": {"type": "array", "items": ["null", "long"]}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {"name": "o", "type": ["null", {"type": "record", "name": "In", "fields": [
            {"name": "x", "type": "int"}]}]},
        {"name": "o2", "type": ["In", "null"]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}  # fmt: skip

INT = st.integers(-(1 << 31), (1 << 31) - 1)
LONG = st.integers(-(1 << 63), (1 << 63) - 1)
VALUES = st.fixed_dictionaries(
    {
        "b": st.booleans(),
        "i": INT,
        "l": LONG,
        "f": st.floats(width=32, allow_nan=False),
        "d": st.floats(allow_nan=False) | st.integers(-(10**6), 10**6),
        "s": st.text(),
        "by": st.binary(max_size=8),
        "n": st.none(),
        "e": st.sampled_from(["RED", "GREEN"]),
        "e2": st.sampled_from(["RED", "GREEN"]),
        "fx": st.binary(min_size=2, max_size=2),
        "a": st.lists(st.none() | LONG, max_size=4),
        "m": st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
        "o": st.none() | st.fixed_dictionaries({"x": INT}),
        "o2": st.none() | st.fixed_dictionaries({"x": INT}),
        "day": INT,
        "ts": LONG,
    }
)


def _fastavro(parsed: Any, value: Any) -> bytes:
    fastavro.validation.validate(value, parsed)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, value)
    return out.getvalue()


def test_the_generated_encoder_covers_the_supported_constructs() -> None:
    parsed = schemas.parse("AVRO", json.dumps(EVERYTHING))
    assert parsed._gen is not None  # type: ignore[attr-defined]


PARSED = schemas.parse("AVRO", json.dumps(EVERYTHING))
ENCODE = PARSED.framed_encoder(7)  # type: ignore[attr-defined]


@settings(max_examples=60, deadline=None)
@given(VALUES)
def test_fast_bytes_are_fastavros_bytes(value: dict[str, Any]) -> None:
    framed = ENCODE(value)
    assert framed == b"\x00\x00\x00\x00\x07" + _fastavro(PARSED._parsed, value)  # type: ignore[attr-defined]
    # Written by the generated encoder itself, not by its fallback.
    out = bytearray()
    PARSED._gen(out, value)  # type: ignore[attr-defined]
    assert bytes(out) == framed[5:]


GOOD = {
    "b": True, "i": 1, "l": 2, "f": 1.5, "d": 2, "s": "x", "by": b"", "n": None, "e": "RED",
    "e2": "GREEN", "fx": b"ab", "a": [None, 3], "m": {"k": "v"}, "o": {"x": 1}, "o2": None,
    "day": 19000, "ts": 1,
}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"i": 1.5}, "i"),  # fastavro's writer alone writes 1
        ({"i": True}, "i"),
        ({"i": 1 << 40}, "i"),
        ({"f": "1"}, "f"),  # fastavro's writer alone writes it
        ({"b": "no"}, "b"),
        ({"a": {"x": 1}}, "a"),  # a dict is not an array
        ({"a": [None, "3"]}, "a[1]"),
        ({"e": "BLUE"}, "e"),
        ({"fx": b"abc"}, "fx"),
        ({"o": {"x": "1"}}, "o"),
        ({"m": {"k": 1}}, "m['k']"),
        ({"s": 5}, "s"),
    ],
)
def test_values_the_fast_path_refuses_get_fastavros_verdict(
    change: dict[str, Any], path: str
) -> None:
    parsed = schemas.parse("AVRO", json.dumps(EVERYTHING))
    encode = parsed.framed_encoder(1)  # type: ignore[attr-defined]
    assert encode(GOOD)[5:] == _fastavro(parsed._parsed, GOOD)  # type: ignore[attr-defined]
    with pytest.raises(RecordInvalid) as caught:
        encode({**GOOD, **change})
    assert caught.value.path == path


def test_values_of_other_types_fastavro_takes_still_encode() -> None:
    """A tuple for an array, a missing field with a default: not the generated encoder's,
    fastavro's writer takes them."""
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "a", "type": {"type": "array", "items": "int"}},
            {"name": "z", "type": "string", "default": "zz"},
        ],
    }
    parsed = schemas.parse("AVRO", json.dumps(schema))
    assert parsed._gen is not None  # type: ignore[attr-defined]
    framed = parsed.framed_encoder(1)({"a": (1, 2)})  # type: ignore[attr-defined]
    assert wire.decode(parsed, framed) == {"a": [1, 2], "z": "zz"}


@pytest.mark.parametrize(
    "field_type",
    [
        ["int", "string"],
        {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2},
        {"type": "string", "logicalType": "uuid"},
    ],
)
def test_schemas_the_generator_leaves_to_fastavro_still_encode(field_type: Any) -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "v", "type": field_type}]}
    parsed = schemas.parse("AVRO", json.dumps(schema))
    assert parsed._gen is None  # type: ignore[attr-defined]
    value = {"v": "3fa85f64-5717-4562-b3fc-2c963f66afa6"} if "uuid" in str(field_type) else None
    if value is not None:
        decoded = wire.decode(parsed, parsed.framed_encoder(1)(value))  # type: ignore[attr-defined]
        assert str(decoded["v"]) == value["v"]


def test_decode_as_resolves_into_the_reader_schema() -> None:
    v1 = schemas.parse(
        "AVRO",
        json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}),
    )
    v2 = schemas.parse(
        "AVRO",
        json.dumps(
            {
                "type": "record",
                "name": "R",
                "fields": [
                    {"name": "a", "type": "long"},
                    {"name": "b", "type": "string", "default": "-"},
                ],
            }
        ),
    )
    payload = wire.encode(v1, 1, {"a": 5})[5:]
    assert v1.decode_as(payload, v2) == {"a": 5, "b": "-"}  # type: ignore[attr-defined]
    with pytest.raises(RecordInvalid):
        v2.decode_as(b"\x01", v1)  # type: ignore[attr-defined]
