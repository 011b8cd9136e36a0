"""Cluster-mode admin through the Kafka door (issue #19): CreatePartitions,
AlterConfigs/IncrementalAlterConfigs and DeleteRecords in a three-broker cluster over a
real ZooKeeper, with unchanged librdkafka clients (confluent-kafka's AdminClient), and
what the HTTP door of every broker then shows.

One cluster for the module (the suite is at its time budget): every test leaves all three
brokers running with full ISRs, so the order does not matter. The DeleteRecords test kills
brokers and starts them again on their data dirs.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import Cluster, find_partition
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
)
from test_e2e_cluster import create_topic, produce, wait_isr
from zookeeper import ZooKeeperServer

from app.core.log.checkpoint import OffsetCheckpointFile

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("cluster_admin")
    server = ZooKeeperServer(workdir / "zookeeper")
    try:
        server.start()
        made = Cluster(workdir / "cluster", server, 3, kafka=True)
        try:
            yield made.start()
        finally:
            codes = made.stop(stop_zookeeper=False)
            assert not any(codes.values()), f"brokers exited non-zero on SIGTERM: {codes}"
    finally:
        server.close()


def admin(cluster: Cluster, broker: int = 1) -> AdminClient:
    """An AdminClient bootstrapped at one broker, kept for the module: librdkafka fails the
    futures of a client destroyed (garbage collected) before they are answered."""
    return _admin(cluster.kafka_bootstrap(broker))


@functools.cache
def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def described(cluster: Cluster, broker: int, topic: str) -> dict[str, Any]:
    """``GET /topics/{topic}`` at one broker: its own view (configs, its replicas' offsets)."""
    answer = httpx.get(f"{cluster.url(broker)}/topics/{topic}", timeout=10)
    answer.raise_for_status()
    body: dict[str, Any] = answer.json()
    return body


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_config_changes_reach_every_broker(cluster: Cluster) -> None:
    create_topic(cluster, "kconf", partitions=1, rf=3)
    client = admin(cluster, 2)
    resource = ConfigResource("topic", "kconf")

    # IncrementalAlterConfigs through broker 2: SET two, APPEND to the list config.
    resource.add_incremental_config(
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    )
    resource.add_incremental_config(
        ConfigEntry("min.insync.replicas", "4", incremental_operation=AlterConfigOpType.SET)
    )
    resource.add_incremental_config(
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)
    )
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=30)

    # Every broker applies it from ZooKeeper: its HTTP door and DescribeConfigs show it.
    want = {"retention.ms": 3600000, "min.insync.replicas": 4, "cleanup.policy": "compact,delete"}

    def applied(broker: int) -> bool:
        overrides = described(cluster, broker, "kconf")["config_overrides"]
        return bool(overrides == want)

    for broker in cluster.ids:
        cluster.wait_until(lambda b=broker: applied(b), message=f"configs on broker {broker}")
        (found,) = (
            admin(cluster, broker).describe_configs([ConfigResource("topic", "kconf")]).values()
        )
        configs = found.result(timeout=30)
        assert configs["retention.ms"].value == "3600000"
        assert configs["min.insync.replicas"].value == "4"

    # The leader checks acks=all against the new min.insync.replicas (4 > 3 replicas).
    leader = cluster.leader("kconf")
    refused = produce(cluster, leader, "kconf", 0, ["x"])
    assert refused.status_code == 503, refused.text
    assert refused.json()["error_code"] == "NOT_ENOUGH_REPLICAS"

    # AlterConfigs (legacy) replaces the overrides: the others return to their defaults.
    legacy = ConfigResource("topic", "kconf", set_config={"retention.ms": "7200000"})
    for future in admin(cluster, 3).alter_configs([legacy]).values():
        future.result(timeout=30)
    for broker in cluster.ids:
        cluster.wait_until(
            lambda b=broker: (
                described(cluster, b, "kconf")["config_overrides"] == {"retention.ms": 7200000}
            ),
            message=f"legacy configs on broker {broker}",
        )
    accepted = produce(cluster, leader, "kconf", 0, ["y"])
    assert accepted.status_code == 200, accepted.text

    # A bad value is refused per resource, nothing changed.
    bad = ConfigResource("topic", "kconf", set_config={"retention.ms": "soon"})
    with pytest.raises(Exception, match=r"INVALID_CONFIG|retention\.ms"):
        for future in client.alter_configs([bad]).values():
            future.result(timeout=30)
    assert described(cluster, 1, "kconf")["config_overrides"] == {"retention.ms": 7200000}


