"""Broker-side schema validation (issue 18): ``confluent.value.schema.validation`` and
``confluent.key.schema.validation`` on a topic refuse, on every door (HTTP JSON and
binary, WebSocket, librdkafka through the Kafka door), records whose value (key) lacks
Confluent's wire-format header with an id registered under ``<topic>-value`` (``-key``),
with INVALID_RECORD and nothing of the request written."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator

import httpx
import orjson
import pytest
from confluent_kafka import KafkaError, Producer
from kafka_harness import KafkaBroker
from websockets.asyncio.client import connect

from app.common.batch import build_batch

SCHEMA = json.dumps(
    {"type": "record", "name": "Click", "fields": [{"name": "page", "type": "string"}]}
)
OTHER = json.dumps({"type": "record", "name": "Other", "fields": [{"name": "n", "type": "int"}]})


@pytest.fixture(scope="module")
def http(kafka_broker: KafkaBroker) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=kafka_broker.url, timeout=30) as h:
        yield h


def register(h: httpx.Client, subject: str, schema: str) -> int:
    r = h.post(f"/schema-registry/subjects/{subject}/versions", json={"schema": schema})
    assert r.status_code == 200, r.text
    return int(r.json()["id"])


def framed(schema_id: int, payload: bytes = b"\x08home") -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def create(h: httpx.Client, topic: str, **configs: str) -> None:
    r = h.post("/topics", json={"name": topic, "partitions": 1, "configs": configs})
    assert r.status_code == 201, r.text


def end_offset(h: httpx.Client, topic: str) -> int:
    r = h.get(f"/topics/{topic}/partitions/0/offsets", params={"at": "latest"})
    assert r.status_code == 200, r.text
    return int(r.json()["offset"])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_http_json_and_binary_refuse_unregistered_values(http: httpx.Client) -> None:
    topic = "sv-http"
    create(http, topic, **{"confluent.value.schema.validation": "true"})
    good = register(http, f"{topic}-value", SCHEMA)
    elsewhere = register(http, "sv-elsewhere-value", OTHER)  # registered, not for this topic
    described = http.get(f"/topics/{topic}").json()["configs"]
    assert described["confluent.value.schema.validation"] is True
    assert described["confluent.key.schema.validation"] is False

    # JSON produce with binary values: the third record's id is another subject's.
    ok = {"value": b64(framed(good))}
    r = http.post(
        f"/topics/{topic}/records",
        json={"value_format": "binary", "records": [ok, ok, {"value": b64(framed(elsewhere))}]},
    )
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error_code"] == "INVALID_RECORD"
    assert body["index"] == 2 and body["field"] == "value"
    assert f"{topic}-value" in body["message"]
    # Plain JSON values carry no header at all.
    r = http.post(f"/topics/{topic}/records", json={"records": [{"value": {"page": "a"}}]})
    assert r.status_code == 422 and r.json()["index"] == 0, r.text
    assert "magic byte" in r.json()["message"]
    assert end_offset(http, topic) == 0  # nothing of either request was written

    # Binary produce (RecordBatch v2): refused as a whole, the record's index named.
    batch = build_batch([(None, framed(good)), (None, b"plain")])
    r = http.post(
        f"/topics/{topic}/partitions/0/batches",
        content=batch,
        headers={"content-type": "application/octet-stream"},
    )
    assert r.status_code == 422, r.text
    assert r.json()["error_code"] == "INVALID_RECORD" and r.json()["index"] == 1
    # Compressed batches are read too; the index counts records across the body's batches.
    two = build_batch([(None, framed(good))]) + build_batch(
        [(None, framed(good)), (None, framed(elsewhere))], compression="gzip"
    )
    r = http.post(
        f"/topics/{topic}/partitions/0/batches",
        content=two,
        headers={"content-type": "application/octet-stream"},
    )
    assert r.status_code == 422 and r.json()["index"] == 2, r.text
    assert end_offset(http, topic) == 0

    # Registered ids pass on both paths; a tombstone (null value) passes too.
    r = http.post(
        f"/topics/{topic}/records",
        json={"value_format": "binary", "records": [ok, {"value": None}]},
    )
    assert r.status_code == 200, r.text
    r = http.post(
        f"/topics/{topic}/partitions/0/batches",
        content=build_batch([(None, framed(good))]),
        headers={"content-type": "application/octet-stream"},
    )
    assert r.status_code == 200, r.text
    # A typed produce frames with the subject's id: accepted.
    r = http.post(
        f"/topics/{topic}/records",
        json={
            "value_format": "avro",
            "value_subject": f"{topic}-value",
            "records": [{"value": {"page": "b"}}],
        },
    )
    assert r.status_code == 200, r.text
    assert end_offset(http, topic) == 4

    # A version registered after the cache was filled is found at once.
    http.put(f"/schema-registry/config/{topic}-value", json={"compatibility": "NONE"})
    newer = register(http, f"{topic}-value", OTHER)
    r = http.post(
        f"/topics/{topic}/records",
        json={"value_format": "binary", "records": [{"value": b64(framed(newer))}]},
    )
    assert r.status_code == 200, r.text


def test_key_validation_and_topics_without_it(http: httpx.Client) -> None:
    topic = "sv-keys"
    create(http, topic, **{"confluent.key.schema.validation": "true"})
    key_id = register(http, f"{topic}-key", SCHEMA)
    # Values are free; keys must be framed with the -key subject's ids.
    r = http.post(
        f"/topics/{topic}/records",
        json={
            "key_format": "binary",
            "value_format": "binary",
            "records": [
                {"key": b64(framed(key_id)), "value": "AA=="},
                {"key": b64(b"k"), "value": "AA=="},
            ],
        },
    )
    assert r.status_code == 422 and r.json()["field"] == "key" and r.json()["index"] == 1
    r = http.post(
        f"/topics/{topic}/records",
        json={"key_format": "binary", "records": [{"key": b64(framed(key_id)), "value": 1}]},
    )
    assert r.status_code == 200, r.text
    # A bad value for a config is INVALID_CONFIG; a topic without the configs takes anything.
    r = http.post(
        "/topics",
        json={"name": "sv-bad", "configs": {"confluent.value.schema.validation": "maybe"}},
    )
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_CONFIG", r.text
    r = http.post("/topics/sv-free/records", json={"records": [{"value": 1}]})
    assert r.status_code == 200, r.text


def test_websocket_produce_refused(kafka_broker: KafkaBroker, http: httpx.Client) -> None:
    topic = "sv-ws"
    create(http, topic, **{"confluent.value.schema.validation": "true"})
    good = register(http, f"{topic}-value", SCHEMA)

    async def main() -> tuple[dict[str, object], dict[str, object]]:
        url = kafka_broker.url.replace("http://", "ws://") + "/ws/produce"
        async with connect(url) as ws:
            records = [{"value": b64(framed(good))}, {"value": b64(b"plain")}]
            message = {"id": 1, "topic": topic, "value_format": "binary", "records": records}
            await ws.send(orjson.dumps(message).decode())
            refused = orjson.loads(await ws.recv())
            message = {**message, "id": 2, "records": records[:1]}
            await ws.send(orjson.dumps(message).decode())
            accepted = orjson.loads(await ws.recv())
            return refused, accepted

    refused, accepted = asyncio.run(main())
    assert refused["error_code"] == "INVALID_RECORD", refused
    assert refused["index"] == 1 and refused["field"] == "value", refused
    assert "offsets" in accepted, accepted
    assert end_offset(http, topic) == 1


def test_kafka_door_produce_refused(kafka_broker: KafkaBroker, http: httpx.Client) -> None:
    topic = "sv-kafka"
    create(http, topic, **{"confluent.value.schema.validation": "true"})
    good = register(http, f"{topic}-value", SCHEMA)
    producer = Producer(
        {"bootstrap.servers": kafka_broker.bootstrap, "retries": 0, "linger.ms": 50}
    )
    reports: list[tuple[KafkaError | None, bytes | None]] = []

    def report(err: KafkaError | None, msg: object) -> None:
        reports.append((err, msg.value()))

    # One batch with a bad record: refused whole (librdkafka fails all its messages).
    producer.produce(topic, framed(good), partition=0, on_delivery=report)
    producer.produce(topic, b"plain", partition=0, on_delivery=report)
    assert producer.flush(30) == 0
    assert len(reports) == 2
    for err, _ in reports:
        assert err is not None and err.code() == KafkaError.INVALID_RECORD, err
    assert end_offset(http, topic) == 0

    reports.clear()
    producer.produce(topic, framed(good), partition=0, on_delivery=report)
    assert producer.flush(30) == 0
    assert reports[0][0] is None, reports
    assert end_offset(http, topic) == 1


def test_transactional_json_produce_refused(http: httpx.Client) -> None:
    topic = "sv-txn"
    create(http, topic, **{"confluent.value.schema.validation": "true"})
    good = register(http, f"{topic}-value", SCHEMA)
    r = http.post("/producers", json={"transactional_id": "sv-txn-1"})
    assert r.status_code == 200, r.text
    ids = {"producer_id": r.json()["producer_id"], "producer_epoch": r.json()["producer_epoch"]}

    def produce(values: list[bytes]) -> httpx.Response:
        return http.post(
            f"/transactions/sv-txn-1/topics/{topic}/records",
            params=ids,
            json={"value_format": "binary", "records": [{"value": b64(v)} for v in values]},
        )

    r = produce([framed(good), b"plain"])
    assert r.status_code == 422 and r.json()["index"] == 1, r.text
    assert end_offset(http, topic) == 0
    assert produce([framed(good)]).status_code == 200
    r = http.post("/transactions/sv-txn-1/commit", json=ids)
    assert r.status_code == 200, r.text
