"""Topic ids through the Kafka door (KIP-516), spoken with kio: Metadata v10+ answers each
topic's id (the one ``partition.metadata`` keeps on disk; stable across a restart:
tests/unit/core/test_topic_ids.py), v12 looks topics up by id, v10/v11 refuse ids, and
DeleteTopics v6 deletes by id. (The same id on every broker of a cluster:
tests/e2e/test_e2e_cluster_kafka.py.)

Fetch v13+ names topics by id: records of a topic named by its id, UNKNOWN_TOPIC_ID for an
id that names nothing (or no longer the topic it named when it joined a session), fetch
sessions keyed by id with forgotten topics named by id, and FETCH_SESSION_TOPIC_ID_ERROR
for a request that mixes a session made with ids and one without. librdkafka's consumers
fetch with v13+ (test_kafka_consumer_protocol.py checks the version it sent).
"""

from __future__ import annotations

import datetime
import uuid
from base64 import urlsafe_b64decode
from typing import Any

import httpx
from kafka_harness import KafkaBroker, kio_call
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.delete_topics.v6.response import DeleteTopicsResponse
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchRequest as FetchRequestV12
from kio.schema.fetch.v12.response import FetchResponse as FetchResponseV12
from kio.schema.fetch.v16.request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from kio.schema.fetch.v16.response import FetchResponse
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


# -- Fetch v13+ --------------------------------------------------------------------------


def _topic(broker: KafkaBroker, partitions: int) -> tuple[str, uuid.UUID]:
    name = f"fid-{uuid.uuid4().hex[:8]}"
    r = httpx.post(f"{broker.url}/topics", json={"name": name, "partitions": partitions})
    assert r.status_code == 201, r.text
    return name, _id_of(broker, name)


def _id_of(broker: KafkaBroker, name: str) -> uuid.UUID:
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=name),),  # type: ignore[arg-type]
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    (answer,) = kio_call(broker, request, MetadataResponse).topics
    assert answer.error_code == ErrorCode.none and answer.topic_id is not None
    return uuid.UUID(str(answer.topic_id))


def _produce(broker: KafkaBroker, topic: str, partition: int, n: int) -> None:
    r = httpx.post(
        f"{broker.url}/topics/{topic}/partitions/{partition}/records",
        json={"records": [{"value": "v"}] * n, "value_format": "string"},
        timeout=30,
    )
    assert r.status_code == 200, r.text


def _fetch(
    broker: KafkaBroker,
    topics: dict[uuid.UUID, dict[int, int]],
    session_id: int = 0,
    epoch: int = -1,
    forgotten: dict[uuid.UUID, tuple[int, ...]] | None = None,
) -> FetchResponse:
    request = FetchRequest(
        max_wait=datetime.timedelta(0),  # type: ignore[arg-type]
        min_bytes=1,  # type: ignore[arg-type]
        max_bytes=1 << 20,  # type: ignore[arg-type]
        session_id=session_id,  # type: ignore[arg-type]
        session_epoch=epoch,  # type: ignore[arg-type]
        topics=tuple(
            FetchTopic(
                topic_id=topic_id,
                partitions=tuple(
                    FetchPartition(
                        partition=p,  # type: ignore[arg-type]
                        fetch_offset=offset,  # type: ignore[arg-type]
                        partition_max_bytes=1 << 20,  # type: ignore[arg-type]
                    )
                    for p, offset in offsets.items()
                ),
            )
            for topic_id, offsets in topics.items()
        ),
        forgotten_topics_data=tuple(
            ForgottenTopic(topic_id=topic_id, partitions=ps)  # type: ignore[arg-type]
            for topic_id, ps in (forgotten or {}).items()
        ),
    )
    response: FetchResponse = kio_call(broker, request, FetchResponse)
    return response


def _answered(response: FetchResponse) -> dict[tuple[uuid.UUID | None, int], Any]:
    assert response.error_code == ErrorCode.none, response.error_code
    return {
        (t.topic_id, int(p.partition_index)): p for t in response.responses for p in t.partitions
    }


