"""Offline replicas in every broker's metadata: a live broker that cannot create its
replicas of a topic reports them in ZooKeeper, and the other brokers' answers (the Kafka
door's Metadata, HTTP ``GET /topics/{t}`` and ``GET /metadata``) list them offline, as
Kafka's Metadata lists every offline replica of a partition, whichever broker it is on."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from conftest import ClusterFactory
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from test_e2e_cluster_kafka import kio_call

pytestmark = pytest.mark.timeout(240)

TOPIC = "wide"
PARTITIONS = 6


@pytest.mark.slow
def test_every_broker_lists_another_brokers_offline_replicas(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(2, start=False, kafka=True)
    small = cluster.brokers[2]
    # Broker 2 cannot hold the topic's 6 replicas: it reports them offline and lives on.
    small.env = {**small.env, "LOGBUS_MAX_PARTITIONS": "4"}
    cluster.start()
    created = httpx.post(
        f"{cluster.url(1)}/topics",
        json={"name": TOPIC, "partitions": PARTITIONS, "replication_factor": 2},
        timeout=60,
    )
    assert created.status_code == 201, created.text
    cluster.wait_until(
        lambda: "cannot host its replicas" in small.log() or None, message="broker 2 refuses"
    )
    assert 2 in {b["id"] for b in httpx.get(f"{cluster.url(1)}/metadata").json()["brokers"]}

    def http_topic(broker: int) -> list[list[int]] | None:
        body = httpx.get(f"{cluster.url(broker)}/topics/{TOPIC}").json()
        offline = [p["offline_replicas"] for p in body["partitions"]]
        return offline if offline == [[2]] * PARTITIONS else None

    def http_metadata(broker: int) -> list[list[int]] | None:
        body = httpx.get(f"{cluster.url(broker)}/metadata", params={"topics": TOPIC}).json()
        (topic,) = body["topics"]
        offline = [p["offline_replicas"] for p in topic["partitions"]]
        return offline if offline == [[2]] * PARTITIONS else None

    def kafka_metadata(broker: int) -> list[tuple[int, ...]] | None:
        request = MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),),  # type: ignore[arg-type]
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        (answer,) = kio_call(cluster, broker, request, MetadataResponse).topics
        offline = [tuple(p.offline_replicas) for p in answer.partitions]
        return offline if offline == [(2,)] * PARTITIONS else None

    for broker in (1, 2):  # broker 1 from the reports' watch; broker 2 its own
        for name, answer in (
            ("GET /topics/{t}", http_topic),
            ("GET /metadata", http_metadata),
            ("Kafka Metadata", kafka_metadata),
        ):

            def listed(answer: Any = answer, broker: int = broker) -> Any:
                return answer(broker)

            cluster.wait_until(listed, message=f"broker {broker}'s {name} lists 2 offline")
    # Broker 1 leads every partition, broker 2 stays out of the ISR.
    for p in httpx.get(f"{cluster.url(1)}/topics/{TOPIC}").json()["partitions"]:
        assert (p["leader"], p["isr"]) == (1, [1])
