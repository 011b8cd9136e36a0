"""LogManager: data-dir layout, topic lifecycle, restart, background work."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from log_helpers import check_log_dir, value_batch

from app.common.batch import build_batch, decode_records
from app.common.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidRequest,
    InvalidTopic,
    KafkaStorageError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from app.core.log import LogConfig, LogManager, validate_topic_name
from app.core.log.topic_rules import MAX_PARTITIONS, MAX_TOPIC_NAME_LENGTH


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    m = LogManager(
        tmp_path / "data", flush_scheduler_interval_ms=20, retention_check_interval_ms=50
    )
    m.start()
    yield m
    m.shutdown()


@pytest.mark.parametrize(
    "name", ["a", "A.b_c-1", "__consumer_offsets", "x" * MAX_TOPIC_NAME_LENGTH, "..a", "-"]
)
def test_valid_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "x" * (MAX_TOPIC_NAME_LENGTH + 1), "x" * 249, "a b", "a/b", "ä", "a\n", "a*"],
)
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopic):
        validate_topic_name(name)


def test_longest_topic_name_fits_every_file_name(tmp_path: Path) -> None:
    """The name limit is derived from NAME_MAX: the longest name creates, writes its
    metadata, deletes (the deletion dir names cut it short) and restarts, with no
    "File name too long" on the way (names of 214-249 characters failed before)."""
    data = tmp_path / "data"
    name = "n" * MAX_TOPIC_NAME_LENGTH
    m = LogManager(data)
    m.start()
    m.create_topic(name, 2)
    m.get_log(name, 1).append(build_batch([(b"k", b"v")]))
    m.delete_topic(name)
    m.create_topic(name, 1)
    m.shutdown()
    m = LogManager(data)
    m.start()
    try:
        assert m.topics() == [name]
        m.delete_topic(name)
    finally:
        m.shutdown()
    # The last possible partition's directory name fits as well.
    assert len(f"{name}-{MAX_PARTITIONS - 1}") <= 255


def test_layout_after_start_and_shutdown(tmp_path: Path) -> None:
    data = tmp_path / "data"
    m = LogManager(data, broker_id=3)
    m.start()
    assert not (data / ".clean_shutdown").exists()
    m.create_topic("orders", 2, {"retention.ms": 1000})
    m.get_log("orders", 1).append(value_batch(0, 4))
    m.shutdown()
    names = sorted(p.name for p in data.iterdir())
    assert names == [
        ".clean_shutdown",
        "log-start-offset-checkpoint",
        "meta.json",
        "orders-0",
        "orders-1",
        "recovery-point-offset-checkpoint",
        "topics",
    ]
    meta = json.loads((data / "meta.json").read_text())
    assert meta["broker_id"] == 3 and meta["version"] == 1 and meta["cluster_id"]
    topic = json.loads((data / "topics" / "orders.json").read_text())
    assert topic["partitions"] == 2 and topic["configs"] == {"retention.ms": 1000}
    assert (
        data / "recovery-point-offset-checkpoint"
    ).read_text() == "0\n2\norders 0 0\norders 1 4\n"
    assert (data / "log-start-offset-checkpoint").read_text() == "0\n2\norders 0 0\norders 1 0\n"
    assert (data / "orders-0" / "partition.metadata").read_text() == (
        f"version: 0\ntopic_id: {topic['topic_id']}\n"
    )
    assert sorted(p.name for p in (data / "orders-1").iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
        "partition.metadata",
    ]
    # Restart: everything comes back and the clean marker is consumed.
    m2 = LogManager(data, broker_id=3)
    m2.start()
    assert m2.loaded_cleanly and not (data / ".clean_shutdown").exists()
    assert m2.topics() == ["orders"] and m2.partition_count("orders") == 2
    assert m2.topic_overrides("orders") == {"retention.ms": 1000}
    assert m2.topic_config("orders").retention_ms == 1000
    assert m2.cluster_id == meta["cluster_id"]
    log = m2.get_log("orders", 1)
    assert log.log_end_offset == 4 and log.recovered_segments_on_load == 0
    assert log.append(value_batch(4, 1)).first_offset == 4
    m2.shutdown()
    with pytest.raises(KafkaStorageError):
        LogManager(data, broker_id=4).start()


def test_create_topic_errors(manager: LogManager) -> None:
    manager.create_topic("t", 1)
    with pytest.raises(TopicAlreadyExists):
        manager.create_topic("t", 1)
    with pytest.raises(InvalidPartitions):
        manager.create_topic("u", 0)
    with pytest.raises(InvalidConfig):
        manager.create_topic("u", 1, {"retention.mss": 1})
    with pytest.raises(InvalidConfig):
        manager.create_topic("u", 1, {"retention.ms": "soon"})
    with pytest.raises(InvalidTopic):
        manager.create_topic("a/b", 1)
    manager.create_topic("my.topic", 1)
    with pytest.raises(InvalidTopic):
        manager.create_topic("my_topic", 1)
    assert manager.topics() == ["my.topic", "t"]


def test_validate_only_checks_everything_and_writes_nothing(manager: LogManager) -> None:
    manager.create_topic("t", 1)
    with pytest.raises(TopicAlreadyExists):
        manager.create_topic("t", 1, validate_only=True)
    with pytest.raises(InvalidTopic):
        manager.create_topic("a/b", 1, validate_only=True)
    with pytest.raises(InvalidConfig):
        manager.create_topic("u", 1, {"retention.mss": 1}, validate_only=True)
    manager.create_topic("u", 3, {"retention.ms": 5}, validate_only=True)
    assert manager.topics() == ["t"]
    assert not (manager.data_dir / "u-0").exists()
    manager.create_topic("u", 3, {"retention.ms": 5})
    assert manager.partition_count("u") == 3


def test_alter_topic_config_replaces_the_overrides_and_survives_a_restart(tmp_path: Path) -> None:
    m = LogManager(tmp_path / "data")
    m.start()
    try:
        m.create_topic("t", 2, {"retention.ms": 1000, "cleanup.policy": "compact"})
        with pytest.raises(InvalidConfig):
            m.alter_topic_config("t", {"no.such": 1})
        with pytest.raises(UnknownTopicOrPartition):
            m.alter_topic_config("nope", {})
        m.alter_topic_config("t", {"max.message.bytes": "4096"}, validate_only=True)
        assert m.topic_overrides("t") == {"retention.ms": 1000, "cleanup.policy": "compact"}
        m.alter_topic_config("t", {"max.message.bytes": "4096"})
        assert m.topic_overrides("t") == {"max.message.bytes": 4096}
        assert m.get_log("t", 1).config.max_message_bytes == 4096
        assert m.get_log("t", 1).config.cleanup_policy == "delete"  # back to the default
    finally:
        m.shutdown()
    m = LogManager(tmp_path / "data")
    m.start()
    try:
        assert m.topic_overrides("t") == {"max.message.bytes": 4096}
        assert m.get_log("t", 0).config.max_message_bytes == 4096
    finally:
        m.shutdown()


def test_add_partitions_grows_a_topic_that_survives_a_restart(tmp_path: Path) -> None:
    m = LogManager(tmp_path / "data")
    m.start()
    try:
        m.create_topic("t", 1)
        m.get_log("t", 0).append(value_batch(0, 1))
        with pytest.raises(InvalidPartitions):
            m.add_partitions("t", 1)
        m.add_partitions("t", 3, validate_only=True)
        assert m.partition_count("t") == 1
        m.add_partitions("t", 3)
        assert m.partition_count("t") == 3
        m.get_log("t", 2).append(value_batch(0, 1))
    finally:
        m.shutdown()
    m = LogManager(tmp_path / "data")
    m.start()
    try:
        assert m.partition_count("t") == 3
        assert [m.get_log("t", p).log_end_offset for p in range(3)] == [1, 0, 1]
    finally:
        m.shutdown()


def test_a_cluster_topic_takes_its_assignment_and_keeps_it_over_a_restart(
    tmp_path: Path,
) -> None:
    m = LogManager(tmp_path / "data")
    m.start()
    try:
        m.create_topic("t", 2, {"retention.ms": 5000}, topic_id="abc", hosted=[0])
        m.get_log("t", 0).append(value_batch(0, 1))
        with pytest.raises(InvalidRequest):  # a cluster's topic changes through ZooKeeper
            m.alter_topic_config("t", {})
        # Grown to four, this broker hosting partition 2 of the new ones, configs replaced.
        assert m.apply_cluster_assignment(
            "t", 4, {"min.insync.replicas": 2}, [0, 2], topic_id="abc"
        )
        assert not m.apply_cluster_assignment(
            "t", 4, {"min.insync.replicas": 2}, [0, 2], topic_id="abc"
        )
        # Another topic's assignment (deleted, and "t" created again since) changes nothing.
        with pytest.raises(UnknownTopicOrPartition):
            m.apply_cluster_assignment("t", 5, {}, [0, 2, 4], topic_id="old")
        assert m.partition_count("t") == 4
        assert m.hosted_partitions("t") == [0, 2]
        assert m.topic_overrides("t") == {"min.insync.replicas": 2}
        assert m.get_log("t", 0).config.min_insync_replicas == 2
        assert m.get_log("t", 0).config.retention_ms == LogConfig().retention_ms
        m.get_log("t", 2).append(value_batch(0, 1))
        with pytest.raises(InvalidConfig):
            m.apply_cluster_assignment("t", 4, {"retention.ms": "soon"}, [0, 2], topic_id="abc")
        lone = "lone"
        m.create_topic(lone, 1)
        with pytest.raises(InvalidRequest):
            m.apply_cluster_assignment(lone, 2, {}, [0, 1], topic_id="")
    finally:
        m.shutdown()
    m = LogManager(tmp_path / "data")
    m.start()
    try:
        assert m.partition_count("t") == 4
        assert m.hosted_partitions("t") == [0, 2]
        assert m.topic_overrides("t") == {"min.insync.replicas": 2}
        assert [m.get_log("t", p).log_end_offset for p in (0, 2)] == [1, 1]
    finally:
        m.shutdown()


def test_unknown_topics_and_partitions(manager: LogManager) -> None:
    manager.create_topic("t", 2)
    with pytest.raises(UnknownTopicOrPartition):
        manager.get_log("t", 2)
    with pytest.raises(UnknownTopicOrPartition):
        manager.get_log("nope", 0)
    with pytest.raises(UnknownTopicOrPartition):
        manager.partition_count("nope")
    with pytest.raises(UnknownTopicOrPartition):
        manager.delete_topic("nope")


def test_delete_topic_and_recreate(manager: LogManager) -> None:
    manager.create_topic("t", 2, {"file.delete.delay.ms": 100})
    log = manager.get_log("t", 0)
    log.append(value_batch(0, 3))
    in_flight = log.read(0, 1 << 20)
    manager.delete_topic("t")
    assert manager.topics() == []
    with pytest.raises(UnknownTopicOrPartition):
        manager.get_log("t", 0)
    with pytest.raises(KafkaStorageError):
        log.append(value_batch(0, 1))
    # The data stays readable for file.delete.delay.ms, then the background thread removes it.
    assert [r.offset for r in decode_records(in_flight.read_bytes())] == [0, 1, 2]
    data_dir = manager.data_dir
    assert len(list(data_dir.glob("t-*-delete"))) == 2
    deadline = time.monotonic() + 5
    while list(data_dir.glob("t-*")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(data_dir.glob("t-*")) == []
    manager.create_topic("t", 1)
    assert manager.get_log("t", 0).log_end_offset == 0


def test_background_retention(manager: LogManager) -> None:
    manager.create_topic(
        "r", 1, {"segment.bytes": 1000, "retention.bytes": 0, "file.delete.delay.ms": 0}
    )
    log = manager.get_log("r", 0)
    for i in range(20):
        log.append(value_batch(i * 2, 2, size=100))
    deadline = time.monotonic() + 5
    while len(log.segments) > 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(log.segments) == 1
    assert log.log_start_offset == log.segments[0].base_offset > 0
    deadline = time.monotonic() + 5
    expected = f"0\n1\nr 0 {log.log_start_offset}\n"
    path = manager.data_dir / "log-start-offset-checkpoint"
    while path.read_text() != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    assert path.read_text() == expected


def test_unclean_restart_recovers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    m = LogManager(data, LogConfig().with_overrides({"segment.bytes": 1000}))
    m.start()
    m.create_topic("c", 1)
    log = m.get_log("c", 0)
    for i in range(20):
        log.append(value_batch(i * 2, 2, size=100))
    log.flush_rolled()
    m.checkpoint()
    active_base = log.segments[-1].base_offset
    # "Crash": stop the thread, never write .clean_shutdown, tear the last batch.
    m._stop.set()
    path = log.segments[-1].log_path
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 7)
    m2 = LogManager(data, LogConfig().with_overrides({"segment.bytes": 1000}))
    m2.start()
    assert not m2.loaded_cleanly
    log2 = m2.get_log("c", 0)
    assert log2.recovered_segments_on_load == 1  # only from the recovery point
    assert log2.log_end_offset == 38 and log2.segments[-1].base_offset == active_base
    assert log2.append(value_batch(38, 2)).first_offset == 38
    assert [o for o, _ in check_log_dir(log2.dir, start=0)] == list(range(40))
    m2.shutdown()


def test_interrupted_deletes_are_finished_on_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    m = LogManager(data)
    m.start()
    m.create_topic("gone", 2)
    m.create_topic("kept", 1)
    m.get_log("kept", 0).append(value_batch(0, 2))
    m.shutdown()
    # A crash after the topic file went but before the directories were renamed,
    # and a renamed directory whose removal never ran.
    (data / "topics" / "gone.json").unlink()
    (data / "gone-1").rename(data / "gone-1.0123abcd-delete")
    m = LogManager(data)
    m.start()
    assert m.topics() == ["kept"]
    assert sorted(p.name for p in data.iterdir() if p.is_dir()) == ["kept-0", "topics"]
    assert m.get_log("kept", 0).log_end_offset == 2
    m.shutdown()


def test_stray_checkpoint_tmp_and_damaged_checkpoint(tmp_path: Path) -> None:
    data = tmp_path / "data"
    m = LogManager(data)
    m.start()
    m.create_topic("t", 1)
    m.get_log("t", 0).append(value_batch(0, 3))
    m.shutdown()
    (data / "recovery-point-offset-checkpoint.tmp").write_text("junk")
    (data / "recovery-point-offset-checkpoint").write_text("garbage")
    (data / ".clean_shutdown").unlink()
    m = LogManager(data)
    m.start()  # a damaged recovery point means: recover everything
    log = m.get_log("t", 0)
    assert log.recovered_segments_on_load == 1 and log.log_end_offset == 3
    assert not (data / "recovery-point-offset-checkpoint.tmp").exists()
    assert (data / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 3\n"
    m.shutdown()


def test_a_topic_created_again_keeps_its_records_across_a_crash(tmp_path: Path) -> None:
    """Deleting a topic writes the checkpoints without it: the old topic's log start
    offset (moved by DeleteRecords) is not applied to a new topic of the same name by a
    start after a crash that came before the next periodic checkpoint."""
    data = tmp_path / "data"
    hour = 3_600_000  # no periodic checkpoint during the test

    def manager() -> LogManager:
        return LogManager(data, flush_scheduler_interval_ms=hour, retention_check_interval_ms=hour)

    m = manager()
    m.start()
    m.create_topic("t", 1)
    m.get_log("t", 0).append(value_batch(0, 50))
    assert m.get_log("t", 0).delete_records(40) == 40
    m.checkpoint()
    m.delete_topic("t")
    m.create_topic("t", 1)
    m.get_log("t", 0).append(value_batch(0, 10))
    m.get_log("t", 0).flush()
    m._stop.set()  # "crash": no further checkpoint, no .clean_shutdown
    again = manager()
    again.start()
    try:
        log = again.get_log("t", 0)
        assert (log.log_start_offset, log.log_end_offset) == (0, 10)
        assert [o for o, _ in check_log_dir(log.dir, start=0)] == list(range(10))
    finally:
        again.shutdown()


@pytest.mark.parametrize("kept_in_partition_dir", [False, True])
def test_a_topic_from_before_ids_gets_one_at_start_and_keeps_it(
    tmp_path: Path, kept_in_partition_dir: bool
) -> None:
    """A topic file without ``topic_id`` (written before ids were kept) gets an id when
    the broker starts: the one a partition's ``partition.metadata`` holds, else a new
    one; written into the topic file so it stays the same across restarts, and into
    every partition directory; never the empty id (the doors' zero UUID)."""
    data = tmp_path / "data"
    with LogManager(data) as m:
        m.create_topic("old", 2)
        first = m.topic_id("old")
    meta_path = data / "topics" / "old.json"
    meta = json.loads(meta_path.read_text())
    del meta["topic_id"]
    meta_path.write_text(json.dumps(meta))
    for p in (0, 1) if not kept_in_partition_dir else (1,):
        (data / f"old-{p}" / "partition.metadata").unlink()
    with LogManager(data) as m:
        given = m.topic_id("old")
    assert given and (given == first) == kept_in_partition_dir
    assert json.loads(meta_path.read_text())["topic_id"] == given
    for p in (0, 1):
        assert (data / f"old-{p}" / "partition.metadata").read_text() == (
            f"version: 0\ntopic_id: {given}\n"
        )
    with LogManager(data) as m:
        assert m.topic_id("old") == given
