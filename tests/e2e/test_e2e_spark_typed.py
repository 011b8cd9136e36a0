"""Typed values in the ``logbus`` Spark source and sink (issue 18), on local Spark against
a real broker: records that confluent-kafka's AvroSerializer wrote (two versions of the
subject, and one record that is not Avro) come out as typed columns (the one that is not
Avro as a null value and its value_error), and what the sink
encodes decodes with confluent-kafka's AvroDeserializer.

Skipped without pyspark or Java, except under CI=true (as test_e2e_spark.py).
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Broker

from app.client import Admin, Consumer, Producer, TopicPartition

_CI = os.environ.get("CI", "").lower() == "true"
try:
    import pyspark  # noqa: F401

    _have = shutil.which("java") is not None
except ImportError:
    _have = False
if not _have:
    if _CI:
        pytest.fail("pyspark and Java are required under CI=true", pytrace=False)
    pytest.skip("pyspark or java is missing", allow_module_level=True)

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402
from spark_query import local_session  # noqa: E402

pytestmark = pytest.mark.slow

V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "item", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "ship", "type": ["null", {"type": "record", "name": "Ship", "fields": [
            {"name": "zip", "type": "string"}]}], "default": None},
    ],
}  # fmt: skip
# Version 2: id promoted to long, a field added with a default (BACKWARD compatible).
V2 = {
    **V1,
    "fields": [{"name": "id", "type": "long"} if f["name"] == "id" else f for f in V1["fields"]]
    + [{"name": "channel", "type": "string", "default": "web"}],
}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = local_session("logbus-typed-tests", spark__sql__session__timeZone="UTC")
    yield session
    session.stop()


def _order(i: int, version: int) -> dict[str, Any]:
    value: dict[str, Any] = {
        "id": i,
        "item": f"item-{i}",
        "tags": ["x", str(i)],
        "attrs": {"n": i},
        "note": None if i % 2 else f"note {i}",
        "kind": "A" if i % 2 else "B",
        "day": datetime.date(2026, 1, 1 + i),
        "at": datetime.datetime(2026, 1, 1, 0, 0, i, tzinfo=datetime.UTC),
        "price": decimal.Decimal(f"{i}.25"),
        "ship": {"zip": f"{i:05d}"} if i % 3 == 0 else None,
    }
    if version == 2:
        value["channel"] = "app"
    return value


def test_typed_avro_source_and_sink_speak_confluents_wire_format(
    spark: Any, broker: Broker
) -> None:
    url = broker.url
    registry = SchemaRegistryClient({"url": f"{url}/schema-registry"})
    with Admin(url) as admin:
        admin.create_topic("orders", partitions=1)
        admin.create_topic("orders-copy", partitions=1)
    ctx = SerializationContext("orders", MessageField.VALUE)
    v1 = AvroSerializer(registry, json.dumps(V1))
    sent = [v1(_order(i, 1), ctx) for i in range(3)]
    # The subject's version 2 (what the reader uses: latest), registered after v1 wrote.
    id2 = registry.register_schema("orders-value", Schema(json.dumps(V2), "AVRO"))
    v2 = AvroSerializer(
        registry, json.dumps(V2), conf={"auto.register.schemas": False, "use.latest.version": True}
    )
    sent += [v2(_order(i, 2), ctx) for i in range(3, 5)]
    sent.append(b"not avro at all")
    with Producer(url) as producer:
        for data in sent:
            producer.send("orders", data, partition=0)
        producer.flush()

    df = (
        spark.read.format("logbus")
        .option("logbus.url", url)
        .option("subscribe", "orders")
        .option("valueFormat", "avro")
        .load()
    )
    value_type = dict(df.dtypes)["value"]
    assert value_type.startswith("struct<id:bigint,item:string,tags:array<string>,")
    assert "attrs:map<string,bigint>" in value_type and "kind:string" in value_type
    assert "day:date,at:timestamp,price:decimal(9,2)" in value_type
    assert value_type.endswith("ship:struct<zip:string>,channel:string>")
    rows = df.orderBy("offset").collect()
    assert len(rows) == 6
    for i, row in enumerate(rows[:5]):
        got = row["value"].asDict(recursive=True)
        expected = {**_order(i, 2), "channel": "web" if i < 3 else "app"}
        expected["at"] = expected["at"].replace(tzinfo=None)  # the session's zone is UTC
        assert got == expected, i
        assert row["value_error"] is None
    first_id = int.from_bytes(sent[0][1:5], "big")
    assert [r["value_schema_id"] for r in rows] == [first_id] * 3 + [id2] * 2 + [None]
    assert rows[5]["value"] is None
    assert "magic byte" in rows[5]["value_error"]

    # FAILFAST (the task fails naming the record) is tested on the decoder itself, without
    # a Spark job: tests/integration/spark/test_spark_typed_schema.py.

    # The sink: the typed column back to Avro with the subject's latest schema.
    (
        df.where("value IS NOT NULL")
        .select("value")
        .write.format("logbus")
        .option("logbus.url", url)
        .option("topic", "orders-copy")
        .option("valueFormat", "avro")
        .option("valueSubject", "orders-value")
        .mode("append")
        .save()
    )
    with Consumer(url, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("orders-copy", 0)])
        copied: list[bytes | None] = []
        while len(copied) < 5:
            copied += [m.value for m in consumer.poll(timeout_ms=5000)]
    deserialize = AvroDeserializer(registry)
    decoded = sorted(
        (
            deserialize(data, SerializationContext("orders-copy", MessageField.VALUE))
            for data in copied
        ),
        key=lambda v: v["id"],
    )
    assert all(data is not None and data[1:5] == id2.to_bytes(4, "big") for data in copied)
    for i, value in enumerate(decoded):
        assert value == {**_order(i, 2), "channel": "web" if i < 3 else "app"}
