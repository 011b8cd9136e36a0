"""Topic ids through the Kafka door (KIP-516), spoken with kio: Metadata v10+ answers each
topic's id (the one ``partition.metadata`` keeps on disk; stable across a restart:
tests/unit/core/test_topic_ids.py), v12 looks topics up by id, v10/v11 refuse ids, and
DeleteTopics v6 deletes by id. (The same id on every broker of a cluster:
tests/e2e/test_e2e_cluster_kafka.py.)
"""

from __future__ import annotations

import datetime
import uuid
from base64 import urlsafe_b64decode

import httpx
from kafka_harness import KafkaBroker, kio_call
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.delete_topics.v6.response import DeleteTopicsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v10.request import MetadataRequest as MetadataRequestV10
from kio.schema.metadata.v10.request import MetadataRequestTopic as MetadataRequestTopicV10
from kio.schema.metadata.v10.response import MetadataResponse as MetadataResponseV10
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse


def make_topic(broker: KafkaBroker, partitions: int = 2) -> str:
    topic = f"ids-{uuid.uuid4().hex[:8]}"
    r = httpx.post(f"{broker.url}/topics", json={"name": topic, "partitions": partitions})
    assert r.status_code == 201, r.text
    return topic


def disk_topic_id(broker: KafkaBroker, topic: str) -> uuid.UUID:
    """The id the broker keeps in partition 0's ``partition.metadata`` (Kafka's file:
    ``topic_id: <unpadded URL-safe base64>``)."""
    data_dir = broker.log_path.with_name(broker.log_path.stem.replace("broker", "data"))
    lines = (data_dir / f"{topic}-0" / "partition.metadata").read_text().splitlines()
    text = next(line.split(": ", 1)[1] for line in lines if line.startswith("topic_id: "))
    return uuid.UUID(bytes=urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def metadata(broker: KafkaBroker, *topics: tuple[str | None, uuid.UUID | None]) -> MetadataResponse:
    request = MetadataRequest(
        topics=tuple(
            MetadataRequestTopic(topic_id=tid, name=name)  # type: ignore[arg-type]
            for name, tid in topics
        ),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    response: MetadataResponse = kio_call(broker, request, MetadataResponse)
    return response


def test_metadata_answers_each_topics_id_and_looks_topics_up_by_id(
    kafka_broker: KafkaBroker,
) -> None:
    topic = make_topic(kafka_broker)
    topic_id = disk_topic_id(kafka_broker, topic)
    assert topic_id != uuid.UUID(int=0)

    (by_name,) = metadata(kafka_broker, (topic, None)).topics
    assert (by_name.error_code, by_name.name, by_name.topic_id) == (ErrorCode.none, topic, topic_id)

    # By id alone: the name, the id and the partitions, as by name.
    (by_id,) = metadata(kafka_broker, (None, topic_id)).topics
    assert (by_id.error_code, by_id.name, by_id.topic_id) == (ErrorCode.none, topic, topic_id)
    assert [p.partition_index for p in by_id.partitions] == [0, 1]
    assert by_id.partitions == by_name.partitions

    # An unknown id: UNKNOWN_TOPIC_ID, no name, nothing created.
    unknown = uuid.uuid4()
    (missing,) = metadata(kafka_broker, (None, unknown)).topics
    assert (missing.error_code, missing.name, missing.topic_id) == (
        ErrorCode.unknown_topic_id,
        None,
        unknown,
    )
    # An unknown name answers the zero id (kio reads it as None).
    (no_topic,) = metadata(kafka_broker, (f"nope-{uuid.uuid4().hex[:6]}", None)).topics
    assert (no_topic.error_code, no_topic.topic_id) == (ErrorCode.unknown_topic_or_partition, None)

    # Listing all topics carries ids too.
    listed = kio_call(
        kafka_broker,
        MetadataRequest(
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
        MetadataResponse,
    )
    assert {t.name: t.topic_id for t in listed.topics}[topic] == topic_id


def test_metadata_v10_refuses_ids_but_answers_them(kafka_broker: KafkaBroker) -> None:
    topic = make_topic(kafka_broker, partitions=1)
    topic_id = disk_topic_id(kafka_broker, topic)

    def v10(topic_id_asked: uuid.UUID | None) -> MetadataResponseV10:
        request = MetadataRequestV10(
            topics=(MetadataRequestTopicV10(topic_id=topic_id_asked, name=topic),),  # type: ignore[arg-type]
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        response: MetadataResponseV10 = kio_call(kafka_broker, request, MetadataResponseV10)
        return response

    (named,) = v10(None).topics
    assert (named.error_code, named.topic_id) == (ErrorCode.none, topic_id)
    # Kafka never served ids before v12: a v10 request using one is INVALID_REQUEST.
    (refused,) = v10(topic_id).topics
    assert (refused.error_code, refused.partitions) == (ErrorCode.invalid_request, ())


def delete_by_id(broker: KafkaBroker, *ids: uuid.UUID) -> DeleteTopicsResponse:
    request = DeleteTopicsRequest(
        topics=tuple(DeleteTopicState(name=None, topic_id=i) for i in ids),
        timeout=datetime.timedelta(seconds=30),  # type: ignore[arg-type]
    )
    response: DeleteTopicsResponse = kio_call(broker, request, DeleteTopicsResponse)
    return response


def test_delete_topics_v6_by_id(kafka_broker: KafkaBroker) -> None:
    topic = make_topic(kafka_broker, partitions=1)
    topic_id = disk_topic_id(kafka_broker, topic)
    unknown = uuid.uuid4()
    answer = delete_by_id(kafka_broker, topic_id, unknown)
    assert [(r.name, r.topic_id, r.error_code) for r in answer.responses] == [
        (topic, topic_id, ErrorCode.none),
        (None, unknown, ErrorCode.unknown_topic_id),
    ]
    assert httpx.get(f"{kafka_broker.url}/topics/{topic}", timeout=30).status_code == 404
    # Gone: its id names nothing any more.
    (again,) = delete_by_id(kafka_broker, topic_id).responses
    assert (again.name, again.error_code) == (None, ErrorCode.unknown_topic_id)

    # A topic deleted and created again under its name has a new id; the old one is unknown.
    r = httpx.post(f"{kafka_broker.url}/topics", json={"name": topic, "partitions": 1})
    assert r.status_code == 201, r.text
    new_id = disk_topic_id(kafka_broker, topic)
    assert new_id != topic_id
    (old,) = metadata(kafka_broker, (None, topic_id)).topics
    assert old.error_code == ErrorCode.unknown_topic_id
    (new,) = metadata(kafka_broker, (None, new_id)).topics
    assert (new.name, new.error_code) == (topic, ErrorCode.none)
