"""A three-broker cluster with authentication and ACLs: ACLs live in ZooKeeper and reach
every broker within a second, followers still replicate with their inter-broker
credentials (acks=all answers), and a broker that leads nothing still refuses."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from conftest import ClusterFactory

from app.core.security.users import UsersFile

ADMIN = ("admin", "admin-secret-1")
ALICE = ("alice", "alice-secret-1")


@pytest.mark.slow
def test_acls_and_replication_in_a_secured_cluster(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    users = UsersFile(tmp_path / "users.json")
    for name, pw in (ADMIN, ALICE):
        users.add(name, pw, n=2**12)
    cluster = cluster_factory(
        env={
            "LOGBUS_AUTHENTICATION": "basic",
            "LOGBUS_AUTHORIZER": "acl",
            "LOGBUS_SUPER_USERS": "User:admin",
            "LOGBUS_USERS_FILE": str(tmp_path / "users.json"),
        },
        start=False,
    )
    cluster.start(wait_for_metadata=False)
    admins = {i: cluster.client(i, auth=ADMIN) for i in cluster.ids}
    alices = {i: cluster.client(i, auth=ALICE) for i in cluster.ids}
    assert cluster.client(1).get("/metadata").status_code == 401
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admins[1].get("/metadata").json()
        if len(meta["brokers"]) == 3 and meta["controller"] >= 0:
            break
        time.sleep(0.1)
    r = admins[1].post("/topics", json={"name": "orders", "replication_factor": 3})
    assert r.status_code == 201, r.text
    leader = cluster.wait_until(lambda: cluster_leader(admins[1]), timeout=20)
    for i in cluster.ids:
        assert alices[i].get("/topics/orders").status_code == 403

    acl = {"resource_type": "TOPIC", "resource_name": "orders", "principal": "User:alice",
           "operation": "WRITE"}  # fmt: skip
    changed = time.monotonic()
    assert admins[2].post("/acls", json={"acls": [acl]}).status_code == 201
    for i in cluster.ids:
        while alices[i].get("/topics/orders").status_code != 200:
            assert time.monotonic() - changed < 1.0, f"broker {i} did not reload in a second"
            time.sleep(0.02)

    # acks=all: answered only once every follower (authenticated by its inter-broker
    # credential, not by a user) fetched the record.
    r = alices[leader].post("/topics/orders/records?acks=all", json={"records": [{"value": 1}]})
    assert r.status_code == 200, r.text
    meta = admins[1].get("/metadata").json()
    parts = next(t for t in meta["topics"] if t["name"] == "orders")["partitions"]
    assert sorted(parts[0]["isr"]) == [1, 2, 3]
    for client in [*admins.values(), *alices.values()]:
        client.close()


def cluster_leader(client: httpx.Client) -> int | None:
    meta = client.get("/metadata").json()
    for topic in meta["topics"]:
        if topic["name"] == "orders" and topic["partitions"][0]["leader"] >= 0:
            return int(topic["partitions"][0]["leader"])
    return None
