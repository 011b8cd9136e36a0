"""``_schemas`` keys and values as Confluent Schema Registry writes them (its
``SchemaRegistryKey``/``SchemaValue`` JSON), both ways, and the store's handling of
records it cannot read (skipped, never fatal)."""

from __future__ import annotations

import orjson
import pytest

from app.common.errors import CorruptRecord
from app.registry.records import (
    ConfigKey,
    DeleteSubjectKey,
    ModeKey,
    NoopKey,
    Reference,
    SchemaKey,
    SchemaValue,
    decode_key,
    decode_schema,
    encode_config,
    encode_key,
    encode_mode,
    encode_noop,
    encode_schema,
)
from app.registry.store import SchemaStore


def test_keys_are_confluents_json() -> None:
    assert orjson.loads(encode_key(SchemaKey("s", 3))) == {
        "keytype": "SCHEMA",
        "subject": "s",
        "version": 3,
        "magic": 1,
    }
    assert orjson.loads(encode_key(ConfigKey(None))) == {
        "keytype": "CONFIG",
        "subject": None,
        "magic": 0,
    }
    assert orjson.loads(encode_key(ModeKey("s"))) == {"keytype": "MODE", "subject": "s", "magic": 0}
    assert orjson.loads(encode_key(DeleteSubjectKey("s")))["keytype"] == "DELETE_SUBJECT"
    assert orjson.loads(encode_key(NoopKey())) == {"keytype": "NOOP", "magic": 0}
    for key in (SchemaKey("s", 3), ConfigKey(None), ModeKey("s"), DeleteSubjectKey("s"), NoopKey()):
        assert decode_key(encode_key(key)) == key


def test_schema_values_round_trip_and_omit_avro() -> None:
    avro = SchemaValue("s", 1, 7, "AVRO", '"string"')
    body = orjson.loads(encode_schema(avro))
    assert body == {"subject": "s", "version": 1, "id": 7, "schema": '"string"', "deleted": False}
    proto = SchemaValue(
        "p", 2, 8, "PROTOBUF", "syntax", (Reference("a.proto", "a", 1),), deleted=True
    )
    body = orjson.loads(encode_schema(proto))
    assert body["schemaType"] == "PROTOBUF"
    assert body["references"] == [{"name": "a.proto", "subject": "a", "version": 1}]
    assert decode_schema(encode_schema(proto)) == proto
    assert decode_schema(encode_schema(avro)) == avro


@pytest.mark.parametrize(
    "raw", [b"not json", b"[1]", b'{"keytype": "OTHER"}', b'{"keytype": "SCHEMA", "version": 1}']
)
def test_unreadable_keys_are_corrupt(raw: bytes) -> None:
    with pytest.raises(CorruptRecord):
        decode_key(raw)


def test_the_store_skips_what_it_cannot_read() -> None:
    store = SchemaStore()
    store.apply(b"garbage", b"{}", 0)
    store.apply(encode_key(SchemaKey("s", 1)), b'{"subject": "s"}', 1)
    store.apply(encode_key(ConfigKey(None)), encode_config("FULL"), 2)
    store.apply(encode_key(ModeKey("s")), encode_mode("READONLY"), 3)
    store.apply(encode_key(NoopKey()), None, 4)  # Confluent's own NOOP: no value
    store.apply(encode_key(NoopKey()), encode_noop(41), 5)
    assert store.next_offset == 6
    assert store.subjects == {}
    assert store.configs == {None: "FULL"} and store.modes == {"s": "READONLY"}
    assert store.max_id == 41
