"""Topic changes in a cluster, at the replica manager. Config changes: the new overrides
are built from the topic's ZooKeeper assignment inside the compare-and-set, not from this
broker's view of it, which may not have a change made through another broker yet; a bad
value is refused before anything is written. Assignments from the topic's watch: one of
a deleted topic, arriving after a topic of that name was created again, changes nothing.

The ReplicaManager is real; ZooKeeper is a fake holding one topic's assignment and its
znode version (``get_topic_versioned``/``set_topic``, the two calls a change makes), and
a write reaches this broker's view at once, as its watch would deliver it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from kazoo.exceptions import ConnectionLoss
from kio.schema.errors import ErrorCode

from app.api.produce_service import plan_topic
from app.common.errors import (
    KafkaStorageError,
    NotLeaderOrFollower,
    PartitionLimitExceeded,
    RequestTimedOut,
    UnknownTopicOrPartition,
)
from app.core.log.config import LogConfig
from app.core.log.manager import LogManager
from app.core.log.topic_rules import check_new_topic
from app.core.replication.config import ReplicaConfig
from app.core.replication.manager import ReplicaManager
from app.core.replication.state import PartitionState, TopicAssignment
from app.kafka.apis.admin import create_partitions, create_topics, incremental_alter_configs
from app.kafka.apis.base import Context

TOPIC = "orders"
SET, DELETE, APPEND = 0, 1, 2
TOPIC_RESOURCE = 2


class FakeZooKeeper:
    def __init__(self, replicas: ReplicaManager, assignment: TopicAssignment) -> None:
        self.replicas = replicas
        self.assignment = assignment
        self.version = 3
        self.writes: list[TopicAssignment] = []
        # Another broker's write lands between this broker's read and its write, once.
        self.race: dict[str, Any] | None = None
        # Or the topic is deleted and created again there (this broker's watches deliver
        # both at once).
        self.recreated: TopicAssignment | None = None
        self.created: dict[str, TopicAssignment] = {}

    def get_topic_versioned(self, name: str) -> tuple[TopicAssignment, int] | None:
        assert name == TOPIC
        return self.assignment, self.version

    def create_topic(self, name: str, assignment: TopicAssignment) -> None:
        # Created in ZooKeeper; no watch here delivers it (no leader ever comes).
        self.created[name] = assignment

    def set_topic(self, name: str, assignment: TopicAssignment, version: int) -> bool:
        if self.race is not None:
            configs = {**self.assignment.configs, **self.race}
            self.assignment = dataclasses.replace(self.assignment, configs=configs)
            self.version += 1
            self.race = None
        if self.recreated is not None:
            self.assignment, self.version = self.recreated, 0
            self.replicas.assignments[name] = self.recreated
            self.recreated = None
        if version != self.version:
            return False
        self.assignment, self.version = assignment, version + 1
        self.writes.append(assignment)
        self.replicas.assignments[name] = assignment  # this broker's watch
        return True


def replica_manager(logs: Any) -> ReplicaManager:
    """Broker 1's replica manager over ``logs`` (its ZooKeeper never reached: each test
    sets the store it needs)."""
    settings = ReplicaConfig(zookeeper="127.0.0.1:1", broker_id=1, url="http://127.0.0.1:9")
    return ReplicaManager(settings, logs, lambda log: None)


@contextlib.contextmanager
def broker_on_disk(tmp_path: Path) -> Iterator[tuple[LogManager, ReplicaManager]]:
    """Broker 1's replica manager over a real log manager in ``tmp_path``, shut down after."""
    logs = LogManager(tmp_path / "data")
    logs.start()
    try:
        yield logs, replica_manager(logs)
    finally:
        logs.shutdown()


def cluster_broker(zk_configs: dict[str, Any]) -> tuple[ReplicaManager, FakeZooKeeper]:
    """Broker 1's replica manager, whose view of the topic has no overrides yet, while
    ZooKeeper has ``zk_configs`` (written through another broker)."""
    # This broker's log manager: its view of the topic, no overrides yet.
    logs: Any = SimpleNamespace(
        default_config=LogConfig(),
        topic_overrides=lambda name: {},
        topic_config=lambda name: LogConfig(),
    )
    replicas = replica_manager(logs)
    stale = TopicAssignment("id-1", ((1, 2, 3),), {})
    replicas.assignments[TOPIC] = stale
    zk = FakeZooKeeper(replicas, dataclasses.replace(stale, configs=zk_configs))
    replicas.store = zk  # type: ignore[assignment]
    return replicas, zk


