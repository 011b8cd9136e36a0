"""The schema registry through confluent-kafka's ``SchemaRegistryClient`` (and raw HTTP for
what the client does not send), against a real broker served by uvicorn: registration,
look-ups, evolution under compatibility levels, references, deletes, config, mode, a
restart, and bad input answered with Confluent's codes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from live_broker import LiveBroker, live_broker

V1 = json.dumps({"type": "record", "name": "Click", "fields": [{"name": "page", "type": "string"}]})
# A field added with a default: BACKWARD compatible.
V2 = json.dumps(
    {
        "type": "record",
        "name": "Click",
        "fields": [
            {"name": "page", "type": "string"},
            {"name": "ms", "type": "long", "default": 0},
        ],
    }
)
# A field added without a default: not BACKWARD compatible.
V2_BAD = json.dumps(
    {
        "type": "record",
        "name": "Click",
        "fields": [{"name": "page", "type": "string"}, {"name": "user", "type": "string"}],
    }
)
ADDRESS = json.dumps(
    {
        "type": "record",
        "name": "Address",
        "namespace": "com.example",
        "fields": [{"name": "city", "type": "string"}],
    }
)
PERSON = json.dumps(
    {
        "type": "record",
        "name": "Person",
        "namespace": "com.example",
        "fields": [{"name": "home", "type": "com.example.Address"}],
    }
)
MEDIA = "application/vnd.schemaregistry.v1+json"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LiveBroker]:
    with live_broker(tmp_path) as b:
        yield b


def client(broker: LiveBroker) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": broker.url + "/schema-registry"})


def refused(call: object, *args: object, **kwargs: object) -> tuple[int, int, str]:
    with pytest.raises(SchemaRegistryError) as info:
        call(*args, **kwargs)  # type: ignore[operator]
    e = info.value
    return e.http_status_code, e.error_code, e.error_message


def test_register_get_lookup_and_reuse_of_ids(broker: LiveBroker) -> None:
    sr = client(broker)
    first = sr.register_schema("clicks-value", Schema(V1, "AVRO"))
    assert first >= 1
    # The same schema again: the same id and version, nothing new.
    assert client(broker).register_schema("clicks-value", Schema(V1, "AVRO")) == first
    # The same schema under another subject: the same id.
    assert sr.register_schema("views-value", Schema(V1, "AVRO")) == first
    assert json.loads(sr.get_schema(first).schema_str) == json.loads(V1)
    latest = sr.get_latest_version("clicks-value")
    assert (latest.version, latest.schema_id) == (1, first)
    assert sr.get_version("clicks-value", 1).schema_id == first
    found = sr.lookup_schema("clicks-value", Schema(V1, "AVRO"))
    assert (found.version, found.schema_id) == (1, first)
    assert sorted(sr.get_subjects()) == ["clicks-value", "views-value"]
    assert sorted(sr.get_subjects_by_schema_id(first)) == ["clicks-value", "views-value"]
    versions = sr.get_schema_versions(first)
    assert sorted((v.subject, v.version) for v in versions) == [
        ("clicks-value", 1),
        ("views-value", 1),
    ]
    assert set(sr.get_schema_types()) == {"AVRO", "JSON", "PROTOBUF"}
    with broker.http() as h:
        r = h.get(f"/schema-registry/schemas/ids/{first}/schema")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith(MEDIA)
        assert json.loads(r.text) == json.loads(V1)
        listed = h.get("/schema-registry/schemas", params={"latestOnly": "true"}).json()
        assert sorted(s["subject"] for s in listed) == ["clicks-value", "views-value"]


def test_evolution_under_compatibility_levels(broker: LiveBroker) -> None:
    sr = client(broker)
    sr.register_schema("c-value", Schema(V1, "AVRO"))
    assert sr.get_compatibility() == "BACKWARD"
    status, code, message = refused(sr.register_schema, "c-value", Schema(V2_BAD, "AVRO"))
    assert (status, code) == (409, 40901)
    assert "user" in message
    assert sr.test_compatibility("c-value", Schema(V2_BAD, "AVRO")) is False
    assert sr.test_compatibility_all_versions("c-value", Schema(V2, "AVRO")) is True
    with broker.http() as h:
        r = h.post(
            "/schema-registry/compatibility/subjects/c-value/versions/latest",
            params={"verbose": "true"},
            json={"schema": V2_BAD},
        )
        assert r.status_code == 200
        assert r.json()["is_compatible"] is False and r.json()["messages"]
    v2 = sr.register_schema("c-value", Schema(V2, "AVRO"))
    assert sr.get_latest_version("c-value").schema_id == v2
    # NONE on the subject lets the incompatible change in; the global level is unchanged.
    assert sr.set_compatibility("c-value", "NONE") == {"compatibility": "NONE"}
    assert sr.get_compatibility("c-value") == "NONE"
    sr.register_schema("c-value", Schema(V2_BAD, "AVRO"))
    assert sr.get_versions("c-value") == [1, 2, 3]
    assert sr.get_compatibility() == "BACKWARD"
    sr.delete_config("c-value")
    status, code, _ = refused(sr.get_compatibility, "c-value")
    assert (status, code) == (404, 40408)
    with broker.http() as h:
        r = h.get("/schema-registry/config/c-value", params={"defaultToGlobal": "true"})
        assert r.json() == {"compatibilityLevel": "BACKWARD"}
    # A global level; an invalid one is 42203.
    sr.set_compatibility(level="FULL_TRANSITIVE")
    assert sr.get_compatibility() == "FULL_TRANSITIVE"
    status, code, _ = refused(sr.set_compatibility, None, "SIDEWAYS")
    assert (status, code) == (422, 42203)


def test_references(broker: LiveBroker) -> None:
    sr = client(broker)
    address = sr.register_schema("address", Schema(ADDRESS, "AVRO"))
    ref = SchemaReference("com.example.Address", "address", 1)
    person = sr.register_schema("person-value", Schema(PERSON, "AVRO", [ref]))
    assert person != address
    got = sr.get_schema(person)
    assert [(r.name, r.subject, r.version) for r in got.references] == [
        ("com.example.Address", "address", 1)
    ]
    assert sr.get_referenced_by("address", 1) == [person]
    # A referenced version cannot be deleted.
    status, code, _ = refused(sr.delete_version, "address", 1)
    assert (status, code) == (422, 42206)
    status, code, _ = refused(sr.delete_subject, "address")
    assert (status, code) == (422, 42206)
    # A reference to a version that does not exist: 42201.
    missing = SchemaReference("com.example.Address", "address", 9)
    status, code, message = refused(
        sr.register_schema, "other-value", Schema(PERSON, "AVRO", [missing])
    )
    assert (status, code) == (422, 42201)
    assert "does not exist" in message
    # Once the referrer is gone, the reference may go.
    sr.delete_subject("person-value")
    assert sr.delete_version("address", 1) == 1


def test_soft_and_permanent_deletes_and_fresh_ids(broker: LiveBroker) -> None:
    sr = client(broker)
    a = sr.register_schema("d-value", Schema(V1, "AVRO"))
    b = sr.register_schema("d-value", Schema(V2, "AVRO"))
    # Permanent before soft: 40407.
    status, code, _ = refused(sr.delete_version, "d-value", 2, True)
    assert (status, code) == (404, 40407)
    assert sr.delete_version("d-value", 2) == 2
    assert sr.get_versions("d-value") == [1]
    with broker.http() as h:
        r = h.get("/schema-registry/subjects/d-value/versions", params={"deleted": "true"})
        assert r.json() == [1, 2]
        r = h.get("/schema-registry/subjects/d-value/versions/2", params={"deleted": "true"})
        assert r.status_code == 200 and r.json()["id"] == b
    status, code, _ = refused(sr.get_version, "d-value", 2)
    assert (status, code) == (404, 40402)
    assert sr.delete_version("d-value", 2, permanent=True) == 2
    # The id of a permanently deleted schema is not handed out again.
    c = sr.register_schema("e-value", Schema(V2_BAD, "AVRO"))
    assert c > b > a
    assert sr.delete_subject("d-value") == [1]
    status, code, _ = refused(sr.delete_subject, "d-value")
    assert (status, code) == (404, 40404)
    assert sr.delete_subject("d-value", permanent=True) == [1]
    assert "d-value" not in sr.get_subjects()
    status, code, _ = refused(sr.get_versions, "d-value")
    assert (status, code) == (404, 40401)


def test_modes(broker: LiveBroker) -> None:
    sr = client(broker)
    assert sr.get_global_mode() == "READWRITE"
    sr.register_schema("m-value", Schema(V1, "AVRO"))
    assert sr.update_mode("m-value", "READONLY") == "READONLY"
    assert sr.get_mode("m-value") == "READONLY"
    status, code, _ = refused(sr.register_schema, "m-value", Schema(V2, "AVRO"))
    assert (status, code) == (422, 42205)
    assert sr.delete_mode("m-value") == "READONLY"
    sr.register_schema("m-value", Schema(V2, "AVRO"))
    status, code, _ = refused(sr.update_mode, "m-value", "SOMETIMES")
    assert (status, code) == (422, 42204)
    # IMPORT: the client names id and version (a registry copied from another).
    assert sr.update_mode("imported-value", "IMPORT") == "IMPORT"
    with broker.http() as h:
        r = h.post(
            "/schema-registry/subjects/imported-value/versions",
            json={"schema": V1, "id": 500, "version": 7},
            headers={"Content-Type": MEDIA},
        )
        assert r.status_code == 200, r.text
        assert (r.json()["id"], r.json()["version"]) == (500, 7)
        # Outside IMPORT an id cannot be given.
        r = h.post("/schema-registry/subjects/m-value/versions", json={"schema": V1, "id": 9})
        assert (r.status_code, r.json()["error_code"]) == (422, 42205)
    # The next id is past the imported one.
    assert sr.register_schema("n-value", Schema(V2_BAD, "AVRO")) == 501


def test_restart_keeps_ids_and_the_next_id_is_fresh(tmp_path: Path) -> None:
    with live_broker(tmp_path) as b:
        sr = client(b)
        a = sr.register_schema("r-value", Schema(V1, "AVRO"))
        c = sr.register_schema("r-value", Schema(V2, "AVRO"))
        sr.set_compatibility("r-value", "FULL")
        sr.update_mode("other", "READONLY")
        # The newest id is deleted for good: still never handed out again.
        sr.delete_version("r-value", 2)
        sr.delete_version("r-value", 2, permanent=True)
    with live_broker(tmp_path) as b:
        sr = client(b)
        assert sr.get_version("r-value", 1).schema_id == a
        assert sr.get_compatibility("r-value") == "FULL"
        assert sr.get_mode("other") == "READONLY"
        fresh = sr.register_schema("s-value", Schema(V2_BAD, "AVRO"))
        assert fresh == c + 1


def test_json_schema_type(broker: LiveBroker) -> None:
    sr = client(broker)
    text = json.dumps({"type": "object", "properties": {"page": {"type": "string"}}})
    sid = sr.register_schema("j-value", Schema(text, "JSON"))
    got = sr.get_schema(sid)
    assert got.schema_type == "JSON"
    assert json.loads(got.schema_str) == json.loads(text)


def test_protobuf_with_an_import_and_json_schema_evolution(broker: LiveBroker) -> None:
    sr = client(broker)
    address = 'syntax = "proto3";\npackage ex;\nmessage Address { string city = 1; }\n'
    person = (
        'syntax = "proto3";\npackage ex;\nimport "address.proto";\n'
        "message Person { ex.Address home = 1; string name = 2; }\n"
    )
    ref = SchemaReference("address.proto", "address.proto", 1)
    a = sr.register_schema("address.proto", Schema(address, "PROTOBUF"))
    p = sr.register_schema("person-value", Schema(person, "PROTOBUF", [ref]))
    assert sr.get_schema(p).schema_type == "PROTOBUF"
    assert sr.get_referenced_by("address.proto", 1) == [p] and a != p
    # A field's scalar kind changed: refused under BACKWARD.
    changed = person.replace("string name", "int64 name")
    status, code, _ = refused(
        sr.register_schema, "person-value", Schema(changed, "PROTOBUF", [ref])
    )
    assert (status, code) == (409, 40901)
    status, code, message = refused(
        sr.register_schema,
        "bad-value",
        Schema('syntax = "proto3";\nmessage P { strin x = 1; }', "PROTOBUF"),
    )
    assert (status, code) == (422, 42201) and "strin" in message
    # JSON Schema: a required property added is refused under BACKWARD.
    closed = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "additionalProperties": False,
    }
    sr.register_schema("js-value", Schema(json.dumps(closed), "JSON"))
    stricter = {
        **closed,
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "required": ["b"],
    }
    status, code, _ = refused(sr.register_schema, "js-value", Schema(json.dumps(stricter), "JSON"))
    assert (status, code) == (409, 40901)


def test_confluent_serializers_register_and_resolve_through_logbus(broker: LiveBroker) -> None:
    """confluent-kafka's Avro and JSON Schema serializers auto-register their schema here,
    and its deserializers find it by the id in the bytes."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    sr = client(broker)
    ctx = SerializationContext("clicks", MessageField.VALUE)
    data = AvroSerializer(sr, V1)({"page": "/home"}, ctx)
    assert data[0] == 0
    schema_id = int.from_bytes(data[1:5], "big")
    assert sr.get_latest_version("clicks-value").schema_id == schema_id
    assert AvroDeserializer(client(broker))(data, ctx) == {"page": "/home"}
    doc = json.dumps(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "View",
            "type": "object",
            "properties": {"page": {"type": "string"}},
        }
    )
    vctx = SerializationContext("views", MessageField.VALUE)
    data = JSONSerializer(doc, sr)({"page": "/a"}, vctx)
    assert client(broker).get_latest_version("views-value").schema.schema_type == "JSON"
    assert JSONDeserializer(None, schema_registry_client=client(broker))(data, vctx) == {
        "page": "/a"
    }


