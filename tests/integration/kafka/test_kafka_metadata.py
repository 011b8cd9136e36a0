"""Metadata through the Kafka door, spoken with kio directly: partitions with leader,
leader epoch, replicas and ISR, and auto-creation as Kafka decides it (the broker's
auto.create.topics.enable and the request's allow_auto_topic_creation)."""

from __future__ import annotations

import io
import socket
import struct
import uuid
from pathlib import Path

import httpx
from conftest import KafkaBroker, start_broker, stop_broker
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32


def metadata(broker: KafkaBroker, topic: str, allow_create: bool) -> MetadataResponse:
    out = io.BytesIO()
    entity_writer(RequestHeader)(
        out,
        RequestHeader(
            request_api_key=i16(3),
            request_api_version=i16(12),
            correlation_id=i32(9),
            client_id="t",
        ),
    )
    entity_writer(MetadataRequest)(
        out,
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=topic),),  # type: ignore[arg-type]
            allow_auto_topic_creation=allow_create,
            include_topic_authorized_operations=False,
        ),
    )
    payload = out.getvalue()
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=30) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(65536)
            assert chunk
            data += chunk
    header, size = entity_reader(ResponseHeader)(data, 4)
    assert header.correlation_id == 9
    response, _ = entity_reader(MetadataResponse)(data, 4 + size)
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
