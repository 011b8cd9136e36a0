"""Offsets over HTTP: fencing, restart, at-least-once, expiration, admin and resets."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from groups_api_helpers import Member, create_topic, make_settings
from starlette.testclient import TestClient

from app.api import create_app
from app.common.batch import build_batch
from app.core.log import LogManager
from app.groups.coordinator import GroupCoordinator


def produce(client: TestClient, topic: str, n: int, partition: int = 0) -> None:
    records = [{"value": i, "partition": partition} for i in range(n)]
    r = client.post(f"/topics/{topic}/records", json={"records": records})
    assert r.status_code == 200, r.text


def fetch(client: TestClient, topic: str, partition: int, offset: int, n: int) -> list[int]:
    r = client.get(
        f"/topics/{topic}/partitions/{partition}/records",
        params={"offset": offset, "max_wait_ms": 0},
    )
    assert r.status_code == 200, r.text
    return [rec["offset"] for rec in r.json()["records"]][:n]


def committed(client: TestClient, group: str, topic: str) -> dict[int, int]:
    r = client.get(f"/groups/{group}/offsets", params={"topic": topic})
    assert r.status_code == 200, r.text
    return {o["partition"]: o["offset"] for o in r.json()["offsets"]}


def admin_commit(client: TestClient, group: str, offsets: list[dict[str, Any]]) -> Any:
    return client.post(f"/groups/{group}/offsets", json={"member_epoch": -1, "offsets": offsets})


def test_commit_fencing(gclient: TestClient) -> None:
    create_topic(gclient, "t", 2)
    # No members yet: a simple consumer (epoch -1) may commit.
    r = admin_commit(gclient, "g", [{"topic": "t", "partition": 0, "offset": 3}])
    assert r.status_code == 200, r.text
    a = Member(gclient, "g", subscribed_topics=["t"])
    a.heartbeat()
    r = a.commit({("t", 0): 5})
    assert r.status_code == 200, r.text
    assert committed(gclient, "g", "t") == {0: 5, 1: -1}
    # With a member in the group, epoch -1 commits are refused.
    r = admin_commit(gclient, "g", [{"topic": "t", "partition": 0, "offset": 9}])
    assert r.status_code == 404 and r.json()["error_code"] == "UNKNOWN_MEMBER_ID"
    b = Member(gclient, "g", subscribed_topics=["t"])
    b.heartbeat()
    a.heartbeat()
    a.heartbeat()  # A moves to the new epoch
    old = a.epoch
    r = gclient.post(
        "/groups/g/offsets",
        json={
            "member_id": a.member_id,
            "member_epoch": old - 1,
            "offsets": [{"topic": "t", "partition": 0, "offset": 7}],
        },
    )
    assert r.status_code == 409 and r.json()["error_code"] == "STALE_MEMBER_EPOCH"
    r = gclient.post(
        "/groups/g/offsets",
        json={
            "member_id": a.member_id,
            "member_epoch": old + 1,
            "offsets": [{"topic": "t", "partition": 0, "offset": 7}],
        },
    )
    assert r.json()["error_code"] == "FENCED_MEMBER_EPOCH"
    r = gclient.post(
        "/groups/g/offsets",
        json={
            "member_id": "ghost",
            "member_epoch": 1,
            "offsets": [{"topic": "t", "partition": 0, "offset": 7}],
        },
    )
    assert r.status_code == 404 and r.json()["error_code"] == "UNKNOWN_MEMBER_ID"
    r = a.commit({("nope", 0): 1})
    assert r.status_code == 404 and r.json()["error_code"] == "UNKNOWN_TOPIC_OR_PARTITION"
    r = a.commit({("t", 5): 1})
    assert r.status_code == 404
    assert committed(gclient, "g", "t") == {0: 5, 1: -1}


def test_offsets_and_members_survive_a_restart(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        create_topic(client, "t", 3)
        a = Member(client, "g", subscribed_topics=["t"])
        a.heartbeat()
        r = a.commit({("t", 0): 11, ("t", 2): 4})
        assert r.status_code == 200
        for i in range(20):  # many groups, spread over the partitions of __consumer_offsets
            r = admin_commit(client, f"g{i}", [{"topic": "t", "partition": 1, "offset": i}])
            assert r.status_code == 200
        assert client.delete("/groups/g7").status_code == 204
        before = client.get("/groups/g").json()
    with TestClient(create_app(settings)) as client:
        assert committed(client, "g", "t") == {0: 11, 1: -1, 2: 4}
        after = client.get("/groups/g").json()
        assert after["members"] == before["members"]
        assert after["group_epoch"] == before["group_epoch"]
        # The restored member carries on with its epoch.
        a.client = client
        a.heartbeat()
        assert a.owned == [("t", 0), ("t", 1), ("t", 2)]
        for i in range(20):
            expected = {} if i == 7 else {1: i}
            got = {p: o for p, o in committed(client, f"g{i}", "t").items() if o >= 0}
            assert got == expected
        assert client.get("/groups/g7").status_code == 404


def test_at_least_once_after_a_crash(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, group_consumer_session_timeout_ms=300)
    with TestClient(create_app(settings)) as client:
        create_topic(client, "t", 1)
        produce(client, "t", 20)
        a = Member(client, "g", subscribed_topics=["t"])
        a.heartbeat()
        assert a.owned == [("t", 0)]
        seen = fetch(client, "t", 0, 0, 10)
        assert seen == list(range(10))
        assert a.commit({("t", 0): 10}).status_code == 200
        # Processed 10..14 but crashed before committing them; stops heartbeating.
        seen += fetch(client, "t", 0, 10, 5)
        b = Member(client, "g", subscribed_topics=["t"])
        b.heartbeat()
        assert b.owned == []  # A still holds the partition
        deadline = time.monotonic() + 5
        while not b.owned and time.monotonic() < deadline:
            time.sleep(0.05)
            b.heartbeat()
        assert b.owned == [("t", 0)]
        start = committed(client, "g", "t")[0]
        assert start == 10
        resumed = fetch(client, "t", 0, start, 100)
        assert resumed == list(range(10, 20))  # 10..14 redelivered, nothing skipped
        assert set(seen) | set(resumed) == set(range(20))


def test_group_admin(gclient: TestClient) -> None:
    create_topic(gclient, "t", 2)
    produce(gclient, "t", 8, partition=0)
    produce(gclient, "t", 3, partition=1)
    a = Member(gclient, "g", subscribed_topics=["t"])
    a.heartbeat()
    assert a.commit({("t", 0): 5, ("t", 1): 3}).status_code == 200
    listing = gclient.get("/groups").json()["groups"]
    assert listing == [
        {
            "group": "g",
            "state": "Stable",
            "protocol_type": "consumer",
            "members": 1,
            "group_epoch": 1,
            "protocol": "consumer",
        }
    ]
    desc = gclient.get("/groups/g").json()
    assert desc["members"][0]["assignment"] == [{"topic": "t", "partitions": [0, 1]}]
    lags = {o["partition"]: (o["high_watermark"], o["lag"]) for o in desc["offsets"]}
    assert lags == {0: (8, 3), 1: (3, 0)}
    r = gclient.delete("/groups/g")
    assert r.status_code == 409 and r.json()["error_code"] == "NON_EMPTY_GROUP"
    r = gclient.post("/groups/g/offsets/reset", json={"topic": "t", "to": "earliest"})
    assert r.status_code == 409 and r.json()["error_code"] == "NON_EMPTY_GROUP"
    a.leave()
    assert gclient.get("/groups/g").json()["state"] == "Empty"

    def reset(**body: Any) -> dict[int, int]:
        r = gclient.post("/groups/g/offsets/reset", json={"topic": "t", **body})
        assert r.status_code == 200, r.text
        return {o["partition"]: o["offset"] for o in r.json()["offsets"]}

    assert reset(to="earliest") == {0: 0, 1: 0}
    assert reset(to="latest") == {0: 8, 1: 3}
    assert reset(to="offset", offset=6, partitions=[0]) == {0: 6}
    assert reset(to="offset", offset=60, partitions=[1]) == {1: 3}  # clamped
    assert reset(to="timestamp", timestamp=0) == {0: 0, 1: 0}
    assert reset(to="timestamp", timestamp=(1 << 62)) == {0: 8, 1: 3}
    r = gclient.post("/groups/g/offsets/reset", json={"topic": "t", "to": "offset"})
    assert r.status_code == 400
    r = gclient.post("/groups/g/offsets/reset", json={"topic": "nope", "to": "earliest"})
    assert r.status_code == 404
    assert gclient.delete("/groups/g").status_code == 204
    assert gclient.get("/groups/g").status_code == 404
    assert gclient.delete("/groups/g").json()["error_code"] == "GROUP_ID_NOT_FOUND"
    assert gclient.get("/groups").json() == {"groups": []}
    assert gclient.get("/groups/g/offsets").json() == {"group": "g", "offsets": []}


def test_offsets_of_empty_groups_expire(gclient: TestClient) -> None:
    create_topic(gclient, "t", 1)
    r = admin_commit(gclient, "old", [{"topic": "t", "partition": 0, "offset": 1}])
    assert r.status_code == 200
    a = Member(gclient, "busy", subscribed_topics=["t"])
    a.heartbeat()
    assert a.commit({("t", 0): 2}).status_code == 200
    coordinator: GroupCoordinator = gclient.app.state.coordinator  # type: ignore[attr-defined]
    week = 7 * 24 * 3600 * 1000
    assert coordinator.expire_offsets(int(time.time() * 1000) + week - 60_000) == 0
    assert coordinator.expire_offsets(int(time.time() * 1000) + week + 60_000) == 1
    assert gclient.get("/groups/old").status_code == 404
    # A group with members keeps its offsets however old they are.
    assert committed(gclient, "busy", "t") == {0: 2}


def test_garbage_in_consumer_offsets_does_not_stop_the_broker(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        create_topic(client, "t", 1)
        r = admin_commit(client, "g", [{"topic": "t", "partition": 0, "offset": 4}])
        assert r.status_code == 200
    # Junk reaches the internal topic anyway (clients are refused over HTTP, but a
    # tool writing the log, or a bug, could): the coordinator must skip it.
    manager = LogManager(settings.data_dir, settings.log_config, broker_id=settings.broker_id)
    manager.start()
    try:
        for partition in range(3):
            manager.get_log("__consumer_offsets", partition).append(
                build_batch([(b"junk", b"not ours"), (b"\x00\x01garbage", b"x")])
            )
    finally:
        manager.shutdown()
    with TestClient(create_app(settings)) as client:
        assert committed(client, "g", "t") == {0: 4}


def test_offsets_cannot_be_committed_to_internal_topics(gclient: TestClient) -> None:
    """Only the coordinator writes __consumer_offsets; a client's commit (or reset) naming
    it is refused as its produce is, and nothing is written."""
    create_topic(gclient, "t", 1)
    m = Member(gclient, "g", subscribed_topics=["t"])
    m.heartbeat()
    offsets_end = gclient.get("/topics/__consumer_offsets").json()["partitions"]
    internal = [{"topic": "__consumer_offsets", "partition": 0, "offset": 5}]
    attempts = [
        admin_commit(gclient, "admin", internal),
        gclient.post(
            "/groups/g/offsets",
            json={"member_id": m.member_id, "member_epoch": m.epoch, "offsets": internal},
        ),
        gclient.post(
            "/groups/admin/offsets/reset",
            json={"topic": "__consumer_offsets", "to": "earliest"},
        ),
    ]
    for r in attempts:
        assert r.status_code == 400, r.text
        assert r.json()["error_code"] == "INVALID_TOPIC_EXCEPTION", r.text
        assert "internal" in r.json()["message"]
    assert gclient.get("/topics/__consumer_offsets").json()["partitions"] == offsets_end
    for group in ("admin", "g"):
        r = gclient.get(f"/groups/{group}/offsets")
        assert r.status_code in (200, 404), r.text
        if r.status_code == 200:
            assert r.json()["offsets"] == []


def test_deleting_a_topic_deletes_its_committed_offsets(tmp_path: Path) -> None:
    """Commit tz-2 at 5, delete tz, create it again and produce 8 records: nothing is
    committed for the new tz (also after a restart), so the group reads it from 0."""
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        create_topic(client, "tz", 3)
        create_topic(client, "other", 1)
        for group in ("g", "h"):
            r = admin_commit(
                client,
                group,
                [
                    {"topic": "tz", "partition": 2, "offset": 5},
                    {"topic": "other", "partition": 0, "offset": 0},
                ],
            )
            assert r.status_code == 200, r.text
        assert client.delete("/topics/tz").status_code == 204
        create_topic(client, "tz", 3)
        produce(client, "tz", 8, partition=2)
        for group in ("g", "h"):
            assert committed(client, group, "tz") == {0: -1, 1: -1, 2: -1}
            assert committed(client, group, "other") == {0: 0}
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        for group in ("g", "h"):
            assert committed(client, group, "tz") == {0: -1, 1: -1, 2: -1}
            assert committed(client, group, "other") == {0: 0}


def test_require_stable_waits_for_the_transaction_that_committed_offsets(
    gclient: TestClient,
) -> None:
    """KIP-447: offsets committed in an open transaction are not visible, and a fetch with
    ``require_stable`` answers UNSTABLE_OFFSET_COMMIT (retriable) for their partitions until
    the transaction ends; partitions it did not touch are stable meanwhile."""
    create_topic(gclient, "t", 2)
    create_topic(gclient, "other", 1)
    r = admin_commit(gclient, "g", [{"topic": "t", "partition": 1, "offset": 4}])
    assert r.status_code == 200, r.text
    r = gclient.post("/producers", json={"transactional_id": "tid"})
    assert r.status_code == 200, r.text
    producer = {k: r.json()[k] for k in ("producer_id", "producer_epoch")}

    def stable(topic: str = "t") -> Any:
        return gclient.get("/groups/g/offsets", params={"topic": topic, "require_stable": True})

    for outcome, offset in (("abort", 7), ("commit", 9)):
        r = gclient.post("/transactions/tid/groups", json={**producer, "group_id": "g"})
        assert r.status_code == 200, r.text
        r = gclient.post(
            "/transactions/tid/offsets",
            json={
                **producer,
                "group_id": "g",
                "offsets": [{"topic": "t", "partition": 0, "offset": offset}],
            },
        )
        assert r.status_code == 200, r.text
        assert committed(gclient, "g", "t") == {0: -1, 1: 4}  # not before the commit
        r = stable()
        assert r.status_code == 409 and r.json()["error_code"] == "UNSTABLE_OFFSET_COMMIT", r.text
        assert r.json()["retriable"] is True
        assert r.json()["partitions"] == [
            {"topic": "t", "partition": 0, "producer_id": producer["producer_id"]}
        ]
        assert stable("other").status_code == 200  # no transaction touched its offsets
        r = gclient.post(f"/transactions/tid/{outcome}", json=producer)
        assert r.status_code == 200, r.text
        r = stable()
        assert r.status_code == 200, r.text
        want = {0: -1, 1: 4} if outcome == "abort" else {0: 9, 1: 4}
        assert {o["partition"]: o["offset"] for o in r.json()["offsets"]} == want
