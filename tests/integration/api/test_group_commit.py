"""Group commit (app/api/group_commit.py): concurrent produce requests to one partition
share one append, and each keeps its own offsets, order and acks.

The requests are started together in the app's own event loop (httpx's ASGI transport,
a real LogManager in a temp dir), so they reach the partition in the same loop turn,
as requests whose bodies arrive in one read of the sockets do under load. Small
requests are joined with ``group_commit_inline`` (the default); requests appended on a worker
thread always are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_helpers import make_settings

from app.api import create_app
from app.api.metrics import GROUP_COMMIT_APPENDS, GROUP_COMMIT_REQUESTS
from app.common.batch import BatchBuilder
from app.config import Settings

Scenario = Callable[[httpx.AsyncClient], Awaitable[None]]


def run(settings: Settings, scenario: Scenario) -> None:
    """``scenario(client)`` in one event loop with the app (its lifespan run around it)."""

    async def main() -> None:
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://broker") as c:
                await scenario(c)

    asyncio.run(main())


def _counts() -> tuple[float, float]:
    return GROUP_COMMIT_REQUESTS._value.get(), GROUP_COMMIT_APPENDS._value.get()


class Counted:
    """Group-commit requests and appends made inside a ``with`` block."""

    def __enter__(self) -> Counted:
        self.start = _counts()
        return self

    def __exit__(self, *exc: object) -> None:
        end = _counts()
        self.requests = int(end[0] - self.start[0])
        self.appends = int(end[1] - self.start[1])


async def _create(
    client: httpx.AsyncClient, name: str, partitions: int = 1, **configs: Any
) -> None:
    body: dict[str, Any] = {"name": name, "partitions": partitions}
    if configs:
        body["configs"] = configs
    r = await client.post("/topics", json=body)
    assert r.status_code == 201, r.text


def _post(
    client: httpx.AsyncClient, topic: str, records: list[dict[str, Any]], acks: str = "1"
) -> Any:
    return client.post(
        f"/topics/{topic}/records",
        params={"acks": acks},
        json={"records": records, "value_format": "string", "key_format": "string"},
    )


async def _stored(client: httpx.AsyncClient, topic: str, partition: int = 0) -> dict[int, str]:
    r = await client.get(
        f"/topics/{topic}/partitions/{partition}/records",
        params={"offset": 0, "max_wait_ms": 0, "value_format": "string"},
    )
    assert r.status_code == 200, r.text
    return {rec["offset"]: rec["value"] for rec in r.json()["records"]}


def test_concurrent_requests_share_one_append_and_keep_their_own_offsets(tmp_path: Path) -> None:
    # group_commit_inline is on by default.
    run(make_settings(tmp_path), _coalesced)


def test_without_inline_group_commit_small_requests_append_at_once(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        await _create(client, "direct")
        with Counted() as counted:
            answers = await asyncio.gather(
                *(_post(client, "direct", [{"value": "v"}]) for _ in range(8))
            )
        assert counted.requests == 0
        assert sorted(a.json()["offsets"][0]["offset"] for a in answers) == list(range(8))

    run(make_settings(tmp_path, group_commit_inline=False), scenario)


async def _coalesced(client: httpx.AsyncClient) -> None:
    await _create(client, "gc")
    # Requests of 1, 2 and 3 records: each answer must be its own slice of the append.
    bodies = [[{"value": f"r{i}-{j}"} for j in range(i % 3 + 1)] for i in range(24)]
    with Counted() as counted:
        answers = await asyncio.gather(*(_post(client, "gc", body) for body in bodies))
    assert counted.requests == len(bodies)
    assert counted.appends < len(bodies) / 4, "the requests were not coalesced"

    stored = await _stored(client, "gc")
    seen: list[int] = []
    for body, answer in zip(bodies, answers, strict=True):
        assert answer.status_code == 200, answer.text
        offsets = [entry["offset"] for entry in answer.json()["offsets"]]
        # Consecutive within a request, in the request's order, holding its records.
        assert offsets == list(range(offsets[0], offsets[0] + len(body)))
        assert [stored[o] for o in offsets] == [rec["value"] for rec in body]
        seen += offsets
    # In the order the requests joined, no offset shared, none skipped.
    assert seen == list(range(sum(len(b) for b in bodies)))


def test_acks_all_requests_are_joined_off_the_loop_by_default(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        await _create(client, "all")
        with Counted() as counted:
            answers = await asyncio.gather(
                *(_post(client, "all", [{"value": f"v{i}"}], "all") for i in range(5))
            )
        assert counted.requests == 5
        assert counted.appends == 1
        stored = await _stored(client, "all")
        for i, answer in enumerate(answers):
            assert answer.status_code == 200, answer.text
            assert stored[answer.json()["offsets"][0]["offset"]] == f"v{i}"

    run(make_settings(tmp_path), scenario)


def test_each_request_keeps_its_acks(tmp_path: Path) -> None:
    run(make_settings(tmp_path, group_commit_inline=True), _acks)


async def _acks(client: httpx.AsyncClient) -> None:
    await _create(client, "acks")
    acks = ["0", "1", "all", "-1", "1", "0", "all", "1"]
    with Counted() as counted:
        answers = await asyncio.gather(
            *(_post(client, "acks", [{"value": f"a{i}"}], a) for i, a in enumerate(acks))
        )
    # acks=all appends apart from the others (a cluster checks min.insync.replicas under
    # the partition's lock for them only): one append for each kind.
    assert counted.requests == len(acks)
    assert counted.appends == 2
    for a, answer in zip(acks, answers, strict=True):
        if a == "0":
            assert answer.status_code == 204 and answer.content == b""
        else:
            assert answer.status_code == 200, answer.text
    stored = await _stored(client, "acks")
    assert sorted(stored.values()) == sorted(f"a{i}" for i in range(len(acks)))
    for i, (a, answer) in enumerate(zip(acks, answers, strict=True)):
        if a != "0":
            (entry,) = answer.json()["offsets"]
            assert stored[entry["offset"]] == f"a{i}"


def test_a_refused_request_fails_alone(tmp_path: Path) -> None:
    run(make_settings(tmp_path, group_commit_inline=True), _refused)


async def _refused(client: httpx.AsyncClient) -> None:
    # A compacted topic refuses a keyless record in the log's own check: the joined
    # append is refused, then each request is judged alone.
    await _create(client, "compacted", **{"cleanup.policy": "compact"})
    bodies = [[{"key": f"k{i}", "value": f"v{i}"}] for i in range(6)]
    bodies[2] = [{"value": "no key"}]
    answers = await asyncio.gather(*(_post(client, "compacted", body) for body in bodies))
    assert answers[2].status_code == 400, answers[2].text
    assert answers[2].json()["error_code"] == "INVALID_RECORD"
    stored = await _stored(client, "compacted")
    assert sorted(stored.values()) == [f"v{i}" for i in range(6) if i != 2]
    for i, answer in enumerate(answers):
        if i != 2:
            assert answer.status_code == 200, answer.text
            assert stored[answer.json()["offsets"][0]["offset"]] == f"v{i}"


def test_binary_batches_and_multi_partition_requests_are_never_joined(tmp_path: Path) -> None:
    # Multi-partition requests join on a lone broker unless group_commit_partitions is
    # off (test_multi_partition_requests_join_each_partitions_group); off, as before.
    run(make_settings(tmp_path, group_commit_inline=True, group_commit_partitions=False), _apart)


async def _apart(client: httpx.AsyncClient) -> None:
    await _create(client, "apart", partitions=2)
    r = await client.post("/producers", json={})
    assert r.status_code == 200, r.text
    producer = r.json()

    def batch(i: int) -> bytes:
        # Odd: a plain batch; even: an idempotent producer's, in sequence.
        builder = (
            BatchBuilder()
            if i % 2
            else BatchBuilder(
                producer_id=producer["producer_id"],
                producer_epoch=producer["producer_epoch"],
                base_sequence=i // 2,
            )
        )
        builder.append(b"v", None, [], 0)
        return builder.build()

    two_partitions = [{"value": "a", "partition": 0}, {"value": "b", "partition": 1}]
    with Counted() as counted:
        answers = await asyncio.gather(
            *(
                client.post(
                    "/topics/apart/partitions/0/batches",
                    content=batch(i),
                    headers={"content-type": "application/octet-stream"},
                )
                for i in range(4)
            ),
            *(_post(client, "apart", two_partitions) for _ in range(4)),
        )
    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
    assert counted.requests == 0


@pytest.mark.parametrize(
    "settings_of",
    [
        # A body over the inline limit goes to a worker thread.
        lambda tmp: make_settings(tmp, inline_append_max_bytes=64),
        # 0: every append on a worker thread.
        lambda tmp: make_settings(tmp, inline_append_max_bytes=0),
    ],
)
def test_requests_appended_off_the_loop_are_joined(
    tmp_path: Path, settings_of: Callable[[Path], Settings]
) -> None:
    async def scenario(c: httpx.AsyncClient) -> None:
        await _create(c, "big")
        bodies = [[{"value": f"{i}-{j}" + "x" * 200} for j in range(i % 2 + 1)] for i in range(6)]
        with Counted() as counted:
            answers = await asyncio.gather(*(_post(c, "big", body) for body in bodies))
        assert counted.requests == len(bodies)
        assert counted.appends == 1
        stored = await _stored(c, "big")
        seen: list[int] = []
        for body, answer in zip(bodies, answers, strict=True):
            assert answer.status_code == 200, answer.text
            offsets = [entry["offset"] for entry in answer.json()["offsets"]]
            assert [stored[o] for o in offsets] == [rec["value"] for rec in body]
            seen += offsets
        assert seen == list(range(len(stored)))

    run(settings_of(tmp_path), scenario)


def test_a_topic_that_fsyncs_per_append_writes_once_per_group(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        await _create(client, "durable", **{"flush.messages": 1})
        with Counted() as counted:
            first = await asyncio.gather(
                *(_post(client, "durable", [{"value": f"a{i}"}]) for i in range(4))
            )
            # A later burst: a group of its own.
            second = [
                asyncio.ensure_future(_post(client, "durable", [{"value": f"b{i}"}]))
                for i in range(3)
            ]
            answers = [*first, *await asyncio.gather(*second)]
        assert [a.status_code for a in answers] == [200] * 7
        assert counted.requests == 7
        assert counted.appends == 2
        stored = await _stored(client, "durable")
        assert sorted(stored.values()) == sorted(
            [f"a{i}" for i in range(4)] + [f"b{i}" for i in range(3)]
        )

    run(make_settings(tmp_path), scenario)


def test_multi_partition_requests_join_each_partitions_group(tmp_path: Path) -> None:
    """On a lone broker (the default settings) a small request to several partitions
    joins each partition's group: fewer appends than partition batches, and every
    request keeps its own offsets, consecutive per partition, in its records' order."""

    async def scenario(client: httpx.AsyncClient) -> None:
        await _create(client, "spread", partitions=3)
        # Request i: records to partitions 0, 1, 2 (1 to 3 records each), interleaved.
        bodies = [
            [
                {"value": f"r{i}-p{p}-{j}", "partition": p}
                for j in range(3)
                for p in range(3)
                if j <= (i + p) % 3
            ]
            for i in range(12)
        ]
        with Counted() as counted:
            answers = await asyncio.gather(*(_post(client, "spread", body) for body in bodies))
        assert counted.requests == 3 * len(bodies)  # one per partition batch
        assert counted.appends <= 6, "the partitions' batches were not joined"
        stored = {p: await _stored(client, "spread", p) for p in range(3)}
        seen: dict[int, list[int]] = {0: [], 1: [], 2: []}
        for body, answer in zip(bodies, answers, strict=True):
            assert answer.status_code == 200, answer.text
            entries = answer.json()["offsets"]
            assert [e["partition"] for e in entries] == [rec["partition"] for rec in body]
            for p in range(3):
                offsets = [e["offset"] for e in entries if e["partition"] == p]
                assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
                assert [stored[p][o] for o in offsets] == [
                    rec["value"] for rec in body if rec["partition"] == p
                ]
                seen[p] += offsets
        # Per partition: in the order the requests joined, nothing shared or skipped.
        for p in range(3):
            assert seen[p] == list(range(len(stored[p])))

    run(make_settings(tmp_path), scenario)


