"""Typed records on the HTTP JSON doors (issue 18): ``value_format`` / ``key_format``
avro, jsonschema and protobuf on produce (validated, framed in Confluent's wire format)
and fetch (decoded through the id each record carries), against a live broker and
confluent-kafka's serializers."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext
from live_broker import LiveBroker, live_broker

from app.common.batch import build_batch

ORDER = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {
                "name": "ship",
                "type": {
                    "type": "record",
                    "name": "Ship",
                    "fields": [{"name": "zip", "type": "string"}],
                },
            },
            {"name": "raw", "type": ["null", "bytes"], "default": None},
        ],
    }
)
VIEW = json.dumps(
    {
        "type": "object",
        "properties": {"page": {"type": "string"}, "ms": {"type": "integer"}},
        "required": ["page"],
    }
)
READING = (
    'syntax = "proto3";\npackage ex;\nmessage Reading { string sensor = 1; double celsius = 2; }\n'
)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LiveBroker]:
    with live_broker(tmp_path) as b:
        yield b


@pytest.fixture
def http(broker: LiveBroker) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as h:
        yield h


def register(h: httpx.Client, subject: str, schema: str, schema_type: str = "AVRO") -> int:
    r = h.post(
        f"/schema-registry/subjects/{subject}/versions",
        json={"schema": schema, "schemaType": schema_type},
    )
    assert r.status_code == 200, r.text
    schema_id: int = r.json()["id"]
    return schema_id


def fetch(h: httpx.Client, topic: str, **params: Any) -> list[dict[str, Any]]:
    r = h.get(
        f"/topics/{topic}/partitions/0/records",
        params={"offset": 0, "max_wait_ms": 0, **params},
    )
    assert r.status_code == 200, r.text
    records: list[dict[str, Any]] = r.json()["records"]
    return records


def end_offset(h: httpx.Client, topic: str) -> int:
    r = h.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0, "max_wait_ms": 0})
    return int(r.headers["Logbus-Log-End-Offset"])


def test_avro_produce_then_fetch_round_trip_and_confluent_reads_the_bytes(
    broker: LiveBroker, http: httpx.Client
) -> None:
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    schema_id = register(http, "orders-value", ORDER)
    key_id = register(http, "orders-key", '"string"')
    orders = [
        {"id": 1, "item": "pen", "ship": {"zip": "10115"}, "raw": None},
        {"id": 2, "item": "ink", "ship": {"zip": "75001"}, "raw": None},
    ]
    r = http.post(
        "/topics/orders/records",
        json={
            "records": [{"key": f"k{o['id']}", "value": o} for o in orders],
            "value_format": "avro",
            "value_subject": "orders-value",
            "key_format": "avro",
            "key_schema_id": key_id,
        },
    )
    assert r.status_code == 200, r.text
    got = fetch(http, "orders", value_format="avro", key_format="avro")
    assert [g["value"] for g in got] == orders
    assert [g["key"] for g in got] == ["k1", "k2"]
    assert all("value_error" not in g for g in got)
    # The stored bytes are Confluent's wire format: its deserializer reads them.
    raw = fetch(http, "orders", value_format="binary")
    import base64

    data = base64.b64decode(raw[0]["value"])
    assert data[:5] == b"\0" + schema_id.to_bytes(4, "big")
    sr = SchemaRegistryClient({"url": broker.url + "/schema-registry"})
    ctx = SerializationContext("orders", MessageField.VALUE)
    assert AvroDeserializer(sr)(data, ctx) == orders[0]


def test_bytes_written_by_confluent_serializers_decode_in_a_typed_fetch(
    broker: LiveBroker, http: httpx.Client
) -> None:
    """AvroSerializer's and ProtobufSerializer's bytes, produced as raw batches, come back
    decoded; a bytes field is base64 text in the JSON answer."""
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from test_api_schema_registry import _protobuf_message_class

    sr = SchemaRegistryClient({"url": broker.url + "/schema-registry"})
    order = {"id": 7, "item": "cap", "ship": {"zip": "1000"}, "raw": b"\x00\xff"}
    data = AvroSerializer(sr, ORDER)(order, SerializationContext("avro-in", MessageField.VALUE))
    assert http.post("/topics", json={"name": "avro-in", "partitions": 1}).status_code == 201
    r = http.post(
        "/topics/avro-in/partitions/0/batches",
        content=build_batch([(None, data)]),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 200, r.text
    [got] = fetch(http, "avro-in", value_format="avro")
    assert got["value"] == {**order, "raw": "AP8="}

    reading = _protobuf_message_class()
    sr.register_schema("readings-value", Schema(READING, "PROTOBUF"))
    conf = {"use.deprecated.format": False, "auto.register.schemas": False}
    serializer = ProtobufSerializer(reading, sr, {**conf, "use.latest.version": True})
    data = serializer(
        reading(sensor="s1", celsius=21.5), SerializationContext("readings", MessageField.VALUE)
    )
    assert http.post("/topics", json={"name": "readings", "partitions": 1}).status_code == 201
    r = http.post(
        "/topics/readings/partitions/0/batches",
        content=build_batch([(None, data)]),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 200, r.text
    [got] = fetch(http, "readings", value_format="protobuf")
    assert got["value"] == {"sensor": "s1", "celsius": 21.5}
    # A WebSocket subscription decodes the same bytes as the typed fetch does.
    assert ws_values(broker, "avro-in", "avro") == [{**order, "raw": "AP8="}]
    assert ws_values(broker, "readings", "protobuf") == [{"sensor": "s1", "celsius": 21.5}]


def ws_values(broker: LiveBroker, topic: str, value_format: str) -> list[Any]:
    """The values a ``/ws/subscribe`` at ``value_format`` is pushed, from the start to the
    topic's end now."""
    import asyncio

    import orjson
    from websockets.asyncio.client import connect

    async def main() -> list[Any]:
        async with connect(broker.ws_url("/ws/subscribe")) as ws:
            message = {
                "type": "subscribe",
                "topics": [topic],
                "start": "earliest",
                "value_format": value_format,
                "credit": {"records": 100},
            }
            await ws.send(orjson.dumps(message).decode())
            subscribed = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            assert subscribed["type"] == "subscribed", subscribed
            end = sum(p["high_watermark"] for p in subscribed["partitions"])
            values: list[Any] = []
            while len(values) < end:
                frame = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
                if frame["type"] == "records":
                    for r in frame["records"]:
                        assert "value_error" not in r, r
                        values.append(r["value"])
            return values

    return asyncio.run(main())


