"""The typed Spark source's registry reads (app.spark.schemas.Registry, through the SDK's
SchemaRegistryClient) and typed keys (keyFormat), against a real broker's registry; no
Spark session needed (the end-to-end Spark job is tests/e2e/test_e2e_spark_typed.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from live_broker import LiveBroker, live_broker

from app.spark.schemas import Registry, _shared

ADDRESS = json.dumps(
    {"type": "record", "name": "Address", "namespace": "shop",
     "fields": [{"name": "city", "type": "string"}]}
)  # fmt: skip
CUSTOMER = json.dumps(
    {"type": "record", "name": "Customer", "namespace": "shop",
     "fields": [{"name": "id", "type": "long"}, {"name": "home", "type": "shop.Address"}]}
)  # fmt: skip


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveBroker]:
    with live_broker(tmp_path_factory.mktemp("spark-typed-registry")) as b:
        yield b


def register(broker: LiveBroker, subject: str, schema: str, **body: object) -> int:
    r = httpx.post(
        f"{broker.url}/schema-registry/subjects/{subject}/versions",
        json={"schema": schema, **body},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    schema_id: int = r.json()["id"]
    return schema_id


def test_the_registry_is_the_sdk_client_shared_per_process(broker: LiveBroker) -> None:
    url = f"{broker.url}/schema-registry"
    register(broker, "address", ADDRESS)
    refs = [{"name": "shop.Address", "subject": "address", "version": 1}]
    customer_id = register(broker, "customers-value", CUSTOMER, references=refs)
    got = Registry(url).version("customers-value")
    assert (got.schema_id, got.version, got.subject) == (customer_id, 1, "customers-value")
    assert [(r.name, r.subject, r.version) for r in got.references] == [
        ("shop.Address", "address", 1)
    ]
    assert Registry(url).version("customers-value", "1") == got
    assert Registry(url).by_id(customer_id).schema == got.schema
    # Parsed once per process: a second task's Registry gets the same object, through
    # the same SDK client (its by-id cache answers without asking the registry again).
    first = Registry(url).parsed(customer_id)
    assert Registry(url + "/").parsed(customer_id) is first
    client = _shared(url).client
    assert customer_id in client._by_id
    with pytest.raises(LookupError, match="40401"):
        Registry(url).version("no-such-subject")
    with pytest.raises(LookupError, match="40403"):
        Registry(url).parsed(99_999)
    with pytest.raises(LookupError, match="cannot reach"):
        Registry("http://127.0.0.1:9/schema-registry").by_id(1)


KEY = json.dumps({"type": "record", "name": "OrderKey", "fields": [{"name": "id", "type": "long"}]})
VALUE = json.dumps(
    {"type": "record", "name": "Order", "fields": [{"name": "item", "type": "string"}]}
)


def test_typed_keys_through_the_sink_and_the_source(broker: LiveBroker) -> None:
    """keyFormat (with keySubject's default <topic>-key) beside valueFormat: the sink
    encodes both struct columns in Confluent's wire format with their subjects' ids; the
    source decodes both, with key_schema_id and key_error after the value's columns; a key
    that is not framed is a null key and its reason, the value still decoded."""
    import pyarrow as pa
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    from app.spark.options import OptionError
    from app.spark.source import LogbusDataSource, LogbusReader, LogbusWriter

    topic = "typed-keys"
    broker.create_topic(topic)
    key_id = register(broker, f"{topic}-key", KEY)
    value_id = register(broker, f"{topic}-value", VALUE)
    options = {"logbus.url": broker.url, "keyFormat": "avro", "valueFormat": "avro"}
    key_t = T.StructType([T.StructField("id", T.LongType(), True)])
    value_t = T.StructType([T.StructField("item", T.StringType(), True)])
    sink_schema = T.StructType(
        [T.StructField("key", key_t, True), T.StructField("value", value_t, True)]
    )
    batch = pa.RecordBatch.from_pylist(
        [{"key": {"id": 1}, "value": {"item": "tea"}}, {"key": {"id": 2}, "value": None}],
        schema=to_arrow_schema(sink_schema),
    )
    LogbusWriter({**options, "topic": topic}, sink_schema).write(iter([batch]))
    # The raw bytes: framed with each subject's id.
    raw = httpx.get(
        f"{broker.url}/topics/{topic}/partitions/0/records",
        params={"offset": 0, "key_format": "avro", "value_format": "avro"},
        timeout=30,
    ).json()["records"]
    assert [(r["key"], r["value"]) for r in raw] == [
        ({"id": 1}, {"item": "tea"}),
        ({"id": 2}, None),
    ]
    broker.produce(topic, [{"key": "plain", "value": {"item": "x"}}])  # not typed: refused below
    source_options = {**options, "subscribe": topic}
    schema = LogbusDataSource(source_options).schema()
    assert isinstance(schema, T.StructType)
    assert schema["key"].dataType == key_t and schema["value"].dataType == value_t
    assert schema.fieldNames()[-4:] == [
        "value_schema_id",
        "value_error",
        "key_schema_id",
        "key_error",
    ]
    reader = LogbusReader(source_options, schema)
    rows = [
        row for part in reader.partitions() for got in reader.read(part) for row in got.to_pylist()
    ]
    assert [(r["key"], r["key_schema_id"], r["value"], r["value_schema_id"]) for r in rows[:2]] == [
        ({"id": 1}, key_id, {"item": "tea"}, value_id),
        ({"id": 2}, key_id, None, None),
    ]
    assert rows[2]["key"] is None and "magic byte" in rows[2]["key_error"]
    assert rows[2]["value"] is None  # the HTTP JSON value is not framed either
    # keyFormat on the sink needs a key column; an unknown key subject is refused at planning.
    with pytest.raises(OptionError, match="'key' column"):
        LogbusWriter({**options, "topic": topic}, T.StructType([T.StructField("value", value_t)]))
    with pytest.raises(OptionError, match=r"keyFormat avro.*40401"):
        LogbusDataSource({**options, "subscribe": "no-such-topic"}).schema()


TWO_MESSAGES = (
    'syntax = "proto3";\npackage ex;\n'
    "message Reading { string sensor = 1; double celsius = 2; }\n"
    "message Alarm { string sensor = 1; int32 level = 2; }\n"
)


def test_value_message_picks_a_protobuf_message(broker: LiveBroker) -> None:
    """valueMessage: the column is that message of the file (not the first), the sink
    writes its message indexes ([1]) and the source reads them back."""
    import pyarrow as pa
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    from app.spark.options import OptionError
    from app.spark.source import LogbusDataSource, LogbusReader, LogbusWriter

    topic = "alarms"
    broker.create_topic(topic)
    register(broker, f"{topic}-value", TWO_MESSAGES, schemaType="PROTOBUF")
    options = {"logbus.url": broker.url, "valueFormat": "protobuf", "valueMessage": "Alarm"}
    source_options = {**options, "subscribe": topic}
    schema = LogbusDataSource(source_options).schema()
    assert isinstance(schema, T.StructType)
    alarm = T.StructType(
        [
            T.StructField("sensor", T.StringType(), True),
            T.StructField("level", T.IntegerType(), True),
        ]
    )
    assert schema["value"].dataType == alarm
    sink_schema = T.StructType([T.StructField("value", alarm, True)])
    batch = pa.RecordBatch.from_pylist(
        [{"value": {"sensor": "s1", "level": 2}}], schema=to_arrow_schema(sink_schema)
    )
    LogbusWriter({**options, "topic": topic}, sink_schema).write(iter([batch]))
    raw = httpx.get(
        f"{broker.url}/topics/{topic}/partitions/0/records",
        params={"offset": 0, "value_format": "binary"},
        timeout=30,
    ).json()["records"]
    import base64

    assert base64.b64decode(raw[0]["value"])[5:7] == b"\x02\x02"  # message indexes [1]
    reader = LogbusReader(source_options, schema)
    rows = [
        row for part in reader.partitions() for got in reader.read(part) for row in got.to_pylist()
    ]
    assert rows[0]["value"] == {"sensor": "s1", "level": 2} and rows[0]["value_error"] is None
    with pytest.raises(OptionError, match="not defined"):
        LogbusDataSource({**source_options, "valueMessage": "ex.Nope"}).schema()
    with pytest.raises(OptionError, match="goes with valueFormat protobuf"):
        LogbusDataSource({**source_options, "valueFormat": "avro"}).schema()
