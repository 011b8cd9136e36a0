"""Fetch sessions (KIP-227) on the Kafka door: the protocol spoken with kio directly (full
and incremental answers, forgotten partitions, the error paths), then kafka-python's
consumer, which keeps a session per broker, reading through one."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import httpx
import pytest
from kafka_harness import KafkaBroker, kio_call
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from kio.schema.fetch.v12.response import FetchResponse


def _topic(broker: KafkaBroker, partitions: int) -> str:
    name = f"sess-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        r = http.post("/topics", json={"name": name, "partitions": partitions})
        assert r.status_code == 201, r.text
    return name


def _produce(broker: KafkaBroker, topic: str, partition: int, n: int) -> None:
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        r = http.post(
            f"/topics/{topic}/partitions/{partition}/records",
            json={"records": [{"value": "v"}] * n, "value_format": "string"},
        )
        assert r.status_code == 200, r.text


def _fetch(
    broker: KafkaBroker,
    session_id: int,
    epoch: int,
    topic: str,
    offsets: dict[int, int],
    forgotten: tuple[int, ...] = (),
) -> FetchResponse:
    request = FetchRequest(
        max_wait=datetime.timedelta(0),  # type: ignore[arg-type]
        min_bytes=1,  # type: ignore[arg-type]
        max_bytes=1 << 20,  # type: ignore[arg-type]
        session_id=session_id,  # type: ignore[arg-type]
        session_epoch=epoch,  # type: ignore[arg-type]
        topics=(
            (
                FetchTopic(
                    topic=topic,  # type: ignore[arg-type]
                    partitions=tuple(
                        FetchPartition(
                            partition=p,  # type: ignore[arg-type]
                            fetch_offset=offset,  # type: ignore[arg-type]
                            partition_max_bytes=1 << 20,  # type: ignore[arg-type]
                        )
                        for p, offset in offsets.items()
                    ),
                ),
            )
            if offsets
            else ()
        ),
        forgotten_topics_data=(
            (ForgottenTopic(topic=topic, partitions=forgotten),)  # type: ignore[arg-type]
            if forgotten
            else ()
        ),
    )
    response: FetchResponse = kio_call(broker, request, FetchResponse)
    return response


def _answered(response: FetchResponse) -> dict[int, Any]:
    assert response.error_code == ErrorCode.none
    return {int(p.partition_index): p for t in response.responses for p in t.partitions}


def test_incremental_answers_hold_only_what_changed(kafka_broker: KafkaBroker) -> None:
    topic = _topic(kafka_broker, 3)
    _produce(kafka_broker, topic, 0, 3)
    # A full fetch (epoch 0) opens a session and answers every partition.
    full = _fetch(kafka_broker, 0, 0, topic, {0: 0, 1: 0, 2: 0})
    session = int(full.session_id)
    assert session != 0
    answered = _answered(full)
    assert sorted(answered) == [0, 1, 2]
    assert len(answered[0].records) > 0 and answered[0].high_watermark == 3
    # The client moves partition 0 to offset 3: nothing changed, nothing answered
    # (each request on a new connection: sessions outlive connections).
    assert _answered(_fetch(kafka_broker, session, 1, topic, {0: 3})) == {}
    # An append to partition 1: only it is answered, although the request names nothing.
    _produce(kafka_broker, topic, 1, 2)
    second = _fetch(kafka_broker, session, 2, topic, {})
    assert second.session_id == session
    answered = _answered(second)
    assert list(answered) == [1]
    assert answered[1].high_watermark == 2 and len(answered[1].records) > 0
    # Partition 2 forgotten: an append to it is not answered, one to partition 0 is.
    _produce(kafka_broker, topic, 2, 1)
    _produce(kafka_broker, topic, 0, 1)
    answered = _answered(_fetch(kafka_broker, session, 3, topic, {1: 2}, forgotten=(2,)))
    assert list(answered) == [0]
    assert answered[0].high_watermark == 4
    # A partition that starts failing is answered with its error (a topic deleted here).
    with httpx.Client(base_url=kafka_broker.url, timeout=30) as http:
        assert http.delete(f"/topics/{topic}").status_code in (200, 202, 204)
    answered = _answered(_fetch(kafka_broker, session, 4, topic, {0: 4}))
    assert {p: a.error_code for p, a in answered.items()} == {
        0: ErrorCode.unknown_topic_or_partition,
        1: ErrorCode.unknown_topic_or_partition,
    }


def test_unknown_sessions_and_wrong_epochs_are_refused_and_epoch_minus_one_closes(
    kafka_broker: KafkaBroker,
) -> None:
    topic = _topic(kafka_broker, 1)
    unknown = _fetch(kafka_broker, 12345, 1, topic, {0: 0})
    assert (unknown.error_code, unknown.session_id, unknown.responses) == (
        ErrorCode.fetch_session_id_not_found,
        0,
        (),
    )
    session = int(_fetch(kafka_broker, 0, 0, topic, {0: 0}).session_id)
    assert session != 0
    assert _fetch(kafka_broker, session, 1, topic, {}).error_code == ErrorCode.none
    # Epoch 1 again (a replayed request) and a skipped epoch are refused; the session stays.
    for epoch in (1, 3):
        wrong = _fetch(kafka_broker, session, epoch, topic, {})
        assert wrong.error_code == ErrorCode.invalid_fetch_session_epoch
        assert wrong.responses == ()
    assert _fetch(kafka_broker, session, 2, topic, {}).error_code == ErrorCode.none
    # Epoch -1 closes it and answers a full, sessionless fetch.
    final = _fetch(kafka_broker, session, -1, topic, {0: 0})
    assert final.session_id == 0 and list(_answered(final)) == [0]
    gone = _fetch(kafka_broker, session, 3, topic, {})
    assert gone.error_code == ErrorCode.fetch_session_id_not_found


def test_fetch_before_v7_is_answered_sessionless(kafka_broker: KafkaBroker) -> None:
    from kio.schema.fetch.v4.request import FetchPartition as P4
    from kio.schema.fetch.v4.request import FetchRequest as R4
    from kio.schema.fetch.v4.request import FetchTopic as T4
    from kio.schema.fetch.v4.response import FetchResponse as Response4

    topic = _topic(kafka_broker, 1)
    _produce(kafka_broker, topic, 0, 2)
    response = kio_call(
        kafka_broker,
        R4(
            replica_id=-1,  # type: ignore[arg-type]
            max_wait=datetime.timedelta(0),  # type: ignore[arg-type]
            min_bytes=1,  # type: ignore[arg-type]
            max_bytes=1 << 20,  # type: ignore[arg-type]
            isolation_level=0,  # type: ignore[arg-type]
            topics=(
                T4(
                    topic=topic,  # type: ignore[arg-type]
                    partitions=(
                        P4(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),  # type: ignore[arg-type]
                    ),
                ),
            ),
        ),
        Response4,
    )
    (answer,) = response.responses
    assert answer.partitions[0].high_watermark == 2 and len(answer.partitions[0].records) > 0


@pytest.mark.slow
def test_kafka_python_consumes_through_a_session(kafka_broker: KafkaBroker) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic = _topic(kafka_broker, 2)
    _produce(kafka_broker, topic, 0, 3)
    _produce(kafka_broker, topic, 1, 2)
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, fetch_max_wait_ms=50)
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        consumer.seek_to_beginning()
        seen: dict[int, list[int]] = {0: [], 1: []}

        def poll_until(count: int) -> None:
            for _ in range(100):
                for tp, records in consumer.poll(timeout_ms=200).items():
                    seen[tp.partition].extend(r.offset for r in records)
                if sum(map(len, seen.values())) >= count:
                    return
            raise AssertionError(f"consumed only {seen}")

        poll_until(5)
        # Records appended while the session is open reach the consumer through its
        # incremental fetches.
        _produce(kafka_broker, topic, 1, 2)
        _produce(kafka_broker, topic, 0, 1)
        poll_until(8)
        assert seen == {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]}
        handlers = consumer._fetcher._session_handlers  # the client's session per broker
        (handler,) = handlers.values()
        assert handler.next_metadata.session_id != 0  # the broker gave it a session
        assert handler.next_metadata.epoch > 1  # ... and it went on incrementally
    finally:
        consumer.close()
