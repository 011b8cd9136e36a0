"""The SDK against a real broker behind a broker that lost its leaderships.

``StaleBroker`` is a small HTTP server that plays a former leader and
coordinator: it answers produce, fetch and offset calls with 307
NOT_LEADER_OR_FOLLOWER naming the real broker, group calls with 421
NOT_COORDINATOR, and its ``/metadata`` names itself as every partition's
leader until it has redirected once (stale metadata that a refresh fixes).
Another bootstrap URL points at a port nobody listens on (a broker that is
down). Records must arrive exactly once, in order, through the raw-socket
fetch path of both consumers too.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import orjson
import pytest

from app.client import AsyncConsumer, Consumer, Producer, TopicPartition

MakeTopic = Callable[..., str]


class StaleBroker:
    def __init__(self, real_url: str) -> None:
        self.real = real_url
        self.moved = False
        self.redirects = 0
        self.not_coordinator = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(
                self, status: int, body: Any, headers: dict[str, str] | None = None
            ) -> None:
                data = orjson.dumps(body)
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("content-length") or 0))

            def do_GET(self) -> None:
                outer.route(self, "GET", b"")

            def do_POST(self) -> None:
                outer.route(self, "POST", self._body())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def route(self, h: Any, method: str, body: bytes) -> None:
        path = h.path.split("?", 1)[0]
        if path == "/metadata":
            r = httpx.get(self.real + h.path, timeout=10)
            answer = r.json()
            answer["brokers"] = [{"id": 0, "url": self.url}, {"id": 1, "url": self.real}]
            for t in answer["topics"]:
                for p in t["partitions"]:
                    p["leader"] = 1 if self.moved else 0
            h._answer(200, answer)
        elif path == "/producers":
            r = httpx.post(
                self.real + path,
                content=body,
                headers={"content-type": "application/json"},
                timeout=10,
            )
            h._answer(r.status_code, r.json())
        elif path.startswith("/topics/") and "/partitions/" in path:
            self.redirects += 1
            self.moved = True
            parts = path.split("/")
            h._answer(
                307,
                {
                    "error_code": "NOT_LEADER_OR_FOLLOWER",
                    "message": "not the leader any more",
                    "retriable": True,
                    "topic": parts[2],
                    "partition": int(parts[4]),
                    "leader": 1,
                    "leader_url": self.real,
                },
                {"location": self.real + h.path},
            )
        elif path == "/coordinator":
            h._answer(200, {"node_id": 0, "url": self.url, "key": "g", "partition": 0})
        elif path.startswith("/groups/"):
            self.not_coordinator += 1
            h._answer(
                421,
                {
                    "error_code": "NOT_COORDINATOR",
                    "message": "the group moved",
                    "retriable": True,
                    "group": path.split("/")[2],
                    "coordinator": 1,
                    "coordinator_url": self.real,
                },
            )
        else:
            h._answer(404, {"error_code": "INVALID_REQUEST", "message": path, "retriable": False})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stale(broker_url: str) -> Iterator[StaleBroker]:
    broker = StaleBroker(broker_url)
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture
def dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there any more


def _produce(bootstrap: list[str], topic: str, n: int) -> None:
    with Producer(bootstrap, linger_ms=0, batch_size=2000, retry_backoff_ms=5) as p:
        for i in range(n):
            p.send(topic, b"%06d" % i, key=b"%d" % (i % 7))
        p.flush(timeout=30)


def _by_partition(records: list[Any]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for r in records:
        out.setdefault(r.partition, []).append(r.value)
    return out


def test_producer_and_consumer_route_past_a_dead_broker_and_a_former_leader(
    broker_url: str, make_topic: MakeTopic, stale: StaleBroker, dead_url: str
) -> None:
    topic = make_topic(3)
    _produce([dead_url, stale.url], topic, 300)
    assert stale.redirects >= 1  # the producer was sent on by a 307 at least once

    # What the real broker holds: each record once, in send order per partition.
    with Consumer(broker_url, auto_offset_reset="earliest") as direct:
        direct.assign([TopicPartition(topic, p) for p in range(3)])
        expected: list[Any] = []
        while len(expected) < 300:
            expected += direct.poll(timeout_ms=2000)
    truth = _by_partition(expected)
    assert sorted(v for vs in truth.values() for v in vs) == [b"%06d" % i for i in range(300)]
    for values in truth.values():
        assert values == sorted(values)

    stale.moved = False  # the metadata is stale again for the consumers
    before = stale.redirects
    with Consumer(
        f"{dead_url},{stale.url}", auto_offset_reset="earliest", max_poll_records=50
    ) as c:
        c.assign([TopicPartition(topic, p) for p in range(3)])
        got: list[Any] = []
        while len(got) < 300:
            got += c.poll(timeout_ms=2000)
        assert c.poll(timeout_ms=200) == []
    assert _by_partition(got) == truth
    assert stale.redirects > before

    async def consume_async() -> list[Any]:
        stale.moved = False
        async with AsyncConsumer([stale.url], auto_offset_reset="earliest") as ac:
            ac.assign([TopicPartition(topic, p) for p in range(3)])
            seen: list[Any] = []
            while len(seen) < 300:
                seen += await ac.poll(timeout_ms=2000)
            return seen

    assert _by_partition(asyncio.run(consume_async())) == truth


def test_a_group_member_finds_the_real_coordinator(
    broker_url: str, make_topic: MakeTopic, stale: StaleBroker
) -> None:
    topic = make_topic(2)
    _produce([broker_url], topic, 20)
    group = f"g-{topic}"
    with Consumer([stale.url], auto_offset_reset="earliest") as member:
        member.subscribe([topic], group_id=group, enable_auto_commit=False)
        got: list[Any] = []
        while len(got) < 20:
            got += member.poll(timeout_ms=1000)
        member.commit()
        assert member.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)]) == {
            TopicPartition(topic, p): n for p, n in _counts(got).items()
        }
    assert stale.not_coordinator >= 1
    r = httpx.get(f"{broker_url}/groups/{group}/offsets", timeout=10)
    committed = {o["partition"]: o["offset"] for o in r.json()["offsets"]}
    assert committed == _counts(got)


def _counts(records: list[Any]) -> dict[int, int]:
    out: dict[int, int] = {}
    for r in records:
        out[r.partition] = max(out.get(r.partition, 0), r.offset + 1)
    return out