def growing_cluster() -> tuple[ReplicaManager, FakeZooKeeper]:
    """cluster_broker's, in a cluster of brokers 1-3 where a topic may be created or
    grown: this broker's share checks pass, and its controller is not kicked."""
    replicas, zk = cluster_broker({})
    replicas.brokers = {1: None, 2: None, 3: None}  # type: ignore[dict-item]
    replicas.logs.partition_budget = SimpleNamespace(check_per_topic=lambda *a: None)
    replicas.logs.check_can_host = lambda *a: None
    replicas.controller.kick = lambda: None  # type: ignore[method-assign]
    return replicas, zk


def normalized(configs: dict[str, object]) -> dict[str, object]:
    return dict(check_new_topic(TOPIC, 1, configs, LogConfig())[1])


async def incremental(
    replicas: ReplicaManager, changes: list[tuple[int, str, str | None]], *, validate: bool = False
) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v1 through the Kafka door of ``replicas``' broker."""
    ctx = Context(
        state=SimpleNamespace(manager=replicas.logs, topology=replicas),  # type: ignore[arg-type]
        advertised=("127.0.0.1", 9092),
        txn=lambda: None,
        groups=lambda: None,
    )
    body = SimpleNamespace(
        validate_only=validate,
        resources=[
            SimpleNamespace(
                resource_type=TOPIC_RESOURCE,
                resource_name=TOPIC,
                configs=[
                    SimpleNamespace(config_operation=op, name=name, value=value)
                    for op, name, value in changes
                ],
            )
        ],
    )
    answer = await incremental_alter_configs(ctx, body, 1)
    (result,) = answer.responses
    return int(result.error_code), result.error_message


def test_an_incremental_change_keeps_a_change_made_through_another_broker() -> None:
    async def main() -> None:
        replicas, zk = cluster_broker(normalized({"retention.ms": 3_600_000}))
        code, message = await incremental(replicas, [(SET, "segment.bytes", "1048576")])
        assert code == ErrorCode.none, message
        # Built on ZooKeeper's overrides: retention.ms (set elsewhere) survives.
        want = normalized({"retention.ms": 3_600_000, "segment.bytes": 1_048_576})
        assert zk.assignment.configs == want
        assert replicas.assignments[TOPIC].configs == want

    asyncio.run(main())


def test_an_incremental_change_that_loses_its_compare_and_set_is_made_again_on_the_new_set() -> (
    None
):
    async def main() -> None:
        replicas, zk = cluster_broker({})
        zk.race = normalized({"retention.ms": 60_000})
        code, message = await incremental(
            replicas, [(APPEND, "cleanup.policy", "compact"), (DELETE, "segment.bytes", None)]
        )
        assert code == ErrorCode.none, message
        assert zk.assignment.configs == normalized(
            {"retention.ms": 60_000, "cleanup.policy": "delete,compact"}
        )

    asyncio.run(main())


def test_a_change_for_a_topic_deleted_and_created_again_meanwhile_leaves_the_new_one() -> None:
    """The config change and the partitions were asked of "orders" (id-1); it is deleted
    and created again (id-2) while the change is being written: the compare-and-set is
    lost, and the change is not made again on the new topic."""

    async def main() -> None:
        for ask in ("configs", "partitions"):
            replicas, zk = cluster_broker({})
            replicas.logs.partition_budget = SimpleNamespace(check_per_topic=lambda *a: None)
            replicas.logs.check_can_host = lambda *a: None
            replicas.brokers = {1: None, 2: None, 3: None}  # type: ignore[dict-item]
            new = TopicAssignment("id-2", ((2, 3, 1),), {})
            zk.recreated = new
            if ask == "configs":
                code, message = await incremental(replicas, [(SET, "retention.ms", "1000")])
                assert code == ErrorCode.unknown_topic_or_partition, message
                assert message is not None and "created again" in message
            else:
                with pytest.raises(UnknownTopicOrPartition, match="created again"):
                    await replicas.create_partitions(TOPIC, 3, timeout_ms=1000)
            assert zk.writes == [] and zk.assignment == new, ask

    asyncio.run(main())


