"""Consumer groups over WS /ws/subscribe: the socket is the member, for as long as it is open."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_ws_asyncapi import check
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from ws_helpers import LiveBroker, live_broker, recv, send, subscribe

from app.api.ws.protocol import Close

TP = tuple[str, int]


@pytest.fixture
def slow_groups(tmp_path: Path) -> Iterator[LiveBroker]:
    """Heartbeat interval and session timeout far above what any test waits: whatever moves
    partitions quickly is the socket itself, not a timer."""
    with live_broker(
        tmp_path,
        group_consumer_session_timeout_ms=120_000,
        group_consumer_heartbeat_interval_ms=60_000,
    ) as b:
        yield b


class Member:
    """One group socket: its partitions (from assignment frames) and records by partition."""

    def __init__(self, ws: ClientConnection, subscribed: dict[str, Any]) -> None:
        assert subscribed["type"] == "subscribed", subscribed
        check("subscribe", "send", subscribed)
        self.ws = ws
        self.member_id: str = subscribed["member_id"]
        self.partitions: set[TP] = set()
        self.records: dict[TP, list[dict[str, Any]]] = defaultdict(list)
        self.assignments: list[dict[str, Any]] = []
        self.acks: list[dict[str, Any]] = []

    async def read(self, timeout: float = 10) -> dict[str, Any]:
        frame: dict[str, Any] = await recv(self.ws, timeout)
        check("subscribe", "send", frame)
        if frame["type"] == "assignment":
            self.assignments.append(frame)
            revoked = {(tp["topic"], tp["partition"]) for tp in frame["revoked"]}
            assigned = {(tp["topic"], tp["partition"]) for tp in frame["assigned"]}
            assert not revoked - self.partitions and not assigned & self.partitions, frame
            self.partitions = (self.partitions - revoked) | assigned
            now = {(tp["topic"], tp["partition"]) for tp in frame["partitions"]}
            assert now == self.partitions, frame
        elif frame["type"] == "records":
            tp = (frame["topic"], frame["partition"])
            # Never a record of a partition this socket does not hold.
            assert tp in self.partitions, (tp, self.partitions)
            self.records[tp].extend(frame["records"])
        elif frame["type"] == "commit_ack":
            self.acks.append(frame)
        else:
            raise AssertionError(frame)
        return frame

    async def until(self, done: Any, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            await self.read(max(0.01, deadline - time.monotonic()))

    def count(self) -> int:
        return sum(len(r) for r in self.records.values())


async def join(url: str, group: str, topics: list[str], **extra: Any) -> Member:
    ws, subscribed = await subscribe(
        url, topics=topics, group=group, credit={"records": 1_000_000}, **extra
    )
    return Member(ws, subscribed)


async def settle(members: list[Member], everything: set[TP], timeout: float = 5) -> None:
    """Read frames until the members' partitions are disjoint, cover ``everything`` and
    every member holds some."""
    deadline = time.monotonic() + timeout

    def split() -> bool:
        held = [m.partitions for m in members]
        disjoint = sum(map(len, held)) == len(everything)
        return set().union(*held) == everything and disjoint and all(held)

    while not split():
        assert time.monotonic() < deadline, [m.partitions for m in members]
        for m in members:
            with pytest.raises(TimeoutError):
                while True:
                    await m.read(0.05)


def test_two_sockets_split_and_a_close_hands_over_at_once(slow_groups: LiveBroker) -> None:
    broker = slow_groups
    broker.create_topic("jobs", 4)
    url = broker.ws_url("/ws/subscribe")
    everything = {("jobs", p) for p in range(4)}

    async def main() -> None:
        a = await join(url, "workers", ["jobs"], default="earliest")
        await a.until(lambda: a.partitions == everything)
        b = await join(url, "workers", ["jobs"], default="earliest")
        await settle([a, b], everything)
        assert len(a.partitions) == len(b.partitions) == 2
        # A gave up partitions first (a revocation frame), B got them afterwards.
        assert any(f["revoked"] for f in a.assignments)

        records = [{"value": [p, i], "partition": p} for i in range(10) for p in range(4)]
        await asyncio.to_thread(broker.produce, "jobs", records)
        await a.until(lambda: a.count() == 20)
        await b.until(lambda: b.count() == 20)
        for m in (a, b):
            assert set(m.records) == m.partitions
            for (_, p), got in m.records.items():
                assert [r["value"] for r in got] == [[p, i] for i in range(10)]

        moved = set(a.partitions)
        closed_at = time.monotonic()
        await a.ws.close()
        await b.until(lambda: b.partitions == everything, timeout=5)
        # The session timeout is 120 s and the heartbeat interval 60 s: only the close
        # itself can have moved them.
        assert time.monotonic() - closed_at < 3
        handover = b.assignments[-1]
        assert {(tp["topic"], tp["partition"]) for tp in handover["assigned"]} == moved
        # Nothing was committed: the moved partitions start at `default` (earliest).
        assert {tp["offset"] for tp in handover["assigned"]} == {0}
        await b.until(lambda: all(len(b.records[tp]) == 10 for tp in moved))

        await asyncio.to_thread(
            broker.produce, "jobs", [{"value": [p, 10], "partition": p} for p in range(4)]
        )
        await b.until(lambda: all(len(b.records[tp]) == 11 for tp in everything))
        for (_, p), got in b.records.items():
            assert [r["value"] for r in got] == [[p, i] for i in range(11)]
        await b.ws.close()

    asyncio.run(main())


def test_reconnect_resumes_from_committed_offsets(slow_groups: LiveBroker) -> None:
    broker = slow_groups
    broker.create_topic("ledger", 2)
    broker.produce("ledger", [{"value": i, "partition": i % 2} for i in range(20)])
    url = broker.ws_url("/ws/subscribe")
    everything = {("ledger", 0), ("ledger", 1)}

    async def main() -> None:
        m = await join(url, "audit", ["ledger"], start="committed", default="earliest")
        await m.until(lambda: m.count() == 20)
        # Processed up to 6 in partition 0 and 4 in partition 1; the rest was in flight.
        commit = {
            "type": "commit",
            "id": "c1",
            "offsets": [
                {"topic": "ledger", "partition": 0, "offset": 6},
                {"topic": "ledger", "partition": 1, "offset": 4},
            ],
        }
        check("subscribe", "receive", commit)
        await send(m.ws, commit)
        await m.until(lambda: bool(m.acks))
        assert m.acks[0]["id"] == "c1"
        assert {(o["partition"], o["offset"]) for o in m.acks[0]["offsets"]} == {(0, 6), (1, 4)}
        await m.ws.close()

        broker.produce("ledger", [{"value": 20 + i, "partition": i % 2} for i in range(10)])
        m = await join(url, "audit", ["ledger"], start="committed", default="latest")
        await m.until(lambda: m.partitions == everything)
        starts = {tp["partition"]: tp["offset"] for tp in m.assignments[0]["assigned"]}
        assert starts == {0: 6, 1: 4}
        await m.until(lambda: m.count() == (15 - 6) + (15 - 4))
        for p, first in ((0, 6), (1, 4)):
            got = m.records[("ledger", p)]
            assert [r["offset"] for r in got] == list(range(first, 15))
            assert [r["value"] for r in got] == [2 * o + p for o in range(first, 15)]

        # A bad commit answers an error with the commit's id; nothing is committed.
        bad = {
            "type": "commit",
            "id": 9,
            "offsets": [{"topic": "ledger", "partition": 7, "offset": 1}],
        }
        await send(m.ws, bad)
        error = await recv(m.ws)
        assert error["error_code"] == "UNKNOWN_TOPIC_OR_PARTITION" and error["id"] == 9, error
        check("subscribe", "send", error)

        # Without offsets: the socket's positions.
        await send(m.ws, {"type": "commit", "id": 2})
        await m.until(lambda: bool(m.acks))
        assert {(o["partition"], o["offset"]) for o in m.acks[0]["offsets"]} == {(0, 15), (1, 15)}
        await m.ws.close()

    asyncio.run(main())


def test_group_with_partitions_is_refused_and_commit_needs_a_group(broker: LiveBroker) -> None:
    broker.create_topic("t", 2)
    url = broker.ws_url("/ws/subscribe")

    async def main() -> None:
        ws, error = await subscribe(
            url, group="g", partitions=[{"topic": "t", "partition": 0}], credit={"records": 1}
        )
        assert error["type"] == "error" and error["error_code"] == "INVALID_REQUEST"
        assert "partitions" in error["message"]
        with pytest.raises(ConnectionClosed):
            await recv(ws)
        assert ws.close_code == Close.BAD_REQUEST

        ws, subscribed = await subscribe(url, topics=["t"], credit={"records": 1})
        assert subscribed["type"] == "subscribed" and "member_id" not in subscribed
        await send(ws, {"type": "commit", "id": 1})
        error = await recv(ws)
        assert error["error_code"] == "INVALID_REQUEST" and "group" in error["message"]
        await ws.close()

    asyncio.run(main())


def test_the_broker_heartbeats_for_the_socket(tmp_path: Path) -> None:
    """A listening socket stays a member well past the session timeout."""
    with live_broker(
        tmp_path,
        group_consumer_session_timeout_ms=600,
        group_consumer_heartbeat_interval_ms=100,
    ) as broker:
        broker.create_topic("t", 2)
        url = broker.ws_url("/ws/subscribe")

        async def main() -> None:
            m = await join(url, "g", ["t"])
            await m.until(lambda: len(m.partitions) == 2)
            await asyncio.sleep(1.5)
            with broker.http() as c:
                described = c.get("/groups/g").json()
            assert [x["member_id"] for x in described["members"]] == [m.member_id]
            await m.ws.close()
            deadline = time.monotonic() + 5
            while True:
                with broker.http() as c:
                    if c.get("/groups/g").json()["members"] == []:
                        break
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)

        asyncio.run(main())


def describe(broker: LiveBroker, group: str) -> dict[str, Any]:
    with broker.http() as c:
        r = c.get(f"/groups/{group}")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body


async def wait_for(condition: Any, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_idle_timeout_leaves_the_group(slow_groups: LiveBroker) -> None:
    broker = slow_groups
    broker.create_topic("t", 2)
    with broker.http() as c:
        # The first group request creates __consumer_offsets (50 partitions), which on a
        # loaded machine can outlast the 500 ms idle timeout before `subscribed` is out.
        r = c.post(
            "/groups/warm-up/offsets",
            json={"member_epoch": -1, "offsets": [{"topic": "t", "partition": 0, "offset": 0}]},
        )
        assert r.status_code == 200, r.text

    async def main() -> None:
        m = await join(broker.ws_url("/ws/subscribe?idle_timeout_ms=500"), "idle", ["t"])
        with pytest.raises(ConnectionClosed):
            while True:
                await m.read(5)
        assert m.ws.close_code == Close.IDLE_TIMEOUT and len(m.partitions) == 2
        await wait_for(lambda: describe(broker, "idle")["members"] == [])

    asyncio.run(main())


def test_a_static_member_keeps_its_partitions_for_its_next_socket(
    slow_groups: LiveBroker,
) -> None:
    broker = slow_groups
    broker.create_topic("t", 4)
    url = broker.ws_url("/ws/subscribe")
    everything = {("t", p) for p in range(4)}

    async def main() -> None:
        a = await join(url, "static", ["t"], instance_id="a")
        b = await join(url, "static", ["t"], instance_id="b")
        await settle([a, b], everything)
        mine = set(a.partitions)
        await a.ws.close()
        # B gets nothing of A's: A's instance may come back (epoch -2, not -1).
        with pytest.raises(TimeoutError):
            await b.read(0.5)
        assert len(describe(broker, "static")["members"]) == 2
        a = await join(url, "static", ["t"], instance_id="a")
        await a.until(lambda: a.partitions == mine)
        await a.ws.close()
        await b.ws.close()

    asyncio.run(main())


def test_a_member_removed_behind_its_back_rejoins(tmp_path: Path) -> None:
    with live_broker(
        tmp_path,
        group_consumer_session_timeout_ms=60_000,
        group_consumer_heartbeat_interval_ms=100,
    ) as broker:
        broker.create_topic("t", 2)
        coordinator = broker.app.state.coordinator

        def remove(member_id: str) -> None:
            # As a session timeout would, on the broker's loop.
            group = coordinator.group("lost")
            coordinator._remove(group, group.members[member_id], "removed by the test")

        async def main() -> None:
            m = await join(broker.ws_url("/ws/subscribe"), "lost", ["t"])
            await m.until(lambda: len(m.partitions) == 2)
            coordinator._loop.call_soon_threadsafe(remove, m.member_id)
            # UNKNOWN_MEMBER_ID on the next heartbeat: everything dropped, then rejoined.
            await m.until(lambda: len(m.assignments) >= 3 and len(m.partitions) == 2)
            assert len(m.assignments[1]["revoked"]) == 2 and m.assignments[1]["partitions"] == []
            broker.produce("t", [{"value": 1, "partition": 0}])
            await m.until(lambda: m.count() == 1)
            await m.ws.close()

        asyncio.run(main())


def test_broker_shutdown_leaves_the_group(tmp_path: Path) -> None:
    """Members of sockets cut by a shutdown are not restored as live members on restart
    (which would hold their partitions until a session timeout)."""
    with live_broker(tmp_path, group_consumer_session_timeout_ms=120_000) as broker:
        broker.create_topic("t", 2)

        async def member() -> Member:
            m = await join(broker.ws_url("/ws/subscribe"), "restart", ["t"])
            await m.until(lambda: len(m.partitions) == 2)
            return m

        loop = asyncio.new_event_loop()
        m = loop.run_until_complete(member())
        assert len(describe(broker, "restart")["members"]) == 1
        broker.stop()
        with pytest.raises(ConnectionClosed):
            loop.run_until_complete(m.read(5))
        loop.run_until_complete(m.ws.close())
        loop.close()
    with live_broker(tmp_path) as again:
        assert describe(again, "restart")["members"] == []


def _frozen_subscriber(port: int, message: dict[str, Any]) -> socket.socket:
    """A WebSocket client that sends its subscribe and then never reads again: no pong
    ever answers the broker's pings, as with a stopped process or a host gone silent
    (TCP itself stays up, so nothing resets the connection)."""
    sock = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            "GET /ws/subscribe HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, "the broker closed during the handshake"
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    payload = orjson.dumps(message)
    assert len(payload) < 126
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)
    return sock


def test_a_frozen_client_loses_its_partitions_within_the_session_timeout(
    tmp_path: Path,
) -> None:
    """The broker heartbeats for a socket only while the socket proves it is alive: with a
    1.5 s session timeout a client that stops answering pings is out long before uvicorn's
    default keepalive (20 s ping + 20 s pong) would notice."""
    with live_broker(
        tmp_path,
        group_consumer_session_timeout_ms=1500,
        group_consumer_heartbeat_interval_ms=100,
    ) as broker:
        broker.create_topic("t", 2)
        sock = _frozen_subscriber(
            broker.port,
            {"type": "subscribe", "topics": ["t"], "group": "frozen", "credit": {"records": 10}},
        )
        try:

            def members() -> int | None:
                with broker.http() as c:
                    r = c.get("/groups/frozen")
                return len(r.json()["members"]) if r.status_code == 200 else None

            async def main() -> None:
                # Joined (the group exists from the join on; its member may be gone
                # again by the time this looks, on a loaded machine).
                await wait_for(lambda: members() is not None)
                # Far below uvicorn's default 40 s, far above the 1.5 s bound.
                await wait_for(lambda: members() == 0, timeout=15)

            asyncio.run(main())
        finally:
            sock.close()


def test_a_topic_created_again_is_read_from_its_start(slow_groups: LiveBroker) -> None:
    """Committed offsets go with their topic: a member starting from the group's commits
    gets every record of the new topic of that name, not those past the old commit."""
    broker = slow_groups
    broker.create_topic("tz", 3)
    with broker.http() as c:
        r = c.post(
            "/groups/g/offsets",
            json={"member_epoch": -1, "offsets": [{"topic": "tz", "partition": 2, "offset": 5}]},
        )
        assert r.status_code == 200, r.text
        assert c.delete("/topics/tz").status_code == 204
    broker.create_topic("tz", 3)
    broker.produce("tz", [{"value": i, "partition": 2} for i in range(8)])

    async def main() -> None:
        m = await join(broker.ws_url("/ws/subscribe"), "g", ["tz"], default="earliest")
        await m.until(lambda: m.count() == 8)
        assert [r["offset"] for r in m.records[("tz", 2)]] == list(range(8))
        await m.ws.close()

    asyncio.run(main())


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_read_committed_member_waits_for_a_transaction_that_committed_offsets(
    slow_groups: LiveBroker, outcome: str
) -> None:
    """KIP-447: a read_committed member does not start a partition whose offsets an open
    transaction committed (it would hand out again what that transaction's consumer
    processed); it starts it once the transaction ends, at the transaction's offset
    (commit) or the one before (abort). Partitions the transaction did not touch start at
    once."""
    broker = slow_groups
    broker.create_topic("tx", 2)
    broker.produce("tx", [{"value": i, "partition": i % 2} for i in range(20)])
    http = broker.http()
    r = http.post(
        "/groups/g/offsets",
        json={
            "member_epoch": -1,
            "offsets": [
                {"topic": "tx", "partition": 0, "offset": 2},
                {"topic": "tx", "partition": 1, "offset": 3},
            ],
        },
    )
    assert r.status_code == 200, r.text
    r = http.post("/producers", json={"transactional_id": "copier"})
    assert r.status_code == 200, r.text
    producer = {k: r.json()[k] for k in ("producer_id", "producer_epoch")}
    r = http.post("/transactions/copier/groups", json={**producer, "group_id": "g"})
    assert r.status_code == 200, r.text
    r = http.post(
        "/transactions/copier/offsets",
        json={
            **producer,
            "group_id": "g",
            "offsets": [{"topic": "tx", "partition": 0, "offset": 7}],
        },
    )
    assert r.status_code == 200, r.text
    url = broker.ws_url("/ws/subscribe")

    async def main() -> None:
        m = await join(
            url,
            "g",
            ["tx"],
            start="committed",
            default="earliest",
            isolation_level="read_committed",
        )
        await m.until(lambda: ("tx", 1) in m.partitions)
        assert m.partitions == {("tx", 1)}, m.assignments
        assert {tp["offset"] for tp in m.assignments[0]["assigned"]} == {3}
        await m.until(lambda: m.count() == 10 - 3)
        with pytest.raises(TimeoutError):  # partition 0 waits for the transaction
            await m.until(lambda: ("tx", 0) in m.partitions, timeout=0.5)
        end = http.post(f"/transactions/copier/{outcome}", json=producer)
        assert end.status_code == 200, end.text
        await m.until(lambda: ("tx", 0) in m.partitions)
        last = m.assignments[-1]
        assert last["revoked"] == [] and len(last["assigned"]) == 1, last
        first = 7 if outcome == "commit" else 2
        assert last["assigned"][0]["offset"] == first
        await m.until(lambda: len(m.records[("tx", 0)]) == 10 - first)
        assert [r["offset"] for r in m.records[("tx", 0)]] == list(range(first, 10))
        await m.ws.close()

    try:
        asyncio.run(main())
    finally:
        http.close()