def test_jsonschema_and_protobuf_produce_then_fetch(broker: LiveBroker, http: httpx.Client) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from test_api_schema_registry import _protobuf_message_class

    register(http, "views-value", VIEW, "JSON")
    r = http.post(
        "/topics/views/records",
        json={
            "records": [{"value": {"page": "/a", "ms": 3}}, {"value": {"page": "/b"}}],
            "value_format": "jsonschema",
            "value_subject": "views-value",
            "value_schema_version": 1,
        },
    )
    assert r.status_code == 200, r.text
    got = fetch(http, "views", value_format="jsonschema")
    assert [g["value"] for g in got] == [{"page": "/a", "ms": 3}, {"page": "/b"}]

    proto_id = register(http, "readings-value", READING, "PROTOBUF")
    r = http.post(
        "/topics/readings/records",
        json={
            "records": [{"value": {"sensor": "s9", "celsius": -4.5}}],
            "value_format": "protobuf",
            "value_schema_id": proto_id,
        },
    )
    assert r.status_code == 200, r.text
    [got] = fetch(http, "readings", value_format="protobuf")
    assert got["value"] == {"sensor": "s9", "celsius": -4.5}
    # confluent-kafka's deserializer reads what Logbus encoded.
    import base64

    [raw] = fetch(http, "readings", value_format="binary")
    sr = SchemaRegistryClient({"url": broker.url + "/schema-registry"})
    reading = _protobuf_message_class()
    back = ProtobufDeserializer(reading, {"use.deprecated.format": False}, sr)(
        base64.b64decode(raw["value"]), SerializationContext("readings", MessageField.VALUE)
    )
    assert (back.sensor, back.celsius) == ("s9", -4.5)


TWO_MESSAGES = (
    'syntax = "proto3";\npackage ex;\n'
    "message Reading { string sensor = 1; double celsius = 2; }\n"
    "message Alarm { string sensor = 1; int32 level = 2; }\n"
)


