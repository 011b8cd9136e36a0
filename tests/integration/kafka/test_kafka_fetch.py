"""Fetch through the Kafka door, spoken with kio directly: max_bytes across partitions."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import httpx
from kafka_harness import KafkaBroker, kio_call
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v6.request import FetchPartition as FetchPartitionV6
from kio.schema.fetch.v6.request import FetchRequest as FetchRequestV6
from kio.schema.fetch.v6.request import FetchTopic as FetchTopicV6
from kio.schema.fetch.v6.response import FetchResponse as FetchResponseV6
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


def test_last_fetched_epoch_is_checked_for_divergence(kafka_broker: KafkaBroker) -> None:
    """Fetch v12+'s ``last_fetched_epoch`` (Kafka's ``Partition.readRecords``): an epoch that
    ends before the fetch offset answers ``diverging_epoch`` and no records; an epoch the
    log cannot place is OFFSET_OUT_OF_RANGE; one that holds the offset fetches as usual."""
    topic = f"fetch-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=kafka_broker.url, timeout=30) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
        r = http.post(
            f"/topics/{topic}/partitions/0/records",
            json={"records": [{"value": "x"}] * 3, "value_format": "string"},
        )
        assert r.status_code == 200, r.text

    def fetch(offset: int, last_epoch: int) -> Any:
        request = FetchRequest(
            max_wait=datetime.timedelta(0),  # type: ignore[arg-type]
            min_bytes=1,  # type: ignore[arg-type]
            topics=(
                FetchTopic(
                    topic=topic,  # type: ignore[arg-type]
                    partitions=(
                        FetchPartition(
                            partition=0,  # type: ignore[arg-type]
                            fetch_offset=offset,  # type: ignore[arg-type]
                            last_fetched_epoch=last_epoch,  # type: ignore[arg-type]
                            partition_max_bytes=1 << 20,  # type: ignore[arg-type]
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        response: FetchResponse = kio_call(kafka_broker, request, FetchResponse)
        return response.responses[0].partitions[0]

    # A lone broker leads in epoch 0, which ends at the log end (3).
    usual = fetch(1, 0)
    assert (usual.error_code, usual.diverging_epoch.epoch) == (ErrorCode.none, -1)
    assert usual.records and len(usual.records) > 0
    diverged = fetch(5, 0)
    assert diverged.error_code == ErrorCode.none
    assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (0, 3)
    assert (diverged.records, diverged.high_watermark) == (b"", 3)
    assert fetch(1, 7).error_code == ErrorCode.offset_out_of_range
    # Without it (-1, as consumers send) nothing is checked.
    assert fetch(1, -1).error_code == ErrorCode.none


def test_a_partition_named_twice_is_read_once(kafka_broker: KafkaBroker) -> None:
    """A fetch without a session (v6) naming one partition several times reads it once,
    as Kafka's request map keeps one entry per partition (the last one named, at the
    first one's place): not one answer per entry, each spending the request's bytes on
    the same log."""
    topic = f"twice-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=kafka_broker.url, timeout=30) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
        r = http.post(
            f"/topics/{topic}/partitions/0/records",
            json={"records": [{"value": "v"}] * 3, "value_format": "string"},
        )
        assert r.status_code == 200, r.text
    request = FetchRequestV6(
        max_wait=datetime.timedelta(0),  # type: ignore[arg-type]
        min_bytes=1,  # type: ignore[arg-type]
        topics=(
            FetchTopicV6(
                topic=topic,  # type: ignore[arg-type]
                partitions=tuple(
                    FetchPartitionV6(
                        partition=0,  # type: ignore[arg-type]
                        fetch_offset=offset,  # type: ignore[arg-type]
                        partition_max_bytes=1 << 20,  # type: ignore[arg-type]
                    )
                    for offset in (0, 0, 0, 3)
                ),
            ),
        ),
    )
    response: FetchResponseV6 = kio_call(kafka_broker, request, FetchResponseV6)
    (answer,) = response.responses
    (only,) = answer.partitions
    assert (only.partition_index, only.error_code, only.high_watermark) == (0, ErrorCode.none, 3)
    # The last entry's offset (the end) is the one read: no records.
    assert not only.records
