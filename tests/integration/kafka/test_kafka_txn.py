"""Transactions through the Kafka door, on the transaction coordinator HTTP uses: librdkafka's
and kafka-python's transactional producers, read back with read_committed by librdkafka and
over HTTP; fencing; Kafka's error codes per case (kio spoken directly)."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka_harness import KafkaBroker, kio_call
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.add_partitions_to_txn.v3.response import AddPartitionsToTxnResponse
from kio.schema.end_txn.v1.request import EndTxnRequest as EndTxnRequestV1
from kio.schema.end_txn.v1.response import EndTxnResponse as EndTxnResponseV1
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.end_txn.v3.response import EndTxnResponse
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.init_producer_id.v4.response import InitProducerIdResponse
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.list_transactions.v1.response import ListTransactionsResponse


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(broker: KafkaBroker, topic: str, partitions: int) -> None:
    r = httpx.post(f"{broker.url}/topics", json={"name": topic, "partitions": partitions})
    assert r.status_code == 201, r.text


def _txn_producer(broker: KafkaBroker, tid: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": tid, "linger.ms": 1}
    )
    producer.init_transactions(30)
    return producer


def _consume(
    broker: KafkaBroker, topic: str, partition: int, isolation: str, until_offset: int
) -> list[bytes]:
    """Values of ``topic-partition`` read by librdkafka until its position passes
    ``until_offset`` (markers take offsets, so positions, not counts, say when to stop)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                if msg.offset() > until_offset:
                    return got
                continue
            value = msg.value()
            assert value is not None
            got.append(value)
        raise AssertionError(f"{topic}-{partition}: only {got} after 30 s")
    finally:
        consumer.close()


def _http_values(broker: KafkaBroker, topic: str, partition: int, isolation: str) -> list[str]:
    r = httpx.get(
        f"{broker.url}/topics/{topic}/partitions/{partition}/records",
        params={"offset": 0, "value_format": "string", "isolation_level": isolation},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return [rec["value"] for rec in r.json()["records"]]


def test_librdkafka_transactions_commit_abort_and_offsets_read_committed(
    kafka_broker: KafkaBroker,
) -> None:
    topic, source, group = _name("txn-out"), _name("txn-in"), _name("txn-group")
    _create(kafka_broker, topic, 2)
    _create(kafka_broker, source, 1)
    tid = _name("tid")
    producer = _txn_producer(kafka_broker, tid)
    reader = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group})
    try:
        producer.begin_transaction()
        for p in (0, 1):
            producer.produce(topic, value=b"c%d" % p, partition=p)
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 5)], reader.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)

        producer.begin_transaction()
        for p in (0, 1):
            producer.produce(topic, value=b"a%d" % p, partition=p)
        producer.flush(30)
        producer.abort_transaction(30)

        producer.begin_transaction()
        producer.produce(topic, value=b"last", partition=0)
        producer.commit_transaction(30)
    finally:
        reader.close()

    # Offsets: c0 0, COMMIT 1, a0 2, ABORT 3, last 4, COMMIT 5 on partition 0.
    assert _consume(kafka_broker, topic, 0, "read_committed", 5) == [b"c0", b"last"]
    assert _consume(kafka_broker, topic, 1, "read_committed", 3) == [b"c1"]
    assert _consume(kafka_broker, topic, 0, "read_uncommitted", 5) == [b"c0", b"a0", b"last"]
    assert _http_values(kafka_broker, topic, 0, "read_committed") == ["c0", "last"]
    assert _http_values(kafka_broker, topic, 1, "read_committed") == ["c1"]
    # The offsets committed in the transaction are the group's, once it committed.
    r = httpx.get(f"{kafka_broker.url}/groups/{group}/offsets", timeout=30)
    assert r.status_code == 200, r.text
    assert [(o["topic"], o["partition"], o["offset"]) for o in r.json()["offsets"]] == [
        (source, 0, 5)
    ]
    # The same transactional id as HTTP describes it.
    described = httpx.get(f"{kafka_broker.url}/transactions/{tid}", timeout=30).json()
    assert described["transaction_state"] == "CompleteCommit"


def test_a_second_librdkafka_producer_fences_the_first(kafka_broker: KafkaBroker) -> None:
    topic = _name("txn-fence")
    _create(kafka_broker, topic, 1)
    tid = _name("tid-fence")
    first = _txn_producer(kafka_broker, tid)
    first.begin_transaction()
    first.produce(topic, value=b"zombie", partition=0)
    first.flush(30)
    second = _txn_producer(kafka_broker, tid)  # aborts the first's transaction, fenced
    second.begin_transaction()
    second.produce(topic, value=b"alive", partition=0)
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), error
    # zombie 0, ABORT 1, alive 2, COMMIT 3.
    assert _consume(kafka_broker, topic, 0, "read_committed", 3) == [b"alive"]


