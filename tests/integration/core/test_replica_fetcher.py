"""The follower fetcher's truncation (KIP-101, KIP-279) over real Logs in tmp_path.

Each case builds a leader's and a follower's log directly, batch by batch, each
batch stamped with the leader epoch it was written in, as a history of leader
changes would have left them. The leader is a fake connection answering the two
requests a follower makes from the leader's Log: OffsetsForLeaderEpoch
(``.../epochs/{epoch}/end-offset``, from the leader's epoch cache) and the binary
fetch. The fetcher truncates, then fetches until it has the leader's log end;
then both logs must be byte-identical with the same epoch caches.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from app.common.batch import BatchBuilder
from app.core.log import Log, LogConfig
from app.core.replication import fetcher as fetcher_mod
from app.core.replication.config import ReplicaConfig
from app.core.replication.fetcher import ReplicaFetcher
from app.core.replication.partition import Partition
from app.core.replication.state import PartitionState
from app.wire import Response

ME, LEADER = 1, 2
END_OFFSET = re.compile(r"/epochs/(-?\d+)/end-offset")


def batch(tag: str, count: int) -> bytes:
    """``count`` records whose values name ``tag``: another tag, other bytes."""
    builder = BatchBuilder()
    for i in range(count):
        builder.append(f"{tag}-{i}".encode(), None, timestamp=1_700_000_000_000 + i)
    return builder.build()


def write(log: Log, history: list[tuple[int, str, int]]) -> None:
    """Append ``(epoch, tag, count)`` batches in order, each stamped with its epoch."""
    for epoch, tag, count in history:
        log.append(batch(tag, count), leader_epoch=epoch)


class FakeLeader:
    """A keep-alive connection to the leader, answered from its Log."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.asked: list[int] = []

    async def fetch(self, target: str, accept: bytes = b"") -> Response:
        await asyncio.sleep(0.001)  # a round trip: the test's loop gets its turn
        found = END_OFFSET.search(target)
        if found is not None:
            self.asked.append(int(found.group(1)))
            epoch, end = self.log.leader_epoch_cache.end_offset_for(int(found.group(1)))
            return Response(
                200, {}, bytearray(orjson.dumps({"leader_epoch": epoch, "end_offset": end}))
            )
        query = parse_qs(urlsplit(target).query)
        offset = int(query["offset"][0])
        headers = {
            "logbus-high-watermark": str(self.log.log_end_offset),
            "logbus-log-start-offset": str(self.log.log_start_offset),
        }
        if not self.log.log_start_offset <= offset <= self.log.log_end_offset:
            body = orjson.dumps(
                {
                    "error_code": "OFFSET_OUT_OF_RANGE",
                    "message": "out of range",
                    "offset": offset,
                    "log_start_offset": self.log.log_start_offset,
                    "log_end_offset": self.log.log_end_offset,
                }
            )
            return Response(416, headers, bytearray(body))
        info = self.log.read(offset, 1 << 20, max_offset=self.log.log_end_offset)
        return Response(200, headers, bytearray(info.read_bytes()))

    def close(self) -> None:
        pass


def manager(checkpoint: Callable[[], None] = lambda: None) -> Any:
    """The fetcher's owner; ``checkpoint`` is called where it writes every log's start
    offset down."""
    settings = ReplicaConfig(
        zookeeper="",
        broker_id=ME,
        url="http://127.0.0.1:9",
        replica_fetch_wait_max_ms=0,
        replica_fetch_max_bytes=1 << 20,
    )
    return SimpleNamespace(
        settings=settings,
        auth=None,
        broker_url=lambda broker: "http://127.0.0.1:9",
        truncated=lambda log: None,
        checkpoint_starts=checkpoint,
        start_moved=lambda log: None,
    )


def following(follower: Log, epoch: int = 1) -> Partition:
    """A partition of ``follower`` that follows LEADER in ``epoch`` (both in the ISR)."""
    part = Partition(
        follower,
        (ME, LEADER),
        ME,
        write_state=lambda state, version: asyncio.sleep(0, None),
        notify=lambda log: None,
        lag_time_max_ms=10_000,
    )
    part.apply(PartitionState(LEADER, epoch, (LEADER, ME), 1), 1)
    return part


def epochs_with_records(log: Log) -> list[tuple[int, int]]:
    """The epoch cache without an entry begun at the log end (the leader's current term
    before its first write): a follower learns epochs from batches only."""
    return [
        (e, start) for e, start in log.leader_epoch_cache.entries() if start < log.log_end_offset
    ]


def all_bytes(log: Log) -> bytes:
    return log.read(0, 1 << 24, max_offset=log.log_end_offset).read_bytes()


async def follow(follower: Log, leader: Log, epoch: int) -> tuple[FakeLeader, ReplicaFetcher]:
    """Follow ``leader`` (the current leader, in ``epoch``) until caught up."""
    part = following(follower, epoch)
    conn = FakeLeader(leader)
    fetcher = ReplicaFetcher(manager())
    fetcher_mod.async_connection = lambda *args: conn  # type: ignore[assignment]
    fetcher.follow(part)
    for _ in range(2_000):  # a bound against hanging, not a timing: it catches up in a few
        if fetcher.fetches and follower.log_end_offset == leader.log_end_offset:
            break
        await asyncio.sleep(0.005)
    await fetcher.close()
    return conn, fetcher


