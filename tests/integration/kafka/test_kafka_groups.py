"""Consumer groups through the Kafka door: librdkafka, kafka-python and aiokafka subscribe
with a group.id (the classic protocol, their own assignors), share one group through
rebalances, commit, resume, and are seen over HTTP like any group."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from kafka_harness import (
    KafkaBroker,
    kio_call,
    restart_broker,
    start_broker,
    stop_broker,
    wait_for,
)

PARTITIONS = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One broker for the module; a short initial rebalance delay and a low minimum
    session (so static members' sessions and rebalances are quick to wait for)."""
    b = start_broker(
        tmp_path_factory.mktemp("kgroups"),
        ("LOGBUS_GROUP_INITIAL_REBALANCE_DELAY_MS", "100"),
        ("LOGBUS_GROUP_MIN_SESSION_TIMEOUT_MS", "1000"),
    )
    yield b
    stop_broker(b)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _topic(broker: KafkaBroker) -> str:
    topic = _name("kg")
    r = httpx.post(f"{broker.url}/topics", json={"name": topic, "partitions": PARTITIONS})
    assert r.status_code == 201, r.text
    return topic


def _produce(broker: KafkaBroker, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for v in values:
        producer.produce(topic, key=str(v).encode(), value=str(v).encode())
    assert producer.flush(30) == 0


class Member(threading.Thread):
    """A group member polling in a thread of its own: each record is noted, then its
    offset committed synchronously before the next poll (so a rebalance, which the
    clients run inside poll, never hands a processed record to another member)."""

    def __init__(self, name: str, seen: list[tuple[str, int]], lock: threading.Lock) -> None:
        super().__init__(daemon=True, name=name)
        self.seen, self.lock = seen, lock
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def note(self, value: bytes) -> None:
        with self.lock:
            self.seen.append((self.name, int(value)))

    def run(self) -> None:
        try:
            self.loop()
        except BaseException as exc:  # surfaced by the test
            self.error = exc


class RdMember(Member):
    def __init__(self, broker: KafkaBroker, group: str, topic: str, strategy: str, *a: Any):
        super().__init__("librdkafka", *a)
        self.consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "partition.assignment.strategy": strategy,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300,
            }
        )
        self.consumer.subscribe([topic])

    def loop(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            self.note(msg.value())
            # A commit refused in a rebalance would hand the record out again (and fail
            # the test's exactly-once check).
            with contextlib.suppress(KafkaException):
                self.consumer.commit(msg, asynchronous=False)
        self.consumer.close()  # LeaveGroup


class PyMember(Member):
    def __init__(self, broker: KafkaBroker, group: str, topic: str, strategy: str, *a: Any):
        super().__init__("kafka-python", *a)
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
        self.consumer = KafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=[assignor[strategy]],
            heartbeat_interval_ms=300,
        )

    def loop(self) -> None:
        from kafka.errors import CommitFailedError

        while not self.stop.is_set():
            for _tp, records in self.consumer.poll(timeout_ms=200).items():
                for record in records:
                    self.note(record.value)
                    with contextlib.suppress(CommitFailedError):
                        self.consumer.commit()
        self.consumer.close()


class AioMember(Member):
    def __init__(self, broker: KafkaBroker, group: str, topic: str, strategy: str, *a: Any):
        super().__init__("aiokafka", *a)
        self.args = (broker, group, topic, strategy)

    def loop(self) -> None:
        asyncio.run(self.aloop())

    async def aloop(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from aiokafka.errors import CommitFailedError

        broker, group, topic, strategy = self.args
        assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=(assignor[strategy],),
            heartbeat_interval_ms=300,
        )
        await consumer.start()
        try:
            while not self.stop.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                for tp, records in batches.items():
                    for record in records:
                        assert record.value is not None
                        self.note(record.value)
                        with contextlib.suppress(CommitFailedError):
                            await consumer.commit({tp: record.offset + 1})
        finally:
            await consumer.stop()


def _describe(broker: KafkaBroker, group: str) -> dict[str, Any]:
    r = httpx.get(f"{broker.url}/groups/{group}", timeout=30)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _stable(broker: KafkaBroker, group: str, members: int) -> bool:
    """The group's generation has ``members`` members, each with an assignment."""
    r = httpx.get(f"{broker.url}/groups/{group}", timeout=30)
    if r.status_code == 404:  # not joined yet
        return False
    d = r.json()
    return bool(
        d["state"] == "Stable"
        and len(d["members"]) == members
        and all(m["assignment"] for m in d["members"])
    )


