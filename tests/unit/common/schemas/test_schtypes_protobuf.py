"""PROTOBUF: .proto text compiled by grpcio-tools' protoc, imports from references and the
well-known types, Confluent's message indexes, and interop with confluent-kafka's
ProtobufSerializer/ProtobufDeserializer (which register base64 FileDescriptorProtos)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.common import schemas
from app.common.schema_errors import InvalidSchema, RecordInvalid
from app.common.schemas import ResolvedReference, wire

ORDER = """
syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
import "money.proto";

message Order {
  string id = 1;
  int64 quantity = 2;
  repeated string tags = 3;
  map<string, int32> counts = 4;
  google.protobuf.Timestamp at = 5;
  common.Money price = 6;
  oneof payment { string card = 7; string iban = 8; }
  optional bool gift = 9;
  message Line { string sku = 1; int32 n = 2; }
  repeated Line lines = 10;
  Status status = 11;
}
enum Status { NEW = 0; PAID = 1; }
message Refund { string order_id = 1; }
"""
MONEY = (
    'syntax = "proto3";\npackage common;\nmessage Money { string currency = 1; int64 units = 2; }\n'
)
MONEY_REF = ResolvedReference("money.proto", "money", 1, "PROTOBUF", MONEY)


@pytest.fixture(scope="module")
def order() -> Any:
    return schemas.parse("PROTOBUF", ORDER, [MONEY_REF])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('syntax = "proto3"; message M { strin x = 1; }', '"strin" is not defined'),
        ('syntax = "proto3"; import "other.proto"; message M { int32 x = 1; }', "other.proto"),
        ('syntax = "proto3"; message M { int32 x = 1; int32 y = 1; }', "has already been used"),
        ('syntax = "proto3";', "defines no message"),
        ("message {", "Expected"),
        ("message M {" * 100 + "}" * 100, "nests deeper than"),
    ],
)
def test_invalid_schemas_carry_protocs_message(text: str, says: str) -> None:
    with pytest.raises(InvalidSchema) as err:
        schemas.parse("PROTOBUF", text)
    assert says in str(err.value)
    assert "logbus_schema__main" not in str(err.value)  # the temporary file name is hidden


def test_reference_names_must_be_relative_import_paths() -> None:
    bad = ResolvedReference("../etc/passwd.proto", "x", 1, "PROTOBUF", MONEY)
    with pytest.raises(InvalidSchema, match=r"relative \.proto import path"):
        schemas.parse("PROTOBUF", 'syntax = "proto3"; message M { int32 x = 1; }', [bad])


def test_round_trip_with_imports_nested_messages_and_well_known_types(order: Any) -> None:
    value = {
        "id": "o-1",
        "quantity": "3",  # MessageToDict writes int64 as a string (proto3 JSON mapping)
        "tags": ["a", "b"],
        "counts": {"x": 1},
        "at": "2024-05-01T10:00:00Z",
        "price": {"currency": "EUR", "units": "12"},
        "iban": "FR76",
        "gift": False,
        "lines": [{"sku": "s", "n": 2}],
        "status": "PAID",
    }
    data = wire.encode(order, 9, value)
    assert data[:6] == b"\x00\x00\x00\x00\x09\x00"  # id 9, message indexes [0] as one 0 byte
    assert wire.decode(order, data) == value
    line = wire.encode(order, 9, {"sku": "k"}, message_name="Order.Line")
    # [0, 1]: count 2, then 0, 1 as zig-zag varints. Line is Order's nested type 1: the map
    # field's entry type (CountsEntry) is nested type 0, as protoc (and Confluent) count.
    assert line[5:8] == b"\x04\x00\x02"
    assert wire.decode(order, line) == {"sku": "k"}
    refund = wire.encode(order, 9, {"order_id": "o"}, message_name="shop.v1.Refund")
    assert refund[5:7] == b"\x02\x02"  # [1]
    assert wire.decode(order, refund) == {"order_id": "o"}


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"quantity": "many"}, "quantity"),
        ({"price": {"units": "x"}}, "price.units"),
        ({"nosuch": 1}, ""),
        ({"status": "LOST"}, "status"),
        ([1, 2], ""),
    ],
)
def test_invalid_values_name_the_field(order: Any, value: Any, path: str) -> None:
    with pytest.raises(RecordInvalid) as err:
        wire.encode(order, 1, value)
    assert err.value.path == path


def test_bad_payloads_and_unknown_message(order: Any) -> None:
    with pytest.raises(RecordInvalid, match="names no message"):
        wire.decode(order, b"\x00\x00\x00\x00\x01\x02\x10")
    with pytest.raises(RecordInvalid, match="does not decode"):
        wire.decode(order, b"\x00\x00\x00\x00\x01\x00\x0a\x05ab")
    with pytest.raises(RecordInvalid, match="not defined"):
        wire.encode(order, 1, {}, message_name="Nope")


def test_normalized_ignores_comments_and_layout(order: Any) -> None:
    spaced = ORDER.replace("message Refund {", "// a comment\nmessage   Refund\n{")
    assert schemas.parse("PROTOBUF", spaced, [MONEY_REF]).normalized() == order.normalized()
    assert order.canonical() == ORDER
    changed = ORDER.replace("string order_id = 1;", "string order_id = 2;")
    assert schemas.parse("PROTOBUF", changed, [MONEY_REF]).normalized() != order.normalized()
    # The normalized form is itself a schema: a registry may store it.
    again = schemas.parse("PROTOBUF", order.normalized(), [MONEY_REF])
    assert again.normalized() == order.normalized()


def test_serialized_form_parses_back(order: Any) -> None:
    again = schemas.parse("PROTOBUF", order.serialized(), [MONEY_REF])
    assert again.normalized() == order.normalized()
    value = {"id": "x", "price": {"currency": "USD"}}
    assert wire.decode(again, wire.encode(order, 1, value)) == value


@settings(max_examples=40, deadline=None)
@given(
    st.fixed_dictionaries({"sku": st.text(min_size=1, max_size=10), "n": st.integers(1, 2**31 - 1)})
)
def test_round_trip_property(line: dict[str, Any]) -> None:
    parsed = schemas.parse("PROTOBUF", ORDER, [MONEY_REF])  # cached compile: cheap
    assert wire.decode(parsed, wire.encode(parsed, 1, line, message_name="Order.Line")) == line


def test_confluent_serializer_bytes_decode_and_ours_deserialize(order: Any) -> None:
    pytest.importorskip("confluent_kafka.schema_registry.protobuf")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import (
        ProtobufDeserializer,
        ProtobufSerializer,
    )
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient.new_client({"url": "mock://schtypes-protobuf"})
    ctx = SerializationContext("orders", MessageField.VALUE)
    line_cls = order.message_class("Order.Line")
    ser = ProtobufSerializer(line_cls, client, {"use.deprecated.format": False})
    theirs = ser(line_cls(sku="k", n=5), ctx)
    schema_id = wire.schema_id_of(theirs)
    # What the serializer registered is Confluent's serialized form (base64): parse it too.
    registered = client.get_schema(schema_id)
    parsed = schemas.parse("PROTOBUF", registered.schema_str, [MONEY_REF])
    assert wire.decode(parsed, theirs) == {"sku": "k", "n": 5}
    assert wire.decode(order, theirs) == {"sku": "k", "n": 5}
    ours = wire.encode(order, schema_id, {"sku": "k", "n": 5}, message_name="Order.Line")
    assert ours == theirs
    deser = ProtobufDeserializer(line_cls, {"use.deprecated.format": False})
    assert deser(ours, ctx) == line_cls(sku="k", n=5)
