"""Membership over HTTP: disjoint, covering assignments; timeouts; static members; errors."""

from __future__ import annotations

import time
from pathlib import Path

from groups_api_helpers import Member, assert_disjoint, create_topic, held, make_settings
from starlette.testclient import TestClient

from app.api import create_app
from app.groups.hashing import partition_for

ALL_T = [("t", p) for p in range(7)]
ALL_TU = sorted(ALL_T + [("u", p) for p in range(3)])


def settle(members: list[Member], client: TestClient, group: str, rounds: int = 4) -> None:
    for _ in range(rounds):
        for m in members:
            m.heartbeat()
            assert_disjoint(client, group)


def test_n_members_hold_disjoint_assignments_covering_every_partition(
    gclient: TestClient,
) -> None:
    create_topic(gclient, "t", 7)
    create_topic(gclient, "u", 3)
    members: list[Member] = []
    for _ in range(4):
        m = Member(gclient, "g", subscribed_topics=["t", "u"])
        members.append(m)
        m.heartbeat()
        assert_disjoint(gclient, "g")
        # Heartbeats interleave with the join: never a partition held twice.
        settle(members, gclient, "g", rounds=3)
        owned = sorted(tp for x in members for tp in x.owned)
        assert owned == ALL_TU
        sizes = sorted(len(x.owned) for x in members)
        assert sizes[-1] - sizes[0] <= 1
    desc = gclient.get("/groups/g").json()
    assert desc["state"] == "Stable"
    assert {m["member_epoch"] for m in desc["members"]} == {desc["group_epoch"]}

    members[1].leave()
    rest = [m for i, m in enumerate(members) if i != 1]
    settle(rest, gclient, "g", rounds=3)
    assert sorted(tp for x in rest for tp in x.owned) == ALL_TU
    assert len(gclient.get("/groups/g").json()["members"]) == 3


def test_range_assignor_and_regex_subscription(gclient: TestClient) -> None:
    create_topic(gclient, "orders-eu", 4)
    create_topic(gclient, "orders-us", 2)
    create_topic(gclient, "other", 2)
    a = Member(gclient, "g", subscribed_topic_regex="orders-.*", server_assignor="range")
    b = Member(gclient, "g", subscribed_topic_regex="orders-.*", server_assignor="range")
    a.heartbeat()
    b.heartbeat()
    settle([a, b], gclient, "g")
    assert gclient.get("/groups/g").json()["assignor"] == "range"
    both = sorted(a.owned + b.owned)
    assert both == sorted(
        [("orders-eu", p) for p in range(4)] + [("orders-us", p) for p in range(2)]
    )
    first = a if a.member_id < b.member_id else b
    assert ("orders-eu", 0) in first.owned and ("orders-us", 0) in first.owned
    # A new matching topic bumps the group epoch and gets assigned.
    epoch = gclient.get("/groups/g").json()["group_epoch"]
    create_topic(gclient, "orders-jp", 2)
    settle([a, b], gclient, "g")
    assert gclient.get("/groups/g").json()["group_epoch"] > epoch
    assert ("orders-jp", 0) in a.owned + b.owned and ("orders-jp", 1) in a.owned + b.owned


def test_silent_member_loses_partitions_after_session_timeout(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, group_consumer_session_timeout_ms=300)
    with TestClient(create_app(settings)) as client:
        create_topic(client, "t", 7)
        a = Member(client, "g", subscribed_topics=["t"])
        b = Member(client, "g", subscribed_topics=["t"])
        a.heartbeat()
        b.heartbeat()
        settle([a, b], client, "g", rounds=2)
        assert a.owned and b.owned
        deadline = time.monotonic() + 5
        # Only B heartbeats; the timer removes A, B takes everything over.
        while time.monotonic() < deadline and b.owned != ALL_T:
            time.sleep(0.05)
            b.heartbeat()
        assert b.owned == ALL_T
        assert list(held(client, "g")) == [b.member_id]
        r = client.post(
            "/groups/g/heartbeat", json={"member_id": a.member_id, "member_epoch": a.epoch}
        )
        assert r.status_code == 404
        assert r.json()["error_code"] == "UNKNOWN_MEMBER_ID"


