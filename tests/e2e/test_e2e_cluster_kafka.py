"""The Kafka door in cluster mode (issue #19, part 5): a real ZooKeeper and three brokers,
each with a Kafka listener on a loopback port of its own, and unchanged librdkafka clients
(confluent-kafka) bootstrapped at one broker.

Brokers publish their Kafka listeners in their ZooKeeper registrations, so Metadata names
every broker and each partition's real leader (and each topic's id, the same on every
broker), FindCoordinator the group coordinator's listener, and a Produce or Fetch sent to
a follower answers NOT_LEADER_OR_FOLLOWER (with the current leader from Produce v10 and
Fetch v12, and its listener from Produce v10 and Fetch v16, KIP-951). The kill-leader test is the HTTP one's
(tests/e2e/test_e2e_cluster.py) through the Kafka door.
"""

from __future__ import annotations

import datetime
import functools
import importlib.util
import sys
import threading
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import httpx
import pytest
from cluster import Cluster, assert_acked_once_in_order, find_partition
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from conftest import ClusterFactory, free_port
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.fetch.v16.request import FetchPartition as FetchPartitionV16
from kio.schema.fetch.v16.request import FetchRequest as FetchRequestV16
from kio.schema.fetch.v16.request import FetchTopic as FetchTopicV16
from kio.schema.fetch.v16.response import FetchResponse as FetchResponseV16
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.produce.v9.request import ProduceRequest
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.produce.v10.request import ProduceRequest as ProduceRequestV10
from kio.schema.produce.v10.response import ProduceResponse as ProduceResponseV10
from test_e2e_cluster import create_topic, wait_isr

pytestmark = pytest.mark.timeout(240)


