"""A secured broker process end to end: users made with ``logbus users``, ACLs with
``logbus acls`` (through Admin), and the SDK's producer, consumer (its binary fetch
connections), admin and WebSocket subscription carrying credentials."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import httpx
import pytest
from conftest import REPO, Broker, BrokerFactory

from app.client import (
    Admin,
    AsyncAdmin,
    AsyncProducer,
    BasicAuth,
    Consumer,
    Producer,
    TopicPartition,
)
from app.client.ws import subscribe
from app.common.errors import ClusterAuthorizationFailed, SaslAuthenticationFailed

ADMIN_PW, ALICE_PW = "admin-secret-1", "alice-secret-1"


def logbus(
    broker: Broker, *args: str, stdin: str = "", creds: tuple[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGBUS_")}
    env["LOGBUS_URL"] = broker.url
    if creds is not None:
        env["LOGBUS_USER"], env["LOGBUS_PASSWORD"] = creds
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )


@pytest.fixture
def secured(new_broker: BrokerFactory) -> Broker:
    broker = new_broker(
        {
            "LOGBUS_AUTHENTICATION": "basic",
            "LOGBUS_AUTHORIZER": "acl",
            "LOGBUS_SUPER_USERS": "User:admin",
        }
    )
    for name, pw in (("admin", ADMIN_PW), ("alice", ALICE_PW)):
        r = logbus(broker, "users", "add", name, "--password-stdin", "--data-dir",
                   str(broker.data_dir), stdin=pw + "\n")  # fmt: skip
        assert r.returncode == 0, r.stderr
    r = logbus(broker, "users", "list", "--data-dir", str(broker.data_dir))
    assert r.stdout.split() == ["admin", "alice"]
    assert ALICE_PW not in (broker.data_dir / "users.json").read_text()
    return broker.start()


@pytest.mark.slow
def test_cli_and_sdk_against_a_secured_broker(secured: Broker) -> None:
    admin = ("admin", ADMIN_PW)
    r = logbus(secured, "topics", "list")
    assert r.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in r.stderr
    assert logbus(secured, "topics", "create", "orders", creds=admin).returncode == 0
    r = logbus(secured, "acls", "add", "--allow-principal", "User:alice", "--operation", "Write",
               "--operation", "Read", "--topic", "orders", creds=admin)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = logbus(secured, "acls", "list", "--topic", "orders", creds=admin)
    assert r.returncode == 0 and r.stdout.count("User:alice") == 2, r.stdout
    # alice may not change ACLs.
    r = logbus(secured, "acls", "list", creds=("alice", ALICE_PW))
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr

    alice = BasicAuth("alice", ALICE_PW)
    with Producer(secured.url, auth=alice) as producer:
        for i in range(10):
            producer.send("orders", f"v{i}".encode())
        producer.flush()
    with Consumer(secured.url, auth=alice, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("orders", 0)])
        got: list[bytes | None] = []
        deadline = time.monotonic() + 10
        while len(got) < 10 and time.monotonic() < deadline:
            got += [rec.value for rec in consumer.poll(500)]
    assert got == [f"v{i}".encode() for i in range(10)]

    async def first_over_ws() -> bytes | None:
        async with subscribe(secured.url, topics=["orders"], start="earliest", auth=alice) as sub:
            async for record in sub:
                return (
                    record.value if isinstance(record.value, bytes) else str(record.value).encode()
                )
        return None

    assert asyncio.run(asyncio.wait_for(first_over_ws(), 10)) is not None

    with pytest.raises(SaslAuthenticationFailed), Admin(secured.url, auth=("alice", "nope")) as a:
        a.list_topics()
    with Admin(secured.url, auth=alice) as a:
        assert a.list_topics() == {"orders": 1}  # READ implies DESCRIBE
    # Removing the ACL takes effect at once.
    r = logbus(secured, "acls", "remove", "--topic", "orders", "--operation", "Write", creds=admin)
    assert r.returncode == 0 and "WRITE" in r.stdout
    with Admin(secured.url, auth=admin) as a:
        assert [x["operation"] for x in a.describe_acls(principal="User:alice")] == ["READ"]

    async def described_async() -> list[dict[str, str]]:
        async with AsyncAdmin(secured.url, auth=admin) as a:
            return await a.describe_acls(resource_name="orders", pattern_type="MATCH")

    assert [x["principal"] for x in asyncio.run(described_async())] == ["User:alice"]
    answer = httpx.post(
        f"{secured.url}/topics/orders/records",
        json={"records": [{"value": "late"}]},
        auth=("alice", ALICE_PW),
    )
    assert answer.status_code == 403
    assert answer.json()["error_code"] == "TOPIC_AUTHORIZATION_FAILED"
    assert "DENIED principal=User:alice" in secured.log()

    # remove with several principals and operations: one DeleteAcls call of one filter per
    # pair; MATCH selects the prefixed bindings that apply to topic "payments".
    r = logbus(secured, "acls", "add", "--allow-principal", "User:alice", "--allow-principal",
               "User:bob", "--operation", "Describe", "--operation", "Write", "--topic", "pay",
               "--resource-pattern-type", "prefixed", creds=admin)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = logbus(secured, "acls", "remove", "--topic", "payments", "--resource-pattern-type",
               "match", "--principal", "User:alice", "--principal", "User:bob", "--operation",
               "Describe", "--operation", "Write", "--operation", "Read", creds=admin)  # fmt: skip
    assert r.returncode == 0, r.stderr
    removed = {(a["principal"], a["operation"]) for a in json.loads(r.stdout)}
    assert removed == {(p, op) for p in ("User:alice", "User:bob") for op in ("DESCRIBE", "WRITE")}
    with Admin(secured.url, auth=admin) as a:
        assert [x["resource_name"] for x in a.describe_acls()] == ["orders"]


def test_a_producer_whose_producer_id_is_refused_fails_fast(secured: Broker) -> None:
    """alice may DESCRIBE the topic (so metadata answers) but holds neither IDEMPOTENT_WRITE
    nor WRITE on any topic: InitProducerId is refused, and send/flush raise Kafka's
    ClusterAuthorizationFailed at once (not BufferFull after max_block_ms), sync and async."""
    admin = ("admin", ADMIN_PW)
    assert httpx.post(f"{secured.url}/topics", json={"name": "locked"}, auth=admin).is_success
    acl = {"resource_type": "TOPIC", "resource_name": "locked", "principal": "User:alice",
           "operation": "DESCRIBE"}  # fmt: skip
    assert httpx.post(f"{secured.url}/acls", json={"acls": [acl]}, auth=admin).is_success
    alice = BasicAuth("alice", ALICE_PW)
    started = time.monotonic()
    with Producer(secured.url, auth=alice, max_block_ms=30_000) as producer:
        with pytest.raises(ClusterAuthorizationFailed, match="IDEMPOTENT_WRITE"):
            producer.send("locked", b"x")
            producer.flush()
        with pytest.raises(ClusterAuthorizationFailed):
            producer.send("locked", b"y")
        with pytest.raises(ClusterAuthorizationFailed):
            producer.flush()
    assert time.monotonic() - started < 10

    async def async_producer() -> None:
        async with AsyncProducer(secured.url, auth=alice, max_block_ms=30_000) as producer:
            with pytest.raises(ClusterAuthorizationFailed, match="IDEMPOTENT_WRITE"):
                await producer.send("locked", b"x")
                await producer.flush()
            with pytest.raises(ClusterAuthorizationFailed):
                await producer.send("locked", b"y")
            with pytest.raises(ClusterAuthorizationFailed):
                await producer.flush()

    started = time.monotonic()
    asyncio.run(async_producer())
    assert time.monotonic() - started < 10
    end = httpx.get(f"{secured.url}/topics/locked", auth=admin).json()["partitions"][0]
    assert end["high_watermark"] == 0