def test_a_bad_value_or_validate_only_writes_nothing() -> None:
    async def main() -> None:
        replicas, zk = cluster_broker({})
        code, message = await incremental(replicas, [(SET, "retention.ms", "soon")])
        assert code == ErrorCode.invalid_config, message
        code, message = await incremental(replicas, [(SET, "retention.ms", "1")], validate=True)
        assert code == ErrorCode.none, message
        code, message = await incremental(replicas, [(SET, "no.such.config", "1")])
        assert code == ErrorCode.invalid_config, message
        assert zk.writes == [] and zk.assignment.configs == {}

    asyncio.run(main())


def test_an_assignment_of_a_deleted_topic_does_not_touch_the_one_created_again(
    tmp_path: Path,
) -> None:
    """The old topic's watch delivered a change (configs, a partition) just before the
    topic was deleted; its apply ran once "orders" was created again here, before the new
    topic's own first apply."""

    async def main() -> None:
        with broker_on_disk(tmp_path) as (logs, replicas):
            replicas.store = SimpleNamespace(  # type: ignore[assignment]
                watch_state=lambda name, p, cb: None
            )
            replicas._watched.add(TOPIC)
            logs.create_topic(TOPIC, 1, {}, topic_id="new-id", hosted=[0])
            old = TopicAssignment("old-id", ((1, 2), (1, 2)), {"retention.ms": 1_000})
            await replicas._apply_assignment(TOPIC, old)
            assert logs.topic_overrides(TOPIC) == {} and logs.partition_count(TOPIC) == 1
            assert TOPIC not in replicas.assignments
            new = TopicAssignment("new-id", ((1, 2),), {})
            await replicas._apply_assignment(TOPIC, new)
            assert replicas.assignments[TOPIC] == new
            assert sorted(replicas.partitions) == [(TOPIC, 0)]

    asyncio.run(main())


class OfflineStore:
    """The calls a broker's topic applies make: its reports of offline replicas, and the
    topic's watch (kept, to deliver its later assignments)."""

    def __init__(self, assignment: TopicAssignment | None = None) -> None:
        self.assignment = assignment
        self.session_id = 1
        self.reports: list[dict[str, tuple[str, list[int]]]] = []
        self.topic_watches: dict[str, Any] = {}

    def set_offline_replicas(self, broker_id: int, offline: dict[str, Any]) -> None:
        assert broker_id == 1
        self.reports.append(dict(offline))

    def get_topic(self, name: str) -> TopicAssignment | None:
        return self.assignment

    def watch_state(self, name: str, p: int, cb: Any) -> None:
        pass

    def watch_topic(self, name: str, cb: Any) -> None:
        self.topic_watches[name] = cb


async def settled(replicas: ReplicaManager) -> None:
    """Until the applies a watch spawned have run."""
    for _ in range(500):
        await asyncio.sleep(0.01)
        if not replicas._topic_tasks:
            return
    raise AssertionError("the watch's apply did not finish")


def test_replicas_this_broker_cannot_create_are_reported_offline_its_view_following_zookeeper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A grown topic whose new replicas here fail (a disk error): the broker logs why
    and reports those replicas offline (the controller leaves it out of their election
    and ISR), and its view follows ZooKeeper's assignment: 4 partitions and the new
    configs in its metadata answers (it kept 1 partition and the old configs), those
    replicas offline in them and not served. An unchanged assignment is not tried again;
    a changed one is: made, the report goes and the new replicas take their known
    state; a deleted topic's report goes with it."""

    async def main() -> None:
        with broker_on_disk(tmp_path) as (logs, replicas):
            replicas.brokers = {1: None, 2: None, 3: None}  # type: ignore[dict-item]
            store = OfflineStore()
            replicas.store = store  # type: ignore[assignment]
            replicas._watched.add(TOPIC)
            logs.create_topic(TOPIC, 1, {}, topic_id="id-1", hosted=[0])
            first = TopicAssignment("id-1", ((1, 2),), {})
            await replicas._apply_assignment(TOPIC, first)
            assert store.reports == []
            grown = TopicAssignment(
                "id-1", ((1, 2), (2, 1), (1, 2), (2, 3)), {"retention.ms": 60_000}
            )
            real = logs.apply_cluster_assignment
            tries = []

            def broken(*args: Any, **kwargs: Any) -> bool:
                tries.append(args)
                raise KafkaStorageError("the log directory is not writable")

            monkeypatch.setattr(logs, "apply_cluster_assignment", broken)
            with caplog.at_level(logging.ERROR):
                await replicas._apply_assignment(TOPIC, grown)
            assert store.reports == [{TOPIC: ("id-1", [1, 2])}]
            assert "not writable" in caplog.text and "[1, 2] are reported offline" in caplog.text
            # This broker's metadata: ZooKeeper's assignment, not what it had.
            assert replicas.partition_count(TOPIC) == 4
            assert replicas.replicas_of(TOPIC, 3) == (2, 3)
            assert [replicas.offline_replicas(TOPIC, p) for p in range(4)] == [[], [1], [1], []]
            config, overrides = replicas.topic_configs(TOPIC)
            assert overrides == {"retention.ms": 60_000} and config.retention_ms == 60_000
            assert logs.partition_count(TOPIC) == 1, "its logs: what it could make"
            assert sorted(replicas.partitions) == [(TOPIC, 0)]
            replicas._apply_state(TOPIC, 1, PartitionState(2, 4, (2,)), 7)
            with pytest.raises(NotLeaderOrFollower):
                replicas.leader_partition(TOPIC, 1)
            assert replicas.replica_log(TOPIC, 1) is None, "not served"
            await replicas._apply_assignment(TOPIC, grown)
            assert len(tries) == 1, "an unchanged assignment is not tried again"

            monkeypatch.setattr(logs, "apply_cluster_assignment", real)
            changed = dataclasses.replace(grown, configs={"retention.ms": 120_000})
            await replicas._apply_assignment(TOPIC, changed)
            assert store.reports[-1] == {}
            assert [replicas.offline_replicas(TOPIC, p) for p in range(4)] == [[]] * 4
            assert sorted(replicas.partitions) == [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)]
            assert replicas.partitions[(TOPIC, 1)].leader_epoch == 4, "its known state"
            assert logs.topic_overrides(TOPIC) == {"retention.ms": 120_000}

            await replicas._drop_topic(TOPIC)
            assert store.reports[-1] == {}

    asyncio.run(main())


