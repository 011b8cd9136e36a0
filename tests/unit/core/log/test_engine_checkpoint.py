"""Offset checkpoint files and the leader-epoch cache: Kafka's text formats, atomic writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.log.checkpoint import CheckpointCorrupt, OffsetCheckpointFile
from app.core.log.epoch import LeaderEpochCache


def test_offset_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    offsets = {("orders", 1): 977, ("orders", 0): 1234, ("__consumer_offsets", 7): 0}
    OffsetCheckpointFile(path).write(offsets)
    assert path.read_text() == "0\n3\n__consumer_offsets 7 0\norders 0 1234\norders 1 977\n"
    assert OffsetCheckpointFile(path).read() == offsets
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    OffsetCheckpointFile(path).write({})
    assert path.read_text() == "0\n0\n"
    assert OffsetCheckpointFile(path).read() == {}
    assert OffsetCheckpointFile(tmp_path / "missing").read() == {}


@pytest.mark.parametrize(
    "text",
    ["", "0\n", "1\n0\n", "0\n2\nt 0 5\n", "0\n1\nt 0\n", "0\n1\nt x 5\n", "0\nx\n"],
)
def test_offset_checkpoint_rejects_damage(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointCorrupt):
        OffsetCheckpointFile(path).read()


def _cache(tmp_path: Path, end: list[int]) -> LeaderEpochCache:
    return LeaderEpochCache(tmp_path / "leader-epoch-checkpoint", lambda: end[0])


def test_epoch_cache_assign_and_persist(tmp_path: Path) -> None:
    end = [100]
    cache = _cache(tmp_path, end)
    assert cache.latest_epoch is None
    assert cache.end_offset_for(0) == (-1, -1)
    cache.assign(0, 0)
    cache.assign(0, 10)  # same epoch later: no change
    cache.assign(2, 40)
    cache.assign(5, 70)
    assert cache.entries() == [(0, 0), (2, 40), (5, 70)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 40\n5 70\n"
    assert _cache(tmp_path, end).entries() == [(0, 0), (2, 40), (5, 70)]
    assert cache.end_offset_for(5) == (5, 100)
    assert cache.end_offset_for(3) == (2, 70)
    assert cache.end_offset_for(0) == (0, 40)
    assert cache.end_offset_for(6) == (-1, -1)
    # A conflicting entry replaces what it contradicts.
    cache.assign(3, 50)
    assert cache.entries() == [(0, 0), (2, 40), (3, 50)]


def test_epoch_cache_truncation(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [100])
    for epoch, start in [(0, 0), (1, 10), (2, 20), (3, 30)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(20)
    assert cache.entries() == [(0, 0), (1, 10)]
    cache.truncate_from_start(15)
    assert cache.entries() == [(1, 15)]
    cache.truncate_from_start(15)
    assert cache.entries() == [(1, 15)]
    cache.clear()
    assert cache.entries() == [] and _cache(tmp_path, [0]).entries() == []


def test_damaged_epoch_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n1 0\n")
    assert _cache(tmp_path, [0]).entries() == []