def test_fetch_by_topic_id_and_unknown_ids(kafka_broker: KafkaBroker) -> None:
    topic, topic_id = _topic(kafka_broker, 2)
    _produce(kafka_broker, topic, 0, 3)
    unknown = uuid.uuid4()
    answer = _answered(_fetch(kafka_broker, {topic_id: {0: 0, 1: 0}, unknown: {0: 0}}))
    assert set(answer) == {(topic_id, 0), (topic_id, 1), (unknown, 0)}
    read = answer[(topic_id, 0)]
    assert (read.error_code, read.high_watermark) == (ErrorCode.none, 3)
    assert len(read.records) > 0
    assert answer[(topic_id, 1)].error_code == ErrorCode.none
    missing = answer[(unknown, 0)]
    assert (missing.error_code, missing.records) == (ErrorCode.unknown_topic_id, None)
    # A lone broker leads everything: no leader hints, no endpoints.
    assert (read.current_leader.leader_id, read.current_leader.leader_epoch) == (-1, -1)


def test_sessions_keyed_by_topic_id(kafka_broker: KafkaBroker) -> None:
    topic, topic_id = _topic(kafka_broker, 2)
    other, other_id = _topic(kafka_broker, 1)
    _produce(kafka_broker, topic, 0, 2)
    full = _fetch(kafka_broker, {topic_id: {0: 2, 1: 0}, other_id: {0: 0}}, epoch=0)
    assert set(_answered(full)) == {(topic_id, 0), (topic_id, 1), (other_id, 0)}
    session = int(full.session_id)
    assert session != 0

    # Incremental: nothing changed, so nothing answered; then a new record shows.
    assert _answered(_fetch(kafka_broker, {}, session, 1)) == {}
    _produce(kafka_broker, other, 0, 1)
    assert set(_answered(_fetch(kafka_broker, {}, session, 2))) == {(other_id, 0)}

    # Forgotten by id: the partition leaves the session, its new record unanswered (and
    # the moved position of the other partition, at its end, answers nothing either).
    _produce(kafka_broker, topic, 1, 1)
    answer = _answered(
        _fetch(kafka_broker, {other_id: {0: 1}}, session, 3, forgotten={topic_id: (1,)})
    )
    assert answer == {}

    # The session's topic deleted and created again under its name: its old id answers
    # UNKNOWN_TOPIC_ID (the new topic is another one, with another id).
    assert httpx.delete(f"{kafka_broker.url}/topics/{other}", timeout=30).status_code in (200, 204)
    r = httpx.post(f"{kafka_broker.url}/topics", json={"name": other, "partitions": 1})
    assert r.status_code == 201, r.text
    assert _id_of(kafka_broker, other) != other_id
    answer = _answered(_fetch(kafka_broker, {}, session, 4))
    assert answer[(other_id, 0)].error_code == ErrorCode.unknown_topic_id

    # A request without ids (v12) on this session: FETCH_SESSION_TOPIC_ID_ERROR, and the
    # session stays (the next epoch still works with ids).
    v12 = FetchRequestV12(
        max_wait=datetime.timedelta(0),  # type: ignore[arg-type]
        min_bytes=1,  # type: ignore[arg-type]
        session_id=session,  # type: ignore[arg-type]
        session_epoch=5,  # type: ignore[arg-type]
        topics=(),
        forgotten_topics_data=(),
    )
    refused = kio_call(kafka_broker, v12, FetchResponseV12)
    assert (refused.error_code, refused.session_id, refused.responses) == (
        ErrorCode.fetch_session_topic_id_error,
        0,
        (),
    )
    answer = _answered(_fetch(kafka_broker, {}, session, 5))
    assert answer[(other_id, 0)].error_code == ErrorCode.unknown_topic_id


def test_zero_topic_id_is_unknown_and_forgotten_by_it(kafka_broker: KafkaBroker) -> None:
    """Fetch v13+ naming the zero UUID: UNKNOWN_TOPIC_ID, as Kafka answers any id that
    names no topic (not UNKNOWN_TOPIC_OR_PARTITION for a topic named ""), and a session
    keys it by that id, so forgetting it by the zero UUID removes it."""
    zero = uuid.UUID(int=0)
    _, topic_id = _topic(kafka_broker, 1)
    full = _fetch(kafka_broker, {zero: {0: 0}, topic_id: {0: 0}}, epoch=0)
    answer = _answered(full)
    # kio reads the zero UUID back as None.
    assert set(answer) == {(None, 0), (topic_id, 0)}
    assert answer[(None, 0)].error_code == ErrorCode.unknown_topic_id
    session = int(full.session_id)
    assert session != 0
    # Its error answers it in each incremental answer until forgotten.
    assert set(_answered(_fetch(kafka_broker, {}, session, 1))) == {(None, 0)}
    assert _answered(_fetch(kafka_broker, {}, session, 2, forgotten={zero: (0,)})) == {}
    assert _answered(_fetch(kafka_broker, {}, session, 3)) == {}
