"""Cluster routing in the SDK against a fake cluster behind httpx.MockTransport.

The fake brokers share one log per partition (as replicas would), answer only
for the partitions they lead (307 with the leader in the body, 421 while there
is none), deduplicate idempotent batches by producer id and sequence, and can
be "down" (connection refused) or lose an answer after appending.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import orjson
import pytest

from app.client import (
    Admin,
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    Producer,
    TopicPartition,
    _cluster,
)
from app.client._cluster import Cluster, bootstrap_urls
from app.client._http import Call
from app.client.errors import error_from_body, is_retriable
from app.client.types import OffsetAndTimestamp
from app.common.batch import iter_headers
from app.common.errors import ConcurrentTransactions, NotLeaderOrFollower, OffsetNotAvailable
from app.spark.lookup import may_pass


def sync(fn: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test on a fresh loop (the suite runs asyncio tests this way)."""

    @functools.wraps(fn)
    def run() -> None:
        asyncio.run(fn())

    return run


A, B, C = "http://a.test:9001", "http://b.test:9002", "http://c.test:9003"


class FakeCluster:
    def __init__(self, topic: str = "t", partitions: int = 2) -> None:
        self.urls = {0: A, 1: B, 2: C}
        self.topic = topic
        self.leaders = {p: p % 2 for p in range(partitions)}  # p0 on A, p1 on B
        self.logs: dict[int, list[tuple[int, int, int, bytes]]] = {p: [] for p in range(partitions)}
        self.down: set[str] = set()
        self.requests: list[tuple[str, str, str]] = []  # (broker url, method, path)
        self.lose_answer: Callable[[str, int], bool] = lambda url, partition: False
        self.coordinator = 0
        self.groups_answer_421_hint = True
        # Leaders /metadata still reports (a broker behind the controller) until a 307.
        self.stale_leaders: dict[int, int] | None = None

    def url_of(self, request: httpx.Request) -> str:
        return f"{request.url.scheme}://{request.url.host}:{request.url.port}"

    def _id_of(self, url: str) -> int:
        return next(i for i, u in self.urls.items() if u == url)

    def metadata(self) -> dict[str, Any]:
        live = [{"id": i, "url": u} for i, u in self.urls.items() if u not in self.down]
        parts = [
            {"partition": p, "leader": leader, "replicas": [0, 1], "isr": [0, 1]}
            for p, leader in (self.stale_leaders or self.leaders).items()
        ]
        return {
            "cluster_id": "fake",
            "brokers": live,
            "controller": 0,
            "topics": [{"name": self.topic, "partitions": parts}],
        }

    def produce(self, partition: int, body: bytes) -> list[dict[str, int]]:
        out = []
        log = self.logs[partition]
        for pos, h in iter_headers(body):
            data = body[pos : pos + h.batch_length + 12]
            dup = [
                base
                for base, pid, seq, _ in log
                if h.producer_id >= 0 and (pid, seq) == (h.producer_id, h.base_sequence)
            ]
            if dup:
                out.append({"base_offset": dup[0]})
                continue
            base = sum(1 for _ in self.records(partition))
            log.append((base, h.producer_id, h.base_sequence, data))
            out.append({"base_offset": base})
        return out

    def records(self, partition: int) -> list[bytes]:
        from aiokafka.record._crecords import DefaultRecordBatch

        return [r.value for _, _, _, data in self.logs[partition] for r in DefaultRecordBatch(data)]

    def not_leader(self, partition: int, url: str) -> httpx.Response:
        self.stale_leaders = None
        leader = self.leaders[partition]
        body = {
            "error_code": "NOT_LEADER_OR_FOLLOWER",
            "message": "not the leader",
            "retriable": True,
            "topic": self.topic,
            "partition": partition,
            "leader": leader if leader >= 0 else None,
            "leader_url": self.urls[leader] if leader >= 0 else None,
        }
        status = 307 if leader >= 0 else 421
        headers = {"location": self.urls[leader] + url} if leader >= 0 else {}
        return httpx.Response(status, json=body, headers=headers)

    def handle(self, request: httpx.Request) -> httpx.Response:
        url = self.url_of(request)
        path = request.url.path
        self.requests.append((url, request.method, path))
        if url in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        me = self._id_of(url)
        if path == "/metadata":
            return httpx.Response(200, json=self.metadata())
        if path == "/producers":
            return httpx.Response(200, json={"producer_id": 7, "producer_epoch": 0})
        if path == "/coordinator":
            return httpx.Response(
                200,
                json={"node_id": self.coordinator, "url": self.urls[self.coordinator], "key": "g"},
            )
        if path.startswith("/groups/"):
            if me != self.coordinator:
                hint = self.urls[self.coordinator] if self.groups_answer_421_hint else None
                return httpx.Response(
                    421,
                    json={
                        "error_code": "NOT_COORDINATOR",
                        "message": "elsewhere",
                        "retriable": True,
                        "group": "g",
                        "coordinator": self.coordinator if hint else None,
                        "coordinator_url": hint,
                    },
                )
            return httpx.Response(200, json={"group": "g", "state": "Empty", "members": []})
        if path.startswith("/topics/") and "/partitions/" in path:
            partition = int(path.split("/")[4])
            if self.leaders[partition] != me:
                return self.not_leader(partition, str(request.url.raw_path, "ascii"))
            if path.endswith("/batches"):
                answer = {"batches": self.produce(partition, request.content)}
                if self.lose_answer(url, partition):
                    raise httpx.ReadError("answer lost", request=request)
                return httpx.Response(200, json=answer)
            if path.endswith("/offsets"):
                return httpx.Response(
                    200, json={"offset": len(self.records(partition)), "timestamp": -1}
                )
        if path == "/topics" and request.method == "GET":
            return httpx.Response(200, json={"topics": [{"name": self.topic, "partitions": 2}]})
        return httpx.Response(404, json={"error_code": "INVALID_REQUEST", "message": path})

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def produced_at(self, path_end: str = "/batches") -> list[tuple[str, int]]:
        return [
            (url, int(path.split("/")[4]))
            for url, _, path in self.requests
            if path.endswith(path_end)
        ]


