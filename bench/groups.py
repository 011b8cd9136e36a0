"""Consumer group benchmarks against a running broker.

* commits/s: 1,000 groups commit at once, each on its own keep-alive
  connection (one offset per commit, each appended to ``__consumer_offsets``
  before the answer).
* rebalance: a 10-member group on one topic; members heartbeat every
  ``heartbeat_interval_ms`` (from the broker's answer) with random phases and,
  like Kafka's consumer, heartbeat again at once after their assignment
  changed (the acknowledgement that lets revoked partitions move). Measured:
  time from the 10th member's first heartbeat until every member holds its
  final assignment (disjoint, covering, balanced).

``python -m bench.groups [URL]`` (no URL: a broker subprocess with a 1 s
heartbeat interval). ``run(url)`` returns the figures as a dict.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import statistics
import sys
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

GROUPS = 1000
COMMITS_PER_GROUP = 10
MEMBERS = 10
PARTITIONS = 30
TRIALS = 3

TP = tuple[str, int]


class Conn:
    """A minimal HTTP/1.1 keep-alive client: httpx costs more CPU per request than
    the broker does, which would measure the client."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: Any | None = None) -> tuple[int, Any]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        payload = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        )
        self.writer.write(head.encode() + payload)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        data = await self.reader.readexactly(length) if length else b""
        return status, (json.loads(data) if data else None)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _addr(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


async def _setup_topic(url: str, name: str, partitions: int) -> None:
    conn = Conn(*_addr(url))
    status, body = await conn.request("POST", "/topics", {"name": name, "partitions": partitions})
    conn.close()
    if status not in (201, 409):
        raise RuntimeError(f"cannot create {name}: {status} {body}")


async def commits_per_second(
    url: str, groups: int = GROUPS, per_group: int = COMMITS_PER_GROUP
) -> dict[str, Any]:
    topic = f"bench-commits-{uuid.uuid4().hex[:8]}"
    await _setup_topic(url, topic, 8)
    host, port = _addr(url)
    conns = [Conn(host, port) for _ in range(groups)]
    prefix = uuid.uuid4().hex[:8]
    latencies: list[float] = []

    async def one(i: int, conn: Conn, rounds: int, record: bool) -> None:
        group = f"bench-{prefix}-{i}"
        for n in range(rounds):
            body = {"offsets": [{"topic": topic, "partition": i % 8, "offset": n}]}
            t = time.perf_counter()
            status, answer = await conn.request("POST", f"/groups/{group}/offsets", body)
            if record:
                latencies.append(time.perf_counter() - t)
            if status != 200:
                raise RuntimeError(f"commit failed: {status} {answer}")

    # The first commit opens the connections and creates the groups.
    await asyncio.gather(*(one(i, c, 1, False) for i, c in enumerate(conns)))
    start = time.perf_counter()
    await asyncio.gather(*(one(i, c, per_group, True) for i, c in enumerate(conns)))
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    latencies.sort()
    return {
        "groups": groups,
        "commits": groups * per_group,
        "seconds": round(elapsed, 3),
        "commits_per_s": round(groups * per_group / elapsed),
        "latency_p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
        "latency_p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
    }


class BenchMember:
    def __init__(self, url: str, group: str, topic: str) -> None:
        self.conn = Conn(*_addr(url))
        self.group = group
        self.topic = topic
        self.member_id = ""
        self.epoch = 0
        self.owned: set[TP] = set()
        self.interval = 1.0
        self.stopped = False

    async def heartbeat(self) -> None:
        body: dict[str, Any] = {"member_id": self.member_id, "member_epoch": self.epoch}
        if self.epoch == 0:
            body["subscribed_topics"] = [self.topic]
        else:
            body["owned_partitions"] = [
                {"topic": self.topic, "partitions": sorted(p for _, p in self.owned)}
            ]
        status, answer = await self.conn.request("POST", f"/groups/{self.group}/heartbeat", body)
        if status != 200:
            raise RuntimeError(f"heartbeat failed: {status} {answer}")
        self.member_id = answer["member_id"]
        self.epoch = answer["member_epoch"]
        self.interval = answer["heartbeat_interval_ms"] / 1000
        new = {(a["topic"], p) for a in answer["assignment"]["partitions"] for p in a["partitions"]}
        changed = new != self.owned
        self.owned = new
        if changed and self.epoch > 0:
            # Reconciled (revoked or took partitions): tell the coordinator at once.
            await self.heartbeat()

    async def loop(self, changed: asyncio.Event, first_delay: float) -> None:
        await asyncio.sleep(first_delay)
        while not self.stopped:
            before = set(self.owned)
            await self.heartbeat()
            if self.owned != before:
                changed.set()
            await asyncio.sleep(self.interval)

    async def leave(self) -> None:
        self.stopped = True
        # A cancelled heartbeat may have left a half-read answer on the old connection.
        self.conn.close()
        self.conn = Conn(self.conn.host, self.conn.port)
        await self.conn.request(
            "POST",
            f"/groups/{self.group}/heartbeat",
            {"member_id": self.member_id, "member_epoch": -1},
        )
        self.conn.close()


def _final(members: list[BenchMember], partitions: int) -> bool:
    held = [m.owned for m in members]
    union = set().union(*held)
    sizes = [len(h) for h in held]
    return sum(sizes) == len(union) == partitions and max(sizes) - min(sizes) <= 1


async def rebalance_time(url: str, members: int = MEMBERS, trials: int = TRIALS) -> dict[str, Any]:
    topic = f"bench-rebalance-{uuid.uuid4().hex[:8]}"
    group = f"bench-rebalance-{uuid.uuid4().hex[:8]}"
    await _setup_topic(url, topic, PARTITIONS)
    changed = asyncio.Event()
    crew = [BenchMember(url, group, topic) for _ in range(members - 1)]
    await crew[0].heartbeat()
    interval = crew[0].interval
    tasks = [asyncio.create_task(m.loop(changed, random.random() * interval)) for m in crew]
    samples: list[float] = []
    try:
        deadline = time.monotonic() + 20 * interval + 10
        while not _final(crew, PARTITIONS):
            if time.monotonic() > deadline:
                raise RuntimeError("the group of 9 never settled")
            await asyncio.sleep(0.01)
        for _ in range(trials):
            newcomer = BenchMember(url, group, topic)
            everyone = [*crew, newcomer]
            start = time.perf_counter()
            await newcomer.heartbeat()
            task = asyncio.create_task(newcomer.loop(changed, newcomer.interval))
            deadline = time.monotonic() + 20 * interval + 10
            while not _final(everyone, PARTITIONS):
                if time.monotonic() > deadline:
                    raise RuntimeError("the group never reached its final assignment")
                changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout=0.05)
            samples.append(time.perf_counter() - start)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await newcomer.leave()
            # Let the nine settle again before the next trial.
            deadline = time.monotonic() + 20 * interval + 10
            while not _final(crew, PARTITIONS):
                if time.monotonic() > deadline:
                    raise RuntimeError("the group did not settle after the leave")
                await asyncio.sleep(0.01)
            await asyncio.sleep(interval)
    finally:
        for m in crew:
            m.stopped = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for m in crew:
            # The broker may be gone already; leaving is a courtesy here.
            with contextlib.suppress(Exception):
                await m.leave()
    median = statistics.median(samples)
    return {
        "members": members,
        "partitions": PARTITIONS,
        "heartbeat_interval_ms": round(interval * 1000),
        "samples_ms": [round(s * 1000) for s in samples],
        "median_ms": round(median * 1000),
        "median_heartbeat_intervals": round(median / interval, 2),
        "goal_heartbeat_intervals": 2,
    }


def run(url: str) -> dict[str, Any]:
    async def both() -> dict[str, Any]:
        return {
            "commits": await commits_per_second(url),
            "rebalance": await rebalance_time(url),
        }

    return asyncio.run(both())


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(json.dumps(run(argv[1]), indent=2))
        return 0
    from bench.common import broker

    env = {"LOGBUS_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "1000"}
    with broker(env) as url:
        print(json.dumps(run(url), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