def test_protobuf_value_message_picks_the_files_message(http: httpx.Client) -> None:
    """value_message (full name, or relative to the package) picks the message; its
    message indexes are written ([1]: zig-zag count 1, index 1), and the typed fetch
    decodes each record by its own indexes. A name the file lacks is a 400 naming the
    field, and so is value_message beside another format."""
    import base64

    proto_id = register(http, "alarms-value", TWO_MESSAGES, "PROTOBUF")
    body = {"value_format": "protobuf", "value_schema_id": proto_id}
    for name in ("ex.Alarm", "Alarm"):
        r = http.post(
            "/topics/alarms/records",
            json={
                **body,
                "value_message": name,
                "records": [{"value": {"sensor": "s", "level": 3}}],
            },
        )
        assert r.status_code == 200, r.text
    r = http.post("/topics/alarms/records", json={**body, "records": [{"value": {"sensor": "r"}}]})
    assert r.status_code == 200, r.text
    got = fetch(http, "alarms", value_format="protobuf")
    assert [g["value"] for g in got] == [{"sensor": "s", "level": 3}] * 2 + [{"sensor": "r"}]
    raw = fetch(http, "alarms", value_format="binary")
    assert base64.b64decode(raw[0]["value"])[5:7] == b"\x02\x02"  # indexes [1]
    assert base64.b64decode(raw[2]["value"])[5:6] == b"\x00"  # [0], the first message
    r = http.post(
        "/topics/alarms/records",
        json={**body, "value_message": "ex.Nope", "records": [{"value": {}}]},
    )
    assert r.status_code == 400 and r.json()["field"] == "value_message", r.text
    r = http.post(
        "/topics/alarms/records",
        json={"value_format": "json", "value_message": "ex.Alarm", "records": [{"value": {}}]},
    )
    assert r.status_code == 400 and "goes with value_format protobuf" in r.text, r.text


def test_a_bad_record_refuses_the_whole_request(http: httpx.Client) -> None:
    register(http, "orders-value", ORDER)
    good = {"id": 1, "item": "pen", "ship": {"zip": "1"}}
    ok = http.post(
        "/topics/orders/records",
        json={
            "records": [{"value": good}],
            "value_format": "avro",
            "value_subject": "orders-value",
        },
    )
    assert ok.status_code == 200, ok.text
    before = end_offset(http, "orders")
    bad = {"id": 2, "item": "ink", "ship": {"zip": 75001}}
    r = http.post(
        "/topics/orders/records",
        json={
            "records": [{"value": good}, {"value": good}, {"value": bad}],
            "value_format": "avro",
            "value_subject": "orders-value",
        },
    )
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error_code"] == "INVALID_RECORD"
    assert body["index"] == 2 and body["field"] == "value"
    assert "zip" in body["path"] and "body.records.2.value" in body["message"]
    assert end_offset(http, "orders") == before
    # JSON Schema: a missing required property, named.
    register(http, "views-value", VIEW, "JSON")
    r = http.post(
        "/topics/views/records",
        json={
            "records": [{"value": {"ms": 1}}],
            "value_format": "jsonschema",
            "value_subject": "views-value",
        },
    )
    assert r.status_code == 422 and r.json()["index"] == 0, r.text
    assert "page" in r.json()["message"]


def test_unknown_id_or_subject_and_mismatched_fields(http: httpx.Client) -> None:
    r = http.post(
        "/topics/t/records",
        json={"records": [{"value": {}}], "value_format": "avro", "value_schema_id": 999},
    )
    assert r.status_code == 404, r.text
    assert r.json()["error_code"] == "SCHEMA_NOT_FOUND" and "40403" in r.json()["message"]
    r = http.post(
        "/topics/t/records",
        json={"records": [{"value": {}}], "value_format": "avro", "value_subject": "nope-value"},
    )
    assert r.status_code == 404, r.text
    assert "nope-value" in r.json()["message"] and "40401" in r.json()["message"]
    register(http, "views-value", VIEW, "JSON")
    r = http.post(
        "/topics/t/records",
        json={
            "records": [{"value": {}}],
            "value_format": "avro",
            "value_subject": "views-value",
        },
    )
    assert r.status_code == 400 and "JSON schema" in r.json()["message"], r.text
    # A typed format without a schema, and schema fields with an untyped format.
    r = http.post("/topics/t/records", json={"records": [{"value": 1}], "value_format": "avro"})
    assert r.status_code == 400 and "value_schema_id" in r.json()["message"], r.text
    r = http.post("/topics/t/records", json={"records": [{"value": 1}], "value_schema_id": 1})
    assert r.status_code == 400, r.text
    r = http.get("/topics/t/partitions/0/records", params={"offset": 0, "max_wait_ms": 0})
    assert r.status_code == 404  # nothing above created the topic