def test_create_partitions_places_and_serves_new_partitions(cluster: Cluster) -> None:
    create_topic(cluster, "kgrow", partitions=2, rf=2)
    client = admin(cluster, 3)
    # validate_only writes nothing.
    for future in client.create_partitions(
        [NewPartitions("kgrow", 6)], validate_only=True
    ).values():
        future.result(timeout=30)
    assert len(described(cluster, 1, "kgrow")["partitions"]) == 2
    for future in client.create_partitions([NewPartitions("kgrow", 6)]).values():
        future.result(timeout=60)
    with pytest.raises(Exception, match="INVALID_PARTITIONS"):
        for future in client.create_partitions([NewPartitions("kgrow", 3)]).values():
            future.result(timeout=30)

    # Every broker knows six partitions; the new ones spread their replicas and leaders.
    for broker in cluster.ids:
        cluster.wait_until(
            lambda b=broker: (
                all(p["leader"] >= 0 for p in described(cluster, b, "kgrow")["partitions"])
                and len(described(cluster, b, "kgrow")["partitions"]) == 6
            ),
            message=f"six led partitions on broker {broker}",
        )
    parts = described(cluster, 1, "kgrow")["partitions"]
    assert all(len(set(p["replicas"])) == 2 for p in parts)
    assert {p["leader"] for p in parts[2:]} == set(cluster.ids)  # four new, three brokers
    for p in parts:
        wait_isr(cluster, "kgrow", p["replicas"], p["partition"])

    # librdkafka produces to and consumes from every partition, new ones included.
    producer = Producer(
        {"bootstrap.servers": cluster.kafka_bootstrap(2), "acks": "all", "linger.ms": 5}
    )
    for i in range(60):
        producer.produce("kgrow", value=b"%d" % i, partition=i % 6)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": cluster.kafka_bootstrap(1), "group.id": "kgrow-reader"}
    )
    seen: dict[int, list[bytes]] = {}
    try:
        consumer.assign([TopicPartition("kgrow", p, 0) for p in range(6)])
        cluster.wait_until(
            lambda: _poll_into(consumer, seen) >= 60, timeout=60, message="60 records read"
        )
    finally:
        consumer.close()
    for p in range(6):
        assert seen[p] == [b"%d" % i for i in range(p, 60, 6)]
    # And the followers of the new partitions hold them (the HTTP door of each replica).
    for p in parts[2:]:
        for broker in p["replicas"]:
            cluster.wait_until(
                lambda b=broker, q=p["partition"]: (
                    described(cluster, b, "kgrow")["partitions"][q]["log_end_offset"] == 10
                ),
                message=f"kgrow-{p['partition']} on broker {broker}",
            )


def _poll_into(consumer: Consumer, seen: dict[int, list[bytes]]) -> int:
    msg = consumer.poll(0.5)
    if msg is not None and msg.error() is None:
        seen.setdefault(msg.partition(), []).append(msg.value() or b"")
    return sum(len(v) for v in seen.values())


def _start_on(cluster: Cluster, broker: int, topic: str) -> int | None:
    found = find_partition({"topics": [described(cluster, broker, topic)]}, topic, 0)
    start: int | None = found["log_start_offset"]
    return start


def _checkpointed_start(data_dir: Path, topic: str) -> int | None:
    return OffsetCheckpointFile(data_dir / "log-start-offset-checkpoint").read().get((topic, 0))


