"""Schemas to Spark types for the typed Spark source (app.spark.schemas): JSON Schema and
Protobuf mappings and their value conversions, taken by pyarrow as Spark's Arrow types.
No Spark or broker needed (the Avro path runs end to end in test_e2e_spark_typed.py)."""

from __future__ import annotations

import datetime
import decimal
import json
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from app.common import schemas
from app.common.schemas import wire
from app.spark.schemas import RegisteredSchema, SchemaMappingError, spark_type
from app.spark.typed import DecodeFailed, Decoder, Encoder, TypedValues, _proto_message


def _arrow(dtype: T.DataType, convert: Any, values: list[Any]) -> list[Any]:
    converted = [v if convert is None or v is None else convert(v) for v in values]
    return pa.array(converted, type=to_arrow_type(dtype, timezone="UTC")).to_pylist(
        maps_as_pydicts="strict"
    )


def test_json_schema_objects_arrays_and_primitives_map_and_the_rest_is_json_text() -> None:
    doc = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "price": {"type": "number"},
            "name": {"type": ["string", "null"]},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "home": {"type": "object", "properties": {"zip": {"type": "string"}}},
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "free": {"type": "object"},
        },
    }
    parsed = schemas.parse("JSON", json.dumps(doc))
    dtype, convert = spark_type(parsed)
    assert dtype.simpleString() == (
        "struct<id:bigint,price:double,name:string,ok:boolean,tags:array<string>,"
        "counts:map<string,bigint>,home:struct<zip:string>,either:string,free:string>"
    )
    value = {
        "id": 1,
        "price": 2,  # a JSON integer is a number too
        "name": None,
        "ok": True,
        "tags": ["a"],
        "counts": {"x": 3},
        "home": {"zip": "75001", "extra": 1},
        "either": 5,
        "free": {"k": [1]},
        "unknown": "dropped",
    }
    decoded = wire.decode(parsed, wire.encode(parsed, 9, value))
    [got] = _arrow(dtype, convert, [decoded])
    assert got == {
        "id": 1,
        "price": 2.0,
        "name": None,
        "ok": True,
        "tags": ["a"],
        "counts": {"x": 3},
        "home": {"zip": "75001"},
        "either": "5",
        "free": '{"k":[1]}',
    }


PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
enum Kind { KIND_A = 0; KIND_B = 1; }
message Order {
  int64 id = 1;
  uint64 big = 2;
  string item = 3;
  repeated string tags = 4;
  map<string, int32> attrs = 5;
  Kind kind = 6;
  Ship ship = 7;
  google.protobuf.Timestamp at = 8;
  bytes blob = 9;
  oneof pick { string a = 10; int32 b = 11; }
}
message Ship { string zip = 1; }
"""


def test_protobuf_messages_map_with_their_field_types() -> None:
    parsed = schemas.parse("PROTOBUF", PROTO)
    dtype, convert = spark_type(parsed)
    assert dtype.simpleString() == (
        "struct<id:bigint,big:decimal(20,0),item:string,tags:array<string>,"
        "attrs:map<string,int>,kind:string,ship:struct<zip:string>,at:timestamp,blob:binary,"
        "a:string,b:int>"
    )
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    framed = wire.encode(
        parsed,
        3,
        {
            "id": 1 << 40,
            "big": (1 << 64) - 1,
            "item": "x",
            "tags": ["a", "b"],
            "attrs": {"k": 2},
            "kind": "KIND_B",
            "at": "2026-01-02T03:04:05Z",
            "b": 7,
        },
    )
    message = _proto_message(parsed, memoryview(framed)[5:])
    [got] = _arrow(dtype, convert, [message])
    assert got == {
        "id": 1 << 40,
        "big": decimal.Decimal((1 << 64) - 1),
        "item": "x",
        "tags": ["a", "b"],
        "attrs": {"k": 2},
        "kind": "KIND_B",
        "ship": None,
        "at": at,
        "blob": b"",
        "a": None,
        "b": 7,
    }


@pytest.mark.parametrize(
    ("schema_type", "text"),
    [
        (
            "AVRO",
            '{"type":"record","name":"N","fields":[{"name":"next","type":["null","N"]}]}',
        ),
        ("PROTOBUF", 'syntax = "proto3"; message N { N next = 1; }'),
        (
            "AVRO",
            '{"type":"bytes","logicalType":"decimal","precision":40,"scale":0}',
        ),
    ],
)
def test_schemas_without_a_spark_type_are_refused(schema_type: str, text: str) -> None:
    with pytest.raises(SchemaMappingError):
        spark_type(schemas.parse(schema_type, text))


def test_avro_unions_of_several_types_become_member_structs() -> None:
    text = json.dumps(
        {
            "type": "record",
            "name": "U",
            "fields": [
                {"name": "v", "type": ["null", "int", "string"]},
                {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
            ],
        }
    )
    parsed = schemas.parse("AVRO", text)
    dtype, convert = spark_type(parsed)
    assert dtype.simpleString() == "struct<v:struct<member0:int,member1:string>,t:int>"
    values = [
        wire.decode(parsed, wire.encode(parsed, 1, {"v": v, "t": 1500})) for v in (5, "x", None)
    ]
    assert _arrow(dtype, convert, values) == [
        {"v": {"member0": 5, "member1": None}, "t": 1500},
        {"v": {"member0": None, "member1": "x"}, "t": 1500},
        {"v": None, "t": 1500},
    ]


def _typed(schema_type: str, text: str, fmt: str, *, fail_fast: bool = False) -> TypedValues:
    # Values framed with the reader's own id need no registry (the URL is never asked).
    reader = RegisteredSchema(4, schema_type, text, (), "t-value", 1)
    return TypedValues(fmt, "http://127.0.0.1:9/schema-registry", reader, fail_fast)


@pytest.mark.parametrize(
    ("schema_type", "text", "fmt", "value"),
    [
        (
            "JSON",
            json.dumps(
                {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer"},
                        "tags": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["id"],
                }
            ),
            "jsonschema",
            {"id": 3, "tags": ["a"]},
        ),
        ("PROTOBUF", PROTO, "protobuf", {"id": 3, "item": "x", "attrs": {"k": 1}, "b": 2}),
    ],
)
def test_the_sink_encodes_and_the_source_decodes_a_struct_column(
    schema_type: str, text: str, fmt: str, value: dict[str, Any]
) -> None:
    typed = _typed(schema_type, text, fmt)
    decoder = Decoder(typed)
    framed = wire.encode(typed.reader.parse(), 4, value)
    raw = pa.array([framed, b"\x00\x00\x00\x00", None], type=pa.binary())
    column, ids, errors = decoder.column(raw, ("t", 0), pa.array([7, 8, 9], type=pa.int64()))
    decoded = column.to_pylist(maps_as_pydicts="strict")
    assert ids.to_pylist() == [4, None, None]
    assert errors.to_pylist()[0] is None and "5-byte header" in errors.to_pylist()[1]
    assert decoded[1:] == [None, None]
    assert {k: v for k, v in decoded[0].items() if k in value} == value
    # The sink: the decoded struct back to the wire format, read again the same.
    encoded = Encoder(typed).column(column)
    assert encoded[1:] == [None, None] and encoded[0] is not None
    again, _, _ = decoder.column(pa.array(encoded[:1]), ("t", 0), pa.array([0]))
    assert again.to_pylist(maps_as_pydicts="strict")[0] == decoded[0]
    with pytest.raises(DecodeFailed, match="t-0 offset 8"):
        Decoder(_typed(schema_type, text, fmt, fail_fast=True)).column(
            raw, ("t", 0), pa.array([7, 8, 9], type=pa.int64())
        )
