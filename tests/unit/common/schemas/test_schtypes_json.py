"""JSON: JSON Schema drafts, references through a registry (never the network), values
validated on encode and decode with field paths, and interop with confluent-kafka's
JSONSerializer/JSONDeserializer."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.common import schemas
from app.common.schema_errors import InvalidSchema, RecordInvalid
from app.common.schemas import ResolvedReference, wire

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
        "home": {"$ref": "address.json"},
    },
    "required": ["name"],
}
ADDRESS = {"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"]}
ADDRESS_REF = ResolvedReference("address.json", "address", 1, "JSON", json.dumps(ADDRESS))


@pytest.mark.parametrize(
    "draft",
    [
        "http://json-schema.org/draft-04/schema#",
        "http://json-schema.org/draft-06/schema#",
        "http://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft/2019-09/schema",
        "https://json-schema.org/draft/2020-12/schema",
    ],
)
def test_every_draft_confluent_accepts(draft: str) -> None:
    parsed = schemas.parse("JSON", json.dumps({"$schema": draft, "type": "integer"}))
    assert wire.decode(parsed, wire.encode(parsed, 1, 5)) == 5
    with pytest.raises(RecordInvalid):
        wire.encode(parsed, 1, "five")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not valid JSON"),
        ("[1]", "must be a JSON object or a boolean"),
        ('{"type": "strin"}', "at /type"),
        ('{"properties": {"a": {"minimum": "x"}}}', "at /properties/a/minimum"),
        ('{"$schema": "http://example.com/mine"}', "not a supported draft"),
        ('{"$ref": "https://example.com/elsewhere.json"}', "not among the schema's references"),
        ('{"items": ' * 100 + "{}" + "}" * 100, "nests deeper than"),
    ],
)
def test_invalid_schemas_say_what_to_fix(text: str, says: str) -> None:
    with pytest.raises(InvalidSchema) as err:
        schemas.parse("JSON", text)
    assert says in str(err.value)


def test_references_resolve_from_the_registry_only() -> None:
    with pytest.raises(InvalidSchema):
        schemas.parse("JSON", json.dumps(PERSON))
    parsed = schemas.parse("JSON", json.dumps(PERSON), [ADDRESS_REF])
    value = {"name": "a", "home": {"zip": "1"}}
    assert wire.decode(parsed, wire.encode(parsed, 2, value)) == value
    with pytest.raises(RecordInvalid) as err:
        wire.encode(parsed, 2, {"name": "a", "home": {"zip": 1}})
    assert err.value.path == "home.zip"
    # With an $id, a relative $ref resolves against it: the reference still serves.
    with_id = {**PERSON, "$id": "https://acme.example/schemas/person.json"}
    parsed = schemas.parse("JSON", json.dumps(with_id), [ADDRESS_REF])
    assert wire.decode(parsed, wire.encode(parsed, 2, value)) == value


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({}, ""),
        ({"name": ""}, "name"),
        ({"name": "a", "age": -1}, "age"),
        ({"name": "a", "tags": ["x", 2]}, "tags[1]"),
        ({"name": "a", "home": {}}, "home"),
    ],
)
def test_invalid_values_name_the_field(value: Any, path: str) -> None:
    parsed = schemas.parse("JSON", json.dumps(PERSON), [ADDRESS_REF])
    with pytest.raises(RecordInvalid) as err:
        wire.encode(parsed, 1, value)
    assert err.value.path == path


def test_decode_validates_and_refuses_non_json() -> None:
    parsed = schemas.parse("JSON", json.dumps(PERSON), [ADDRESS_REF])
    with pytest.raises(RecordInvalid, match="not JSON"):
        wire.decode(parsed, b"\x00\x00\x00\x00\x01{nope")
    with pytest.raises(RecordInvalid) as err:
        wire.decode(parsed, b"\x00\x00\x00\x00\x01" + orjson.dumps({"name": 3}))
    assert err.value.path == "name"


def test_canonical_is_the_text_and_normalized_sorts_keys() -> None:
    a = schemas.parse("JSON", '{"type": "object", "required": ["x"]}')
    b = schemas.parse("JSON", '{"required":["x"],\n "type":"object"}')
    assert a.canonical() == '{"type": "object", "required": ["x"]}'
    assert a.normalized() == b.normalized()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=80, deadline=None)
@given(json_values)
def test_round_trip_any_json_under_true(value: Any) -> None:
    parsed = schemas.parse("JSON", "true")
    data = wire.encode(parsed, 7, value)
    assert json.loads(data[5:]) == value  # the payload is plain JSON
    assert wire.decode(parsed, data) == value


def test_confluent_serializer_bytes_decode_and_ours_deserialize() -> None:
    pytest.importorskip("confluent_kafka.schema_registry.json_schema")
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    text = json.dumps(
        {k: v for k, v in PERSON.items() if k != "properties"}
        | {
            "properties": {k: v for k, v in PERSON["properties"].items() if k != "home"}  # type: ignore[attr-defined]
        }
    )
    client = SchemaRegistryClient.new_client({"url": "mock://schtypes-json"})
    schema_id = client.register_schema("people-value", Schema(text, "JSON"))
    ctx = SerializationContext("people", MessageField.VALUE)
    person = {"name": "ann", "age": 3, "tags": ["t"]}
    theirs = JSONSerializer(text, client)(person, ctx)
    parsed = schemas.parse("JSON", text)
    assert wire.schema_id_of(theirs) == schema_id
    assert wire.decode(parsed, theirs) == person
    ours = wire.encode(parsed, schema_id, person)
    assert JSONDeserializer(text, schema_registry_client=client)(ours, ctx) == person