def test_a_typed_fetch_of_other_records_gives_per_record_errors(http: httpx.Client) -> None:
    schema_id = register(http, "mixed-value", ORDER)
    views_id = register(http, "views-value", VIEW, "JSON")
    r = http.post("/topics/mixed/records", json={"records": [{"value": {"plain": True}}]})
    assert r.status_code == 200, r.text
    import base64

    framed = [
        b"\0" + (schema_id + 1000).to_bytes(4, "big") + b"\x02",  # unknown id
        b"\0" + views_id.to_bytes(4, "big") + b'{"page":"/x"}',  # a JSON Schema id
        b"\0" + schema_id.to_bytes(4, "big") + b"\x02",  # truncated Avro
    ]
    r = http.post(
        "/topics/mixed/records",
        json={
            "records": [{"value": base64.b64encode(f).decode()} for f in framed]
            + [{"value": None}],
            "value_format": "binary",
        },
    )
    assert r.status_code == 200, r.text
    got = fetch(http, "mixed", value_format="avro")
    assert len(got) == 5
    for g in got[:4]:
        assert g["value"] is None and g["value_error"]["error_code"] == "INVALID_RECORD", g
    assert "magic byte" in got[0]["value_error"]["message"]
    assert "40403" in got[1]["value_error"]["message"]
    assert "JSON" in got[2]["value_error"]["message"]
    assert "decode" in got[3]["value_error"]["message"]
    assert got[4]["value"] is None and "value_error" not in got[4]  # a tombstone


def test_damaged_avro_records_among_good_ones_get_the_fastavro_paths_errors(
    http: httpx.Client,
) -> None:
    """Records of one id, the good ones decoded in C (app/common/schemas/_avrodec.c) and
    the damaged ones between them: each damaged record's error is the one the
    fastavro-only path gives (the C decoder hands them to it), and good records after a
    bad one or another id decode again; bytes fields come back as base64 text."""
    import base64

    from app.common import schemas
    from app.common.schema_errors import RecordInvalid

    schema_id = register(http, "damaged-value", ORDER)
    other_id = register(http, "damaged-other", '"string"')
    header = b"\0" + schema_id.to_bytes(4, "big")
    parsed = schemas.parse("AVRO", ORDER)
    good = {"id": 7, "item": "pen", "ship": {"zip": "10115"}, "raw": b"\x00\xff"}
    payload = parsed.encode_payload(good, None)
    damaged = [
        payload[:-1],  # truncated
        payload + b"\x00",  # a byte after the value
        b"\x0e\x06p\xffn" + payload[5:],  # not UTF-8
        b"\x0e\xfe\xff\xff\xff\xff\xff\xff\xff\x7f",  # a string of ~2**62 bytes
        payload[:-4] + b"\x06",  # union index 3 of 2
    ]
    fastavro_only = schemas.parse("AVRO", ORDER)
    fastavro_only._read_program = None
    expected = []
    for bad in damaged:
        with pytest.raises(RecordInvalid) as caught:
            fastavro_only.decode_payload(memoryview(bad))
        expected.append(caught.value.message)
    framed = [header + payload]
    for bad in damaged:
        framed += [header + bad, header + payload]
    framed += [b"\0" + other_id.to_bytes(4, "big") + b"\x02x", header + payload]
    r = http.post(
        "/topics/damaged/records",
        json={
            "records": [{"value": base64.b64encode(f).decode()} for f in framed],
            "value_format": "binary",
        },
    )
    assert r.status_code == 200, r.text
    got = fetch(http, "damaged", value_format="avro")
    as_json = {**good, "raw": base64.b64encode(good["raw"]).decode()}
    assert [g["value"] for g in got[0::2]] == [as_json] * (len(damaged) + 2)
    assert all("value_error" not in g for g in got[0::2])
    errors = [g["value_error"]["message"] for g in got[1:-2:2]]
    strip = re.compile(r" at 0x[0-9a-f]+")  # fastavro may name its stream object
    assert [strip.sub("", e) for e in errors] == [strip.sub("", e) for e in expected]
    assert got[-2]["value"] == "x"  # another id: a string schema