def test_kafka_python_transactional_producer(kafka_broker: KafkaBroker) -> None:
    from kafka import KafkaProducer

    topic = _name("txn-kp")
    _create(kafka_broker, topic, 1)
    producer = KafkaProducer(
        bootstrap_servers=kafka_broker.bootstrap, transactional_id=_name("tid-kp")
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kept", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"dropped", partition=0).get(timeout=30)
        producer.abort_transaction()
    finally:
        producer.close(timeout=10)
    assert _http_values(kafka_broker, topic, 0, "read_committed") == ["kept"]
    assert _http_values(kafka_broker, topic, 0, "read_uncommitted") == ["kept", "dropped"]


def _init(broker: KafkaBroker, tid: str) -> tuple[int, int]:
    answer: Any = kio_call(
        broker,
        InitProducerIdRequest(
            transactional_id=tid,
            transaction_timeout=datetime.timedelta(seconds=60),  # type: ignore[arg-type]
            producer_id=-1,  # type: ignore[arg-type]
            producer_epoch=-1,  # type: ignore[arg-type]
        ),
        InitProducerIdResponse,
    )
    assert answer.error_code == ErrorCode.none
    return int(answer.producer_id), int(answer.producer_epoch)


def _add(broker: KafkaBroker, tid: str, pid: int, epoch: int, **topics: list[int]) -> Any:
    return kio_call(
        broker,
        AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=pid,  # type: ignore[arg-type]
            v3_and_below_producer_epoch=epoch,  # type: ignore[arg-type]
            v3_and_below_topics=tuple(
                AddPartitionsToTxnTopic(name=name, partitions=tuple(ps))  # type: ignore[arg-type]
                for name, ps in topics.items()
            ),
        ),
        AddPartitionsToTxnResponse,
    )


