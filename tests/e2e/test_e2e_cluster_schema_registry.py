"""The schema registry in a cluster (a real ZooKeeper, three broker processes):
registrations through a follower are forwarded to the ``_schemas`` leader, every broker
answers them at once (a read that misses at a follower asks the leader), and killing the
leader loses no schema and changes no id; the next id is fresh. ``_schemas`` has two
replicas of three brokers, so the third has none: broker-side schema validation on a
topic it leads asks the ``_schemas`` leader for the subject's ids.

Through confluent-kafka's ``SchemaRegistryClient``, a new client per read (no cache).
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from cluster import Cluster
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from conftest import ClusterFactory

from app.common.batch import build_batch

pytestmark = pytest.mark.timeout(240)


def avro(i: int) -> Schema:
    fields = [{"name": f"f{j}", "type": "string", "default": ""} for j in range(i + 1)]
    return Schema(json.dumps({"type": "record", "name": "R", "fields": fields}), "AVRO")


def sr(cluster: Cluster, broker_id: int) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": cluster.url(broker_id) + "/schema-registry"})


def retried(call: Any, timeout: float = 60) -> Any:
    """A registry call, retried while ``_schemas`` has no leader (50001, retriable)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except SchemaRegistryError as exc:
            if exc.http_status_code < 500 or time.monotonic() > deadline:
                raise
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


@pytest.mark.slow
def test_registry_reads_and_writes_through_any_broker_and_survive_the_leader(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(size=3, env={"LOGBUS_SCHEMA_REGISTRY_TOPIC_REPLICATION_FACTOR": "2"})
    # The first registration, through broker 1, creates _schemas (2 replicas).
    first = retried(lambda: sr(cluster, 1).register_schema("a-value", avro(0)))
    leader = cluster.wait_until(
        lambda: (lid := cluster.leader("_schemas")) > 0 and lid, message="_schemas leader"
    )
    follower = next(b for b in cluster.ids if b != leader)
    ids = {("a-value", 1): first}
    # Registrations through a follower: forwarded to the leader, readable everywhere at once.
    for i, subject in enumerate(("b-value", "c-value", "b-value")):
        schema_id = sr(cluster, follower).register_schema(subject, avro(i + 1))
        version = sr(cluster, follower).lookup_schema(subject, avro(i + 1)).version
        ids[(subject, version)] = schema_id
        for broker in cluster.ids:
            client = sr(cluster, broker)
            assert client.get_version(subject, version).schema_id == schema_id, broker
            assert json.loads(client.get_schema(schema_id).schema_str) == json.loads(
                avro(i + 1).schema_str
            )
            assert client.get_latest_version(subject).version == version, broker
    assert len(set(ids.values())) == len(ids)
    outside = next(b for b in cluster.ids if b not in cluster.partition("_schemas")["replicas"])
    validation_on_a_broker_without_schemas(cluster, outside, ids[("b-value", 1)])
    # The leader dies: no schema lost, no id changed, the next id fresh.
    cluster.kill(leader)
    survivors = [b for b in cluster.ids if b != leader]
    cluster.wait_until(
        lambda: cluster.leader("_schemas") in survivors, message="a new _schemas leader"
    )
    for broker in survivors:
        for (subject, version), schema_id in ids.items():
            got = retried(lambda b=broker, s=subject, v=version: sr(cluster, b).get_version(s, v))
            assert got.schema_id == schema_id, (broker, subject, version)
    fresh = retried(lambda: sr(cluster, survivors[0]).register_schema("d-value", avro(9)))
    assert fresh == max(ids.values()) + 1
    assert sr(cluster, survivors[1]).get_latest_version("d-value").schema_id == fresh


def validation_on_a_broker_without_schemas(cluster: Cluster, broker: int, other_id: int) -> None:
    """A validating topic's partition led by ``broker`` (no ``_schemas`` replica): a
    registered id passes, at once after its registration; an id of another subject and an
    unframed value are INVALID_RECORD (before: BROKER_NOT_AVAILABLE for all three)."""
    topic = "checked"
    with cluster.client(broker) as http:
        created = http.post(
            "/topics",
            json={
                "name": topic,
                "partitions": 3,
                "replication_factor": 1,
                "configs": {"confluent.value.schema.validation": True},
            },
        )
        assert created.status_code == 201, created.text
    (partition,) = cluster.wait_until(  # a tuple: partition 0 is falsy
        lambda: next(
            ((p,) for p in range(3) if cluster.partition(topic, p)["leader"] == broker), None
        ),
        message=f"a partition of {topic} led by broker {broker}",
    )
    schema_id = sr(cluster, 1).register_schema(f"{topic}-value", avro(0))

    def produce(value: bytes) -> httpx.Response:
        with cluster.client(broker) as http:
            return http.post(
                f"/topics/{topic}/partitions/{partition}/batches",
                content=build_batch([(None, value)]),
                headers={"Content-Type": "application/octet-stream"},
            )

    framed = b"\x00" + schema_id.to_bytes(4, "big") + b"\x00"
    assert produce(framed).status_code == 200, produce(framed).text
    for value in (b"\x00" + other_id.to_bytes(4, "big") + b"\x00", b"plain"):
        refused = produce(value)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error_code"] == "INVALID_RECORD", refused.text