def test_a_typed_value_beside_a_json_key_is_placed_and_stored_as_an_untyped_one(
    broker: LiveBroker, http: httpx.Client
) -> None:
    """Typed values with json keys take the plain records' batch building: the keys are
    the json format's bytes, placed by their murmur2 hash as in an untyped produce."""
    import base64

    schema_id = register(http, "keyed-value", ORDER)
    r = http.post("/topics", json={"name": "keyed", "partitions": 4})
    assert r.status_code == 201, r.text
    order = {"id": 1, "item": "pen", "ship": {"zip": "1"}, "raw": None}
    records = [{"key": {"user": i}, "value": order} for i in range(8)]
    typed = http.post(
        "/topics/keyed/records",
        json={"records": records, "value_format": "avro", "value_schema_id": schema_id},
    )
    plain = http.post("/topics/keyed/records", json={"records": records})
    assert typed.status_code == plain.status_code == 200, typed.text
    assert [o["partition"] for o in typed.json()["offsets"]] == [
        o["partition"] for o in plain.json()["offsets"]
    ]
    p = typed.json()["offsets"][0]["partition"]
    got = http.get(
        f"/topics/keyed/partitions/{p}/records",
        params={"offset": 0, "max_wait_ms": 0, "key_format": "binary", "value_format": "avro"},
    ).json()["records"]
    assert base64.b64decode(got[0]["key"]) == b'{"user":0}'
    assert got[0]["value"] == order


def test_typed_fetches_are_rendered_once_unless_a_record_failed(
    broker: LiveBroker, http: httpx.Client
) -> None:
    """A batch whose records all decoded is kept in the rendered-records cache (the next
    fetch joins its bytes: a hit, the same answer); one with a per-record error is not:
    once the id it carries is registered, the next fetch decodes it."""
    import base64

    schema_id = register(http, "cached-value", ORDER)
    order = {"id": 1, "item": "pen", "ship": {"zip": "1"}, "raw": None}
    r = http.post(
        "/topics/cached/records",
        json={"records": [{"value": order}], "value_format": "avro", "value_schema_id": schema_id},
    )
    assert r.status_code == 200, r.text
    rendered = broker.app.state.logbus.rendered
    first = fetch(http, "cached", value_format="avro")
    hits = rendered.hits
    assert fetch(http, "cached", value_format="avro") == first == [{**first[0], "value": order}]
    assert rendered.hits == hits + 1
    # The next id, not registered yet: a per-record error, not kept.
    future = b"\0" + (schema_id + 1).to_bytes(4, "big") + b'"x"'
    r = http.post(
        "/topics/later/records",
        json={"records": [{"value": base64.b64encode(future).decode()}], "value_format": "binary"},
    )
    assert r.status_code == 200, r.text
    assert "40403" in fetch(http, "later", value_format="jsonschema")[0]["value_error"]["message"]
    assert register(http, "later-value", '{"type": "string"}', "JSON") == schema_id + 1
    again = fetch(http, "later", value_format="jsonschema")
    assert again[0]["value"] == "x" and "value_error" not in again[0]


