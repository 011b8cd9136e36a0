"""Consumer.subscribe against a real broker with fast heartbeats: splits, hand-overs, commits."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.client import AsyncConsumer, Consumer, ConsumerRecord, Producer, TopicPartition
from app.client.errors import ClientError
from app.common.errors import LogbusError

REPO = Path(__file__).resolve().parents[3]
_names = itertools.count()
# Fast enough that a rebalance settles in a fraction of a second, slow enough for a busy box.
HEARTBEAT_MS = 100
SESSION_MS = 3_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("group-broker")
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "LOGBUS_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": str(HEARTBEAT_MS),
        "LOGBUS_GROUP_CONSUMER_SESSION_TIMEOUT_MS": str(SESSION_MS),
        "LOGBUS_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
    }
    env.pop("LOGBUS_CONFIG", None)
    port = _free_port()
    with (base / "broker.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--data-dir", str(base / "data"),
             "--port", str(port), "--log-level", "warning"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    broker = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "broker did not start"
            try:
                if httpx.get(f"{broker}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield broker
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def topic_with(url: str, partitions: int, per_partition: int) -> str:
    name = f"grp-{os.getpid()}-{next(_names)}"
    r = httpx.post(f"{url}/topics", json={"name": name, "partitions": partitions}, timeout=30)
    assert r.status_code == 201, r.text
    with Producer(url) as p:
        for part in range(partitions):
            for i in range(per_partition):
                p.send(name, b"%d-%d" % (part, i), partition=part)
    return name


def poll_until(
    consumers: list[Consumer],
    done: Callable[[], bool],
    timeout_s: float = 15,
    into: list[ConsumerRecord] | None = None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        for c in consumers:
            records = c.poll(timeout_ms=20)
            if into is not None:
                into.extend(records)


def everything(topic: str, n: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(n)}


def test_members_split_disjointly_and_closing_hands_over(url: str) -> None:
    topic = topic_with(url, 4, 5)
    group = f"g-split-{next(_names)}"
    a = Consumer(url, auto_offset_reset="earliest")
    b = Consumer(url, auto_offset_reset="earliest")
    seen: list[ConsumerRecord] = []
    try:
        a.subscribe([topic], group_id=group)
        b.subscribe([topic], group_id=group)

        def split() -> bool:
            sa, sb = a.assignment(), b.assignment()
            return bool(sa) and bool(sb) and not sa & sb and sa | sb == everything(topic, 4)

        poll_until([a, b], split, into=seen)
        # Stays split: no partition is ever held twice while the group settles.
        for _ in range(10):
            for c in (a, b):
                seen.extend(c.poll(timeout_ms=20))
            assert not a.assignment() & b.assignment()
        poll_until([a, b], lambda: len(seen) >= 20, into=seen)
        a.close()
        poll_until([b], lambda: b.assignment() == everything(topic, 4))
    finally:
        a.close()
        b.close()
    # Every record arrived, each partition in order (a hand-over may repeat, never skip).
    by_partition: dict[int, list[int]] = {}
    for r in seen:
        by_partition.setdefault(r.partition, []).append(r.offset)
    assert {p: sorted(set(o)) for p, o in by_partition.items()} == {
        p: list(range(5)) for p in range(4)
    }


def test_at_least_once_next_member_resumes_after_last_commit(url: str) -> None:
    topic = topic_with(url, 1, 30)
    group = f"g-alo-{next(_names)}"
    tp = TopicPartition(topic, 0)
    with Consumer(url, auto_offset_reset="earliest", max_poll_records=10) as a:
        a.subscribe(topic, group_id=group, enable_auto_commit=False)
        got: list[ConsumerRecord] = []
        poll_until([a], lambda: len(got) >= 10, into=got)
        assert [r.offset for r in got] == list(range(10))
        a.commit()
        assert a.committed([tp]) == {tp: 10}
        poll_until([a], lambda: len(got) >= 20, into=got)
        # No commit for 10..19: it leaves (closing commits nothing without auto-commit).
    with Consumer(url, auto_offset_reset="earliest") as b:
        b.subscribe([topic], group_id=group)
        again: list[ConsumerRecord] = []
        poll_until([b], lambda: len(again) >= 20, into=again)
        assert [r.offset for r in again] == list(range(10, 30))
    # b auto-committed on close.
    with Consumer(url) as c:
        c.subscribe([topic], group_id=group)
        assert c.committed([tp]) == {tp: 30}


def test_callbacks_revoke_before_the_other_member_is_assigned(url: str) -> None:
    topic = topic_with(url, 2, 3)
    group = f"g-cb-{next(_names)}"
    events: list[tuple[str, str, frozenset[TopicPartition]]] = []

    def recorder(who: str, what: str) -> Callable[[set[TopicPartition]], None]:
        return lambda tps: events.append((who, what, frozenset(tps)))

    a = Consumer(url, auto_offset_reset="earliest")
    b = Consumer(url, auto_offset_reset="earliest")
    try:
        a.subscribe(
            [topic], group_id=group, on_assigned=recorder("a", "+"), on_revoked=recorder("a", "-")
        )
        poll_until([a], lambda: a.assignment() == everything(topic, 2))
        assert events == [("a", "+", frozenset(everything(topic, 2)))]
        b.subscribe(
            [topic], group_id=group, on_assigned=recorder("b", "+"), on_revoked=recorder("b", "-")
        )
        poll_until([a, b], lambda: len(b.assignment()) == 1 and len(a.assignment()) == 1)
        moved = frozenset(b.assignment())
        assert events[1:] == [("a", "-", moved), ("b", "+", moved)]
        a.close()
        assert events[-1] == ("a", "-", frozenset(everything(topic, 2)) - moved)
        poll_until([b], lambda: b.assignment() == everything(topic, 2))
        assert events[-1] == ("b", "+", frozenset(everything(topic, 2)) - moved)
    finally:
        a.close()
        b.close()


def test_fenced_member_loses_partitions_and_rejoins(url: str) -> None:
    topic = topic_with(url, 2, 3)
    group = f"g-fence-{next(_names)}"
    revoked: list[set[TopicPartition]] = []
    with Consumer(url, auto_offset_reset="earliest") as a:
        a.subscribe([topic], group_id=group, on_revoked=revoked.append)
        poll_until([a], lambda: a.assignment() == everything(topic, 2))
        member_id, epoch = a.member()
        assert member_id and epoch > 0
        membership = a._group
        assert membership is not None
        with membership._lock:
            membership.epoch = epoch + 100  # an epoch the coordinator never gave out
        poll_until([a], lambda: bool(revoked))
        assert revoked == [everything(topic, 2)]
        poll_until([a], lambda: a.assignment() == everything(topic, 2))
        assert a.member()[0] == member_id  # fenced, not forgotten: same id, new epoch


def test_commit_and_assign_need_the_right_mode(url: str) -> None:
    topic = topic_with(url, 1, 0)
    with Consumer(url) as c:
        with pytest.raises(ClientError):
            c.commit()
        c.subscribe([topic], group_id=f"g-mode-{next(_names)}")
        with pytest.raises(ClientError):
            c.assign([TopicPartition(topic, 0)])
        with pytest.raises(ClientError):
            c.subscribe([topic], group_id="other")


def test_silent_member_loses_its_partitions_after_the_session_timeout(url: str) -> None:
    topic = topic_with(url, 2, 0)
    group = f"g-silent-{next(_names)}"
    a = Consumer(url)
    b = Consumer(url)
    try:
        a.subscribe([topic], group_id=group)
        b.subscribe([topic], group_id=group)
        poll_until([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1)
        membership = a._group
        assert membership is not None
        membership._stop.set()  # a hangs: no heartbeat, no leave
        membership._wake.set()
        started = time.monotonic()
        poll_until([b], lambda: b.assignment() == everything(topic, 2), timeout_s=15)
        assert time.monotonic() - started >= SESSION_MS / 1000 - 0.5
    finally:
        b.close()
        a.close()


def test_static_member_keeps_its_partitions_across_a_restart(url: str) -> None:
    topic = topic_with(url, 2, 0)
    group = f"g-static-{next(_names)}"
    a = Consumer(url)
    b = Consumer(url)
    try:
        a.subscribe([topic], group_id=group, group_instance_id="worker-1")
        b.subscribe([topic], group_id=group)
        poll_until([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1)
        held = a.assignment()
        a.close()
        # Several heartbeat intervals, well inside the session timeout: nothing moves.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            b.poll(timeout_ms=50)
            assert len(b.assignment()) == 1
        with Consumer(url) as again:
            again.subscribe([topic], group_id=group, group_instance_id="worker-1")
            poll_until([again, b], lambda: again.assignment() == held)
    finally:
        a.close()
        b.close()


def test_pattern_subscription_covers_matching_topics(url: str) -> None:
    first = topic_with(url, 1, 2)
    second = topic_with(url, 2, 2)
    group = f"g-re-{next(_names)}"
    with Consumer(url, auto_offset_reset="earliest") as c:
        c.subscribe(re.compile(re.escape(first) + "|" + re.escape(second)), group_id=group)
        wanted = everything(first, 1) | everything(second, 2)
        got: list[ConsumerRecord] = []
        poll_until([c], lambda: c.assignment() == wanted and len(got) >= 6, into=got)
        assert sorted((r.topic, r.partition, r.offset) for r in got) == sorted(
            (tp.topic, tp.partition, o) for tp in wanted for o in range(2)
        )


def test_async_members_split_commit_and_hand_over(url: str) -> None:
    topic = topic_with(url, 2, 10)
    group = f"g-async-{next(_names)}"
    events: list[tuple[str, str, frozenset[TopicPartition]]] = []

    def recorder(who: str, what: str) -> Callable[[set[TopicPartition]], None]:
        return lambda tps: events.append((who, what, frozenset(tps)))

    async def until(consumers: list[AsyncConsumer], done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 15
        while not done():
            assert time.monotonic() < deadline, "timed out"
            for c in consumers:
                seen.extend(await c.poll(timeout_ms=20))

    seen: list[ConsumerRecord] = []

    async def main() -> None:
        a = AsyncConsumer(url, auto_offset_reset="earliest")
        b = AsyncConsumer(url, auto_offset_reset="earliest")
        try:
            a.subscribe([topic], group_id=group, on_revoked=recorder("a", "-"))
            await until([a], lambda: a.assignment() == everything(topic, 2) and len(seen) >= 20)
            await a.commit()
            b.subscribe([topic], group_id=group, on_assigned=recorder("b", "+"))
            await until([a, b], lambda: len(a.assignment()) == len(b.assignment()) == 1)
            assert not a.assignment() & b.assignment()
            moved = frozenset(b.assignment())
            assert events == [("a", "-", moved), ("b", "+", moved)]
            await a.close()
            await until([b], lambda: b.assignment() == everything(topic, 2))
            assert await b.committed(everything(topic, 2)) == {
                tp: 10 for tp in everything(topic, 2)
            }
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())
    # Everything was read once by a; b started at a's commits, so nothing was read twice.
    assert sorted((r.partition, r.offset) for r in seen) == [
        (p, o) for p in range(2) for o in range(10)
    ]


def test_a_refused_join_raises_from_poll(url: str) -> None:
    topic = topic_with(url, 1, 0)
    with Consumer(url) as c:
        c.subscribe([topic], group_id=f"g-bad-{next(_names)}", server_assignor="no-such")
        with pytest.raises(LogbusError) as caught:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                c.poll(timeout_ms=50)
        assert caught.value.error_code == "UNSUPPORTED_ASSIGNOR"


def test_three_members_never_overlap_through_joins_and_leaves(url: str) -> None:
    topic = topic_with(url, 5, 0)
    group = f"g-three-{next(_names)}"
    members = [Consumer(url) for _ in range(3)]
    every = everything(topic, 5)

    def check_round(active: list[Consumer]) -> bool:
        held = [c.assignment() for c in active]
        for i, mine in enumerate(held):
            for other in held[i + 1 :]:
                assert not mine & other
        return set().union(*held) == every and all(held)

    try:
        for n, c in enumerate(members, 1):
            c.subscribe([topic], group_id=group)
            poll_until(members[:n], lambda n=n: check_round(members[:n]))  # type: ignore[misc]
        members[1].close()
        rest = [members[0], members[2]]
        poll_until(rest, lambda: check_round(rest))
        assert sorted(len(c.assignment()) for c in rest) == [2, 3]
    finally:
        for c in members:
            c.close()
