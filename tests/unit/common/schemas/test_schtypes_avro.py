"""AVRO: parse errors, limits, references, canonical/normalized forms, encode/decode round
trips, and interop with fastavro and confluent-kafka's AvroSerializer/AvroDeserializer."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.common import schemas
from app.common.schema_errors import InvalidSchema, NotSchemaFramed, RecordInvalid
from app.common.schemas import ResolvedReference, wire

USER = json.dumps(
    {
        "type": "record",
        "name": "User",
        "namespace": "com.acme",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "age", "type": "int"},
            {"name": "email", "type": ["null", "string"], "default": None},
            {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
            {"name": "scores", "type": {"type": "map", "values": "double"}, "default": {}},
        ],
    }
)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not valid JSON"),
        ('{"type": "record", "fields": []}', '"name" is a required field'),
        ('"nosuchtype"', "unknown type 'nosuchtype'"),
        ('{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "must be unique"),
        (
            '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]}',
            "Default value",
        ),
        ('{"type": "fixed", "name": "F"}', "size"),
        ("[" * 200 + "]" * 200, "nests deeper than"),
    ],
)
def test_invalid_schemas_say_what_to_fix(text: str, says: str) -> None:
    with pytest.raises(InvalidSchema) as err:
        schemas.parse("AVRO", text)
    assert says.lower() in str(err.value).lower()
    assert err.value.confluent_code == 42201


def test_huge_schema_is_refused_by_the_limit() -> None:
    fields = [{"name": f"f{i}", "type": "string"} for i in range(60_000)]
    text = json.dumps({"type": "record", "name": "Big", "fields": fields})
    assert len(text) > schemas.LIMITS.max_schema_bytes
    with pytest.raises(InvalidSchema, match="over the limit"):
        schemas.parse("AVRO", text)


def test_named_types_come_from_references() -> None:
    address = '{"type":"record","name":"Address","namespace":"com.acme","fields":[{"name":"zip","type":"string"}]}'
    ref = ResolvedReference("com.acme.Address", "address", 1, "AVRO", address)
    person = '{"type":"record","name":"Person","namespace":"com.acme","fields":[{"name":"home","type":"Address"}]}'
    with pytest.raises(InvalidSchema, match="unknown type"):
        schemas.parse("AVRO", person)
    parsed = schemas.parse("AVRO", person, [ref])
    data = wire.encode(parsed, 3, {"home": {"zip": "75001"}})
    assert wire.decode(parsed, data) == {"home": {"zip": "75001"}}
    with pytest.raises(RecordInvalid) as err:
        wire.encode(parsed, 3, {"home": {"zip": 75001}})
    assert err.value.path == "home.zip"


def test_reference_cycles_and_deep_trees_are_invalid_not_recursion() -> None:
    leaf = ResolvedReference("a.A", "a", 1, "AVRO", '{"type":"fixed","name":"a.A","size":1}')
    looped = ResolvedReference("a.A", "a", 1, "AVRO", leaf.schema, (leaf,))
    with pytest.raises(InvalidSchema, match="reference cycle: a/1 -> a/1"):
        schemas.parse("AVRO", '"a.A"', [looped])
    deep = leaf
    for i in range(100):
        deep = ResolvedReference(
            f"n.T{i}", f"s{i}", 1, "AVRO", f'{{"type":"fixed","name":"n.T{i}","size":1}}', (deep,)
        )
    with pytest.raises(InvalidSchema, match="references nest deeper"):
        schemas.parse("AVRO", '"a.A"', [deep])


def test_a_reference_of_another_type_is_invalid() -> None:
    ref = ResolvedReference("x", "x", 1, "JSON", "{}")
    with pytest.raises(InvalidSchema, match="JSON schema; a AVRO schema can refer only"):
        schemas.parse("AVRO", '"string"', [ref])


def test_canonical_is_compact_and_normalized_ignores_spelling() -> None:
    a = schemas.parse("AVRO", json.dumps(json.loads(USER), indent=4))
    assert a.canonical() == json.dumps(json.loads(USER), separators=(",", ":"))
    # The same schema spelled otherwise: namespace folded into the name, a primitive as an
    # object, keys in another order.
    other = json.loads(USER)
    del other["namespace"]
    other["name"] = "com.acme.User"
    other["fields"][1] = {"type": {"type": "int"}, "name": "age"}
    b = schemas.parse("AVRO", json.dumps(other))
    assert a.canonical() != b.canonical()
    assert a.normalized() == b.normalized()
    c = schemas.parse("AVRO", USER.replace('"age", "type": "int"', '"age", "type": "long"'))
    assert c.normalized() != a.normalized()


def test_wire_framing_and_errors() -> None:
    parsed = schemas.parse("AVRO", USER)
    data = wire.encode(parsed, 258, {"name": "ann", "age": 7})
    assert data[:5] == b"\x00\x00\x00\x01\x02"
    assert wire.schema_id_of(data) == 258
    # The payload is plain Avro binary: fastavro alone decodes it.
    value = fastavro.schemaless_reader(io.BytesIO(data[5:]), json.loads(USER), None)
    assert value == {"name": "ann", "age": 7, "email": None, "tags": [], "scores": {}}
    for bad, says in [(b"", "shorter"), (b"\x01\x00\x00\x00\x01x", "not the magic byte")]:
        with pytest.raises(NotSchemaFramed, match=says):
            wire.schema_id_of(bad)
    with pytest.raises(RecordInvalid, match="bytes after the value"):
        wire.decode(parsed, data + b"\x00")
    with pytest.raises(RecordInvalid, match="does not decode"):
        wire.decode(parsed, data[:8])


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"name": "a", "age": 1.5}, "age"),  # fastavro's writer alone would write 1
        ({"name": "a", "age": 2**40}, "age"),  # ... and overflow silently
        ({"name": "a"}, "age"),
        ({"name": "a", "age": 1, "tags": ["x", 3]}, "tags[1]"),
        ({"name": "a", "age": 1, "scores": {"k": "v"}}, "scores['k']"),
        ({"name": "a", "age": 1, "email": 5}, "email"),
        ("not a record", ""),
    ],
)
def test_invalid_values_name_the_field(value: Any, path: str) -> None:
    parsed = schemas.parse("AVRO", USER)
    with pytest.raises(RecordInvalid) as err:
        wire.encode(parsed, 1, value)
    assert err.value.path == path
    assert err.value.error_code == "INVALID_RECORD"


users = st.fixed_dictionaries(
    {
        "name": st.text(max_size=20),
        "age": st.integers(-(2**31), 2**31 - 1),
        "email": st.none() | st.text(max_size=10),
        "tags": st.lists(st.text(max_size=5), max_size=4),
        "scores": st.dictionaries(st.text(max_size=5), st.floats(allow_nan=False), max_size=3),
    }
)


@settings(max_examples=60, deadline=None)
@given(users)
def test_round_trip(user: dict[str, Any]) -> None:
    parsed = schemas.parse("AVRO", USER)
    assert wire.decode(parsed, wire.encode(parsed, 1, user)) == user


def test_confluent_serializer_bytes_decode_and_ours_deserialize() -> None:
    pytest.importorskip("confluent_kafka.schema_registry.avro")
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    # Confluent's in-memory registry client (a "mock://" url): the serializers are real.
    client = SchemaRegistryClient.new_client({"url": "mock://schtypes-avro"})
    schema_id = client.register_schema("users-value", Schema(USER, "AVRO"))
    ctx = SerializationContext("users", MessageField.VALUE)
    user = {"name": "bo", "age": 30, "email": "b@x", "tags": ["a"], "scores": {"m": 1.5}}
    theirs = AvroSerializer(client, USER)(user, ctx)
    parsed = schemas.parse("AVRO", USER)
    assert wire.schema_id_of(theirs) == schema_id
    assert wire.decode(parsed, theirs) == user
    ours = wire.encode(parsed, schema_id, user)
    assert ours == theirs
    assert AvroDeserializer(client)(ours, ctx) == user