def test_delete_records_is_followed_and_survives_restarts(cluster: Cluster) -> None:
    create_topic(cluster, "kdel", partitions=1, rf=3)
    values = [str(i) for i in range(100)]
    leader = cluster.leader("kdel")
    assert produce(cluster, leader, "kdel", 0, values).status_code == 200
    wait_isr(cluster, "kdel", cluster.ids)

    # Through a broker that does not lead: librdkafka sends it to the leader.
    via = next(b for b in cluster.ids if b != leader)
    (result,) = admin(cluster, via).delete_records([TopicPartition("kdel", 0, 40)]).values()
    deleted = result.result(timeout=60)
    assert deleted.low_watermark == 40
    # Answered once every replica moved its start and wrote it down.
    for broker in cluster.ids:
        assert _start_on(cluster, broker, "kdel") == 40
        assert _checkpointed_start(cluster.broker(broker).data_dir, "kdel") == 40

    # A follower killed and started again keeps its start (from its own disk).
    follower = next(b for b in cluster.ids if b != leader)
    cluster.kill(follower)
    assert _checkpointed_start(cluster.broker(follower).data_dir, "kdel") == 40
    cluster.restart(follower)
    assert _start_on(cluster, follower, "kdel") == 40
    wait_isr(cluster, "kdel", cluster.ids)

    # The leader killed: the new one starts at 40 too, and every acknowledged record
    # from there is there, in order (nothing lost; what was deleted does not return).
    cluster.kill(leader)
    new_leader = cluster.wait_until(
        lambda: (lead := cluster.leader("kdel")) not in (-1, leader) and lead,
        message="a new leader",
    )
    earliest = httpx.get(
        f"{cluster.url(new_leader)}/topics/kdel/partitions/0/offsets",
        params={"at": "earliest"},
        timeout=10,
    )
    assert earliest.status_code == 200, earliest.text
    assert earliest.json()["offset"] == 40
    records = cluster.wait_until(
        lambda: httpx.get(
            f"{cluster.url(new_leader)}/topics/kdel/partitions/0/records",
            params={"offset": 40, "max_bytes": 1 << 20},
            timeout=10,
        ).json()["records"],
        message="records from 40 at the new leader",
    )
    assert [r["value"] for r in records] == values[40:]
    gone = httpx.get(
        f"{cluster.url(new_leader)}/topics/kdel/partitions/0/records",
        params={"offset": 10},
        timeout=10,
    )
    assert gone.status_code == 416, gone.text
    cluster.restart(leader)
    assert _start_on(cluster, leader, "kdel") == 40
    wait_isr(cluster, "kdel", cluster.ids)

    # Past the high watermark: OFFSET_OUT_OF_RANGE, the start unchanged. Asked once the
    # preferred replica leads again (the controller moves it back within a second), by a
    # new client: librdkafka's admin does not retry a DeleteRecords sent to a stale leader.
    cluster.wait_until(lambda: cluster.leader("kdel") == leader, message="preferred leader back")
    fresh = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap(leader)})
    (beyond,) = fresh.delete_records([TopicPartition("kdel", 0, 500)]).values()
    with pytest.raises(Exception, match=r"OFFSET_OUT_OF_RANGE|out of range"):
        beyond.result(timeout=30)
    assert _start_on(cluster, cluster.leader("kdel"), "kdel") == 40


