"""The SDK's schema registry client and serializers (issue 18) against a real broker's
registry, and interop with confluent-kafka's: bytes Logbus's serializers write are read by
confluent-kafka's deserializers and the other way round, for Avro, JSON Schema and
Protobuf; Producer/Consumer with serializers; the asyncio twins."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import schema_registry as ck
from confluent_kafka.schema_registry.avro import AvroDeserializer as CkAvroDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as CkAvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer as CkJSONDeserializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer as CkJSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer as CkProtoDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer as CkProtoSerializer
from confluent_kafka.serialization import MessageField as CkField
from confluent_kafka.serialization import SerializationContext as CkContext

from app.client import AsyncConsumer, AsyncProducer, Consumer, Producer, TopicPartition
from app.client.schema_registry import (
    AsyncSchemaRegistryClient,
    Schema,
    SchemaRegistryClient,
)
from app.client.serialization import (
    AvroDeserializer,
    AvroSerializer,
    JSONDeserializer,
    JSONSerializer,
    MessageField,
    ProtobufDeserializer,
    ProtobufSerializer,
    SerializationContext,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
)
from app.common.schema_errors import (
    IncompatibleSchema,
    InvalidSchema,
    NotSchemaFramed,
    RecordInvalid,
    SchemaNotFound,
    SubjectNotFound,
)

ORDER = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
)
VIEW = json.dumps(
    {
        "title": "View",
        "type": "object",
        "properties": {"page": {"type": "string"}, "ms": {"type": "integer"}},
        "required": ["page"],
    }
)
READING = (
    'syntax = "proto3";\npackage ex;\nmessage Reading { string sensor = 1; double celsius = 2; }\n'
)


@pytest.fixture(scope="module")
def registry_url(broker_url: str) -> str:
    return f"{broker_url}/schema-registry"


@pytest.fixture(scope="module")
def registry(registry_url: str) -> Iterator[SchemaRegistryClient]:
    with SchemaRegistryClient({"url": registry_url}) as client:
        yield client


@pytest.fixture(scope="module")
def ck_registry(registry_url: str) -> ck.SchemaRegistryClient:
    return ck.SchemaRegistryClient({"url": registry_url})


def _topic(tag: str) -> str:
    return f"schsdk-{os.getpid()}-{tag}"


def test_registry_client_calls(registry: SchemaRegistryClient) -> None:
    subject = _topic("calls") + "-value"
    schema = Schema(ORDER)
    schema_id = registry.register_schema(subject, schema)
    assert registry.register_schema(subject, schema) == schema_id  # cached, same id
    assert (
        registry.get_schema(schema_id).schema_str
        == registry.get_latest_version(subject).schema.schema_str
    )
    latest = registry.get_latest_version(subject)
    assert (latest.schema_id, latest.version, latest.subject) == (schema_id, 1, subject)
    assert registry.get_version(subject, 1) == latest
    assert registry.lookup_schema(subject, schema).schema_id == schema_id
    assert subject in registry.get_subjects()
    assert registry.get_versions(subject) == [1]

    # A field without a default cannot read the old records: BACKWARD refuses it.
    fields = json.loads(ORDER)
    fields["fields"].append({"name": "extra", "type": "string"})
    incompatible = Schema(json.dumps(fields))
    result = registry.check_compatibility(subject, incompatible)
    assert not result.is_compatible and result.messages
    with pytest.raises(IncompatibleSchema) as info:
        registry.register_schema(subject, incompatible)
    assert info.value.confluent_code == 40901
    assert registry.set_compatibility(subject, "NONE") == "NONE"
    assert registry.get_compatibility(subject) == "NONE"
    assert registry.check_compatibility(subject, incompatible).is_compatible
    assert registry.register_schema(subject, incompatible) > schema_id

    with pytest.raises(InvalidSchema) as bad:
        registry.register_schema(subject, Schema('{"type": "nope"}'))
    assert bad.value.confluent_code == 42201
    with pytest.raises(SchemaNotFound):
        registry.get_schema(1 << 30)
    with pytest.raises(SubjectNotFound):
        registry.get_latest_version(_topic("absent") + "-value")

    assert registry.delete_subject(subject) == [1, 2]
    with pytest.raises(SubjectNotFound):
        registry.get_versions(subject)
    assert registry.delete_subject(subject, permanent=True) == [1, 2]
    assert registry.get_schema(schema_id).schema_type == "AVRO"  # ids outlive subjects


def _ck_ctx(topic: str) -> CkContext:
    return CkContext(topic, CkField.VALUE)


def test_avro_both_ways(registry: SchemaRegistryClient, ck_registry: Any) -> None:
    topic = _topic("avro")
    ctx = SerializationContext(topic, MessageField.VALUE)
    order = {"id": 7, "item": "tea", "tags": ["a", "b"]}
    ours = AvroSerializer(registry, ORDER)(order, ctx)
    assert ours is not None
    assert CkAvroDeserializer(ck_registry)(ours, _ck_ctx(topic)) == order
    theirs = CkAvroSerializer(ck_registry, ORDER)(order, _ck_ctx(topic))
    assert theirs == ours  # byte for byte: same id, same Avro binary
    assert AvroDeserializer(registry)(theirs, ctx) == order
    with pytest.raises(RecordInvalid) as info:
        AvroSerializer(registry, ORDER)({"id": "x", "item": "tea", "tags": []}, ctx)
    assert info.value.path == "id"
    with pytest.raises(NotSchemaFramed):
        AvroDeserializer(registry)(b"plain bytes", ctx)
    with pytest.raises(NotSchemaFramed):  # a JSON Schema id is not Avro
        other = SerializationContext(_topic("avro-json"), MessageField.VALUE)
        AvroDeserializer(registry)(JSONSerializer(VIEW, registry)({"page": "p"}, other), ctx)
    with pytest.raises(TypeError):  # neither a schema nor from_dict
        AvroDeserializer(registry, 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidSchema):  # a bad reader schema fails at construction
        AvroDeserializer(registry, '{"type": "record"}')
    assert AvroSerializer(registry, ORDER)(None, ctx) is None  # a tombstone stays null


ORDER_V2 = json.dumps(  # ORDER as a newer reader has it: item dropped, qty added
    {  # with a default, id and tags kept
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "qty", "type": "int", "default": 1},
        ],
    }
)


def test_avro_reader_schema(registry: SchemaRegistryClient, ck_registry: Any) -> None:
    """confluent-kafka's AvroDeserializer(client, schema_str): each value is resolved from
    its writer's schema (the id it carries) into the reader's by Avro's rules, for bytes
    either side wrote; a writer the reader cannot resolve is RecordInvalid."""
    topic = _topic("avro-reader")
    ctx = SerializationContext(topic, MessageField.VALUE)
    order = {"id": 7, "item": "tea", "tags": ["a"]}
    theirs = CkAvroSerializer(ck_registry, ORDER)(order, _ck_ctx(topic))
    reading = AvroDeserializer(registry, ORDER_V2)
    assert reading(theirs, ctx) == {"id": 7, "tags": ["a"], "qty": 1}
    assert reading(AvroSerializer(registry, ORDER)(order, ctx), ctx) == {
        "id": 7,
        "tags": ["a"],
        "qty": 1,
    }
    # confluent-kafka's own reader-schema deserializer agrees on our bytes.
    ours = AvroSerializer(registry, ORDER)(order, ctx)
    assert CkAvroDeserializer(ck_registry, ORDER_V2)(ours, _ck_ctx(topic)) == reading(ours, ctx)
    # The reader's own schema: the plain path, same value.
    same = AvroDeserializer(registry, Schema(ORDER, "AVRO"))
    assert same(ours, ctx) == order
    # int written, long and double read (promotions); a string is not a number.
    narrow = json.dumps({"type": "record", "name": "N", "fields": [{"name": "n", "type": "int"}]})
    wide = json.dumps({"type": "record", "name": "N", "fields": [{"name": "n", "type": "double"}]})
    other = SerializationContext(_topic("avro-promote"), MessageField.VALUE)
    data = AvroSerializer(registry, narrow)({"n": 3}, other)
    value = AvroDeserializer(registry, wide)(data, other)
    assert value == {"n": 3.0} and isinstance(value["n"], float)
    text = json.dumps({"type": "record", "name": "N", "fields": [{"name": "n", "type": "string"}]})
    with pytest.raises(RecordInvalid):
        AvroDeserializer(registry, text)(data, other)


def test_json_schema_both_ways(registry: SchemaRegistryClient, ck_registry: Any) -> None:
    topic = _topic("json")
    ctx = SerializationContext(topic, MessageField.VALUE)
    view = {"page": "/home", "ms": 12}
    ours = JSONSerializer(VIEW, registry)(view, ctx)
    assert ours is not None
    assert (
        CkJSONDeserializer(VIEW, schema_registry_client=ck_registry)(ours, _ck_ctx(topic)) == view
    )
    theirs = CkJSONSerializer(VIEW, ck_registry)(view, _ck_ctx(topic))
    assert theirs is not None and theirs[:5] == ours[:5]
    assert JSONDeserializer(registry)(theirs, ctx) == view
    with pytest.raises(RecordInvalid):
        JSONSerializer(VIEW, registry)({"ms": 1}, ctx)
    # confluent-kafka's form: the reader's schema first, validated against it, no registry
    # asked (a code ported from confluent-kafka runs unchanged); from_dict applied.
    reader = JSONDeserializer(VIEW, from_dict=lambda obj, _ctx: (obj["page"], obj.get("ms")))
    assert reader(theirs, ctx) == reader(ours, ctx) == ("/home", 12)
    assert JSONDeserializer(VIEW, schema_registry_client=registry)(theirs, ctx) == view
    strict = json.dumps({**json.loads(VIEW), "required": ["page", "referrer"]})
    with pytest.raises(RecordInvalid):  # valid for the writer, not for this reader
        JSONDeserializer(strict, schema_registry_client=registry)(theirs, ctx)
    with pytest.raises(ValueError, match="needs schema_str"):
        JSONDeserializer()


def test_protobuf_both_ways(
    registry: SchemaRegistryClient, ck_registry: Any, tmp_path: Any
) -> None:
    topic = _topic("proto")
    ctx = SerializationContext(topic, MessageField.VALUE)
    ours = ProtobufSerializer(registry, READING)({"sensor": "s1", "celsius": 21.5}, ctx)
    assert ours is not None
    # confluent-kafka's Protobuf deserializer needs the generated class: compile it.
    from grpc_tools import protoc

    (tmp_path / "reading.proto").write_text(READING)
    assert (
        protoc.main(["protoc", f"-I{tmp_path}", f"--python_out={tmp_path}", "reading.proto"]) == 0
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import reading_pb2  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    msg = CkProtoDeserializer(reading_pb2.Reading, {"use.deprecated.format": False})(
        ours, _ck_ctx(topic)
    )
    assert (msg.sensor, msg.celsius) == ("s1", 21.5)
    # confluent-kafka's serializer registers its own form (a new version if need be).
    theirs = CkProtoSerializer(reading_pb2.Reading, ck_registry, {"use.deprecated.format": False})(
        reading_pb2.Reading(sensor="s2", celsius=-3.0), _ck_ctx(topic)
    )
    assert ProtobufDeserializer(registry)(theirs, ctx) == {"sensor": "s2", "celsius": -3.0}
    # A generated message instance serializes too.
    framed = ProtobufSerializer(registry, READING)(reading_pb2.Reading(sensor="s3"), ctx)
    assert ProtobufDeserializer(registry)(framed, ctx) == {"sensor": "s3"}
    # confluent-kafka's forms, unchanged: the generated class in, instances out.
    conf = {"use.deprecated.format": False}
    ported = ProtobufSerializer(reading_pb2.Reading, registry, conf)(
        reading_pb2.Reading(sensor="s4", celsius=1.5), ctx
    )
    back = ProtobufDeserializer(reading_pb2.Reading, conf)
    for data in (ported, theirs, ours):
        assert isinstance(back(data, ctx), reading_pb2.Reading)
    assert back(ported, ctx) == reading_pb2.Reading(sensor="s4", celsius=1.5)
    assert CkProtoDeserializer(reading_pb2.Reading, conf)(ported, _ck_ctx(topic)) == (
        reading_pb2.Reading(sensor="s4", celsius=1.5)
    )
    assert ProtobufDeserializer(registry)(ported, ctx) == {"sensor": "s4", "celsius": 1.5}
    with pytest.raises(RecordInvalid):
        back(b"\x00\x00\x00\x00\x01\x00\xff\xff", ctx)  # not a Reading
    with pytest.raises(ValueError, match="deprecated"):
        ProtobufDeserializer(reading_pb2.Reading, {"use.deprecated.format": True})


def test_subject_strategies_and_registration_modes(registry: SchemaRegistryClient) -> None:
    topic = _topic("strategies")
    ctx = SerializationContext(topic, MessageField.KEY)
    conf = {"subject.name.strategy": record_subject_name_strategy}
    AvroSerializer(registry, ORDER, conf=conf)({"id": 1, "item": "x", "tags": []}, ctx)
    assert registry.get_latest_version("shop.Order").version >= 1
    conf = {"subject.name.strategy": topic_record_subject_name_strategy}
    JSONSerializer(VIEW, registry, conf=conf)({"page": "p"}, ctx)
    assert registry.get_versions(f"{topic}-View") == [1]

    # auto.register.schemas off: the schema must be there already.
    off = AvroSerializer(registry, ORDER, conf={"auto.register.schemas": False})
    with pytest.raises((SubjectNotFound, SchemaNotFound)):
        off({"id": 1, "item": "x", "tags": []}, SerializationContext(_topic("none"), "value"))
    # use.latest.version: encodes with the subject's latest schema.
    subject = f"{topic}-value"
    latest_id = registry.register_schema(subject, Schema(ORDER))
    latest = AvroSerializer(
        registry, ORDER, conf={"use.latest.version": True, "auto.register.schemas": False}
    )
    data = latest({"id": 2, "item": "y", "tags": []}, SerializationContext(topic, "value"))
    assert data is not None and int.from_bytes(data[1:5], "big") == latest_id


def test_producer_and_consumer_with_serializers(
    registry: SchemaRegistryClient,
    ck_registry: Any,
    make_topic: Callable[..., str],
    broker_url: str,
) -> None:
    topic = make_topic()
    orders = [{"id": i, "item": f"i{i}", "tags": []} for i in range(3)]
    with Producer(
        broker_url,
        value_serializer=AvroSerializer(registry, ORDER),
        key_serializer=lambda k, ctx: None if k is None else str(k).encode(),
    ) as producer:
        for order in orders:
            producer.send(topic, order, key=order["id"]).result(timeout=30)
    with Consumer(
        broker_url,
        auto_offset_reset="earliest",
        value_deserializer=AvroDeserializer(registry),
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        got: list[Any] = []
        while len(got) < 3:
            got.extend(consumer.poll(timeout_ms=1000))
    assert [r.value for r in got] == orders
    assert [r.key for r in got] == [b"0", b"1", b"2"]
    # confluent-kafka's deserializer reads what the SDK's Producer wrote.
    with Consumer(broker_url, auto_offset_reset="earliest") as raw:
        raw.assign([TopicPartition(topic, 0)])
        first = raw.poll(timeout_ms=5000)[0]
    assert CkAvroDeserializer(ck_registry)(first.value, _ck_ctx(topic)) == orders[0]


def test_async_client_producer_and_consumer(
    registry_url: str, make_topic: Callable[..., str], broker_url: str
) -> None:
    topic = make_topic()

    async def main() -> list[Any]:
        async with AsyncSchemaRegistryClient(registry_url) as reg:
            schema_id = await reg.register_schema(f"{topic}-value", Schema(VIEW, "JSON"))
            assert (await reg.get_schema(schema_id)).schema_type == "JSON"
            async with AsyncProducer(
                broker_url, value_serializer=JSONSerializer(VIEW, reg)
            ) as producer:
                future = await producer.send(topic, {"page": "/a"})
                await future
            async with AsyncConsumer(
                broker_url, auto_offset_reset="earliest", value_deserializer=JSONDeserializer(reg)
            ) as consumer:
                consumer.assign([TopicPartition(topic, 0)])
                got: list[Any] = []
                while not got:
                    got.extend(await consumer.poll(timeout_ms=1000))
                return got

    got = asyncio.run(main())
    assert got[0].value == {"page": "/a"}