def post(h: httpx.Client, path: str, body: object, **kw: object) -> httpx.Response:
    return h.post("/schema-registry" + path, json=body, **kw)  # type: ignore[arg-type]


def test_bad_input_is_a_4xx_with_confluent_codes(broker: LiveBroker) -> None:
    with broker.http() as h:
        # An invalid schema: 422/42201 with the parser's message.
        r = post(h, "/subjects/x-value/versions", {"schema": '{"type":"recrd"}'})
        assert (r.status_code, r.json()["error_code"]) == (422, 42201)
        assert "recrd" in r.json()["message"]
        r = post(h, "/subjects/x-value/versions", {"schema": "not json"})
        assert (r.status_code, r.json()["error_code"]) == (422, 42201)
        r = post(h, "/subjects/x-value/versions", {"schema": V1, "schemaType": "XML"})
        assert (r.status_code, r.json()["error_code"]) == (422, 42201)
        # Deeply nested and huge schemas: 4xx, never 5xx.
        nested = '{"type":"array","items":' * 3000 + '"string"' + "}" * 3000
        r = post(h, "/subjects/x-value/versions", {"schema": nested})
        assert r.status_code == 422, r.text
        huge = {"type": "enum", "name": "E", "symbols": [f"S{i}" for i in range(200_000)]}
        r = post(h, "/subjects/x-value/versions", {"schema": json.dumps(huge)})
        assert 400 <= r.status_code < 500, r.text
        # Unknown subject, version, id; a version that is no version.
        r = h.get("/schema-registry/subjects/nope/versions")
        assert (r.status_code, r.json()["error_code"]) == (404, 40401)
        post(h, "/subjects/k-value/versions", {"schema": V1}).raise_for_status()
        r = h.get("/schema-registry/subjects/k-value/versions/9")
        assert (r.status_code, r.json()["error_code"]) == (404, 40402)
        r = h.get("/schema-registry/subjects/k-value/versions/abc")
        assert (r.status_code, r.json()["error_code"]) == (422, 42202)
        r = h.get("/schema-registry/schemas/ids/99999")
        assert (r.status_code, r.json()["error_code"]) == (404, 40403)
        r = post(h, "/subjects/k-value", {"schema": V2})
        assert (r.status_code, r.json()["error_code"]) == (404, 40403)
        # A body that is not a schema request: 422 in Confluent's shape.
        r = post(h, "/subjects/k-value/versions", {"schemaa": V1})
        assert r.status_code == 422 and isinstance(r.json()["error_code"], int)
        # What newer clients send and Logbus does not use is accepted.
        r = post(
            h,
            "/subjects/k-value/versions",
            {"schema": V1, "metadata": {"properties": {"owner": "x"}}, "ruleSet": {}},
            headers={"Content-Type": "application/vnd.schemaregistry+json"},
        )
        assert r.status_code == 200, r.text
        # A body of another media type: 415.
        r = h.post(
            "/schema-registry/subjects/k-value/versions",
            content=json.dumps({"schema": V1}),
            headers={"Content-Type": "text/plain"},
        )
        assert r.status_code == 415