def test_a_topic_this_broker_cannot_create_is_still_watched_and_created_at_its_next_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The topic could not be created here at all (no space left): its replicas are
    reported offline, the broker knows the topic as ZooKeeper has it and watches it, so
    a later change (new partitions, configs) reaches it: created then, with every
    partition it hosts, the report taken back. It had no watch: the topic stayed unknown
    here until a restart."""

    async def main() -> None:
        with broker_on_disk(tmp_path) as (logs, replicas):
            replicas._loop = asyncio.get_running_loop()
            replicas.brokers = {1: None, 2: None, 3: None}  # type: ignore[dict-item]
            audit = TopicAssignment("id-9", ((2, 1), (1, 2), (2, 3)), {})
            store = OfflineStore(audit)
            replicas.store = store  # type: ignore[assignment]
            replicas._watched.add("audit")
            real = logs.create_topic

            def refused(*args: Any, **kwargs: Any) -> None:
                raise KafkaStorageError("no space left on the device")

            monkeypatch.setattr(logs, "create_topic", refused)
            await replicas._add_topic("audit")
            assert store.reports[-1] == {"audit": ("id-9", [0, 1])}
            assert replicas.topics() == ["audit"] and replicas.partition_count("audit") == 3
            assert replicas.offline_replicas("audit", 0) == [1]
            assert "audit" in store.topic_watches, "watched all the same"
            # A produce here plans on the cluster's view (routed to the leader), not 404.
            state: Any = SimpleNamespace(topology=replicas)
            plan = plan_topic(state, logs, "audit")
            assert (plan.partitions, plan.exists) == (3, True)

            monkeypatch.setattr(logs, "create_topic", real)
            grown = TopicAssignment(
                "id-9", ((2, 1), (1, 2), (2, 3), (1, 3)), {"retention.ms": 5000}
            )
            assert store.topic_watches["audit"](grown) is True
            await settled(replicas)
            assert store.reports[-1] == {}
            assert logs.hosted_partitions("audit") == [0, 1, 3]
            assert logs.topic_overrides("audit") == {"retention.ms": 5000}
            assert sorted(replicas.partitions) == [("audit", 0), ("audit", 1), ("audit", 3)]
            await replicas._drop_topic("audit")
            assert store.reports[-1] == {}

    asyncio.run(main())


def test_create_partitions_checks_this_brokers_share_off_the_event_loop() -> None:
    """check_can_host takes the log manager's lock, which a worker thread may hold for a
    while (fsyncs): the loop goes on meanwhile, and the check's refusal still comes back
    as itself, nothing written."""

    async def main() -> None:
        replicas, zk = cluster_broker({})
        replicas.brokers = {1: None, 2: None, 3: None}  # type: ignore[dict-item]
        lock = threading.Lock()
        held, release, entered = threading.Event(), threading.Event(), threading.Event()
        refuse = False

        def hold() -> None:
            with lock:
                held.set()
                release.wait(10)

        def check_can_host(name: str, partitions: int) -> None:
            entered.set()
            with lock:
                if refuse:
                    raise PartitionLimitExceeded("no descriptors left", 10, "max_partitions")

        replicas.logs.partition_budget = SimpleNamespace(check_per_topic=lambda *a: None)
        replicas.logs.check_can_host = check_can_host
        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(5)
        try:
            task = asyncio.create_task(replicas.create_partitions(TOPIC, 4, validate_only=True))
            while not entered.is_set():
                await asyncio.sleep(0.01)
            # Here while the check waits for the lock: the loop was not blocked by it.
            await asyncio.sleep(0.05)
            assert not task.done(), "the loop ran while the lock was held"
        finally:
            release.set()
            holder.join()
        await task
        refuse = True
        with pytest.raises(PartitionLimitExceeded, match="no descriptors"):
            await replicas.create_partitions(TOPIC, 4)
        assert zk.writes == []

    asyncio.run(main())


def test_create_partitions_and_config_changes_honour_the_requests_timeout() -> None:
    """CreatePartitions through the Kafka door waits up to its timeout_ms for the new
    partitions' leaders (none come here): REQUEST_TIMED_OUT then, the partitions made; 0
    answers at once after the write, as Kafka. A config change this broker's watch has
    not delivered: REQUEST_TIMED_OUT after timeout_ms, at once with 0; written either way."""

    async def main() -> None:
        replicas, zk = growing_cluster()
        ctx = Context(
            state=SimpleNamespace(  # type: ignore[arg-type]
                manager=replicas.logs,
                topology=replicas,
                sticky=SimpleNamespace(forget=lambda name: None),
            ),
            advertised=("127.0.0.1", 9092),
            txn=lambda: None,
            groups=lambda: None,
        )

        async def grow(count: int, timeout_ms: int) -> tuple[int, str | None, float]:
            body = SimpleNamespace(
                topics=[SimpleNamespace(name=TOPIC, count=count, assignments=None)],
                timeout=timedelta(milliseconds=timeout_ms),
                validate_only=False,
            )
            began = time.monotonic()
            answer = await create_partitions(ctx, body, 3)
            (result,) = answer.results
            return int(result.error_code), result.error_message, time.monotonic() - began

        code, message, took = await grow(2, 0)
        assert code == ErrorCode.none and took < 5, (message, took)
        assert zk.assignment.partitions == 2
        code, message, took = await grow(3, 300)
        assert code == ErrorCode.request_timed_out and took < 5, (message, took)
        assert message is not None and "timeout_ms=300" in message and "made" in message
        assert zk.assignment.partitions == 3, "made all the same"

        zk.replicas = SimpleNamespace(assignments={})  # type: ignore[assignment]  # no watch
        await replicas.alter_topic_config(TOPIC, {"retention.ms": 1000}, timeout_ms=0)
        assert zk.assignment.configs == normalized({"retention.ms": 1000})
        with pytest.raises(RequestTimedOut, match="timeout_ms=200"):
            await replicas.alter_topic_config(TOPIC, {"retention.ms": 2000}, timeout_ms=200)
        assert zk.assignment.configs == normalized({"retention.ms": 2000})

    asyncio.run(main())


def test_create_topics_honours_the_requests_timeout_through_both_doors() -> None:
    """CreateTopics (the Kafka door) and POST /topics wait up to their timeout_ms for the
    new topic's leaders (none come here): REQUEST_TIMED_OUT then, the topic created; 0
    answers at once after the write (v5+: what was written; HTTP: 201, the partitions not
    seen here yet without leader). Both waited 30 s and answered LEADER_NOT_AVAILABLE."""
    from starlette.requests import Request

    from app.api.routers.topics import create_topic as http_create_topic

    async def main() -> None:
        replicas, zk = growing_cluster()
        state: Any = SimpleNamespace(
            manager=replicas.logs,
            topology=replicas,
            sticky=SimpleNamespace(forget=lambda name: None),
            settings=SimpleNamespace(
                num_partitions=1, default_replication_factor=3, max_request_bytes=1 << 20
            ),
        )
        ctx = Context(
            state=state, advertised=("127.0.0.1", 9092), txn=lambda: None, groups=lambda: None
        )

        async def kafka(name: str, timeout_ms: int) -> tuple[Any, float]:
            body = SimpleNamespace(
                topics=[
                    SimpleNamespace(
                        name=name,
                        num_partitions=2,
                        replication_factor=-1,
                        assignments=(),
                        configs=[SimpleNamespace(name="retention.ms", value="1000")],
                    )
                ],
                timeout=timedelta(milliseconds=timeout_ms),
                validate_only=False,
            )
            began = time.monotonic()
            answer = await create_topics(ctx, body, 7)
            (result,) = answer.topics
            return result, time.monotonic() - began

        result, took = await kafka("clicks", 0)
        assert result.error_code == ErrorCode.none and took < 5, (result.error_message, took)
        assert (result.num_partitions, result.replication_factor) == (2, 3)
        assert {c.name: c.value for c in result.configs}["retention.ms"] == "1000"
        assert zk.created["clicks"].partitions == 2
        result, took = await kafka("views", 300)
        assert result.error_code == ErrorCode.request_timed_out and took < 5, took
        assert "timeout_ms=300" in result.error_message and "created" in result.error_message
        assert "views" in zk.created, "created all the same"

        async def http(name: str, timeout_ms: int) -> Any:
            raw = f'{{"name": "{name}", "partitions": 2, "timeout_ms": {timeout_ms}}}'.encode()

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": raw, "more_body": False}

            scope = {
                "type": "http",
                "method": "POST",
                "path": "/topics",
                "headers": [(b"content-length", str(len(raw)).encode())],
            }
            return await http_create_topic(Request(scope, receive), state, replicas.logs)

        began = time.monotonic()
        answer = await http("audit", 0)
        assert answer.status_code == 201 and time.monotonic() - began < 5
        described = orjson.loads(answer.body)
        assert [p["leader"] for p in described["partitions"]] == [-1, -1]
        assert "audit" in zk.created
        began = time.monotonic()
        with pytest.raises(RequestTimedOut, match="timeout_ms=300"):
            await http("pages", 300)
        assert time.monotonic() - began < 5 and "pages" in zk.created

    asyncio.run(main())


class GatedOfflineStore(OfflineStore):
    """OfflineStore whose next report write (once ``hold`` is set) waits for ``gate``, as a
    slow ZooKeeper would, and whose next ``fail`` writes are lost with the connection."""

    def __init__(self, assignment: TopicAssignment | None = None) -> None:
        super().__init__(assignment)
        self.hold = False
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.fail = 0

    def set_offline_replicas(self, broker_id: int, offline: dict[str, Any]) -> None:
        if self.hold:
            self.hold = False
            self.entered.set()
            assert self.gate.wait(30), "the test never opened the gate"
        if self.fail:
            self.fail -= 1
            raise ConnectionLoss()
        super().set_offline_replicas(broker_id, offline)


class ContendedLock(asyncio.Lock):
    """An asyncio.Lock that tells when someone waits for it while it is held."""

    def __init__(self) -> None:
        super().__init__()
        self.contended = asyncio.Event()

    async def acquire(self) -> bool:
        if self.locked():
            self.contended.set()
        return await super().acquire()


async def until_entered(store: GatedOfflineStore) -> None:
    for _ in range(3000):
        if store.entered.is_set():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the report write never started")


def failing_create(*args: Any, **kwargs: Any) -> None:
    raise PartitionLimitExceeded("no partitions left", 0, "max_partitions")


def test_a_topic_deleted_while_its_offline_report_is_written_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The topic could not be created here; its report is being written when the topic is
    deleted. The deletion waits for that apply: no assignment of the deleted topic stays
    in this broker's view, and the topic created again under its name is made here. The
    apply went on after its report and put the deleted topic's assignment back; the new
    topic's apply then took it for its own, older, and never made its replicas here (nor
    reported them offline: the controller could elect this broker without a log)."""

    async def main() -> None:
        with broker_on_disk(tmp_path) as (logs, replicas):
            replicas._loop = asyncio.get_running_loop()
            replicas.brokers = {1: None, 2: None}  # type: ignore[dict-item]
            old = TopicAssignment("id-1", ((1, 2), (2, 1)), {})
            store = GatedOfflineStore(old)
            replicas.store = store  # type: ignore[assignment]
            replicas._watched.add(TOPIC)
            real = logs.create_topic
            monkeypatch.setattr(logs, "create_topic", failing_create)
            store.hold = True
            applying = asyncio.create_task(replicas._apply_assignment(TOPIC, old))
            await until_entered(store)
            deleting = asyncio.create_task(replicas._sync_topics([]))
            for _ in range(20):  # the deletion goes as far as it can meanwhile
                await asyncio.sleep(0)
            store.gate.set()
            await asyncio.gather(applying, deleting)
            assert replicas.topics() == [] and replicas.partitions == {}
            assert store.reports[-1] == {}

            monkeypatch.setattr(logs, "create_topic", real)
            new = TopicAssignment("id-2", ((1, 2),), {})
            store.assignment = new
            await replicas._sync_topics([TOPIC])
            assert replicas.assignments[TOPIC] == new
            assert logs.topic_id(TOPIC) == "id-2" and logs.hosted_partitions(TOPIC) == [0]
            assert sorted(replicas.partitions) == [(TOPIC, 0)]

    asyncio.run(main())