def test_the_http_door_changes_the_cluster_through_the_same_topology(cluster: Cluster) -> None:
    create_topic(cluster, "hadmin", partitions=1, rf=3)
    # PUT configs at broker 3: every broker applies them.
    answer = httpx.put(
        f"{cluster.url(3)}/topics/hadmin/configs",
        json={"configs": {"retention.bytes": 1 << 30}},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    for broker in cluster.ids:
        cluster.wait_until(
            lambda b=broker: (
                described(cluster, b, "hadmin")["config_overrides"] == {"retention.bytes": 1 << 30}
            ),
            message=f"HTTP-set configs on broker {broker}",
        )
    # Grown at broker 2: the answer lists three led partitions.
    answer = httpx.post(f"{cluster.url(2)}/topics/hadmin/partitions", json={"count": 3}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert [p["leader"] >= 0 for p in answer.json()["partitions"]] == [True] * 3
    # DeleteRecords at a broker that does not lead: 307 to the leader, which answers once
    # every replica moved its start.
    assert produce(cluster, cluster.leader("hadmin"), "hadmin", 0, ["a"] * 20).status_code == 200
    wait_isr(cluster, "hadmin", cluster.ids)
    leader = cluster.leader("hadmin")
    other = next(b for b in cluster.ids if b != leader)
    redirected = httpx.delete(
        f"{cluster.url(other)}/topics/hadmin/partitions/0/records", params={"before": 15}
    )
    assert redirected.status_code == 307, redirected.text
    answer = httpx.delete(redirected.headers["location"], timeout=60)
    assert (answer.status_code, answer.json()) == (200, {"low_watermark": 15}), answer.text
    for broker in cluster.ids:
        assert _start_on(cluster, broker, "hadmin") == 15


def test_a_follower_down_during_delete_records_inside_a_batch_catches_up(
    cluster: Cluster,
) -> None:
    """A follower is down while the leader takes a batch of 100 records and deletes up to
    the middle of it. Started again, its next offset is gone at the leader: it starts over
    at the leader's start, is answered the whole batch holding it, and must append it and
    rejoin the ISR (it fetched that batch again and again before), holding nothing below
    the start."""
    create_topic(cluster, "kdelmid", partitions=1, rf=3)
    leader = cluster.leader("kdelmid")
    assert produce(cluster, leader, "kdelmid", 0, ["a"] * 10).status_code == 200
    wait_isr(cluster, "kdelmid", cluster.ids)
    follower = next(b for b in cluster.ids if b != leader)
    cluster.kill(follower)
    others = [b for b in cluster.ids if b != follower]
    wait_isr(cluster, "kdelmid", others)
    values = [str(i) for i in range(10, 110)]
    assert produce(cluster, leader, "kdelmid", 0, values).status_code == 200  # one batch
    answer = httpx.delete(
        f"{cluster.url(leader)}/topics/kdelmid/partitions/0/records",
        params={"before": 60},
        timeout=60,
    )
    assert (answer.status_code, answer.json()) == (200, {"low_watermark": 60}), answer.text
    cluster.restart(follower)
    wait_isr(cluster, "kdelmid", cluster.ids)
    cluster.wait_until(
        lambda: _start_on(cluster, follower, "kdelmid") == 60,
        message="the restarted follower's start at 60",
    )
    found = find_partition({"topics": [described(cluster, follower, "kdelmid")]}, "kdelmid", 0)
    assert found["log_end_offset"] == 110
    assert _checkpointed_start(cluster.broker(follower).data_dir, "kdelmid") == 60


def test_a_broker_down_during_topic_changes_takes_them_at_its_next_start(
    cluster: Cluster,
) -> None:
    """Partitions added and configs changed while a broker is down: the new replicas go
    to the live brokers, and the broker, started again, knows the new partitions (and
    their leaders) and applies the new configs from ZooKeeper."""
    create_topic(cluster, "kaway", partitions=1, rf=2)
    away = 3
    assert cluster.stop_broker(away) == 0  # its registration goes at once

    def live(via: int) -> list[int]:
        brokers = httpx.get(f"{cluster.url(via)}/metadata", timeout=10).json()["brokers"]
        return [b["id"] for b in brokers]

    for via in (1, 2):
        cluster.wait_until(
            lambda v=via: away not in live(v), message=f"broker {via} sees {away} gone"
        )
    grown = httpx.post(f"{cluster.url(1)}/topics/kaway/partitions", json={"count": 4}, timeout=60)
    assert grown.status_code == 200, grown.text
    assert all(away not in p["replicas"] for p in grown.json()["partitions"][1:])
    changed = httpx.put(
        f"{cluster.url(2)}/topics/kaway/configs",
        json={"configs": {"retention.ms": 123_456}},
        timeout=30,
    )
    assert changed.status_code == 200, changed.text
    cluster.restart(away)
    seen = described(cluster, away, "kaway")
    assert seen["config_overrides"] == {"retention.ms": 123456}
    cluster.wait_until(
        lambda: (
            [p["leader"] >= 0 for p in described(cluster, away, "kaway")["partitions"]]
            == [True] * 4
        ),
        message="four led partitions at the restarted broker",
    )