@functools.cache
def _kafka_harness() -> ModuleType:
    """tests/integration/kafka/kafka_harness.py (its ``kio_call`` speaks the protocol
    directly), loaded by path: test directories are not packages."""
    if "kafka_harness" in sys.modules:  # imported by the Kafka door's own tests already
        return sys.modules["kafka_harness"]
    path = Path(__file__).resolve().parents[1] / "integration" / "kafka" / "kafka_harness.py"
    spec = importlib.util.spec_from_file_location("kafka_harness", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def kio_call(cluster: Cluster, broker_id: int, request: Any, response_type: type) -> Any:
    target = SimpleNamespace(kafka_port=cluster.kafka_ports[broker_id])
    return _kafka_harness().kio_call(target, request, response_type)


def bootstrap(cluster: Cluster, ids: list[int] | None = None) -> str:
    return ",".join(cluster.kafka_bootstrap(i) for i in (ids or cluster.live_ids))


def consume(
    cluster: Cluster, topic: str, partition: int, count: int, ids: list[int] | None = None
) -> list[bytes]:
    """``count`` values of ``topic-partition`` from offset 0, through librdkafka's assign."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(cluster, ids),
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    seen: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 60
        while len(seen) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            seen.append(msg.value() or b"")
    finally:
        consumer.close()
    return seen


@pytest.mark.slow
def test_librdkafka_discovers_the_cluster_through_one_broker(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(kafka=True)
    create_topic(cluster, "kclicks", partitions=3, rf=3)
    http_meta = cluster.metadata()

    # Bootstrapped at broker 1 only: Metadata names all three brokers and every leader.
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap(1)})
    meta = admin.list_topics(timeout=20)
    assert {b.id: (b.host, b.port) for b in meta.brokers.values()} == {
        i: ("127.0.0.1", cluster.kafka_ports[i]) for i in cluster.ids
    }
    assert meta.controller_id == http_meta["controller"]
    for p, info in meta.topics["kclicks"].partitions.items():
        http_p = find_partition(http_meta, "kclicks", p)
        assert info.error is None
        assert info.leader == http_p["leader"]
        assert sorted(info.replicas) == cluster.ids
        assert sorted(info.isrs) == sorted(http_p["isr"])
    described = admin.describe_cluster(request_timeout=20).result(timeout=30)
    assert sorted((n.id, n.host, n.port) for n in described.nodes) == [
        (i, "127.0.0.1", cluster.kafka_ports[i]) for i in cluster.ids
    ]
    assert described.controller.id == http_meta["controller"]

    # Idempotent acks=all produce to three partitions led by three brokers.
    producer = Producer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap(1),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
        }
    )
    delivered: list[tuple[int, int]] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset()))

    for i in range(300):
        producer.produce("kclicks", value=b"%d" % i, partition=i % 3, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert errors == []
    for p in range(3):
        assert sorted(o for q, o in delivered if q == p) == list(range(100))

    # Consumed with assign, each partition from its leader, in the order produced.
    for p in range(3):
        assert consume(cluster, "kclicks", p, 100, ids=[1]) == [b"%d" % i for i in range(p, 300, 3)]

    # KIP-848 (group.protocol=consumer) bootstrapped at broker 1: the coordinator, on
    # whichever broker, assigns all three partitions by topic id, which every broker's
    # Metadata resolves the same; the member reads every record from the leaders.
    kip848 = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap(1),
            "group.id": "kip848-readers",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        kip848.subscribe(["kclicks"])
        read: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(read) < 300 and time.monotonic() < deadline:
            msg = kip848.poll(0.5)
            if msg is not None and msg.error() is None:
                read.add(bytes(msg.value()))
        assert read == {b"%d" % i for i in range(300)}
        assert sorted(tp.partition for tp in kip848.assignment()) == [0, 1, 2]
    finally:
        kip848.close()

    # FindCoordinator names the coordinator's listener: a group coordinated by each of
    # the three brokers commits through the client bootstrapped at broker 1, and the
    # commit is the group's offset over HTTP at its coordinator.
    by_broker = coordinated_by(cluster, 1)
    for coordinator, group in by_broker.items():
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.kafka_bootstrap(1),
                "group.id": group,
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.commit(offsets=[TopicPartition("kclicks", 0, 42)], asynchronous=False)
            (committed,) = consumer.committed([TopicPartition("kclicks", 0)], timeout=20)
            assert committed.offset == 42
        finally:
            consumer.close()
        answer = httpx.get(f"{cluster.url(coordinator)}/groups/{group}/offsets", timeout=30)
        assert answer.status_code == 200, answer.text
        assert [(o["partition"], o["offset"]) for o in answer.json()["offsets"]] == [(0, 42)]

    # A follower answers NOT_LEADER_OR_FOLLOWER to Fetch and Produce, with the current
    # leader where the version has the field (Fetch v12+, Produce v10+).
    leader = int(find_partition(http_meta, "kclicks", 0)["leader"])
    follower = next(i for i in cluster.ids if i != leader)
    fetch = FetchRequest(
        max_wait=datetime.timedelta(0),  # type: ignore[arg-type]
        min_bytes=1,  # type: ignore[arg-type]
        max_bytes=1 << 20,  # type: ignore[arg-type]
        topics=(
            FetchTopic(
                topic="kclicks",  # type: ignore[arg-type]
                partitions=(
                    FetchPartition(
                        partition=0,  # type: ignore[arg-type]
                        fetch_offset=0,  # type: ignore[arg-type]
                        partition_max_bytes=1 << 20,  # type: ignore[arg-type]
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    fetched: FetchResponse = kio_call(cluster, follower, fetch, FetchResponse)
    assert fetched.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
    epoch = int(find_partition(cluster.metadata(leader), "kclicks", 0)["leader_epoch"])
    assert (
        fetched.responses[0].partitions[0].current_leader.leader_id,
        fetched.responses[0].partitions[0].current_leader.leader_epoch,
    ) == (leader, epoch)

    # Topic ids: every broker answers the controller's id for the topic (Metadata v12),
    # and Fetch v16 names the topic by it; a follower's answer carries the leader and its
    # Kafka listener (KIP-951's node_endpoints).
    ids = set()
    for broker in cluster.ids:
        request = MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name="kclicks"),),  # type: ignore[arg-type]
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        (answer,) = kio_call(cluster, broker, request, MetadataResponse).topics
        ids.add(answer.topic_id)
    (topic_id,) = ids
    assert topic_id is not None
    fetch_v16 = FetchRequestV16(
        max_wait=datetime.timedelta(0),  # type: ignore[arg-type]
        min_bytes=1,  # type: ignore[arg-type]
        max_bytes=1 << 20,  # type: ignore[arg-type]
        topics=(
            FetchTopicV16(
                topic_id=topic_id,
                partitions=(
                    FetchPartitionV16(
                        partition=0,  # type: ignore[arg-type]
                        fetch_offset=0,  # type: ignore[arg-type]
                        partition_max_bytes=1 << 20,  # type: ignore[arg-type]
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    hinted: FetchResponseV16 = kio_call(cluster, follower, fetch_v16, FetchResponseV16)
    part = hinted.responses[0].partitions[0]
    assert hinted.responses[0].topic_id == topic_id
    assert part.error_code == ErrorCode.not_leader_or_follower
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (leader, epoch)
    assert [(e.node_id, e.host, e.port) for e in hinted.node_endpoints] == [
        (leader, "127.0.0.1", cluster.kafka_ports[leader])
    ]
    led: FetchResponseV16 = kio_call(cluster, leader, fetch_v16, FetchResponseV16)
    assert led.responses[0].partitions[0].error_code == ErrorCode.none
    assert led.node_endpoints == ()
    # Produce v9 answers NOT_LEADER_OR_FOLLOWER alone; v10 (KIP-951) with the current
    # leader, its epoch and its Kafka listener.
    for request_type, response_type in (
        (ProduceRequest, ProduceResponse),
        (ProduceRequestV10, ProduceResponseV10),
    ):
        module = sys.modules[request_type.__module__]
        produce = request_type(
            transactional_id=None,
            acks=-1,  # type: ignore[arg-type]
            timeout=datetime.timedelta(seconds=10),  # type: ignore[arg-type]
            topic_data=(
                module.TopicProduceData(
                    name="kclicks",
                    partition_data=(module.PartitionProduceData(index=0, records=b"\0" * 70),),
                ),
            ),
        )
        produced = kio_call(cluster, follower, produce, response_type)
        answer = produced.responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.not_leader_or_follower
        if response_type is ProduceResponseV10:
            assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (
                leader,
                epoch,
            )
            assert [(e.node_id, e.host, e.port) for e in produced.node_endpoints] == [
                (leader, "127.0.0.1", cluster.kafka_ports[leader])
            ]


def coordinated_by(cluster: Cluster, via: int) -> dict[int, str]:
    """A group id coordinated by each broker, as ``POST /coordinator`` says (waiting
    through its retriable 503s: the first question creates ``__consumer_offsets``, whose
    partitions then elect their leaders)."""
    by_broker: dict[int, str] = {}
    for i in range(200):

        def found(key: str = f"kg{i}") -> Any:
            answer = httpx.post(
                f"{cluster.url(via)}/coordinator",
                json={"key": key, "key_type": "group"},
                timeout=30,
            )
            if answer.status_code == 503 and answer.json().get("retriable"):
                return None
            assert answer.status_code == 200, answer.text
            return answer.json()

        coordinator = cluster.wait_until(found, message=f"a coordinator for kg{i}")
        by_broker.setdefault(int(coordinator["node_id"]), f"kg{i}")
        if len(by_broker) == len(cluster.ids):
            return by_broker
    raise AssertionError(f"no group coordinated by each broker: {by_broker}")


@pytest.mark.slow
def test_a_broker_without_a_kafka_listener_is_left_out(cluster_factory: ClusterFactory) -> None:
    """Brokers 1 and 2 have Kafka listeners, broker 3 none: Metadata and DescribeCluster
    list 1 and 2, a partition led by 3 answers LEADER_NOT_AVAILABLE, and FindCoordinator
    for a group 3 coordinates COORDINATOR_NOT_AVAILABLE."""
    cluster = cluster_factory(kafka={1: free_port(), 2: free_port()})
    create_topic(cluster, "kmixed", partitions=3, rf=1)
    leaders = {p: cluster.leader("kmixed", p) for p in range(3)}
    assert sorted(leaders.values()) == cluster.ids  # one partition led by each broker
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap(1)})

    def listed() -> Any:
        meta = admin.list_topics(timeout=20)
        return meta if sorted(meta.brokers) == [1, 2] else None

    meta = cluster.wait_until(listed, message="brokers 1 and 2 in Kafka Metadata")
    # The named controller is always a listed broker (librdkafka waits forever for one
    # it cannot reach): broker 3's controllership is shown as the asked broker.
    assert meta.controller_id in (1, 2)
    broker2 = meta.brokers[2]
    assert {b.id: (b.host, b.port) for b in meta.brokers.values()} == {
        i: ("127.0.0.1", cluster.kafka_ports[i]) for i in (1, 2)
    }
    for p, info in meta.topics["kmixed"].partitions.items():
        if leaders[p] == 3:
            assert info.error is not None
            assert info.error.code() == KafkaError.LEADER_NOT_AVAILABLE
            assert info.leader == -1
        else:
            assert info.error is None
            assert info.leader == leaders[p]
    # Broker 2 lists the same brokers.
    other = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap(2)})
    described = other.describe_cluster(request_timeout=20).result(timeout=30)
    assert sorted(n.id for n in described.nodes) == [1, 2]
    assert described.controller.id in (1, 2)
    groups = coordinated_by(cluster, 1)
    answers = {
        coordinator: kio_call(
            cluster,
            1,
            FindCoordinatorRequest(key=group, key_type=0),  # type: ignore[arg-type]
            FindCoordinatorResponse,
        )
        for coordinator, group in groups.items()
    }
    assert answers[3].error_code == ErrorCode.coordinator_not_available
    assert (answers[2].error_code, answers[2].node_id, answers[2].port) == (
        ErrorCode.none,
        2,
        broker2.port,
    )


@pytest.mark.slow
def test_kill_leader_under_a_librdkafka_idempotent_producer_loses_nothing(
    cluster_factory: ClusterFactory,
) -> None:
    """The kill-leader test through the Kafka door: SIGKILL the partition's leader under a
    librdkafka producer with acks=all and idempotence, then bring it back until it leads
    again; every acknowledged record is read back exactly once, in order."""
    cluster = cluster_factory(kafka=True)
    create_topic(cluster, "kpayments", configs={"min.insync.replicas": 2})
    wait_isr(cluster, "kpayments", cluster.ids)
    leader = cluster.leader("kpayments")
    acked: list[int] = []
    failures: list[str] = []
    stop = threading.Event()
    killed_at: list[float] = []
    first_ack_after_kill: list[float] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(str(err))
            return
        acked.append(int(msg.value() or b"-1"))
        if killed_at and not first_ack_after_kill:
            first_ack_after_kill.append(time.monotonic())

    def produce_loop() -> None:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap(cluster),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 60_000,
            }
        )
        i = 0
        while not stop.is_set():
            for j in range(50):
                producer.produce(
                    "kpayments", value=b"%d" % (i + j), partition=0, on_delivery=on_delivery
                )
            producer.flush(60)
            i += 50
        assert producer.flush(60) == 0

    thread = threading.Thread(target=produce_loop)
    thread.start()
    try:
        cluster.wait_until(lambda: len(acked) > 2_000 or None, message="records acknowledged")
        cluster.kill(leader)
        killed_at.append(time.monotonic())
        cluster.wait_until(
            lambda: first_ack_after_kill or None, message="a write acknowledged after the kill"
        )
        count = len(acked)
        cluster.wait_until(lambda: len(acked) > count + 2_000 or None, message="producer goes on")
        assert cluster.leader("kpayments") not in (leader, -1)
        # The killed broker returns as a follower, catches up and, as the preferred replica,
        # takes leadership back from a live leader under the producer (which is answered
        # NOT_LEADER_OR_FOLLOWER there, with the new leader: Produce v10).
        cluster.restart(leader)
        wait_isr(cluster, "kpayments", cluster.ids)
        cluster.wait_until(
            lambda: cluster.leader("kpayments") == leader or None,
            message=f"preferred replica {leader} leads again",
        )
        count = len(acked)
        cluster.wait_until(
            lambda: len(acked) > count + 2_000 or None, message="producer goes on after"
        )
    finally:
        stop.set()
        thread.join(90)
    assert not failures, failures[:5]
    seen = [int(v) for v in consume(cluster, "kpayments", 0, len(acked))]
    assert_acked_once_in_order(acked, seen)