def test_a_topic_created_again_while_the_old_ones_report_is_taken_back_keeps_its_replicas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deleted topic's report is being taken back when the topic is created again
    here: the new topic is applied after the deletion is done, and keeps its logs and
    replicas. The deletion went on after its report and removed the new topic's
    Partitions and logs, leaving its assignment: this broker, live and not reporting
    them offline, was electable for replicas it had no log of."""

    async def main() -> None:
        with broker_on_disk(tmp_path) as (logs, replicas):
            replicas._loop = asyncio.get_running_loop()
            replicas.brokers = {1: None, 2: None}  # type: ignore[dict-item]
            replicas._assign_lock = lock = ContendedLock()
            old = TopicAssignment("id-1", ((1, 2), (2, 1)), {})
            store = GatedOfflineStore(old)
            replicas.store = store  # type: ignore[assignment]
            real = logs.create_topic
            monkeypatch.setattr(logs, "create_topic", failing_create)
            await replicas._sync_topics([TOPIC])
            assert store.reports[-1] == {TOPIC: ("id-1", [0, 1])}

            monkeypatch.setattr(logs, "create_topic", real)
            store.hold = True
            deleting = asyncio.create_task(replicas._sync_topics([]))
            await until_entered(store)
            new = TopicAssignment("id-2", ((1, 2),), {})
            store.assignment = new
            creating = asyncio.create_task(replicas._sync_topics([TOPIC]))
            waiter = asyncio.create_task(lock.contended.wait())
            # The new topic is applied at once, or waits for the deletion to finish.
            await asyncio.wait([creating, waiter], timeout=30, return_when="FIRST_COMPLETED")
            waiter.cancel()
            store.gate.set()
            await asyncio.gather(deleting, creating)
            assert replicas.assignments[TOPIC] == new
            assert TOPIC in logs.topics() and logs.topic_id(TOPIC) == "id-2"
            assert sorted(replicas.partitions) == [(TOPIC, 0)]
            assert store.reports[-1] == {}

    asyncio.run(main())


def test_a_report_lost_with_the_connection_is_written_again_when_it_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ZooKeeper's connection drops while a report is written (the session lives on):
    the report, and later its taking back, are written again once the connection is
    back. They were written again only with a new session: the controller went on
    electing this broker for replicas it had no log of, or, the report never taken
    back, left it out of them for good."""

    async def main() -> None:
        with broker_on_disk(tmp_path) as (logs, replicas):
            replicas._loop = asyncio.get_running_loop()
            replicas.brokers = {1: None, 2: None}  # type: ignore[dict-item]
            first = TopicAssignment("id-1", ((1, 2), (2, 1)), {})
            store = GatedOfflineStore(first)
            replicas.store = store  # type: ignore[assignment]
            replicas._registered_session = store.session_id
            real = logs.create_topic
            monkeypatch.setattr(logs, "create_topic", failing_create)
            store.fail = 1
            await replicas._sync_topics([TOPIC])
            assert store.reports == [], "lost with the connection"
            replicas._on_session("suspended")
            replicas._on_session("connected")
            await settled(replicas)
            assert store.reports[-1] == {TOPIC: ("id-1", [0, 1])}

            monkeypatch.setattr(logs, "create_topic", real)
            store.fail = 1
            changed = dataclasses.replace(first, configs={"retention.ms": 60_000})
            await replicas._apply_assignment(TOPIC, changed)
            assert store.reports[-1] == {TOPIC: ("id-1", [0, 1])}, "the take-back was lost"
            replicas._on_session("suspended")
            replicas._on_session("connected")
            await settled(replicas)
            assert store.reports[-1] == {}
            count = len(store.reports)
            replicas._on_session("suspended")
            replicas._on_session("connected")
            await settled(replicas)
            assert len(store.reports) == count, "nothing to write again"

    asyncio.run(main())


