"""Clients cannot write or delete __consumer_offsets: only the group coordinator does."""

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
