"""ACLs in ZooKeeper (app/core/replication/zk_acls.py) against a real ZooKeeper: Kafka's
znode layout, compare-and-set writes, and every broker's store reloading within a second
of a change made through another."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import orjson
import pytest
from zookeeper import ZooKeeperServer

from app.core.replication.zk_acls import ZkAclStore
from app.core.security.acl import (
    AclBinding,
    AclFilter,
    AclSnapshot,
    Action,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
)


@pytest.fixture
def stores(zookeeper: ZooKeeperServer) -> Iterator[list[ZkAclStore]]:
    made = [ZkAclStore(zookeeper.connect_string + "/acls-test", 6000) for _ in range(2)]
    for store in made:
        store.start()
    yield made
    for store in made:
        store.close()


WATCH_BOUND_SECONDS = 10.0


def binding(name: str, op: Operation, pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, "User:alice", "*", op, Permission.ALLOW)


def test_changes_reach_every_broker_through_the_watch(stores: list[ZkAclStore]) -> None:
    writer, reader = stores
    authorizer = Authorizer()
    changed = threading.Event()

    def on_change(snapshot: AclSnapshot) -> None:
        authorizer.update(snapshot)
        changed.set()

    reader.watch(on_change)
    read = Action(Operation.READ, Resource(ResourceType.TOPIC, "orders"))
    assert not authorizer.authorize("User:alice", "h", read)
    started = time.monotonic()
    writer.create(
        [binding("orders", Operation.READ), binding("ord", Operation.WRITE, PatternType.PREFIXED)]
    )
    # The watch fires within milliseconds on a quiet machine (the issue's "within a
    # second"); the bound is loose because a loaded CI host is not a timing instrument.
    deadline = started + WATCH_BOUND_SECONDS
    while not authorizer.authorize("User:alice", "h", read) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert authorizer.authorize("User:alice", "h", read), (
        f"not reloaded within {WATCH_BOUND_SECONDS} s"
    )
    # One change notice per resource, as Kafka's CreateAcls: the first may reach the
    # reader before the second resource is written, so wait for both.
    while len(reader.load().bindings) != 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(reader.load().bindings) == 2

    # Kafka's layout and value format.
    data, _ = writer.client.get("/kafka-acl/Topic/orders")
    assert orjson.loads(data) == {
        "version": 1,
        "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}
        ],
    }
    assert writer.client.exists("/kafka-acl-extended/prefixed/Topic/ord")

    matched, snapshot = writer.delete([AclFilter(pattern_type=PatternType.PREFIXED)])
    assert [a.name for a in matched[0]] == ["ord"] and len(snapshot.bindings) == 1
    assert not writer.client.exists("/kafka-acl-extended/prefixed/Topic/ord")
    deadline = time.monotonic() + WATCH_BOUND_SECONDS
    while len(reader.load().bindings) != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(reader.load().bindings) == 1


def test_concurrent_writers_lose_nothing(stores: list[ZkAclStore]) -> None:
    a, b = stores
    ops = [Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.DELETE]

    def add(store: ZkAclStore, op: Operation) -> None:
        store.create([binding("orders", op)])

    threads = [
        threading.Thread(target=add, args=(s, op)) for s, op in zip([a, b, a, b], ops, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data, _ = a.client.get("/kafka-acl/Topic/orders")
    assert len(orjson.loads(data)["acls"]) == 4


def test_a_group_named_dot_or_dot_dot_gets_its_own_node(stores: list[ZkAclStore]) -> None:
    """'.' and '..' are group ids Kafka accepts but node names ZooKeeper refuses (kazoo
    raised ValueError, the door dropped the connection): their dots are encoded."""
    writer, reader = stores
    granted = {
        AclBinding(
            ResourceType.GROUP,
            name,
            PatternType.LITERAL,
            "User:a",
            "*",
            Operation.READ,
            Permission.ALLOW,
        )
        for name in (".", "..", "...")
    }
    writer.create(sorted(granted, key=lambda b: b.name))
    deadline = time.monotonic() + WATCH_BOUND_SECONDS
    while reader.load().bindings != granted:
        assert time.monotonic() < deadline, f"not reloaded within {WATCH_BOUND_SECONDS} s"
        time.sleep(0.01)
    assert sorted(writer.client.get_children("/kafka-acl/Group")) == ["%2E", "%2E%2E", "..."]
    _, snapshot = writer.delete(
        [AclFilter(resource_type=ResourceType.GROUP, name="..", pattern_type=PatternType.LITERAL)]
    )
    assert {b.name for b in snapshot.bindings} == {".", "..."}