def _protobuf_message_class() -> type:
    """A generated-style message class (``ex.Reading``) built at run time, as protoc's
    Python output would define it: what confluent-kafka's ProtobufSerializer takes."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="reading.proto", package="ex", syntax="proto3")
    msg = proto.message_type.add(name="Reading")
    label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    msg.field.add(
        name="sensor", number=1, label=label, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING
    )
    msg.field.add(
        name="celsius", number=2, label=label, type=descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("ex.Reading"))


def test_protobuf_serializer_round_trip_with_format_serialized(broker: LiveBroker) -> None:
    """confluent-kafka's ProtobufDeserializer fetches the writer's schema with
    ``format=serialized`` (the base64 FileDescriptorProto): the round trip works, and the
    parameter changes nothing for other types."""
    from confluent_kafka.schema_registry.protobuf import (
        ProtobufDeserializer,
        ProtobufSerializer,
    )
    from confluent_kafka.serialization import MessageField, SerializationContext

    reading = _protobuf_message_class()
    ctx = SerializationContext("readings", MessageField.VALUE)
    sr = client(broker)
    # Registered as .proto text: the serializer (latest version) and the deserializer
    # (the id in the bytes) get it only through format=serialized.
    text = 'syntax = "proto3";\npackage ex;\nmessage Reading { string sensor = 1; double celsius = 2; }\n'
    sr.register_schema("readings-value", Schema(text, "PROTOBUF"))
    conf = {"use.deprecated.format": False, "auto.register.schemas": False}
    serializer = ProtobufSerializer(reading, sr, {**conf, "use.latest.version": True})
    data = serializer(reading(sensor="s1", celsius=21.5), ctx)
    assert data[0] == 0
    schema_id = int.from_bytes(data[1:5], "big")
    back = ProtobufDeserializer(reading, {"use.deprecated.format": False}, client(broker))(
        data, ctx
    )
    assert (back.sensor, back.celsius) == ("s1", 21.5)
    with httpx.Client(base_url=broker.url) as h:
        text = '{"type":"record","name":"T","fields":[{"name":"a","type":"int"}]}'
        avro_id = post(h, "/subjects/t-value/versions", {"schema": text}).json()["id"]
        plain = h.get(f"/schema-registry/schemas/ids/{avro_id}").json()
        assert h.get(f"/schema-registry/schemas/ids/{avro_id}?format=serialized").json() == plain
        proto = h.get(f"/schema-registry/schemas/ids/{schema_id}?format=serialized").json()
        assert proto["schemaType"] == "PROTOBUF"
        import base64

        from google.protobuf import descriptor_pb2

        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(proto["schema"]))
        assert [m.name for m in fdp.message_type] == ["Reading"]
        latest = h.get("/schema-registry/subjects/readings-value/versions/latest?format=serialized")
        assert latest.json()["schema"] == proto["schema"]