# ---- the cache --------------------------------------------------------------------


def test_bootstrap_urls_accept_a_list_or_a_comma_separated_string() -> None:
    assert bootstrap_urls("a.test:1, http://b.test:2/ ,a.test:1") == [
        "http://a.test:1",
        "http://b.test:2",
    ]
    assert bootstrap_urls(["https://x.test"]) == ["https://x.test"]
    with pytest.raises(ValueError):
        bootstrap_urls(" , ")


def test_a_single_broker_is_reached_where_the_client_was_told_not_where_it_advertises() -> None:
    cluster = Cluster("http://proxy.test:80")
    cluster.update(
        {
            "brokers": [{"id": 0, "url": "http://10.0.0.5:8080"}],
            "topics": [{"name": "t", "partitions": [{"partition": 0, "leader": 0}]}],
        }
    )
    assert cluster.leader_url(TopicPartition("t", 0)) == "http://proxy.test:80"
    assert cluster.resolve("http://10.0.0.5:8080", "http://proxy.test:80") == "http://proxy.test:80"


def test_leaders_hints_and_failures() -> None:
    cluster = Cluster([A, B])
    cluster.update(FakeCluster().metadata())
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    assert (cluster.leader_url(t0), cluster.leader_url(t1)) == (A, B)
    assert not cluster.needs_refresh(["t"])
    hint = cluster.leader_hint(t0, NotLeaderOrFollower("t", 0, 2, C + "/"))
    assert hint == C and cluster.leader_url(t0) == C
    assert cluster.needs_refresh(["t"])  # the hint serves one retry; the refresh confirms it
    cluster.failed(A)
    assert cluster.candidates()[0] != A


# ---- the producer -------------------------------------------------------------------


@sync
async def test_async_producer_sends_each_partition_to_its_leader() -> None:
    fake = FakeCluster()
    async with AsyncProducer(A, transport=fake.transport(), linger_ms=0) as p:
        for i in range(4):
            await p.send_and_wait("t", b"v%d" % i, partition=i % 2)
    assert set(fake.produced_at()) == {(A, 0), (B, 1)}
    assert fake.records(0) == [b"v0", b"v2"] and fake.records(1) == [b"v1", b"v3"]


def test_producer_takes_a_307_as_stale_metadata_and_retries_at_the_named_leader() -> None:
    fake = FakeCluster()
    with Producer(f"{A},{B}", transport=fake.transport(), linger_ms=0) as p:
        assert p.send("t", b"before", partition=0).result(timeout=10).offset == 0
        fake.leaders[0] = 1  # leadership of p0 moves to B; the producer still thinks A
        assert p.send("t", b"after", partition=0).result(timeout=10).offset == 1
        assert p.send("t", b"later", partition=0).result(timeout=10).offset == 2
    sent = fake.produced_at()
    # before at A; after: A answers 307, retried at once at B; later goes straight to B.
    assert sent == [(A, 0), (A, 0), (B, 0), (B, 0)]
    assert fake.records(0) == [b"before", b"after", b"later"]
    # ... and the metadata was looked up again after the 307.
    assert sum(1 for _, _, path in fake.requests if path == "/metadata") >= 2