def _run_phases(
    broker: KafkaBroker, topic: str, group: str, kinds: list[type[Member]], strategy: str
) -> list[tuple[str, int]]:
    """Members join one by one (a rebalance each, records produced between), then the
    first leaves; returns every record consumed, by whom. Every generation ran the
    clients' ``strategy`` (the protocol the coordinator chose)."""
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()
    members: list[Member] = []
    produced = 0
    assignors: set[str] = set()

    def batch(n: int = 60) -> None:
        nonlocal produced
        _produce(broker, topic, range(produced, produced + n))
        produced += n
        wait_for(f"{produced} records consumed", lambda: len(seen) >= produced)

    try:
        for i, kind in enumerate(kinds):
            member = kind(broker, group, topic, strategy, seen, lock)
            member.start()
            members.append(member)
            # Wait until the group's generation has every member: a rebalance completed.
            wait_for(
                f"{i + 1} members in a stable group", lambda n=i + 1: _stable(broker, group, n)
            )
            assignors.add(_describe(broker, group)["assignor"])
            batch()
        first = members.pop(0)
        first.stop.set()
        first.join(30)
        wait_for(
            "the group rebalanced without the member that left",
            lambda: _stable(broker, group, len(members)),
        )
        batch()
        assert len(seen) == produced
    finally:
        for member in members:
            member.stop.set()
        for member in members:
            member.join(30)
    errors = [m.error for m in [*members] if m.error is not None]
    assert not errors, errors
    assert assignors == {strategy}, "the generations ran another assignor"
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_three_clients_share_a_group_through_rebalances_exactly_once(
    broker: KafkaBroker, strategy: str
) -> None:
    topic, group = _topic(broker), _name("g")
    seen = _run_phases(broker, topic, group, [RdMember, PyMember, AioMember], strategy)
    values = sorted(v for _, v in seen)
    assert values == list(range(len(values))), "a record was lost or consumed twice"
    assert {who for who, _ in seen} == {"librdkafka", "kafka-python", "aiokafka"}
    # The commits are the group's offsets over HTTP: nothing left to consume.
    described = _describe(broker, group)
    assert described["protocol"] == "classic" and described["state"] == "Empty"
    assert len(described["offsets"]) == PARTITIONS
    assert all(o["lag"] == 0 for o in described["offsets"])
    listed = httpx.get(f"{broker.url}/groups").json()["groups"]
    assert {"group": group, "protocol": "classic", "state": "Empty"}.items() <= next(
        g for g in listed if g["group"] == group
    ).items()

    # A new member of the group resumes from the committed offsets: only what is new.
    _produce(broker, topic, range(10_000, 10_005))
    seen2: list[tuple[str, int]] = []
    member = PyMember(broker, group, topic, strategy, seen2, threading.Lock())
    member.start()
    try:
        wait_for("the records produced since", lambda: len(seen2) >= 5)
    finally:
        member.stop.set()
        member.join(30)
    assert sorted(v for _, v in seen2) == list(range(10_000, 10_005))


@pytest.mark.slow
def test_librdkafka_cooperative_sticky_rebalances_complete(broker: KafkaBroker) -> None:
    topic, group = _topic(broker), _name("coop")
    seen = _run_phases(broker, topic, group, [RdMember, RdMember], "cooperative-sticky")
    values = sorted(v for _, v in seen)
    assert values == list(range(len(values)))


def test_a_static_member_restarts_without_a_rebalance(broker: KafkaBroker) -> None:
    topic, group = _topic(broker), _name("static")
    _produce(broker, topic, range(6))

    def consumer() -> Consumer:
        c = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "group.instance.id": "instance-1",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 30_000,
            }
        )
        c.subscribe([topic])
        return c

    first = consumer()
    assert len(_consume(first, 6)) == 6
    before = _describe(broker, group)
    first.close()  # a static member sends no LeaveGroup: its partitions wait for it
    assert len(_describe(broker, group)["members"]) == 1

    second = consumer()
    try:
        _produce(broker, topic, range(6, 8))
        assert sorted(_consume(second, 2)) == [6, 7]
        after = _describe(broker, group)
        # Same generation (no rebalance), a new member id for the same instance.
        assert after["group_epoch"] == before["group_epoch"]
        ((old,), (new,)) = before["members"], after["members"]
        assert new["instance_id"] == old["instance_id"] == "instance-1"
        assert new["member_id"] != old["member_id"]
        assert new["assignment"] == old["assignment"]
        # A reset is refused while the group has members, as for any group.
        r = httpx.post(
            f"{broker.url}/groups/{group}/offsets/reset", json={"topic": topic, "to": "earliest"}
        )
        assert r.status_code == 409 and r.json()["error_code"] == "NON_EMPTY_GROUP"
    finally:
        second.close()
    # A static member's close sends no LeaveGroup: its session ends it. Until then the
    # group keeps it; a reset after LeaveGroup by instance id (kafka-python's admin) works.
    from kafka import KafkaAdminClient
    from kafka.admin import MemberToRemove

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.remove_group_members(group, [MemberToRemove(group_instance_id="instance-1")])
    finally:
        admin.close()
    r = httpx.post(
        f"{broker.url}/groups/{group}/offsets/reset", json={"topic": topic, "to": "earliest"}
    )
    assert r.status_code == 200, r.text


