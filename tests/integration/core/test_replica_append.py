"""Leader appends against leadership changes: Partition over real Logs in tmp_path.

A leader appends only while it leads in the epoch the request saw, stamping that
epoch; the check and the write happen under the partition's leader/ISR lock that
state changes take exclusively. Threads stand in for the broker's worker threads.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from app.common.batch import BatchBuilder, read_header
from app.common.errors import NotEnoughReplicas, NotLeaderOrFollower
from app.core.log import Log, LogConfig
from app.core.replication.partition import Partition, append_to_leaders
from app.core.replication.state import PartitionState

ME = 1
URLS = {2: "http://broker-2:8080", 3: "http://broker-3:8080"}


def batch(count: int, tag: str = "v") -> bytes:
    builder = BatchBuilder()
    for i in range(count):
        builder.append(f"{tag}{i}".encode(), None, timestamp=1_700_000_000_000 + i)
    return builder.build()


async def _no_write(state: PartitionState, version: int) -> int | None:
    return None


def replica(tmp_path: Path, name: str = "t-0", min_isr: int = 1) -> Partition:
    config = LogConfig().with_overrides({"min.insync.replicas": min_isr})
    return Partition(
        Log(tmp_path / name, config),
        (1, 2, 3),
        ME,
        write_state=_no_write,
        notify=lambda log: None,
        lag_time_max_ms=10_000,
        locate=URLS.get,
    )


def stamps(log: Log) -> list[tuple[int, int]]:
    """(base offset, leader epoch) of every batch in the log."""
    data = log.read(0, 1 << 20, max_offset=log.log_end_offset).read_bytes()
    out, pos = [], 0
    while pos < len(data):
        h = read_header(data, pos)
        out.append((h.base_offset, h.partition_leader_epoch))
        pos += h.size
    return out


def test_a_deposed_leader_appends_nothing_and_names_the_new_leader(tmp_path: Path) -> None:
    part = replica(tmp_path)
    part.apply(PartitionState(ME, 3, (1, 2, 3), 1), 1)
    epoch = part.leader_epoch  # what the request saw when it was routed here
    append_to_leaders([(part, epoch, batch(2))], acks_all=True)
    part.apply(PartitionState(2, 4, (2, 3), 1), 2)
    with pytest.raises(NotLeaderOrFollower) as caught:
        append_to_leaders([(part, epoch, batch(2))], acks_all=True)
    assert (caught.value.leader, caught.value.leader_url) == (2, URLS[2])  # a 307 there
    assert "nothing was written" in caught.value.message
    assert part.log.log_end_offset == 2
    assert stamps(part.log) == [(0, 3)]
    part.log.close()


def test_a_new_term_of_our_own_refuses_the_old_epoch_without_a_redirect(
    tmp_path: Path,
) -> None:
    part = replica(tmp_path)
    part.apply(PartitionState(ME, 3, (1, 2, 3), 1), 1)
    part.apply(PartitionState(ME, 5, (1, 2), 1), 2)
    with pytest.raises(NotLeaderOrFollower) as caught:
        append_to_leaders([(part, 3, batch(1))], acks_all=False)
    assert caught.value.leader_url is None  # 421: retry here, after refreshing
    append_to_leaders([(part, 5, batch(1))], acks_all=False)
    assert stamps(part.log) == [(0, 5)]
    part.log.close()


def test_an_append_to_several_partitions_is_all_or_nothing(tmp_path: Path) -> None:
    a, b = replica(tmp_path, "t-0"), replica(tmp_path, "t-1")
    for p in (a, b):
        p.apply(PartitionState(ME, 3, (1, 2, 3), 1), 1)
    b.apply(PartitionState(3, 4, (2, 3), 1), 2)
    with pytest.raises(NotLeaderOrFollower):
        append_to_leaders([(a, 3, batch(1)), (b, 3, batch(1))], acks_all=False)
    assert a.log.log_end_offset == b.log.log_end_offset == 0
    a.log.close()
    b.log.close()


def test_min_insync_replicas_is_checked_with_the_append(tmp_path: Path) -> None:
    part = replica(tmp_path, min_isr=2)
    part.apply(PartitionState(ME, 3, (1,), 1), 1)
    with pytest.raises(NotEnoughReplicas):
        append_to_leaders([(part, 3, batch(1))], acks_all=True)
    append_to_leaders([(part, 3, batch(1))], acks_all=False)  # acks=1 does not care
    assert part.log.log_end_offset == 1
    part.log.close()


def test_a_leadership_change_waits_for_the_append_in_flight(tmp_path: Path) -> None:
    """The append holds the lock shared: the state change (exclusive) comes after it, so
    the batch is stamped with the epoch this broker led, and a second append after the
    change writes nothing."""
    part = replica(tmp_path)
    part.apply(PartitionState(ME, 3, (1, 2, 3), 1), 1)
    events: list[str] = []
    writing, release = threading.Event(), threading.Event()
    real_append = part.log.append

    def slow_append(data: bytes, *, leader_epoch: int | None = None) -> object:
        writing.set()
        release.wait(30)
        events.append("appended")
        return real_append(data, leader_epoch=leader_epoch)

    part.log.append = slow_append  # type: ignore[method-assign,assignment]
    appender = threading.Thread(
        target=append_to_leaders, args=([(part, 3, batch(2))],), kwargs={"acks_all": False}
    )
    appender.start()
    assert writing.wait(30)

    def change() -> None:
        part.apply(PartitionState(2, 4, (2, 3), 1), 2)
        events.append("deposed")

    changer = threading.Thread(target=change)
    changer.start()
    changer.join(0.2)  # a chance to jump the queue, had the append not held the lock
    release.set()
    appender.join(30)
    changer.join(30)
    assert events == ["appended", "deposed"]
    assert stamps(part.log) == [(0, 3)]
    assert part.log.leader_epoch_cache.entries() == [(3, 0)]
    part.log.append = real_append  # type: ignore[method-assign]
    with pytest.raises(NotLeaderOrFollower):
        append_to_leaders([(part, 3, batch(1))], acks_all=False)
    assert part.log.log_end_offset == 2
    part.log.close()


def test_acks_after_a_leadership_change_are_refused_without_a_redirect(tmp_path: Path) -> None:
    """The write was made: whatever the high watermark says now (a follower's, after a cut
    maybe other records), the answer is 421 with no leader to resend to."""

    async def main() -> None:
        part = replica(tmp_path)
        part.apply(PartitionState(ME, 3, (1,), 1), 1)
        (info,) = append_to_leaders([(part, 3, batch(2))], acks_all=True)
        assert part.log.high_watermark == 2  # alone in the ISR: committed at once
        await part.wait_replicated(info.last_offset, 1_000, 3)
        part.apply(PartitionState(2, 4, (2, 3), 1), 2)
        with pytest.raises(NotLeaderOrFollower) as caught:
            await part.wait_replicated(info.last_offset, 1_000, 3)
        assert caught.value.leader_url is None
        part.log.close()

    asyncio.run(main())
