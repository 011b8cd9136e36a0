"""DescribeProducers on the Kafka door: the producers the leader log's producer state
keeps, told to kafka-python's admin client (``describe_producers``) after librdkafka's
idempotent and transactional producers wrote to the partition; partitions that do not
exist answered UNKNOWN_TOPIC_OR_PARTITION (kio). Authorization (READ topic):
test_kafka_acls.py."""

from __future__ import annotations

import time
import uuid

import httpx
from confluent_kafka import Producer
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka_harness import KafkaBroker, kio_call
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_producers.v0.response import DescribeProducersResponse
from kio.schema.errors import ErrorCode


def make_topic(broker: KafkaBroker) -> str:
    name = f"producers-{uuid.uuid4().hex[:8]}"
    answer = httpx.post(f"{broker.url}/topics", json={"name": name, "partitions": 2}, timeout=10)
    assert answer.status_code == 201, answer.text
    return name


def test_idempotent_and_transactional_producers_are_described(kafka_broker: KafkaBroker) -> None:
    topic = make_topic(kafka_broker)
    before = int(time.time() * 1000)
    idempotent = Producer({"bootstrap.servers": kafka_broker.bootstrap, "enable.idempotence": True})
    for i in range(3):
        idempotent.produce(topic, f"r{i}".encode(), partition=0)
    assert idempotent.flush(30) == 0
    txn = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": topic})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"open", partition=0)
    assert txn.flush(30) == 0

    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        states = admin.describe_producers([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        assert states[TopicPartition(topic, 1)].active_producers == []
        producers = sorted(
            states[TopicPartition(topic, 0)].active_producers, key=lambda p: p.last_sequence
        )
        assert len(producers) == 2
        transactional, plain = producers  # sequences 0 and 2
        assert (plain.last_sequence, plain.current_transaction_start_offset) == (2, -1)
        assert (transactional.last_sequence, transactional.current_transaction_start_offset) == (
            0,
            3,  # the open transaction's first record follows the three idempotent ones
        )
        assert plain.producer_id != transactional.producer_id
        assert min(plain.producer_id, transactional.producer_id) >= 0
        assert plain.producer_epoch >= 0 and plain.last_timestamp >= before
        assert plain.coordinator_epoch == transactional.coordinator_epoch == -1
        # Committed: the transaction is closed and its marker's coordinator epoch kept.
        txn.commit_transaction(30)
        after = admin.describe_producers([TopicPartition(topic, 0)])
        (done,) = [
            p
            for p in after[TopicPartition(topic, 0)].active_producers
            if p.producer_id == transactional.producer_id
        ]
        assert done.current_transaction_start_offset == -1
        assert done.coordinator_epoch >= 0
    finally:
        admin.close()


def test_partitions_that_do_not_exist_are_named(kafka_broker: KafkaBroker) -> None:
    topic = make_topic(kafka_broker)
    answer = kio_call(
        kafka_broker,
        DescribeProducersRequest(
            topics=(
                TopicRequest(name=topic, partition_indexes=(0, 2)),  # type: ignore[arg-type]
                TopicRequest(name=f"{topic}-none", partition_indexes=(0,)),  # type: ignore[arg-type]
            )
        ),
        DescribeProducersResponse,
    )
    assert [[(p.partition_index, p.error_code) for p in t.partitions] for t in answer.topics] == [
        [(0, ErrorCode.none), (2, ErrorCode.unknown_topic_or_partition)],
        [(0, ErrorCode.unknown_topic_or_partition)],
    ]
    assert answer.topics[0].partitions[0].active_producers == ()