@sync
async def test_producer_refreshes_metadata_after_421_without_a_leader() -> None:
    fake = FakeCluster()
    async with AsyncProducer(A, transport=fake.transport(), linger_ms=0, retry_backoff_ms=5) as p:
        await p.send_and_wait("t", b"x", partition=0)
        fake.leaders[0] = -1  # an election under way: 421, no leader named

        async def elect() -> None:
            await asyncio.sleep(0.05)
            fake.leaders[0] = 1

        election = asyncio.create_task(elect())
        meta = await p.send_and_wait("t", b"y", partition=0)
        await election
    assert meta.offset == 1
    assert fake.produced_at()[-1] == (B, 0)
    assert fake.records(0) == [b"x", b"y"]


def test_producer_fails_over_to_another_bootstrap_url_when_one_is_down() -> None:
    fake = FakeCluster()
    fake.down.add(A)
    fake.leaders = {0: 1, 1: 1}
    with Producer([A, B], transport=fake.transport(), linger_ms=0, retry_backoff_ms=5) as p:
        assert p.send("t", b"x", partition=0).result(timeout=10).offset == 0
    assert fake.records(0) == [b"x"]
    assert [url for url, _, path in fake.requests if path == "/batches" or "batches" in path] == [B]


@pytest.mark.parametrize("old_leader", ["down", "redirects"])
def test_idempotent_retry_across_a_leader_change_stores_each_record_once(old_leader: str) -> None:
    """The old leader appended (and replicated) a batch but its answer was lost; the
    leader changes; the retry, with the same producer id and sequence, reaches the new
    leader (found in the metadata of the other broker when the old one is down, or
    through the old one's 307 while the metadata still names it) and is recognised as a
    duplicate."""
    fake = FakeCluster()
    lost: list[str] = []

    def lose(url: str, partition: int) -> bool:
        if url == A and not lost:
            lost.append(url)
            if old_leader == "down":
                fake.down.add(A)
            else:
                fake.stale_leaders = dict(fake.leaders)
            fake.leaders[0] = 1
            return True
        return False

    fake.lose_answer = lose
    with Producer(
        [A, B], transport=fake.transport(), linger_ms=0, retry_backoff_ms=5, enable_idempotence=True
    ) as p:
        futures = [p.send("t", b"r%d" % i, partition=0) for i in range(50)]
        p.flush(timeout=10)
        offsets = [f.result(timeout=10).offset for f in futures]
    assert lost
    assert fake.records(0) == [b"r%d" % i for i in range(50)]  # no duplicate, no gap
    assert offsets == list(range(50))
    assert all(pid == 7 for _, pid, _, _ in fake.logs[0])
    statuses = [url for url, _, path in fake.requests if path.endswith("/batches")]
    assert statuses[0] == A and B in statuses
    if old_leader == "redirects":
        assert statuses.count(A) >= 2  # the retry went to A, answered 307, then to B


# ---- admin and groups ---------------------------------------------------------------


def test_admin_tries_the_next_broker_when_one_is_down() -> None:
    fake = FakeCluster()
    fake.down.add(A)
    admin = Admin([A, B])
    admin._client._transport = fake.transport()  # the sync client has no transport argument
    with admin:
        assert admin.list_topics() == {"t": 2}
        assert admin.list_topics() == {"t": 2}
    listed = [url for url, _, path in fake.requests if path == "/topics"]
    assert listed == [A, B, B]  # the failed broker is not first any more


@sync
async def test_group_calls_find_the_coordinator_again_after_not_coordinator() -> None:
    fake = FakeCluster()
    async with AsyncAdmin(A, transport=fake.transport()) as admin:
        await admin.describe_group("g")
        assert fake.requests[-1][0] == A  # POST /coordinator named A
        fake.coordinator = 1  # the group moves to B; A answers 421 naming B
        await admin.describe_group("g")
        assert fake.requests[-1][0] == B
        fake.coordinator = 2  # then to C, and B does not know where: find it again
        fake.groups_answer_421_hint = False
        await admin.describe_group("g")
    group_calls = [(url, path) for url, _, path in fake.requests if path != "/metadata"]
    assert group_calls == [
        (A, "/coordinator"),
        (A, "/groups/g"),
        (A, "/groups/g"),
        (B, "/groups/g"),
        (B, "/groups/g"),
        (A, "/coordinator"),
        (C, "/groups/g"),
    ]


