"""ListOffsets on a newly elected leader, in a 3-broker cluster (Kafka's OFFSET_NOT_AVAILABLE).

A new leader's high watermark is the one it had as a follower: its old leader's last
answer said where the watermark was, which can trail the records the follower holds
by any amount. Until its followers fetch from it past the start of its epoch, Kafka
answers a client's ListOffsets ``latest`` with OFFSET_NOT_AVAILABLE (retriable);
Logbus answered the stale watermark (seen: 0 for a partition holding 50 records).

The window is made to last with a test-only fault (``LOGBUS_TEST_HOLD_FETCHES``,
app/core/replication/faults.py: a broker's follower fetchers send nothing while a
file named after it exists):

1. the third replica is held, so the leader's high watermark stays where that
   replica was; 50 records are written with acks=1 and the second replica (the
   next leader: the controller elects the first live ISR member in replica order)
   fetches them all, its watermark stuck below 50 with the leader's;
2. the leader is killed; the second replica leads with a log end of 50 (its epoch
   starts there) and a watermark below it: ``latest`` is a 503 OFFSET_NOT_AVAILABLE,
   never the stale watermark, while ``earliest`` answers; an SDK lookup started now
   keeps asking;
3. the third replica is released: it fetches from the new leader, the watermark
   reaches 50, ``latest`` answers 50 and the SDK lookup returns 50; a WebSocket
   subscription at ``latest`` opened during the window (refused with the same
   retriable error, asked again by the SDK) starts at 50 and receives the next record;
   so does a WebSocket group member whose group committed 50 (above the lagging
   watermark): it is not started from a fallback (0, or the stale watermark: records
   the group had consumed, handed out again) but waits for the watermark.

The ISR lag limit is raised for this cluster so the held replica stays in the ISR
(dropped, it would leave the old leader alone and its watermark at its log end).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest
from test_e2e_cluster import create_topic, produce
from websockets.asyncio.client import connect

from app.client import Admin, OffsetAndTimestamp, TopicPartition
from app.client.ws import Subscription

if TYPE_CHECKING:
    from conftest import ClusterFactory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "lagging"
RECORDS = 50


def replica_view(cluster: Any, broker: int) -> dict[str, Any]:
    """Broker ``broker``'s own replica of ``TOPIC``-0 (its log end and watermark)."""
    answer = httpx.get(f"{cluster.url(broker)}/topics/{TOPIC}", timeout=5)
    answer.raise_for_status()
    part: dict[str, Any] = answer.json()["partitions"][0]
    return part


def group_coordinated_by(cluster: Any, broker: int) -> str:
    """A group id whose coordinator is ``broker``."""
    for i in range(500):
        group = f"resume-{i}"
        r = httpx.post(f"{cluster.url(broker)}/coordinator", json={"key": group}, timeout=30)
        r.raise_for_status()
        if r.json()["node_id"] == broker:
            return group
    raise AssertionError(f"no group of 500 is coordinated by broker {broker}")


def latest(cluster: Any, broker: int) -> httpx.Response:
    return httpx.get(
        f"{cluster.url(broker)}/topics/{TOPIC}/partitions/0/offsets",
        params={"at": "latest"},
        timeout=5,
    )