def _consume(consumer: Consumer, count: int, timeout: float = 60) -> list[int]:
    """The values of the next ``count`` records ``consumer`` polls (fewer on timeout)."""
    values: list[int] = []
    deadline = time.monotonic() + timeout
    while len(values) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            values.append(int(msg.value()))
    return values


def test_a_classic_group_keeps_its_generation_across_a_broker_restart(
    broker: KafkaBroker,
) -> None:
    """The group's record (issue 19): the broker restarted on its data dir restores the
    generation and its members; librdkafka's member heartbeats on in it (no rebalance:
    its callbacks are not called again) and consumes what is produced since."""
    topic, group = _topic(broker), _name("restart")
    _produce(broker, topic, range(6))
    callbacks: list[str] = []
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 30_000,
            "heartbeat.interval.ms": 300,
        }
    )
    consumer.subscribe(
        [topic],
        on_assign=lambda _c, ps: callbacks.append(f"assign {len(ps)}"),
        on_revoke=lambda _c, ps: callbacks.append(f"revoke {len(ps)}"),
        on_lost=lambda _c, ps: callbacks.append(f"lost {len(ps)}"),
    )
    try:
        assert sorted(_consume(consumer, 6)) == list(range(6))
        before = _describe(broker, group)
        assert before["state"] == "Stable" and callbacks == [f"assign {PARTITIONS}"]
        consumer.commit(asynchronous=False)

        restart_broker(broker)
        assert _describe(broker, group)["members"] == before["members"]
        _produce(broker, topic, range(6, 12))
        assert sorted(_consume(consumer, 6)) == list(range(6, 12))
        # Heartbeats went on in the restored generation: nothing rebalanced.
        time.sleep(1)
        after = _describe(broker, group)
        assert (after["state"], after["group_epoch"]) == ("Stable", before["group_epoch"])
        assert after["members"] == before["members"]
        assert callbacks == [f"assign {PARTITIONS}"]
    finally:
        consumer.close()
    assert _describe(broker, group)["state"] == "Empty"


def test_admin_apis_list_describe_delete_and_offset_delete(broker: KafkaBroker) -> None:
    """ListGroups, DescribeGroups, OffsetDelete, DeleteGroups through kafka-python's admin
    client, over a classic group and an HTTP (KIP-848) group alike."""
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import GroupSubscribedToTopicError, NoError

    topic, group, http_group = _topic(broker), _name("adm"), _name("http")
    r = httpx.post(
        f"{broker.url}/groups/{http_group}/offsets",
        json={"member_epoch": -1, "offsets": [{"topic": topic, "partition": 0, "offset": 0}]},
    )
    assert r.status_code == 200, r.text
    _produce(broker, topic, range(6))
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "client.id": "billing-7",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        got = 0
        deadline = time.monotonic() + 60
        while got < 6 and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got += 1
                c.commit(msg, asynchronous=False)
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert (listed[group]["group_type"], listed[group]["group_state"]) == ("classic", "Stable")
        assert listed[http_group]["group_type"] == "consumer"
        desc = admin.describe_groups([group, "no-such-group"])
        assert (desc[group]["group_state"], desc[group]["protocol_data"]) == ("Stable", "range")
        (member,) = desc[group]["members"]
        assert member["member_metadata"]["topics"] == [topic]
        # As Kafka describes a member: its client.id, "/<address>", an id made from both.
        assert (member["client_id"], member["client_host"]) == ("billing-7", "/127.0.0.1")
        assert member["member_id"].startswith("billing-7-")
        assert member["member_assignment"]["assigned_partitions"] == [
            {"topic": topic, "partitions": list(range(PARTITIONS))}
        ]
        assert desc["no-such-group"]["group_state"] == "Dead"
        # Offsets of a topic the members subscribe to stay; the HTTP group's go.
        tp = TopicPartition(topic, 0)
        assert admin.delete_group_offsets(group, [tp]) == {tp: GroupSubscribedToTopicError}
        assert admin.delete_group_offsets(http_group, [tp]) == {tp: NoError}
        assert httpx.get(f"{broker.url}/groups/{http_group}/offsets").json()["offsets"] == []
        # A group with members is not deleted.
        assert admin.delete_groups([group]) == {group: "NonEmptyGroupError"}
    finally:
        c.close()
    deleted = admin.delete_groups([group, http_group, "no-such-group"])
    assert deleted == {group: "OK", http_group: "OK", "no-such-group": "GroupIdNotFoundError"}
    assert httpx.get(f"{broker.url}/groups/{group}").status_code == 404
    admin.close()