@sync
async def test_offset_lookups_go_to_the_leader() -> None:
    fake = FakeCluster()
    async with AsyncProducer(A, transport=fake.transport(), linger_ms=0) as p:
        await p.send_and_wait("t", b"x", partition=1)
    async with AsyncAdmin(A, transport=fake.transport()) as admin:
        found = await admin.list_offsets([TopicPartition("t", 1)])
    assert found[TopicPartition("t", 1)] is not None
    assert found[TopicPartition("t", 1)].offset == 1  # type: ignore[union-attr]
    # Unknown leaders at first: A answers 307 naming B, which answers.
    assert [u for u, _, path in fake.requests if path.endswith("/offsets")][-1] == B


def test_produce_body_is_the_same_bytes_on_every_attempt() -> None:
    fake = FakeCluster()
    bodies: list[bytes] = []
    inner = fake.handle

    def spy(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/batches"):
            bodies.append(request.content)
        return inner(request)

    fake.leaders[0] = 1
    with Producer(A, transport=httpx.MockTransport(spy), linger_ms=0) as p:
        # The producer's metadata says B leads; B's log is then handed back to A.
        p.partitions_for("t")
        fake.leaders[0] = 0
        p.send("t", b"same", partition=0).result(timeout=10)
    assert len(bodies) == 2 and bodies[0] == bodies[1]
    assert orjson.loads(orjson.dumps(fake.produced_at())) == [[B, 0], [A, 0]]


def test_transactional_calls_back_off_exponentially_up_to_a_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A coordinator answering CONCURRENT_TRANSACTIONS for the whole max_block_ms: the
    pauses double from the backoff up to ``TXN_BACKOFF_MAX_S`` (Kafka's
    retry.backoff.max.ms), never past the deadline; then the retriable error is raised."""
    clock = [100.0]
    monkeypatch.setattr(_cluster.time, "monotonic", lambda: clock[0])
    call: Call[Any] = Call("POST", "/transactions/t/commit", lambda body: body)
    route = _cluster.txn_route(Cluster(A), "t", call, 0.02, clock[0] + 5.0)
    op = next(route)
    pauses: list[float] = []
    with pytest.raises(ConcurrentTransactions):
        while True:
            assert isinstance(op, _cluster._Send) and op.url == A
            op = route.throw(ConcurrentTransactions("the previous transaction is completing", "t"))
            assert isinstance(op, _cluster._Sleep)
            pauses.append(op.seconds)
            clock[0] += op.seconds
            op = route.send(None)
    assert pauses[:7] == pytest.approx([0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0])
    assert max(pauses) == _cluster.TXN_BACKOFF_MAX_S
    assert sum(pauses) == pytest.approx(5.0) and len(pauses) < 15  # was 250 at a fixed 20 ms


# ---- a leader catching up after its election (OFFSET_NOT_AVAILABLE) -------------------


def _offset_not_available() -> OffsetNotAvailable:
    return OffsetNotAvailable("t", 0, 0, 50, 3)


def test_a_catching_up_leader_is_asked_again_with_a_growing_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OFFSET_NOT_AVAILABLE (a new leader's high watermark lags the start of its epoch)
    is asked again at the same broker, without a metadata refresh and without using up
    the routed attempts (the leader did not move), the pauses doubling to the cap."""
    clock = [100.0]
    monkeypatch.setattr(_cluster.time, "monotonic", lambda: clock[0])
    cluster = Cluster(A)
    call: Call[Any] = Call("GET", "/topics/t/partitions/0/offsets", lambda body: body)
    route = _cluster.leader_route(cluster, TopicPartition("t", 0), call, 0.1)
    op = next(route)
    pauses = []
    for _ in range(_cluster.ROUTED_ATTEMPTS + 4):
        assert isinstance(op, _cluster._Send) and op.url == A
        op = route.throw(_offset_not_available())
        assert isinstance(op, _cluster._Sleep), "no metadata refresh: the leader is here"
        pauses.append(op.seconds)
        clock[0] += op.seconds
        op = route.send(None)
    assert isinstance(op, _cluster._Send) and op.url == A
    with pytest.raises(StopIteration) as done:
        route.send({"offset": 50, "timestamp": -1})
    assert done.value.value == {"offset": 50, "timestamp": -1}
    assert pauses[:5] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])
    assert max(pauses) == _cluster.TXN_BACKOFF_MAX_S


def test_a_leader_catching_up_for_too_long_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(_cluster.time, "monotonic", lambda: clock[0])
    call: Call[Any] = Call("GET", "/topics/t/partitions/0/offsets", lambda body: body)
    route = _cluster.leader_route(Cluster(A), TopicPartition("t", 0), call, 0.1, catch_up_s=3.0)
    op = next(route)
    waited = 0.0
    with pytest.raises(OffsetNotAvailable) as raised:
        while True:
            op = route.throw(_offset_not_available())
            assert isinstance(op, _cluster._Sleep)
            waited += op.seconds
            clock[0] += op.seconds
            op = route.send(None)
    assert raised.value.retriable and 2.0 < waited <= 3.0


