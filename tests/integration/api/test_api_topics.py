"""Topic admin and metadata through HTTP against a real LogManager."""

from __future__ import annotations

from pathlib import Path

from api_helpers import create_topic, make_settings, produce
from starlette.testclient import TestClient

from app.api import create_app
from app.core.log.config import LogConfig


def test_create_describe_list_delete(client: TestClient) -> None:
    r = client.post(
        "/topics",
        json={
            "name": "orders",
            "partitions": 3,
            "replication_factor": 1,
            "configs": {"retention.ms": 3600000, "cleanup.policy": "compact"},
        },
    )
    assert r.status_code == 201, r.text
    assert r.headers["location"] == "/topics/orders"
    created = r.json()
    assert created["name"] == "orders"

    desc = client.get("/topics/orders").json()
    assert desc == created
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2]
    for p in desc["partitions"]:
        assert p["leader"] == 3
        assert p["replicas"] == [3]
        assert p["isr"] == [3]
        assert p["log_start_offset"] == p["high_watermark"] == p["log_end_offset"] == 0
    # Every effective config, Kafka names, overrides applied.
    assert set(desc["configs"]) == set(LogConfig.kafka_names())
    assert desc["configs"]["retention.ms"] == 3600000
    assert desc["configs"]["cleanup.policy"] == "compact"
    assert desc["configs"]["segment.bytes"] == LogConfig().segment_bytes
    assert set(desc["config_overrides"]) == {"retention.ms", "cleanup.policy"}

    create_topic(client, "audit")
    assert client.get("/topics").json() == {
        "topics": [{"name": "audit", "partitions": 1}, {"name": "orders", "partitions": 3}]
    }

    r = client.delete("/topics/orders")
    assert r.status_code == 204
    assert client.get("/topics/orders").status_code == 404
    assert client.get("/topics").json() == {"topics": [{"name": "audit", "partitions": 1}]}


def test_description_offsets_follow_appends(client: TestClient) -> None:
    create_topic(client, "t", partitions=2)
    produce(client, "t", [{"value": i, "partition": 1} for i in range(5)])
    parts = client.get("/topics/t").json()["partitions"]
    assert (parts[1]["log_start_offset"], parts[1]["high_watermark"]) == (0, 5)
    assert parts[1]["log_end_offset"] == 5
    assert parts[0]["log_end_offset"] == 0


def test_metadata(client: TestClient) -> None:
    create_topic(client, "a", partitions=2)
    body = client.get("/metadata").json()
    assert isinstance(body.pop("cluster_id"), str)
    assert body == {
        "brokers": [{"id": 3, "url": "http://broker-3:8080"}],
        "controller": 3,
        "topics": [
            {
                "name": "a",
                "partitions": [
                    {
                        "partition": 0,
                        "leader": 3,
                        "leader_epoch": 0,
                        "replicas": [3],
                        "isr": [3],
                        "offline_replicas": [],
                    },
                    {
                        "partition": 1,
                        "leader": 3,
                        "leader_epoch": 0,
                        "replicas": [3],
                        "isr": [3],
                        "offline_replicas": [],
                    },
                ],
            }
        ],
    }


def test_partitions_default_to_num_partitions(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, num_partitions=4))) as client:
        r = client.post("/topics", json={"name": "d"})
        assert r.status_code == 201
        assert len(r.json()["partitions"]) == 4


def test_produce_auto_creates_topic(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, num_partitions=3))) as client:
        offsets = produce(client, "fresh", [{"key": "k", "value": 1}])
        assert offsets[0]["offset"] == 0
        assert len(client.get("/topics/fresh").json()["partitions"]) == 3


def test_auto_create_disabled(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, auto_create_topics_enable=False)
    with TestClient(create_app(settings)) as client:
        r = client.post("/topics/nope/records", json={"records": [{"value": 1}]})
        assert r.status_code == 404
        assert r.json()["error_code"] == "UNKNOWN_TOPIC_OR_PARTITION"
        assert client.get("/topics").json() == {"topics": []}


def test_topics_survive_restart(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        create_topic(client, "kept", partitions=2, **{"retention.ms": 1000})
        produce(client, "kept", [{"value": "x", "partition": 1}])
    with TestClient(create_app(settings)) as client:
        desc = client.get("/topics/kept").json()
        assert desc["configs"]["retention.ms"] == 1000
        assert desc["partitions"][1]["log_end_offset"] == 1


def test_metadata_for_named_topics(client: TestClient) -> None:
    create_topic(client, "a", partitions=2)
    create_topic(client, "b")
    body = client.get("/metadata", params={"topics": "b,missing,b"}).json()
    # Only the named topics, once each; a missing one is left out and not created.
    assert [t["name"] for t in body["topics"]] == ["b"]
    assert "missing" not in [t["name"] for t in client.get("/topics").json()["topics"]]


def test_metadata_auto_creates_requested_topics(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, num_partitions=3))) as client:
        create_topic(client, "old", partitions=1)
        r = client.get(
            "/metadata", params={"topics": "old,new1,new2", "allow_auto_topic_creation": "true"}
        )
        assert r.status_code == 200, r.text
        counts = {t["name"]: len(t["partitions"]) for t in r.json()["topics"]}
        assert counts == {"old": 1, "new1": 3, "new2": 3}
        assert client.get("/topics/new1").status_code == 200
        # Asking again is the same answer, nothing recreated.
        again = client.get(
            "/metadata", params={"topics": "new1", "allow_auto_topic_creation": "true"}
        )
        assert [len(t["partitions"]) for t in again.json()["topics"]] == [3]


