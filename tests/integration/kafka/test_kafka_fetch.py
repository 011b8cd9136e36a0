"""Fetch through the Kafka door, spoken with kio directly: max_bytes across partitions."""

from __future__ import annotations

import datetime
import uuid

import httpx
from kafka_harness import KafkaBroker, kio_call
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse


def test_max_bytes_spent_on_the_first_partition_leaves_offsets_only_for_the_next(
    kafka_broker: KafkaBroker,
) -> None:
    topic = f"fetch-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=kafka_broker.url, timeout=30) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 2}).status_code == 201
        for p in (0, 1):
            r = http.post(
                f"/topics/{topic}/partitions/{p}/records",
                json={"records": [{"value": "x" * 100}] * 3, "value_format": "string"},
            )
            assert r.status_code == 200, r.text
    request = FetchRequest(
        max_wait=datetime.timedelta(0),  # type: ignore[arg-type]
        min_bytes=1,  # type: ignore[arg-type]
        max_bytes=1,  # type: ignore[arg-type]
        topics=(
            FetchTopic(
                topic=topic,  # type: ignore[arg-type]
                partitions=tuple(
                    FetchPartition(
                        partition=p,  # type: ignore[arg-type]
                        fetch_offset=0,  # type: ignore[arg-type]
                        partition_max_bytes=1 << 20,  # type: ignore[arg-type]
                    )
                    for p in (0, 1)
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    response: FetchResponse = kio_call(kafka_broker, request, FetchResponse)
    (answer,) = response.responses
    first, second = answer.partitions
    assert (first.error_code, second.error_code) == (ErrorCode.none, ErrorCode.none)
    # The first partition's batch is served whole although larger than max_bytes=1 ...
    assert first.records and len(first.records) > 300
    # ... and the second answers its offsets only.
    assert (second.records, second.high_watermark) == (b"", 3)


def test_offset_for_leader_epoch_answers_from_the_epoch_cache(kafka_broker: KafkaBroker) -> None:
    from kio.schema.offset_for_leader_epoch.v4.request import (
        OffsetForLeaderEpochRequest,
        OffsetForLeaderPartition,
        OffsetForLeaderTopic,
    )
    from kio.schema.offset_for_leader_epoch.v4.response import OffsetForLeaderEpochResponse

    topic = f"epochs-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=kafka_broker.url, timeout=30) as http:
        assert http.post("/topics", json={"name": topic}).status_code == 201
        r = http.post(
            f"/topics/{topic}/partitions/0/records",
            json={"records": [{"value": "x"}] * 3, "value_format": "string"},
        )
        assert r.status_code == 200, r.text
    asked = [(0, 0), (0, 7), (9, 0)]  # (partition, leader epoch)
    answer = kio_call(
        kafka_broker,
        OffsetForLeaderEpochRequest(
            replica_id=-1,  # type: ignore[arg-type]
            topics=(
                OffsetForLeaderTopic(
                    topic=topic,  # type: ignore[arg-type]
                    partitions=tuple(
                        OffsetForLeaderPartition(
                            partition=p,  # type: ignore[arg-type]
                            current_leader_epoch=-1,  # type: ignore[arg-type]
                            leader_epoch=e,  # type: ignore[arg-type]
                        )
                        for p, e in asked
                    ),
                ),
            ),
        ),
        OffsetForLeaderEpochResponse,
    )
    (result,) = answer.topics
    assert [
        (p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in result.partitions
    ] == [
        (0, ErrorCode.none, 0, 3),  # the current epoch ends at the log end
        (0, ErrorCode.none, -1, -1),  # an epoch above the latest is unknown
        (9, ErrorCode.unknown_topic_or_partition, -1, -1),
    ]