def test_a_new_leader_answers_offset_not_available_until_its_watermark_catches_up(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    holds = tmp_path / "holds"
    holds.mkdir()
    cluster = cluster_factory(
        env={
            "LOGBUS_TEST_HOLD_FETCHES": str(holds),
            "LOGBUS_REPLICA_LAG_TIME_MAX_MS": "120000",
        }
    )
    described = create_topic(cluster, TOPIC, partitions=1, rf=3)
    old, successor, held = described["partitions"][0]["replicas"]
    assert described["partitions"][0]["leader"] == old
    # The group of the WebSocket member below: coordinated by the next leader, which has
    # committed RECORDS (before any fetch is held: the commit waits for every replica).
    group = group_coordinated_by(cluster, successor)
    r = httpx.post(
        f"{cluster.url(successor)}/groups/{group}/offsets",
        json={"member_epoch": -1, "offsets": [{"topic": TOPIC, "partition": 0, "offset": RECORDS}]},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    (holds / str(held)).touch()

    answer = produce(cluster, old, TOPIC, 0, [f"v{i}" for i in range(RECORDS)], acks="1")
    assert answer.status_code == 200, answer.text
    cluster.wait_until(
        lambda: replica_view(cluster, successor)["log_end_offset"] == RECORDS or None,
        message=f"broker {successor} holds the {RECORDS} records",
    )
    assert replica_view(cluster, successor)["high_watermark"] < RECORDS

    cluster.kill(old)
    cluster.wait_until(
        lambda: cluster.leader(TOPIC) == successor or None,
        message=f"broker {successor} leads",
        timeout=60,
    )

    def refused_by_the_new_leader() -> httpx.Response | None:
        # The metadata may name it before it took over (a 421 then): wait for its answer,
        # which must never be an offset (the old behaviour: the stale watermark).
        r = latest(cluster, successor)
        assert r.status_code != 200, f"a new leader answered latest {r.json()}"
        return r if r.status_code == 503 else None

    refused = cluster.wait_until(refused_by_the_new_leader, message="the new leader answers")
    body = refused.json()
    assert body["error_code"] == "OFFSET_NOT_AVAILABLE" and body["retriable"] is True
    assert body["epoch_start_offset"] == RECORDS and body["high_watermark"] < RECORDS
    assert body["topic"] == TOPIC and body["partition"] == 0
    earliest = httpx.get(
        f"{cluster.url(successor)}/topics/{TOPIC}/partitions/0/offsets",
        params={"at": "earliest"},
        timeout=5,
    )
    assert earliest.status_code == 200 and earliest.json()["offset"] == 0

    # An SDK lookup now waits through the window rather than answering a stale end.
    tp = TopicPartition(TOPIC, 0)
    found: dict[str, Any] = {}

    def look_up() -> None:
        try:
            with Admin(cluster.url(successor)) as admin:
                found["answer"] = admin.list_offsets([tp], "latest")[tp]
        except BaseException as exc:  # reported below
            found["error"] = exc

    lookup = threading.Thread(target=look_up, daemon=True)
    lookup.start()

    async def subscribe_at_latest() -> None:
        async with Subscription(cluster.url(successor), partitions=[tp], start="latest") as sub:
            found["subscribed_at"] = sub.positions[tp]
            record = await asyncio.wait_for(sub.__anext__(), 60)
            found["pushed"] = (record.offset, record.value)

    def subscribe() -> None:
        try:
            asyncio.run(subscribe_at_latest())
        except BaseException as exc:  # reported below
            found["subscribe_error"] = exc

    subscriber = threading.Thread(target=subscribe, daemon=True)
    subscriber.start()

    released = threading.Event()

    async def group_member() -> None:
        url = cluster.url(successor).replace("http", "ws", 1) + "/ws/subscribe"
        async with connect(url) as ws:
            message = {
                "type": "subscribe",
                "topics": [TOPIC],
                "group": group,
                "start": "committed",
                "default": "earliest",
                "credit": {"records": 1000},
            }
            await ws.send(orjson.dumps(message).decode())
            while True:
                frame = orjson.loads(await asyncio.wait_for(ws.recv(), 90))
                if frame["type"] == "error":
                    raise AssertionError(frame)
                if frame["type"] == "assignment" and frame["assigned"]:
                    found["member_started"] = (frame["assigned"][0]["offset"], released.is_set())
                if frame["type"] == "records":
                    found["member_pushed"] = frame["records"][0]["offset"]
                    return

    def member() -> None:
        try:
            asyncio.run(group_member())
        except BaseException as exc:  # reported below
            found["member_error"] = exc

    member_thread = threading.Thread(target=member, daemon=True)
    member_thread.start()
    # Still refused a moment later (the SDK is asking meanwhile), and never answered stale.
    again = latest(cluster, successor)
    assert again.status_code == 503 and again.json()["error_code"] == "OFFSET_NOT_AVAILABLE"
    assert "answer" not in found and "error" not in found
    assert "subscribed_at" not in found and "subscribe_error" not in found

    released.set()
    (holds / str(held)).unlink()
    settled = cluster.wait_until(
        lambda: (r := latest(cluster, successor)).status_code == 200 and r,
        message="the new leader's watermark catches up",
    )
    assert settled.json()["offset"] == RECORDS
    lookup.join(timeout=30)
    assert not lookup.is_alive(), "the SDK lookup returned"
    assert "error" not in found, found.get("error")
    assert found["answer"] == OffsetAndTimestamp(RECORDS, -1)

    # The subscription opened during the window starts at the caught-up end.
    cluster.wait_until(
        lambda: "subscribed_at" in found or "subscribe_error" in found or None,
        message="the WebSocket subscription is accepted",
    )
    assert "subscribe_error" not in found, found.get("subscribe_error")
    assert found["subscribed_at"] == RECORDS
    answer = produce(cluster, successor, TOPIC, 0, ["after"], acks="1")
    assert answer.status_code == 200, answer.text
    subscriber.join(timeout=60)
    assert not subscriber.is_alive(), "the subscription received the record"
    assert "subscribe_error" not in found, found.get("subscribe_error")
    assert found["pushed"] == (RECORDS, "after")
    member_thread.join(timeout=60)
    assert not member_thread.is_alive(), "the group member received the record"
    assert "member_error" not in found, found.get("member_error")
    # Started at the group's commit, once the watermark had caught up: never before.
    assert found["member_started"] == (RECORDS, True)
    assert found["member_pushed"] == RECORDS