def test_metadata_auto_create_rejects_bad_names_before_creating(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as client:
        r = client.get(
            "/metadata", params={"topics": "good,bad name", "allow_auto_topic_creation": "true"}
        )
        assert r.status_code == 400
        assert r.json()["error_code"] == "INVALID_TOPIC_EXCEPTION"
        assert client.get("/topics").json() == {"topics": []}


def test_metadata_auto_create_off_by_setting(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, auto_create_topics_enable=False)
    with TestClient(create_app(settings)) as client:
        r = client.get("/metadata", params={"topics": "x", "allow_auto_topic_creation": "true"})
        assert r.status_code == 200
        assert r.json()["topics"] == []
        assert client.get("/topics").json() == {"topics": []}


def test_partition_limits_refuse_a_create_before_anything_is_written(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, max_partitions=60, max_partitions_per_topic=40)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        create_topic(client, "keep", partitions=30)
        for body, setting in [
            ({"name": "bomb", "partitions": 7000}, "max_partitions_per_topic"),
            ({"name": "bomb", "partitions": 31}, "max_partitions"),
        ]:
            r = client.post("/topics", json=body)
            assert r.status_code == 400, r.text
            assert r.json()["error_code"] == "INVALID_PARTITIONS"
            assert r.json()["setting"] == setting
        assert not (settings.data_dir / "topics" / "bomb.json").exists()
        assert not list(settings.data_dir.glob("bomb-*"))
        assert "bomb" not in {t["name"] for t in client.get("/topics").json()["topics"]}
        create_topic(client, "fits", partitions=30)  # 30 + 30: exactly max_partitions


def test_grow_alter_configs_and_delete_records(client: TestClient) -> None:
    """The Kafka door's CreatePartitions, AlterConfigs and DeleteRecords over HTTP (the same
    Topology methods; the cluster's are in tests/e2e/test_e2e_cluster_admin.py)."""
    create_topic(client, "grown", 2, **{"retention.ms": 5000})
    r = client.post("/topics/grown/partitions", json={"count": 4, "validate_only": True})
    assert r.status_code == 200 and len(r.json()["partitions"]) == 2, r.text
    r = client.post("/topics/grown/partitions", json={"count": 4})
    assert r.status_code == 200 and len(r.json()["partitions"]) == 4, r.text
    r = client.post("/topics/grown/partitions", json={"count": 3})
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_PARTITIONS")
    r = client.post("/topics/__consumer_offsets/partitions", json={"count": 99})
    assert r.status_code == 400 and r.json()["error_code"] in (
        "INVALID_TOPIC_EXCEPTION",
        "UNKNOWN_TOPIC_OR_PARTITION",
    )

    # Configs: the overrides become exactly those given (retention.ms back to default).
    r = client.put("/topics/grown/configs", json={"configs": {"min.insync.replicas": 1}})
    assert r.status_code == 200, r.text
    assert r.json()["config_overrides"] == {"min.insync.replicas": 1}
    assert r.json()["configs"]["retention.ms"] == LogConfig().retention_ms
    r = client.put("/topics/grown/configs", json={"configs": {"retention.ms": "soon"}})
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_CONFIG")
    r = client.put("/topics/nope/configs", json={"configs": {}})
    assert r.status_code == 404

    # DeleteRecords: the start moves; below it is out of range, above the HW refused.
    r = client.post(
        "/topics/grown/partitions/3/records",
        json={"records": [{"value": str(i)} for i in range(10)]},
    )
    assert r.status_code == 200, r.text
    r = client.delete("/topics/grown/partitions/3/records", params={"before": 6})
    assert (r.status_code, r.json()) == (200, {"low_watermark": 6}), r.text
    assert client.get("/topics/grown").json()["partitions"][3]["log_start_offset"] == 6
    gone = client.get("/topics/grown/partitions/3/records", params={"offset": 2})
    assert gone.status_code == 416
    r = client.delete("/topics/grown/partitions/3/records", params={"before": 11})
    assert (r.status_code, r.json()["error_code"]) == (416, "OFFSET_OUT_OF_RANGE")
    r = client.delete("/topics/grown/partitions/3/records", params={"before": -1})
    assert r.json() == {"low_watermark": 10}
    r = client.delete("/topics/__consumer_offsets/partitions/0/records", params={"before": -1})
    assert r.status_code in (400, 404)
