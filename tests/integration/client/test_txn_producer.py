"""The SDK's transactional producer (``Producer(transactional_id=...)`` and
``AsyncProducer``) against a real in-process broker: commits seen by ``read_committed``
readers, aborts never, zombies fenced, offsets committed only with the transaction, and
an ACL refusing the transactional id."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_broker import LiveBroker, live_broker

from app.client import AsyncAdmin, AsyncProducer, BasicAuth, Consumer, Producer, TopicPartition
from app.client.errors import TransactionAborted
from app.common.errors import (
    InvalidTxnState,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
)
from app.core.security.users import UsersFile

_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveBroker]:
    with live_broker(tmp_path_factory.mktemp("txn-sdk")) as b:
        yield b


def fresh(broker: LiveBroker, partitions: int = 2) -> str:
    name = f"txn-sdk-{next(_names)}"
    broker.create_topic(name, partitions)
    return name


def read(url: str, topic: str, partitions: int, isolation: str, expect: int) -> list[bytes]:
    """Every value of ``topic`` as ``isolation`` shows it (waits for ``expect`` values,
    then one more empty poll so that extra records would be seen)."""
    got: list[bytes] = []
    with Consumer(url, isolation_level=isolation) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning()
        deadline = time.monotonic() + 10
        while len(got) < expect and time.monotonic() < deadline:
            got += [r.value for r in c.poll(timeout_ms=200) if r.value is not None]
        got += [r.value for r in c.poll(timeout_ms=200) if r.value is not None]
    return sorted(got)


def committed(broker: LiveBroker, group: str, topic: str) -> dict[int, int]:
    with broker.http() as h:
        r = h.get(f"/groups/{group}/offsets", params={"topic": topic})
        if r.status_code == 404:
            return {}
        assert r.status_code == 200, r.text
        # -1: nothing committed for the partition
        return {o["partition"]: o["offset"] for o in r.json()["offsets"] if o["offset"] >= 0}


def test_commit_is_seen_abort_is_not(broker: LiveBroker) -> None:
    topic = fresh(broker)
    with Producer(broker.url, transactional_id=f"{topic}-tx", linger_ms=1) as p:
        p.init_transactions()
        with pytest.raises(InvalidTxnState):
            p.send(topic, b"outside")  # no transaction begun
        p.begin_transaction()
        with pytest.raises(InvalidTxnState):
            p.begin_transaction()
        futures = [p.send(topic, b"kept-%d" % i, key=b"%d" % i) for i in range(20)]
        p.commit_transaction()
        assert all(f.result(timeout=0).offset >= 0 for f in futures)
        p.begin_transaction()
        for i in range(10):
            p.send(topic, b"dropped-%d" % i, key=b"%d" % i)
        p.flush()  # written to the log, then aborted
        p.abort_transaction()
        p.begin_transaction()
        unsent = p.send(topic, b"never-sent", partition=0)
        p.abort_transaction()  # before it went out: dropped in the client
        with pytest.raises(TransactionAborted):
            unsent.result(timeout=5)
        p.begin_transaction()
        p.send(topic, b"last", partition=1)
        p.commit_transaction()
    kept = sorted([b"kept-%d" % i for i in range(20)] + [b"last"])
    assert read(broker.url, topic, 2, "read_committed", 21) == kept
    # The aborted records are in the log: a read_uncommitted reader sees them.
    assert len(read(broker.url, topic, 2, "read_uncommitted", 31)) >= 31


def test_a_second_instance_fences_the_first(broker: LiveBroker) -> None:
    topic = fresh(broker)
    tid = f"{topic}-tx"
    zombie = Producer(broker.url, transactional_id=tid, linger_ms=1)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, b"zombie", partition=0)
        zombie.flush()
        with Producer(broker.url, transactional_id=tid, linger_ms=1) as successor:
            successor.init_transactions()  # fences the zombie, aborts its transaction
            successor.begin_transaction()
            successor.send(topic, b"successor", partition=0)
            with pytest.raises(ProducerFenced):
                zombie.send(topic, b"late", partition=1)
                zombie.commit_transaction()
            # Fatal: every later call raises it again.
            with pytest.raises(ProducerFenced):
                zombie.begin_transaction()
            with pytest.raises(ProducerFenced):
                zombie.abort_transaction()
            successor.commit_transaction()
    finally:
        zombie.close(timeout=5)
    assert read(broker.url, topic, 2, "read_committed", 1) == [b"successor"]


def test_offsets_count_only_when_the_transaction_commits(broker: LiveBroker) -> None:
    source, sink = fresh(broker, 1), fresh(broker, 1)
    group = f"{source}-copier"
    tp = TopicPartition(source, 0)
    with Producer(broker.url, transactional_id=f"{sink}-tx", linger_ms=1) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(sink, b"a", partition=0)
        p.send_offsets_to_transaction({tp: 5}, group)
        assert committed(broker, group, source) == {}  # pending inside the transaction
        p.abort_transaction()
        assert committed(broker, group, source) == {}
        p.begin_transaction()
        p.send(sink, b"b", partition=0)
        p.send_offsets_to_transaction({tp: 7}, group)
        p.commit_transaction()
        assert committed(broker, group, source) == {0: 7}
        with pytest.raises(InvalidTxnState):
            p.send_offsets_to_transaction({tp: 9}, group)  # no transaction
    assert read(broker.url, sink, 1, "read_committed", 1) == [b"b"]


def test_async_producer_commits_aborts_and_is_fenced(broker: LiveBroker) -> None:
    topic = fresh(broker)
    tid = f"{topic}-tx"
    group = f"{topic}-g"

    async def main() -> None:
        async with AsyncProducer(broker.url, transactional_id=tid, linger_ms=1) as p:
            await p.init_transactions()
            with pytest.raises(InvalidTxnState):
                await p.send(topic, b"outside")
            p.begin_transaction()
            await p.send(topic, b"async-kept", partition=0)
            await p.send_offsets_to_transaction({TopicPartition(topic, 0): 3}, group)
            await p.commit_transaction()
            async with AsyncAdmin(broker.url) as admin:
                described = await admin.describe_transaction(tid)
                assert described["transaction_state"] == "CompleteCommit"
                listed = await admin.list_transactions(["CompleteCommit"])
                assert tid in [t["transactional_id"] for t in listed]
            p.begin_transaction()
            await p.send(topic, b"async-dropped", partition=1)
            await p.flush()
            await p.abort_transaction()
            p.begin_transaction()
            await p.send(topic, b"async-zombie", partition=1)
            await p.flush()
            async with AsyncProducer(broker.url, transactional_id=tid) as successor:
                await successor.init_transactions()
            with pytest.raises(ProducerFenced):
                await p.commit_transaction()
            with pytest.raises(ProducerFenced):
                await p.send(topic, b"after")

    asyncio.run(main())
    assert read(broker.url, topic, 2, "read_committed", 1) == [b"async-kept"]
    assert committed(broker, group, topic) == {0: 3}


def test_an_acl_refusing_the_id_is_fatal(tmp_path: Path) -> None:
    users = UsersFile(tmp_path / "users.json")
    for name in ("root", "alice"):
        users.add(name, f"{name}-secret", n=2**10)  # a cheap cost: tests, not storage
    secured: dict[str, Any] = {
        "authentication": "basic",
        "authorizer": "acl",
        "super_users": "User:root",
        "users_file": tmp_path / "users.json",
    }
    with live_broker(tmp_path, **secured) as b:
        root = BasicAuth("root", "root-secret")
        alice = BasicAuth("alice", "alice-secret")
        with b.http() as h:
            h.auth = ("root", "root-secret")
            assert h.post("/topics", json={"name": "orders"}).status_code == 201
            acl = {
                "resource_type": "TOPIC",
                "resource_name": "orders",
                "pattern_type": "LITERAL",
                "principal": "User:alice",
                "host": "*",
                "operation": "WRITE",
                "permission": "ALLOW",
            }
            assert h.post("/acls", json={"acls": [acl]}).status_code == 201
        with Producer(b.url, transactional_id="alice-tx", auth=alice) as p:
            with pytest.raises(TransactionalIdAuthorizationFailed):
                p.init_transactions()
            with pytest.raises(TransactionalIdAuthorizationFailed):
                p.begin_transaction()
        # The same id works for a principal allowed to write it.
        with Producer(b.url, transactional_id="alice-tx", auth=root) as p:
            p.init_transactions()
            p.begin_transaction()
            p.send("orders", b"by-root")
            p.commit_transaction()


def test_a_read_committed_consumer_waits_for_the_offsets_of_an_open_transaction(
    broker: LiveBroker,
) -> None:
    """KIP-447: a read_committed member asks for stable offsets, so while a transaction
    that committed offsets of its partition is open it waits (UNSTABLE_OFFSET_COMMIT,
    asked again) and gets the transaction's offsets once it commits, never the ones they
    replace; a read_uncommitted member is answered at once with what is committed."""
    source, sink = fresh(broker, 1), fresh(broker, 1)
    group = f"{source}-g"
    tp = TopicPartition(source, 0)
    answers: list[tuple[dict[TopicPartition, int | None], float]] = []
    with Producer(broker.url, transactional_id=f"{sink}-tx", linger_ms=1) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(sink, b"a", partition=0)
        p.send_offsets_to_transaction({tp: 7}, group)
        with Consumer(broker.url) as plain:
            plain.subscribe([source], group_id=group, enable_auto_commit=False)
            assert plain.committed([tp]) == {tp: None}

        def stable() -> None:
            with Consumer(broker.url, isolation_level="read_committed") as c:
                c.subscribe([source], group_id=group, enable_auto_commit=False)
                found = c.committed([tp])
                answers.append((found, time.monotonic()))

        waiter = threading.Thread(target=stable)
        waiter.start()
        waiter.join(1.0)
        assert waiter.is_alive() and not answers, "answered while the transaction is open"
        committed_at = time.monotonic()
        p.commit_transaction()
        waiter.join(20)
    assert len(answers) == 1
    found, at = answers[0]
    assert found == {tp: 7} and at > committed_at