def test_a_topic_created_again_unseen_by_the_topics_watch_replaces_the_old_one_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The topic is deleted and created again (another topic id) while this broker's
    connection is down: on reconnection the topics' children watch finds the names it had
    and calls no one (kazoo's ChildrenWatch), as when a deletion and a re-creation fall
    between two of its reads. The old topic's own watch sees the new id (or the deletion,
    then the new id): the old topic goes here, its offline report with it, and the new one
    is made. The watch just stopped: this broker kept the old topic (its view, its
    report, its replicas, which took the new topic's states) and never made nor reported
    the new one's, so the controller elected it for replicas it had no log of."""

    async def main() -> None:
        with broker_on_disk(tmp_path) as (logs, replicas):
            replicas._loop = asyncio.get_running_loop()
            replicas.brokers = {1: None, 2: None}  # type: ignore[dict-item]
            old = TopicAssignment("id-1", ((1, 2),), {})
            store = OfflineStore(old)
            replicas.store = store  # type: ignore[assignment]
            real = logs.create_topic
            monkeypatch.setattr(logs, "create_topic", failing_create)
            await replicas._sync_topics([TOPIC])
            assert store.reports[-1] == {TOPIC: ("id-1", [0])}
            monkeypatch.setattr(logs, "create_topic", real)

            new = TopicAssignment("id-2", ((1, 2), (2, 1)), {})
            store.assignment = new
            await replicas._sync_topics([TOPIC])  # the same names: nothing to do
            old_watch = store.topic_watches[TOPIC]
            assert old_watch(new) is False, "this watch ends: the new topic has its own"
            await settled(replicas)
            assert replicas.assignments[TOPIC] == new
            assert logs.topic_id(TOPIC) == "id-2" and logs.hosted_partitions(TOPIC) == [0, 1]
            assert sorted(replicas.partitions) == [(TOPIC, 0), (TOPIC, 1)]
            assert store.reports[-1] == {}, "the deleted topic's report went"

            # The deletion seen first (its mark, then no node), the new topic after.
            newer = TopicAssignment("id-3", ((1, 2),), {})
            store.assignment = newer
            watch = store.topic_watches[TOPIC]
            assert watch is not old_watch
            assert watch(None) is True, "watched on while the topic is known here"
            await replicas._sync_topics([TOPIC])
            assert watch(newer) is False
            await settled(replicas)
            assert replicas.assignments[TOPIC] == newer and logs.topic_id(TOPIC) == "id-3"
            assert sorted(replicas.partitions) == [(TOPIC, 0)]
            # A stale watch of a replaced topic changes nothing more.
            assert old_watch(newer) is False
            await settled(replicas)
            assert replicas.assignments[TOPIC] == newer and logs.topic_id(TOPIC) == "id-3"

    asyncio.run(main())


def test_a_registration_lost_with_the_connection_at_a_new_session_is_made_again(
    tmp_path: Path,
) -> None:
    """The session expired; the connection drops again while the new session's
    registration is written. The broker registers once the connection is back (same
    session), its offline report with it. The failed registration was never tried
    again (only a new session's "connected" did): the broker stayed unregistered, dead
    to the controller, for as long as that session lived."""

    async def main() -> None:
        with broker_on_disk(tmp_path) as (_logs, replicas):
            replicas._loop = asyncio.get_running_loop()
            store = GatedOfflineStore()
            replicas.store = store  # type: ignore[assignment]
            replicas._offline = {TOPIC: ("id-1", [0])}
            registrations: list[int] = []
            failures = [ConnectionLoss()]

            def register_broker(info: Any, wait_s: float) -> None:
                if failures:
                    raise failures.pop()
                registrations.append(info.id)

            store.register_broker = register_broker  # type: ignore[attr-defined]
            replicas._registered_session = store.session_id
            replicas._on_session("lost")
            store.session_id = 2
            replicas._on_session("connected")
            await settled(replicas)
            assert registrations == [] and failures == []
            replicas._on_session("suspended")
            replicas._on_session("connected")
            await settled(replicas)
            assert registrations == [1], "registered again"
            assert store.reports[-1] == {TOPIC: ("id-1", [0])}

    asyncio.run(main())