def test_static_member_rejoin_keeps_partitions(gclient: TestClient) -> None:
    create_topic(gclient, "t", 7)
    a = Member(gclient, "g", subscribed_topics=["t"], instance_id="host-a")
    b = Member(gclient, "g", subscribed_topics=["t"], instance_id="host-b")
    a.heartbeat()
    b.heartbeat()
    settle([a, b], gclient, "g")
    before = list(a.owned)
    epoch = gclient.get("/groups/g").json()["group_epoch"]
    # Rejoining while the old incarnation is active is refused.
    r = gclient.post(
        "/groups/g/heartbeat",
        json={"member_epoch": 0, "instance_id": "host-a", "subscribed_topics": ["t"]},
    )
    assert r.status_code == 409
    assert r.json()["error_code"] == "UNRELEASED_INSTANCE_ID"
    a.heartbeat(member_epoch=-2, instance_id="host-a")
    restarted = Member(gclient, "g", subscribed_topics=["t"], instance_id="host-a")
    restarted.heartbeat()
    assert restarted.owned == before
    assert restarted.member_id != a.member_id
    settle([restarted, b], gclient, "g")
    assert restarted.owned == before
    assert gclient.get("/groups/g").json()["group_epoch"] == epoch


def test_heartbeat_errors(gclient: TestClient) -> None:
    create_topic(gclient, "t", 2)
    r = gclient.post("/groups/g/heartbeat", json={"member_epoch": 0})
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_REQUEST"
    r = gclient.post("/groups/g/heartbeat", json={"member_epoch": 0, "subscribed_topic_regex": "("})
    assert r.status_code == 400
    r = gclient.post(
        "/groups/g/heartbeat",
        json={"member_epoch": 0, "subscribed_topics": ["t"], "server_assignor": "sticky"},
    )
    assert r.status_code == 400 and r.json()["error_code"] == "UNSUPPORTED_ASSIGNOR"
    a = Member(gclient, "g", subscribed_topics=["t"])
    a.heartbeat()
    r = gclient.post(
        "/groups/g/heartbeat", json={"member_id": a.member_id, "member_epoch": a.epoch + 10}
    )
    assert r.status_code == 409 and r.json()["error_code"] == "FENCED_MEMBER_EPOCH"
    r = gclient.post("/groups/g/heartbeat", json={"member_id": "x", "member_epoch": 3})
    assert r.status_code == 404 and r.json()["error_code"] == "UNKNOWN_MEMBER_ID"
    r = gclient.post("/groups/g/heartbeat", json={"member_epoch": -3})
    assert r.status_code == 400
    r = gclient.get("/groups/nope")
    assert r.status_code == 404 and r.json()["error_code"] == "GROUP_ID_NOT_FOUND"


def test_find_coordinator(gclient: TestClient) -> None:
    r = gclient.post("/coordinator", json={"key": "my-group", "key_type": "group"})
    assert r.status_code == 200
    assert r.json() == {
        "node_id": 1,
        "url": "http://broker-1:8080",
        "key": "my-group",
        "partition": partition_for("my-group", 3),
    }
    # A transactional id's coordinator: its __transaction_state partition's leader (this
    # broker, alone), as Kafka's FindCoordinator key type 1.
    r = gclient.post("/coordinator", json={"key": "orders-tx", "key_type": "transaction"})
    assert r.status_code == 200, r.text
    settings = gclient.app.state.logbus.settings  # type: ignore[attr-defined]
    assert r.json() == {
        "node_id": 1,
        "url": "http://broker-1:8080",
        "key": "orders-tx",
        "partition": partition_for("orders-tx", settings.transaction_state_log_num_partitions),
    }
    r = gclient.post("/coordinator", json={"key": "x", "key_type": "broker"})
    assert r.status_code == 400
    r = gclient.post("/coordinator", json={"key": ""})
    assert r.status_code == 400