def _codes(answer: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (t.name, int(p.partition_index)): p.partition_error_code
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


@pytest.fixture
def kp_admin(kafka_broker: KafkaBroker) -> Iterator[Any]:
    """kafka-python's admin client (it has DescribeTransactions and ListTransactions)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    yield admin
    admin.close()


def test_transaction_apis_answer_kafkas_error_codes(
    kafka_broker: KafkaBroker, kp_admin: Any
) -> None:
    from kafka import TopicPartition as KTopicPartition
    from kafka.errors import TransactionalIdNotFoundError

    topic = _name("txn_codes")  # an identifier: the topics are keyword arguments below
    _create(kafka_broker, topic, 2)
    tid = _name("tid-codes")

    found = kio_call(
        kafka_broker,
        FindCoordinatorRequest(key=tid, key_type=1),  # type: ignore[arg-type]
        FindCoordinatorResponse,
    )
    assert (found.error_code, found.port) == (ErrorCode.none, kafka_broker.kafka_port)

    # An id never initialized: INVALID_PRODUCER_ID_MAPPING to a producer, as Kafka answers.
    assert set(_codes(_add(kafka_broker, tid, 1, 0, **{topic: [0]})).values()) == {
        ErrorCode.invalid_producer_id_mapping
    }
    with pytest.raises(TransactionalIdNotFoundError):
        kp_admin.describe_transactions([tid])

    pid, epoch = _init(kafka_broker, tid)
    # Nothing to commit yet.
    ended = kio_call(
        kafka_broker,
        EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True),  # type: ignore[arg-type]
        EndTxnResponse,
    )
    assert ended.error_code == ErrorCode.invalid_txn_state
    # One partition that does not exist: it is named, the others not attempted.
    assert _codes(_add(kafka_broker, tid, pid, epoch, **{topic: [0, 7]})) == {
        (topic, 0): ErrorCode.operation_not_attempted,
        (topic, 7): ErrorCode.unknown_topic_or_partition,
    }
    assert _codes(_add(kafka_broker, tid, pid, epoch, **{topic: [0, 1]})) == {
        (topic, 0): ErrorCode.none,
        (topic, 1): ErrorCode.none,
    }
    # DescribeTransactions and ListTransactions through kafka-python's admin client
    # (ListTransactions v1: a duration filter; unknown state names answered back).
    (listed,) = kp_admin.list_transactions(state_filters=["Ongoing"], duration_filter_ms=0).values()
    assert (tid, pid, "Ongoing") in {
        (t.transactional_id, t.producer_id, t.state.value) for t in listed
    }
    d = kp_admin.describe_transactions([tid])[tid]
    assert (d.state.value, d.producer_id, d.producer_epoch, d.transaction_timeout_ms) == (
        "Ongoing",
        pid,
        epoch,
        60_000,
    )
    assert d.transaction_start_time_ms > 0
    assert d.topic_partitions == {KTopicPartition(topic, 0), KTopicPartition(topic, 1)}
    unknown = kio_call(
        kafka_broker,
        ListTransactionsRequest(state_filters=("Ongoing", "Nope")),  # type: ignore[arg-type]
        ListTransactionsResponse,
    )
    assert (unknown.error_code, unknown.unknown_state_filters) == (ErrorCode.none, ("Nope",))
    # A newer instance fences this one: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH
    # before (KIP-588).
    _init(kafka_broker, tid)
    ended = kio_call(
        kafka_broker,
        EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True),  # type: ignore[arg-type]
        EndTxnResponse,
    )
    assert ended.error_code == ErrorCode.producer_fenced
    old = kio_call(
        kafka_broker,
        EndTxnRequestV1(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
        ),  # type: ignore[arg-type]
        EndTxnResponseV1,
    )
    assert old.error_code == ErrorCode.invalid_producer_epoch


def test_offset_fetch_require_stable_waits_for_an_open_transaction(
    kafka_broker: KafkaBroker,
) -> None:
    """KIP-447: while a transaction that committed a group's offsets is open, OffsetFetch
    v7 with require_stable answers UNSTABLE_OFFSET_COMMIT for those partitions (others
    as usual); without it, the last stable offsets; after the commit, the new ones."""
    from kio.schema.offset_fetch.v7.request import (
        OffsetFetchRequest,
        OffsetFetchRequestTopic,
    )
    from kio.schema.offset_fetch.v7.response import OffsetFetchResponse

    source, group = _name("stable-in"), _name("stable-group")
    _create(kafka_broker, source, 2)
    reader = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group})
    producer = _txn_producer(kafka_broker, _name("tid-stable"))

    def fetch(require_stable: bool) -> dict[int, tuple[int, ErrorCode]]:
        answer = kio_call(
            kafka_broker,
            OffsetFetchRequest(
                group_id=group,
                topics=(OffsetFetchRequestTopic(name=source, partition_indexes=(0, 1)),),  # type: ignore[arg-type]
                require_stable=require_stable,
            ),
            OffsetFetchResponse,
        )
        assert answer.error_code == ErrorCode.none
        (topic,) = answer.topics
        return {p.partition_index: (p.committed_offset, p.error_code) for p in topic.partitions}

    try:
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 7)], reader.consumer_group_metadata(), 30
        )
        # The offsets are pending in the open transaction (TxnOffsetCommit answered).
        assert fetch(require_stable=True) == {
            0: (-1, ErrorCode.unstable_offset_commit),
            1: (-1, ErrorCode.none),
        }
        assert fetch(require_stable=False) == {0: (-1, ErrorCode.none), 1: (-1, ErrorCode.none)}
        producer.commit_transaction(30)
    finally:
        reader.close()
    assert fetch(require_stable=True) == {0: (7, ErrorCode.none), 1: (-1, ErrorCode.none)}


def _init_with(broker: KafkaBroker, tid: str, pid: int, epoch: int) -> Any:
    """InitProducerId v4 naming the producer id and epoch held (KIP-360's epoch bump)."""
    return kio_call(
        broker,
        InitProducerIdRequest(
            transactional_id=tid,
            transaction_timeout=datetime.timedelta(seconds=60),  # type: ignore[arg-type]
            producer_id=pid,  # type: ignore[arg-type]
            producer_epoch=epoch,  # type: ignore[arg-type]
        ),
        InitProducerIdResponse,
    )


def test_a_fenced_instance_cannot_bump_its_epoch_back_over_the_new_one(
    kafka_broker: KafkaBroker,
) -> None:
    """KIP-360: an InitProducerId without a producer id (a new instance) bumps the epoch
    and forgets the last one, so the instance it fenced, asking for an epoch bump with
    the epoch it held (as librdkafka does after an abortable error), is PRODUCER_FENCED;
    it must not get an epoch above the new instance's and fence it in turn."""
    topic = _name("txn_zombie")  # an identifier: a keyword argument below
    _create(kafka_broker, topic, 1)
    tid = _name("tid-zombie")
    pid, old = _init(kafka_broker, tid)
    assert _init(kafka_broker, tid) == (pid, old + 1)  # the new instance
    zombie = _init_with(kafka_broker, tid, pid, old)
    assert zombie.error_code == ErrorCode.producer_fenced
    assert (zombie.producer_id, zombie.producer_epoch) == (-1, -1)
    # Half a pair (an id, no epoch) is INVALID_REQUEST, as Kafka answers: not a new
    # producer, nor an epoch matching the last epoch the new instance's bump left at -1.
    assert _init_with(kafka_broker, tid, pid, -1).error_code == ErrorCode.invalid_request
    # The new instance is still the producer of the id.
    assert _codes(_add(kafka_broker, tid, pid, old + 1, **{topic: [0]})) == {
        (topic, 0): ErrorCode.none
    }
    aborted = kio_call(
        kafka_broker,
        EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=old + 1, committed=False
        ),  # type: ignore[arg-type]
        EndTxnResponse,
    )
    assert aborted.error_code == ErrorCode.none
    # Its own bump (the epoch it holds) is granted, and a retry of it (the answer lost)
    # is recognised by the last epoch, not fenced.
    bumped = _init_with(kafka_broker, tid, pid, old + 1)
    assert (bumped.error_code, bumped.producer_id) == (ErrorCode.none, pid)
    retried = _init_with(kafka_broker, tid, pid, old + 1)
    assert retried.error_code == ErrorCode.none
