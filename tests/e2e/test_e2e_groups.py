"""Consumer groups against a ``logbus serve`` subprocess: the CLI, restarts, a kill -9."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import httpx
from conftest import REPO, Broker, BrokerFactory

ENV = {"LOGBUS_OFFSETS_TOPIC_NUM_PARTITIONS": "5"}


def logbus(broker: Broker, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOGBUS_URL": broker.url}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=30,
    )


def heartbeat(c: httpx.Client, group: str, **body: Any) -> dict[str, Any]:
    resp = c.post(f"/groups/{group}/heartbeat", json=body)
    assert resp.status_code == 200, resp.text
    answer: dict[str, Any] = resp.json()
    return answer


def offsets(c: httpx.Client, group: str) -> dict[int, int]:
    resp = c.get(f"/groups/{group}/offsets", params={"topic": "t"})
    assert resp.status_code == 200, resp.text
    return {o["partition"]: o["offset"] for o in resp.json()["offsets"]}


def test_groups_cli_and_restart(new_broker: BrokerFactory) -> None:
    broker = new_broker(env=ENV).start()
    assert logbus(broker, "topics", "create", "t", "--partitions", "2").returncode == 0
    with broker.client() as c:
        resp = c.post(
            "/topics/t/records",
            json={"records": [{"value": i, "partition": i % 2} for i in range(10)]},
        )
        assert resp.status_code == 200
        joined = heartbeat(c, "g", member_epoch=0, subscribed_topics=["t"])
        member, epoch = joined["member_id"], joined["member_epoch"]
        resp = c.post(
            "/groups/g/offsets",
            json={
                "member_id": member,
                "member_epoch": epoch,
                "offsets": [{"topic": "t", "partition": 0, "offset": 2, "metadata": "m"}],
            },
        )
        assert resp.status_code == 200, resp.text

    r = logbus(broker, "groups", "list")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["GROUP", "STATE", "MEMBERS", "g", "Stable", "1"]
    r = logbus(broker, "groups", "describe", "g")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "State: Stable" in lines[0]
    assert lines[1].split() == [
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "MEMBER-ID",
    ]
    assert lines[2].split() == ["t", "0", "2", "5", "3", member]
    assert lines[3].split() == ["t", "1", "-", "-", "-", member]
    r = logbus(broker, "groups", "delete", "g")
    assert r.returncode == 1 and "NON_EMPTY_GROUP" in r.stderr
    r = logbus(broker, "groups", "reset-offsets", "g", "--topic", "t", "--to-earliest")
    assert r.returncode == 1 and "NON_EMPTY_GROUP" in r.stderr

    with broker.client() as c:
        heartbeat(c, "g", member_id=member, member_epoch=-1)
    r = logbus(broker, "groups", "reset-offsets", "g", "--topic", "t", "--to-offset", "4")
    assert r.returncode == 0, r.stderr
    assert [line.split() for line in r.stdout.splitlines()[1:]] == [
        ["t", "0", "4"],
        ["t", "1", "4"],
    ]
    r = logbus(
        broker, "groups", "reset-offsets", "g", "--topic", "t", "--partitions", "1", "--to-latest"
    )
    assert r.stdout.splitlines()[1].split() == ["t", "1", "5"]
    r = logbus(
        broker, "groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "1970-01-01T00:00"
    )
    assert r.returncode == 0, r.stderr
    r = logbus(broker, "groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "soon")
    assert r.returncode == 2

    # A clean restart and a kill -9: committed offsets come back from __consumer_offsets.
    with broker.client() as c:
        resp = c.post(
            "/groups/g/offsets",
            json={"offsets": [{"topic": "t", "partition": 1, "offset": 3}]},
        )
        assert resp.status_code == 200, resp.text
    assert broker.stop() == 0
    broker.start()
    with broker.client() as c:
        assert offsets(c, "g") == {0: 0, 1: 3}
        resp = c.post(
            "/groups/g/offsets", json={"offsets": [{"topic": "t", "partition": 0, "offset": 5}]}
        )
        assert resp.status_code == 200
    broker.kill()
    broker.start()
    with broker.client() as c:
        assert offsets(c, "g") == {0: 5, 1: 3}
    r = logbus(broker, "groups", "describe", "g", "--json")
    assert json.loads(r.stdout)["state"] == "Empty"
    assert logbus(broker, "groups", "delete", "g").returncode == 0
    r = logbus(broker, "groups", "list")
    assert r.returncode == 0 and r.stdout == ""
    r = logbus(broker, "groups", "describe", "g")
    assert r.returncode == 1 and "GROUP_ID_NOT_FOUND" in r.stderr


def test_concurrent_members_never_hold_a_partition_twice(new_broker: BrokerFactory) -> None:
    """Member threads heartbeat against a real server with jitter, leave and rejoin; a shared
    ledger, updated the way a consumer acts on each answer, never shows a partition twice."""
    import random
    import threading
    import time

    broker = new_broker(
        env={
            **ENV,
            "LOGBUS_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "30",
            "LOGBUS_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "5000",
        }
    ).start()
    assert logbus(broker, "topics", "create", "t", "--partitions", "12").returncode == 0
    lock = threading.Lock()
    ledger: dict[int, str] = {}
    errors: list[str] = []
    handed_out = [0]
    stop = time.monotonic() + 3.0

    def member(seed: int) -> None:
        rng = random.Random(seed)
        name = f"thread-{seed}"
        with broker.client() as c:
            member_id, epoch, owned = "", 0, set[int]()
            while time.monotonic() < stop and not errors:
                body: dict[str, Any] = {"member_id": member_id, "member_epoch": epoch}
                if epoch == 0:
                    body["subscribed_topics"] = ["t"]
                else:
                    body["owned_partitions"] = [{"topic": "t", "partitions": sorted(owned)}]
                answer = heartbeat(c, "g", **body)
                member_id, epoch = answer["member_id"], answer["member_epoch"]
                new = {p for a in answer["assignment"]["partitions"] for p in a["partitions"]}
                with lock:
                    for p in owned - new:
                        del ledger[p]
                    for p in new - owned:
                        if p in ledger:
                            errors.append(f"{name} got {p} still held by {ledger[p]}")
                        ledger[p] = name
                        handed_out[0] += 1
                owned = new
                if rng.random() < 0.04:
                    # Leave (after releasing everything) and come back as a new member.
                    with lock:
                        for p in owned:
                            del ledger[p]
                    heartbeat(c, "g", member_id=member_id, member_epoch=-1)
                    member_id, epoch, owned = "", 0, set()
                time.sleep(rng.uniform(0, 0.06))
            if epoch > 0:
                with lock:
                    for p in owned:
                        del ledger[p]
                heartbeat(c, "g", member_id=member_id, member_epoch=-1)

    threads = [threading.Thread(target=member, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert handed_out[0] > 24  # partitions really moved between members, many times
    with broker.client() as c:
        desc = c.get("/groups/g").json()
    assert desc["state"] == "Empty" and desc["members"] == []


def test_describe_members(broker: Broker) -> None:
    assert logbus(broker, "topics", "create", "t", "--partitions", "2").returncode == 0
    with broker.client() as c:
        joined = heartbeat(c, "g", member_epoch=0, subscribed_topics=["t"], instance_id="host-1")
    r = logbus(broker, "groups", "describe", "g", "--members")
    assert r.returncode == 0, r.stderr
    lines = [line.split() for line in r.stdout.splitlines()]
    assert lines[1] == ["MEMBER-ID", "INSTANCE-ID", "EPOCH", "STATE", "ASSIGNMENT"]
    assert lines[2] == [joined["member_id"], "host-1", "1", "Stable", "t-0,t-1"]


def test_a_static_leave_survives_kill_and_sigterm(new_broker: BrokerFactory) -> None:
    """A static member leaves with epoch -2, then the broker is killed (-9) or stopped
    (SIGTERM): its instance rejoins under a new member id at once (not 409
    UNRELEASED_INSTANCE_ID for a session timeout) with its partitions, and the id that
    left is refused (heartbeat and commit)."""
    broker = new_broker(env={**ENV, "LOGBUS_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "120000"}).start()
    assert logbus(broker, "topics", "create", "t", "--partitions", "2").returncode == 0
    for restart in ("kill", "stop"):
        with broker.client() as c:
            joined = heartbeat(c, "s", member_epoch=0, instance_id="pod-1", subscribed_topics=["t"])
            member, epoch = joined["member_id"], joined["member_epoch"]
            heartbeat(c, "s", member_id=member, member_epoch=-2, instance_id="pod-1")
        if restart == "kill":
            broker.kill()
        else:
            assert broker.stop() == 0
        broker.start()
        with broker.client() as c:
            back = c.post(
                "/groups/s/heartbeat",
                json={"member_epoch": 0, "instance_id": "pod-1", "subscribed_topics": ["t"]},
            )
            assert back.status_code == 200, (restart, back.text)
            assert back.json()["member_id"] != member
            assert back.json()["assignment"] == joined["assignment"]
            old = c.post("/groups/s/heartbeat", json={"member_id": member, "member_epoch": epoch})
            assert old.status_code == 404 and old.json()["error_code"] == "UNKNOWN_MEMBER_ID"
            commit = c.post(
                "/groups/s/offsets",
                json={
                    "member_id": member,
                    "member_epoch": epoch,
                    "offsets": [{"topic": "t", "partition": 0, "offset": 1}],
                },
            )
            assert commit.status_code == 404, commit.text
            heartbeat(
                c, "s", member_id=back.json()["member_id"], member_epoch=-2, instance_id="pod-1"
            )