def check_case(
    tmp_path: Path,
    leader_history: list[tuple[int, str, int]],
    follower_history: list[tuple[int, str, int]],
    *,
    leader_epoch: int,
    truncated_to: int,
    follower_hw: int | None = None,
) -> list[int]:
    """Build both logs, follow, check the cut and the identical result; the epochs asked."""
    leader = Log(tmp_path / "leader" / "t-0", LogConfig())
    follower = Log(tmp_path / "follower" / "t-0", LogConfig())
    write(leader, leader_history)
    leader.leader_epoch_cache.assign(leader_epoch, leader.log_end_offset)
    write(follower, follower_history)
    if follower_hw is not None:
        follower.high_watermark = follower_hw
    cuts: list[int] = []
    truncate_to = follower.truncate_to

    def recording_truncate(offset: int) -> None:
        if offset < follower.log_end_offset:
            cuts.append(offset)
        truncate_to(offset)

    follower.truncate_to = recording_truncate  # type: ignore[method-assign]
    try:
        conn, _ = asyncio.run(follow(follower, leader, leader_epoch))
        assert min(cuts, default=follower.log_end_offset) == truncated_to, cuts
        assert follower.log_end_offset == leader.log_end_offset
        assert all_bytes(follower) == all_bytes(leader)
        assert epochs_with_records(follower) == epochs_with_records(leader)
        return conn.asked
    finally:
        leader.close()
        follower.close()


@pytest.fixture(autouse=True)
def _restore_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetcher_mod, "async_connection", fetcher_mod.async_connection)


def test_same_latest_epoch_follower_ahead_cuts_at_the_leaders_end(tmp_path: Path) -> None:
    # The follower took records in epoch 1 (as its leader) the new leader never got.
    asked = check_case(
        tmp_path,
        [(0, "a", 10), (1, "b", 5)],
        [(0, "a", 10), (1, "b", 5), (1, "lost", 5)],
        leader_epoch=1,
        truncated_to=15,
    )
    assert asked == [1]


def test_follower_behind_in_an_older_epoch_cuts_where_the_leaders_next_epoch_starts(
    tmp_path: Path,
) -> None:
    # The follower's latest epoch is older than the leader's: it has epoch 1 records past
    # offset 15, where the leader's epoch 2 begins.
    check_case(
        tmp_path,
        [(0, "a", 10), (1, "b", 5), (2, "c", 10)],
        [(0, "a", 10), (1, "b", 5), (1, "lost", 7)],
        leader_epoch=3,
        truncated_to=15,
    )


def test_follower_led_an_epoch_the_leader_never_had(tmp_path: Path) -> None:
    # Follower: epoch 2 at 10 (its own term, unreplicated); leader: epoch 3 from 12. The
    # leader answers epoch 0 ending at 12, and ours ends at 10.
    asked = check_case(
        tmp_path,
        [(0, "a", 10), (0, "b", 2), (3, "c", 10)],
        [(0, "a", 10), (2, "mine", 10)],
        leader_epoch=3,
        truncated_to=10,
    )
    assert asked == [2]


def test_follower_epochs_the_leader_never_had_need_a_second_question(tmp_path: Path) -> None:
    # Follower: 0@0, 2@10, 4@20; leader: 0@0, 3@12, 5@25. Asked about 4, the leader answers
    # epoch 3 (ends at 25), which the follower never had: its epoch below 3 is 2, ending at
    # 20, but the leader never had epoch 2 either. Cutting at 20 keeps the follower's epoch 2
    # records at 10..20 where the leader has others (batch boundaries line up, so fetching
    # from 20 would not notice); asking again about epoch 2 gives epoch 0, ending at 12 on
    # the leader and at 10 here.
    asked = check_case(
        tmp_path,
        [(0, "a", 10), (0, "b", 2), (3, "c", 8), (3, "d", 5), (5, "e", 5)],
        [(0, "a", 10), (2, "mine2", 10), (4, "mine4", 10)],
        leader_epoch=5,
        truncated_to=10,
    )
    assert asked == [4, 2]


def test_leader_had_an_epoch_in_between_the_follower_never_had(tmp_path: Path) -> None:
    # Follower: 0@0, 2@10; leader: 0@0, 1@8, 3@15. Asked about 2 the leader answers epoch 1
    # (ends at 15); the follower's epoch below 1 is 0, ending at 10, but on the leader
    # epoch 0 ends at 8: the follower's records at 8..10 are not the leader's (and fetching
    # from 10 would not notice: a batch of the leader's starts there).
    asked = check_case(
        tmp_path,
        [(0, "a", 8), (1, "b", 2), (1, "b2", 5), (3, "c", 5)],
        [(0, "a", 8), (0, "old", 2), (2, "mine", 10)],
        leader_epoch=3,
        truncated_to=8,
    )
    assert asked == [2, 0]


