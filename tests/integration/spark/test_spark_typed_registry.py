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