class CatchingUpCluster(FakeCluster):
    """Leaders answer ListOffsets and group resets OFFSET_NOT_AVAILABLE ``lagging`` times."""

    def __init__(self, lagging: int) -> None:
        super().__init__()
        self.lagging = lagging

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        lookup = path.endswith("/offsets") and "/partitions/" in path
        reset = path.endswith("/offsets/reset")
        if (lookup or reset) and self.lagging > 0:
            self.requests.append((self.url_of(request), request.method, path))
            self.lagging -= 1
            exc = _offset_not_available()
            body = {"error_code": exc.error_code, "message": exc.message, "retriable": True}
            return httpx.Response(503, json={**body, **exc.fields()})
        if reset:
            return httpx.Response(
                200, json={"offsets": [{"topic": "t", "partition": 0, "offset": 5}]}
            )
        return super().handle(request)


def test_admin_offset_lookups_wait_for_a_leader_catching_up() -> None:
    fake = CatchingUpCluster(lagging=2)
    fake.leaders[0] = 0
    admin = Admin(A)
    admin._client._transport = fake.transport()
    with admin:
        found = admin.list_offsets([TopicPartition("t", 0)], "latest")
    assert found[TopicPartition("t", 0)] == OffsetAndTimestamp(0, -1)
    asked = [url for url, _, path in fake.requests if path.endswith("/offsets")]
    assert asked == [A, A, A]


@sync
async def test_consumer_end_offsets_and_group_resets_wait_for_a_leader_catching_up() -> None:
    fake = CatchingUpCluster(lagging=2)
    async with AsyncConsumer(A, transport=fake.transport()) as consumer:
        ends = await consumer.end_offsets([TopicPartition("t", 0)])
    assert ends == {TopicPartition("t", 0): 0} and fake.lagging == 0
    fake.lagging = 1
    async with AsyncAdmin(A, transport=fake.transport()) as admin:
        reset = await admin.reset_group_offsets("g", "t", "latest")
    assert reset == {TopicPartition("t", 0): 5} and fake.lagging == 0


def test_offset_not_available_answers_are_raised_as_their_retriable_class() -> None:
    """The SDK, the CLI and Spark's planning lookups decide on retrying by the class
    (``is_retriable``; Spark's ``may_pass``)."""
    exc = _offset_not_available()
    body = orjson.dumps({"error_code": exc.error_code, "message": exc.message, "retriable": True})
    raised = error_from_body(503, body)
    assert isinstance(raised, OffsetNotAvailable) and is_retriable(raised)
    assert may_pass(raised)


# ---- offsets not stable yet (UNSTABLE_OFFSET_COMMIT, KIP-447) --------------------------


def test_unstable_offsets_are_asked_again_at_the_coordinator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read_committed consumer's offsets fetch (``require_stable``) answered
    UNSTABLE_OFFSET_COMMIT is asked again at the same coordinator after a growing pause,
    until the transaction that committed offsets has ended; a read_uncommitted one's
    fetch does not ask for stable offsets."""
    from app.client.group import committed_call

    assert "require_stable" not in committed_call("g", ["t"]).path
    clock = [100.0]
    monkeypatch.setattr(_cluster.time, "monotonic", lambda: clock[0])
    cluster = Cluster(A)
    cluster.set_coordinator("g", B)
    call = committed_call("g", ["t"], require_stable=True)
    assert call.path == "/groups/g/offsets?topic=t&require_stable=true"
    unstable = error_from_body(
        409,
        orjson.dumps(
            {"error_code": "UNSTABLE_OFFSET_COMMIT", "message": "open", "retriable": True}
        ),
    )
    assert is_retriable(unstable)
    route = _cluster.group_route(cluster, "g", call, 0.1)
    op = next(route)
    pauses = []
    for _ in range(3):
        assert isinstance(op, _cluster._Send) and op.url == B
        op = route.throw(unstable)
        assert isinstance(op, _cluster._Sleep)
        pauses.append(op.seconds)
        clock[0] += op.seconds
        op = route.send(None)
    assert isinstance(op, _cluster._Send) and op.url == B
    answer = {"offsets": [{"topic": "t", "partition": 0, "offset": 7}]}
    with pytest.raises(StopIteration) as done:
        route.send(answer)
    assert done.value.value == answer
    assert pauses == pytest.approx([0.1, 0.2, 0.4])