def test_multi_partition_requests_to_a_compacted_topic_are_not_joined(tmp_path: Path) -> None:
    """A compacted topic's log refuses keyless records at the append: a request to
    several of its partitions keeps its one sequential append (nothing joined)."""

    async def scenario(client: httpx.AsyncClient) -> None:
        await _create(client, "ckeys", partitions=2, **{"cleanup.policy": "compact"})
        body = [
            {"key": "k", "value": "a", "partition": 0},
            {"key": "k", "value": "b", "partition": 1},
        ]
        with Counted() as counted:
            answers = await asyncio.gather(*(_post(client, "ckeys", body) for _ in range(4)))
        assert [a.status_code for a in answers] == [200] * 4
        assert counted.requests == 0

    run(make_settings(tmp_path), scenario)


def test_a_partition_refused_in_a_joined_request_fails_that_request_only(tmp_path: Path) -> None:
    """GroupCommit.append_partitions over a real lone broker: one request's batch to a
    compacted partition is keyless (the log refuses it); that request raises the log's
    error, its other partition's batch is written (as a sequential append would have
    written the partitions before the refused one), and the request sharing the
    groups keeps its own offsets."""
    from app.api.group_commit import GroupCommit
    from app.common.errors import InvalidRecord
    from app.core.local_topology import LocalTopology
    from app.core.log.manager import LogManager

    def batch(key: bytes | None, value: bytes) -> bytes:
        builder = BatchBuilder()
        builder.append(value, key, [], 0)
        return builder.build()

    async def main() -> None:
        manager = LogManager(tmp_path / "logs")
        manager.start()
        try:
            manager.create_topic("plain", 1, {})
            manager.create_topic("comp", 1, {"cleanup.policy": "compact"})
            topology = LocalTopology(manager, 1, "http://broker")
            plain, comp = (topology.leader_partition(t, 0) for t in ("plain", "comp"))
            commits = GroupCommit()
            refused, fine = await asyncio.gather(
                commits.append_partitions(
                    topology, [(plain, 0, batch(None, b"a"), 1), (comp, 0, batch(None, b"x"), 1)]
                ),
                commits.append_partitions(
                    topology, [(plain, 0, batch(None, b"b"), 1), (comp, 0, batch(b"k", b"y"), 1)]
                ),
                return_exceptions=True,
            )
            assert isinstance(refused, InvalidRecord), refused
            assert not isinstance(fine, BaseException), fine
            assert [(i.first_offset, i.last_offset) for i in fine] == [(1, 1), (0, 0)]
            assert plain.log.log_end_offset == 2  # both requests' plain batches
            assert comp.log.log_end_offset == 1  # only the keyed one
        finally:
            manager.shutdown()

    asyncio.run(main())
