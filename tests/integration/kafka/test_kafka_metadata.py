"""Metadata through the Kafka door, spoken with kio directly: partitions with leader,
leader epoch, replicas and ISR, and auto-creation as Kafka decides it (the broker's
auto.create.topics.enable and the request's allow_auto_topic_creation)."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
from kafka_harness import KafkaBroker, kio_call, start_broker, stop_broker
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse


def metadata(broker: KafkaBroker, topic: str, allow_create: bool) -> MetadataResponse:
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=topic),),  # type: ignore[arg-type]
        allow_auto_topic_creation=allow_create,
        include_topic_authorized_operations=False,
    )
    response: MetadataResponse = kio_call(broker, request, MetadataResponse)
    return response


def test_metadata_creates_only_when_the_request_allows_it(kafka_broker: KafkaBroker) -> None:
    topic = f"meta-{uuid.uuid4().hex[:8]}"
    refused = metadata(kafka_broker, topic, allow_create=False)
    assert [(t.name, t.error_code) for t in refused.topics] == [
        (topic, ErrorCode.unknown_topic_or_partition)
    ]
    assert httpx.get(f"{kafka_broker.url}/topics/{topic}", timeout=30).status_code == 404

    created = metadata(kafka_broker, topic, allow_create=True)
    (answer,) = created.topics
    assert answer.error_code == ErrorCode.none
    assert [
        (p.partition_index, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes)
        for p in answer.partitions
    ] == [(0, 0, 0, (0,), (0,))]
    assert [(b.node_id, b.host, b.port) for b in created.brokers] == [
        (0, "127.0.0.1", kafka_broker.kafka_port)
    ]
    assert httpx.get(f"{kafka_broker.url}/topics/{topic}", timeout=30).status_code == 200


def test_a_broker_without_auto_create_never_creates(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, ("LOGBUS_AUTO_CREATE_TOPICS_ENABLE", "false"))
    try:
        (answer,) = metadata(broker, "never-made", allow_create=True).topics
        assert answer.error_code == ErrorCode.unknown_topic_or_partition
        assert httpx.get(f"{broker.url}/topics/never-made", timeout=30).status_code == 404
    finally:
        stop_broker(broker)


def test_without_an_authorizer_every_operation_of_a_topic_is_authorized(
    kafka_broker: KafkaBroker,
) -> None:
    """Kafka's AuthHelper.authorizedOperations without an authorizer: every operation the
    resource type supports (Kafka's AclEntry.supportedOperations for a topic)."""
    topic = f"meta-{uuid.uuid4().hex[:8]}"
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=topic),),  # type: ignore[arg-type]
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=True,
    )
    (answer,) = kio_call(kafka_broker, request, MetadataResponse).topics
    assert answer.error_code == ErrorCode.none
    # READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, DESCRIBE_CONFIGS 10,
    # ALTER_CONFIGS 11: Kafka's AclOperation codes as bits.
    assert answer.topic_authorized_operations == sum(1 << c for c in (3, 4, 5, 6, 7, 8, 10, 11))