def test_follower_epoch_older_than_all_the_leaders_cuts_at_the_leaders_first(
    tmp_path: Path,
) -> None:
    # The leader's log starts in epoch 2 (its earlier epochs are gone): asked about 1, it
    # answers (1, where its epoch 2 starts); the follower's epoch 1 records past that go.
    leader = [(2, "b", 10)]
    follower = [(1, "x", 4)]
    check_case(tmp_path, leader, follower, leader_epoch=2, truncated_to=0)


def test_leader_knowing_no_epoch_at_or_below_ours_cuts_to_the_high_watermark(
    tmp_path: Path,
) -> None:
    # The follower claims epoch 7, above anything the leader has: (-1, -1), and the
    # follower falls back to its high watermark (Kafka's rule).
    asked = check_case(
        tmp_path,
        [(0, "a", 10), (3, "c", 5)],
        [(0, "a", 10), (7, "x", 5)],
        leader_epoch=3,
        truncated_to=10,
        follower_hw=10,
    )
    assert asked == [7]


def test_an_epoch_begun_at_the_log_end_without_records_is_forgotten(tmp_path: Path) -> None:
    # The follower led epoch 2 from offset 10 and took no write: its cache says 2@10 with
    # no batch of epoch 2. The leader's epoch-1 records at 10.. must not be filed under it.
    leader_log_history = [(0, "a", 10), (1, "b", 5)]
    leader = Log(tmp_path / "leader" / "t-0", LogConfig())
    follower = Log(tmp_path / "follower" / "t-0", LogConfig())
    try:
        write(leader, leader_log_history)
        leader.leader_epoch_cache.assign(3, leader.log_end_offset)
        write(follower, [(0, "a", 10)])
        follower.leader_epoch_cache.assign(2, 10)
        asyncio.run(follow(follower, leader, 3))
        assert all_bytes(follower) == all_bytes(leader)
        assert follower.leader_epoch_cache.entries() == [(0, 0), (1, 10)]
    finally:
        leader.close()
        follower.close()


def test_a_stale_fetch_answer_is_not_appended_after_the_epoch_changed(tmp_path: Path) -> None:
    """Bytes fetched for an epoch that ended are dropped, even when the change comes while
    the answer is on its way."""

    async def main() -> None:
        leader = Log(tmp_path / "leader" / "t-0", LogConfig())
        follower = Log(tmp_path / "follower" / "t-0", LogConfig())
        write(leader, [(0, "a", 10)])
        part = following(follower)
        conn = FakeLeader(leader)
        real_fetch = conn.fetch

        async def fetch_then_move(target: str, accept: bytes = b"") -> Response:
            answer = await real_fetch(target, accept)
            if "/records" in target:
                # Leadership moves to this broker while the answer is in flight.
                part.apply(PartitionState(ME, 2, (ME,), 1), 2)
            return answer

        conn.fetch = fetch_then_move  # type: ignore[method-assign]
        fetcher_mod.async_connection = lambda *args: conn  # type: ignore[assignment]
        fetcher = ReplicaFetcher(manager())
        fetcher.follow(part)
        for _ in range(2_000):
            if fetcher.fetches:
                break
            await asyncio.sleep(0.005)
        await fetcher.close()
        assert follower.log_end_offset == 0
        leader.close()
        follower.close()

    asyncio.run(main())


def test_a_follower_behind_the_leaders_start_starts_there_and_writes_it_down(
    tmp_path: Path,
) -> None:
    """The leader deleted the records the follower would fetch next (DeleteRecords,
    retention): the follower starts over at the leader's start and writes that start down
    before its next fetch reports it (the leader's low watermark counts it)."""

    async def main() -> None:
        leader = Log(tmp_path / "leader" / "t-0", LogConfig())
        follower = Log(tmp_path / "follower" / "t-0", LogConfig())
        write(leader, [(0, "a", 60)])
        write(follower, [(0, "a", 10)])
        leader.delete_records(50)
        part = following(follower)
        conn = FakeLeader(leader)
        reported: list[int] = []
        real_fetch = conn.fetch

        async def fetch(target: str, accept: bytes = b"") -> Response:
            query = parse_qs(urlsplit(target).query)
            if "log_start_offset" in query:
                reported.append(int(query["log_start_offset"][0]))
            return await real_fetch(target, accept)

        conn.fetch = fetch  # type: ignore[method-assign]
        written: list[int] = []
        fetcher_mod.async_connection = lambda *args: conn  # type: ignore[assignment]
        fetcher = ReplicaFetcher(manager(lambda: written.append(follower.log_start_offset)))
        fetcher.follow(part)
        for _ in range(2_000):  # a bound against hanging: it catches up in a few fetches
            if (follower.log_start_offset, follower.log_end_offset) == (50, 60):
                break
            await asyncio.sleep(0.005)
        await fetcher.close()
        assert (follower.log_start_offset, follower.log_end_offset) == (50, 60)
        first = reported.index(50)
        assert written and written[0] == 50, "written down before it was reported"
        assert all(r < 50 for r in reported[:first])
        leader.close()
        follower.close()

    asyncio.run(main())