def test_a_classic_member_cannot_join_a_consumer_protocol_group(
    broker: KafkaBroker, tmp_path: Path
) -> None:
    """One group, one protocol: librdkafka's JoinGroup to a group with an HTTP member is
    INCONSISTENT_GROUP_PROTOCOL, which it reports as a fatal consumer error."""
    topic, group = _topic(broker), _name("mixed")
    r = httpx.post(
        f"{broker.url}/groups/{group}/heartbeat",
        json={"member_epoch": 0, "subscribed_topics": [topic]},
    )
    assert r.status_code == 200, r.text
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        error = None
        while error is None and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error():
                error = msg.error()
        assert error is not None and "INCONSISTENT_GROUP_PROTOCOL" in error.name()
    finally:
        c.close()


@pytest.mark.parametrize("version", range(10))
def test_every_join_group_version_forms_syncs_heartbeats_and_leaves(
    broker: KafkaBroker, version: int
) -> None:
    """The wire at each advertised JoinGroup version (SyncGroup, Heartbeat, LeaveGroup at
    the nearest they define; then ListGroups, DescribeGroups, DeleteGroups): one member,
    KIP-394's MEMBER_ID_REQUIRED from v4, a generation it leads and its assignment back."""
    import datetime
    import importlib

    from kio.index import load_request_schema, load_response_schema
    from kio.schema.errors import ErrorCode

    from app.kafka.encode import build

    def call(api: int, v: int, **fields: Any) -> Any:
        request = load_request_schema(api, v)
        module = importlib.import_module(request.__module__)
        nested = {
            name: getattr(module, cls)
            for name, cls in (
                ("protocols", "JoinGroupRequestProtocol"),
                ("assignments", "SyncGroupRequestAssignment"),
                ("members", "MemberIdentity"),
            )
            if hasattr(module, cls)
        }
        values = {
            k: tuple(build(nested[k], **x) for x in fields[k]) if k in nested else fields[k]
            for k in fields
        }
        return kio_call(broker, build(request, **values), load_response_schema(api, v))

    group = _name(f"v{version}")
    join = {
        "group_id": group,
        "session_timeout": datetime.timedelta(seconds=10),
        "rebalance_timeout": datetime.timedelta(seconds=10),
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"m"}],
    }
    joined = call(11, version, **join)
    if version >= 4:
        assert joined.error_code == ErrorCode.member_id_required and joined.member_id
        joined = call(11, version, **{**join, "member_id": joined.member_id})
    assert joined.error_code == ErrorCode.none and joined.generation_id == 1
    me = joined.member_id
    assert joined.leader == me and [m.member_id for m in joined.members] == [me]
    common = {"group_id": group, "generation_id": 1, "member_id": me}
    synced = call(
        14, min(version, 5), **common, assignments=[{"member_id": me, "assignment": b"a"}]
    )
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"a")
    stale = call(12, min(version, 4), **{**common, "generation_id": 0})
    assert stale.error_code == ErrorCode.illegal_generation
    assert call(12, min(version, 4), **common).error_code == ErrorCode.none
    listed = call(16, min(version, 5))
    assert group in {g.group_id for g in listed.groups}
    described = call(15, min(version, 6), groups=[group], include_authorized_operations=False)
    assert described.groups[0].group_state == "Stable"
    left = call(
        13,
        min(version, 5),
        group_id=group,
        member_id=me,
        members=[{"member_id": me, "group_instance_id": None}],
    )
    assert left.error_code == ErrorCode.none
    deleted = call(42, min(version, 2), groups_names=[group])
    assert deleted.results[0].error_code == ErrorCode.none
