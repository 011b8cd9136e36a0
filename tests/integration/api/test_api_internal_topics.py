"""Clients cannot write or delete the broker's internal topics: __consumer_offsets (only the
group coordinator writes it) and _schemas (only the schema registry)."""

from __future__ import annotations

from api_helpers import end_offsets
from starlette.testclient import TestClient

from app.common.batch import build_batch

OFFSETS = "__consumer_offsets"


def _make_offsets_topic(client: TestClient) -> None:
    r = client.post(
        "/groups/g/heartbeat", json={"member_id": "", "member_epoch": 0, "subscribed_topics": ["t"]}
    )
    assert r.status_code == 200, r.text


def test_clients_cannot_produce_to_or_delete_the_offsets_topic(client: TestClient) -> None:
    _make_offsets_topic(client)
    before = end_offsets(client, OFFSETS)
    attempts = [
        client.post(f"/topics/{OFFSETS}/records", json={"records": [{"value": 1}]}),
        client.post(f"/topics/{OFFSETS}/partitions/0/records", json={"records": [{"value": 1}]}),
        client.post(
            f"/topics/{OFFSETS}/partitions/0/batches",
            content=build_batch([(b"k", b"v")]),
            headers={"content-type": "application/octet-stream"},
        ),
        client.delete(f"/topics/{OFFSETS}"),
    ]
    for r in attempts:
        assert r.status_code == 400, r.text
        assert r.json()["error_code"] == "INVALID_TOPIC_EXCEPTION"
        assert "internal" in r.json()["message"]
    assert end_offsets(client, OFFSETS) == before
    # Reading it stays allowed, as in Kafka.
    assert client.get(f"/topics/{OFFSETS}").status_code == 200


def test_clients_cannot_produce_to_or_delete_the_schemas_topic(client: TestClient) -> None:
    """A forged record in _schemas would be applied as a registered schema by every
    broker's registry: only the registry writes it."""
    r = client.post(
        "/schema-registry/subjects/s-value/versions",
        json={"schema": '{"type": "string"}'},
        headers={"content-type": "application/vnd.schemaregistry.v1+json"},
    )
    assert r.status_code == 200, r.text
    before = end_offsets(client, "_schemas")
    forged = b'{"subject":"s-value","version":2,"id":7,"schema":"\\"int\\"","deleted":false}'
    attempts = [
        client.post("/topics/_schemas/records", json={"records": [{"value": 1}]}),
        client.post(
            "/topics/_schemas/partitions/0/batches",
            content=build_batch(
                [(b'{"keytype":"SCHEMA","subject":"s-value","version":2}', forged)]
            ),
            headers={"content-type": "application/octet-stream"},
        ),
        client.delete("/topics/_schemas"),
    ]
    for r in attempts:
        assert r.status_code == 400, r.text
        assert r.json()["error_code"] == "INVALID_TOPIC_EXCEPTION"
    assert end_offsets(client, "_schemas") == before
    versions = client.get("/schema-registry/subjects/s-value/versions")
    assert versions.json() == [1]