def test_a_large_typed_fetch_rendered_off_the_loop(
    http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over INLINE_WORK_BYTES the answer is rendered on a worker thread: an id met there
    for the first time (the records came as raw batches, so no typed produce cached it) is
    looked up through the event loop, and every record decodes."""
    from app.api.typed import SchemaCache
    from app.api.util import INLINE_WORK_BYTES
    from app.common.schemas import parse, wire

    asked: list[int] = []
    load_async = SchemaCache._load_async

    async def counted(self: SchemaCache, schema_id: int) -> Any:
        asked.append(schema_id)
        return await load_async(self, schema_id)

    monkeypatch.setattr(SchemaCache, "_load_async", counted)

    schema_id = register(http, "big-value", ORDER)
    parsed = parse("AVRO", ORDER)
    item = "x" * 1000
    count = INLINE_WORK_BYTES // 1000 + 50
    values = [
        wire.encode(parsed, schema_id, {"id": i, "item": item, "ship": {"zip": "1"}, "raw": None})
        for i in range(count)
    ]
    assert http.post("/topics", json={"name": "big", "partitions": 1}).status_code == 201
    r = http.post(
        "/topics/big/partitions/0/batches",
        content=build_batch([(None, v) for v in values]),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 200, r.text
    got = fetch(http, "big", value_format="avro", max_bytes=4 * INLINE_WORK_BYTES)
    assert len(got) == count
    assert [g["value"]["id"] for g in got] == list(range(count))
    assert all("value_error" not in g for g in got)
    assert asked == [schema_id]  # looked up once, from the worker thread through the loop


def test_websocket_produce_and_subscribe_take_typed_formats(tmp_path: Path) -> None:
    """WS /ws/produce takes the HTTP produce's typed fields (a bad record refused whole,
    with its index); WS /ws/subscribe decodes as the typed HTTP fetch does."""
    from fastapi.testclient import TestClient

    from app.api.app import create_app
    from app.config import Settings

    settings = Settings(data_dir=tmp_path / "data", num_partitions=1)
    with TestClient(create_app(settings)) as c:
        r = c.post(
            "/schema-registry/subjects/orders-value/versions",
            json={"schema": ORDER},
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        )
        assert r.status_code == 200, r.text
        good = {"id": 1, "item": "pen", "ship": {"zip": "1"}, "raw": None}
        with c.websocket_connect("/ws/produce") as ws:
            typed_fields = {"value_format": "avro", "value_subject": "orders-value"}
            ws.send_json({"type": "produce", "topic": "orders", "records": [{"value": good}]})
            assert ws.receive_json()["type"] == "ack"  # untyped, as before
            ws.send_json(
                {"type": "produce", "topic": "orders", "records": [{"value": good}], **typed_fields}
            )
            assert ws.receive_json()["type"] == "ack"
            ws.send_json(
                {
                    "type": "produce",
                    "topic": "orders",
                    "records": [{"value": good}, {"value": {"id": "x"}}],
                    **typed_fields,
                }
            )
            refused = ws.receive_json()
            assert refused["error_code"] == "INVALID_RECORD" and refused["index"] == 1, refused
        with c.websocket_connect("/ws/subscribe") as ws:
            ws.send_json(
                {
                    "type": "subscribe",
                    "topics": ["orders"],
                    "start": "earliest",
                    "value_format": "avro",
                    "credit": {"records": 10},
                }
            )
            assert ws.receive_json()["type"] == "subscribed"
            got: list[dict[str, Any]] = []
            while len(got) < 2:
                frame = ws.receive_json()
                if frame["type"] == "records":
                    got.extend(frame["records"])
        assert got[0]["value"] is None and "value_error" in got[0]  # the untyped record
        assert got[1]["value"] == good and "value_error" not in got[1]
        # value_message as in HTTP produce: the file's second message, its indexes [1].
        r = c.post(
            "/schema-registry/subjects/alarms-value/versions",
            json={"schema": TWO_MESSAGES, "schemaType": "PROTOBUF"},
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        )
        assert r.status_code == 200, r.text
        with c.websocket_connect("/ws/produce") as ws:
            ws.send_json(
                {
                    "type": "produce",
                    "topic": "alarms",
                    "records": [{"value": {"sensor": "s", "level": 4}}],
                    "value_format": "protobuf",
                    "value_subject": "alarms-value",
                    "value_message": "ex.Alarm",
                }
            )
            assert ws.receive_json()["type"] == "ack"
        r = c.get(
            "/topics/alarms/partitions/0/records",
            params={"offset": 0, "max_wait_ms": 0, "value_format": "protobuf"},
        )
        assert r.json()["records"][0]["value"] == {"sensor": "s", "level": 4}, r.text


def test_a_typed_fetch_with_a_stored_schema_over_the_zero_byte_bound_fails_per_record(
    tmp_path: Path,
) -> None:
    """A schema in _schemas from before the check (an older broker registered it; here a
    broker whose limit was raised to its maximum): R_20, whose values take no bytes and
    decode to 4,194,303 objects each. A broker with the default limit serves a typed fetch
    of records framed with its id (a header and no payload) with a per-record error naming
    the bound, built nothing, and refuses a typed produce with it (400, the parser's
    message)."""
    import base64

    fields: list[Any] = [{"name": "a", "type": "null"}, {"name": "b", "type": "null"}]
    bomb: dict[str, Any] = {"type": "record", "name": "R0", "fields": fields}
    for i in range(1, 21):
        bomb = {"type": "record", "name": f"R{i}",
                "fields": [{"name": "a", "type": bomb}, {"name": "b", "type": f"R{i - 1}"}]}  # fmt: skip
    raised = {"schema_registry_max_zero_byte_values": 1 << 30}
    with live_broker(tmp_path, **raised) as old, httpx.Client(base_url=old.url, timeout=30) as h:
        schema_id = register(h, "bomb-value", json.dumps(bomb))
        framed = base64.b64encode(b"\0" + schema_id.to_bytes(4, "big")).decode()
        r = h.post(
            "/topics/bombs/records",
            json={"records": [{"value": framed}] * 3, "value_format": "binary"},
        )
        assert r.status_code == 200, r.text
    with live_broker(tmp_path) as new, httpx.Client(base_url=new.url, timeout=30) as h:
        started = time.monotonic()
        got = fetch(h, "bombs", value_format="avro")
        assert time.monotonic() - started < 5
        assert len(got) == 3
        for g in got:
            assert g["value"] is None and g["value_error"]["error_code"] == "INVALID_RECORD"
            message = g["value_error"]["message"]
            assert f"schema id {schema_id}" in message and "42201" in message, message
            assert "builds 4,194,303 values from no bytes" in message, message
            assert "schema_registry_max_zero_byte_values" in message, message
        r = h.post(
            "/topics/bombs/records",
            json={"records": [{"value": {}}], "value_format": "avro", "value_schema_id": schema_id},
        )
        assert r.status_code == 400, r.text  # the request names a schema not served
        assert "values from no bytes" in r.json()["message"], r.text


def test_a_typed_fetch_refuses_array_blocks_of_items_that_take_no_bytes_on_fastavros_path(
    tmp_path: Path,
) -> None:
    """A schema with a logical type (the compiled decoder leaves it to fastavro) and an
    array of records of a null: a producer's four payload bytes declaring 2**40 items.
    The typed fetch answers that record's error at once and decodes the others; fastavro
    would have built 2**40 records (hours, then out of memory)."""
    import base64

    def varint(n: int) -> bytes:
        n, out = (n << 1) ^ (n >> 63), bytearray()
        while n > 0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        return bytes(out + bytes([n]))

    empty = {"type": "record", "name": "E", "fields": [{"name": "n", "type": "null"}]}
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "xs", "type": {"type": "array", "items": empty}}]}  # fmt: skip
    with live_broker(tmp_path) as b, httpx.Client(base_url=b.url, timeout=30) as h:
        schema_id = register(h, "stamps-value", json.dumps(schema))
        header = b"\0" + schema_id.to_bytes(4, "big")
        payloads = [varint(5) + varint(2) + varint(0), varint(5) + varint(2**40) + varint(0)]
        r = h.post(
            "/topics/stamps/records",
            json={
                "records": [{"value": base64.b64encode(header + p).decode()} for p in payloads * 2],
                "value_format": "binary",
            },
        )
        assert r.status_code == 200, r.text
        started = time.monotonic()
        got = fetch(h, "stamps", value_format="avro")
        assert time.monotonic() - started < 5
        assert [g["value"] is None for g in got] == [False, True, False, True]
        assert got[0]["value"]["xs"] == [{"n": None}] * 2 == got[2]["value"]["xs"]
        for g in got[1::2]:
            assert g["value_error"]["error_code"] == "INVALID_RECORD"
            assert "items that take no bytes" in g["value_error"]["message"], g
