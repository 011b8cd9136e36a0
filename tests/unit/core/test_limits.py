"""app.core.limits and its use by LogManager: partitions are checked against the
file-descriptor budget before anything is written, a create that fails half-way
leaves nothing behind, and a start never fails because of one topic."""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.common.batch import build_batch, decode_records
from app.common.errors import InvalidPartitions, KafkaStorageError, PartitionLimitExceeded
from app.core.limits import FDS_PER_PARTITION, PartitionBudget, nofile_limit, open_fds
from app.core.log import LogManager
from app.core.log import manager as manager_module


def _files(data: Path) -> set[str]:
    """Everything a topic leaves on disk (its file, its partition dirs), by name."""
    names = {p.name for p in data.iterdir() if p.is_dir() and p.name != "topics"}
    return names | {f"topics/{p.name}" for p in (data / "topics").iterdir()}


def _open_under(data: Path, prefix: str) -> list[str]:
    """Files under ``data`` whose name starts with ``prefix`` that this process holds open."""
    held = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        if target.is_relative_to(data) and target.relative_to(data).parts[0].startswith(prefix):
            held.append(str(target))
    return held


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def manager(data: Path) -> Iterator[LogManager]:
    m = LogManager(data, partition_budget=PartitionBudget(max_per_topic=50, max_total=60))
    m.start()
    yield m
    m.shutdown()


def test_limits_refuse_before_anything_is_written(manager: LogManager, data: Path) -> None:
    manager.create_topic("keep", 20)
    before = _files(data)
    with pytest.raises(PartitionLimitExceeded) as per_topic:
        manager.create_topic("wide", 51)
    assert per_topic.value.setting == "max_partitions_per_topic"
    with pytest.raises(PartitionLimitExceeded) as total:
        manager.create_topic("more", 41)  # 20 + 41 > 60
    assert total.value.setting == "max_partitions"
    assert isinstance(total.value, InvalidPartitions)  # INVALID_PARTITIONS, a 400
    assert _files(data) == before
    manager.create_topic("fits", 40)  # 20 + 40 = 60: exactly the limit


def test_descriptors_in_use_and_the_reserve_count(data: Path) -> None:
    m = LogManager(data)
    m.start()  # raises the soft limit to the hard one first
    try:
        room = (nofile_limit() - open_fds()) // FDS_PER_PARTITION
        budget = PartitionBudget(reserved_fds=(room - 10) * FDS_PER_PARTITION)
        with pytest.raises(PartitionLimitExceeded) as exc:
            budget.check_create("t", 11, 0)
        assert exc.value.setting == "reserved_file_descriptors"
        budget.check_create("t", 5, 0)
    finally:
        m.shutdown()


def test_a_create_failing_half_way_leaves_nothing(
    manager: LogManager, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager.create_topic("keep", 1)
    manager.get_log("keep", 0).append(build_batch([(b"k", b"v")]))
    before = _files(data)
    real_log = manager_module.Log
    made: list[int] = []

    def failing_log(directory: Path, *args: Any, **kwargs: Any) -> Any:
        if len(made) == 3:
            raise OSError(errno.EMFILE, "Too many open files", str(directory))
        made.append(1)
        return real_log(directory, *args, **kwargs)

    monkeypatch.setattr(manager_module, "Log", failing_log)
    with pytest.raises(OSError):
        manager.create_topic("half", 6)
    monkeypatch.setattr(manager_module, "Log", real_log)
    assert _files(data) == before
    assert _open_under(data, "half") == []  # the three logs made were closed
    assert manager.topics() == ["keep"]
    manager.create_topic("half", 6)  # the same create succeeds now
    manager.shutdown()
    restarted = LogManager(data)
    restarted.start()
    try:
        assert restarted.topics() == ["half", "keep"]
    finally:
        restarted.shutdown()


def test_a_topic_that_cannot_load_is_refused_and_the_rest_served(data: Path) -> None:
    m = LogManager(data)
    m.start()
    m.create_topic("good", 1)
    m.get_log("good", 0).append(build_batch([(b"k", b"acknowledged")]))
    m.create_topic("damaged", 2)
    m.shutdown()
    # What a crashed create of an older broker left: a topic file for more partitions than
    # any descriptor limit allows, two of its directories; and a topic file that is garbage.
    meta = json.loads((data / "topics" / "damaged.json").read_text())
    bomb = {**meta, "name": "bomb", "topic_id": "b", "partitions": 10**9}
    (data / "topics" / "bomb.json").write_text(json.dumps(bomb))
    (data / "bomb-0").mkdir()
    (data / "bomb-1").mkdir()
    (data / "topics" / "damaged.json").write_text("{not json")

    restarted = LogManager(data)
    restarted.start()
    try:
        assert restarted.topics() == ["good"]
        assert set(restarted.refused_topics) == {"bomb", "damaged"}
        (record,) = decode_records(restarted.get_log("good", 0).read(0, 1 << 20).read_bytes())
        assert record.value == b"acknowledged"
        # Their files are kept (not mistaken for the rest of a deletion) ...
        assert {"bomb-0", "bomb-1", "damaged-0", "damaged-1"} <= _files(data)
        with pytest.raises(KafkaStorageError):
            restarted.create_topic("bomb", 1)  # ... and not overwritten by a create
        # Deleting a refused topic removes them.
        restarted.delete_topic("bomb")
        restarted.delete_topic("damaged")
        assert _files(data) == {"good-0", "topics/good.json"} | {
            f for f in _files(data) if f.startswith("__")
        }
        restarted.create_topic("bomb", 1)
    finally:
        restarted.shutdown()
