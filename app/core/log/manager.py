"""The log manager: every partition log of one broker's data directory.

Data-dir layout (see also docs/ARCHITECTURE.md, "On disk")::

    <data-dir>/
      meta.json                          {"version": 1, "broker_id": 0, "cluster_id": "..."}
      topics/<topic>.json                {"name", "topic_id", "partitions", "configs",
                                          "hosted" (cluster mode: the partitions kept here)}
      <topic>-<partition>/               segments, indexes, leader-epoch-checkpoint,
                                         partition.metadata (topic id, Kafka's format)
      producer-id-block                  next unused block of producer ids (app.core.log.producer_ids)
      recovery-point-offset-checkpoint   per partition: offsets below it are fsynced
      log-start-offset-checkpoint        per partition: first readable offset
      .clean_shutdown                    present only after a clean stop

Creating a topic is all or nothing: its partitions are checked against the
broker's file-descriptor budget (:mod:`app.core.limits`) before anything is
written, and a create that fails half-way (no space, no descriptor left)
closes and removes what it made, topic file included. Starting never fails
because of one topic: a topic whose file is damaged or whose partitions
cannot be opened is refused with an error in the log, its files are kept
untouched (not taken for the rest of a deletion), and every other topic is
served; deleting it then removes its files.

Topic configs: ``topics/<topic>.json`` keeps the topic's *overrides* (Kafka
names, parsed values) and partition count; the effective config is the
broker's defaults with those overrides applied, so changing a broker default
reaches every topic that did not override it. That file is the commit point
of topic creation and deletion: it is written (atomically) before the
partition directories are made, and removed before they are renamed to
``<topic>-<p>.<uuid>-delete`` for asynchronous removal. A partition
directory without a topic file is therefore the rest of a deletion and is
removed on start.

Threads: public methods are thread-safe. One background thread
(``logbus-log-manager``) flushes rolled segments, applies ``flush.ms``,
retention (every ``retention_check_interval_ms``) and delayed deletes, and
writes the checkpoint files; ``shutdown`` stops it. A second one
(``logbus-log-cleaner``, :class:`app.core.log.cleaner.LogCleaner`) compacts
the logs of compacted topics and keeps ``cleaner-offset-checkpoint``; it
starts and stops with the manager (``cleaner_config.enable=False`` leaves
it off; :meth:`LogManager.run_cleaner_once` runs a pass on the caller's
thread either way).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import threading
from collections.abc import Callable, Collection, Container, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.common.errors import (
    InvalidPartitions,
    InvalidRequest,
    InvalidTopic,
    KafkaStorageError,
    LogbusError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from app.core.limits import PartitionBudget, raise_nofile_limit
from app.core.log.checkpoint import (
    CheckpointCorrupt,
    OffsetCheckpointFile,
    fsync_dir,
    write_atomically,
)
from app.core.log.cleaner import CleanerConfig, CleanResult, LogCleaner
from app.core.log.config import LogConfig
from app.core.log.log import Log, close_logs
from app.core.log.partition_metadata import legacy_topic_id, new_kafka_id, write_topic_id
from app.core.log.producer_ids import PRODUCER_ID_BLOCK_FILE, ProducerIdManager
from app.core.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from app.core.log.segment import now_ms
from app.core.log.topic_rules import (
    DELETE_DIR_SUFFIX,
    MAX_PARTITIONS,
    ConfigChange,
    changed_overrides,
    check_new_topic,
    collision_key,
    delete_dir_name,
)

_log = logging.getLogger(__name__)

META_FILE = "meta.json"
TOPICS_DIR = "topics"
CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
FORMAT_VERSION = 1
DEFAULT_CONFIG = LogConfig()  # frozen, so one shared default is safe

_PARTITION_DIR = re.compile(r"(.+)-(\d+)")


@dataclass
class _Topic:
    name: str
    topic_id: str
    overrides: dict[str, object]
    config: LogConfig
    # Indexed by partition; None where another broker holds the partition (cluster mode).
    logs: list[Log | None] = field(default_factory=list)
    # Created by cluster mode (from ZooKeeper), not by this broker on its own.
    clustered: bool = False

    def take_config(self, overrides: dict[str, object], config: LogConfig) -> None:
        """New config overrides and the config they make, for the topic and its logs here
        (a log reads its ``config`` per operation: one in flight uses the old or the new)."""
        self.overrides, self.config = overrides, config
        for log in self.logs:
            if log is not None:
                log.config = config


class LogManager:
    """Creates, loads, deletes and looks after every partition log; see the module docstring."""

    def __init__(
        self,
        data_dir: Path,
        default_config: LogConfig = DEFAULT_CONFIG,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        retention_check_interval_ms: int = 300_000,
        flush_scheduler_interval_ms: int = 1000,
        broker_id: int = 0,
        cleaner_config: CleanerConfig | None = None,
        partition_budget: PartitionBudget | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.partition_budget = (
            partition_budget if partition_budget is not None else PartitionBudget()
        )
        # Topics on disk that could not be loaded at start (name -> why): kept, not served.
        self.refused_topics: dict[str, str] = {}
        # Idempotent producers: broker-wide ids, per-log state expiring after this long idle.
        self.producer_ids = ProducerIdManager(self.data_dir / PRODUCER_ID_BLOCK_FILE)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.default_config = default_config
        self.retention_check_interval_ms = retention_check_interval_ms
        self.flush_scheduler_interval_ms = flush_scheduler_interval_ms
        self.broker_id = broker_id
        self.cluster_id = ""
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        self._topics: dict[str, _Topic] = {}
        self._pending_dir_deletes: list[tuple[int, list[Log], list[Path]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._last_checkpoint: (
            tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]] | None
        ) = None
        self.loaded_cleanly = False
        self.cleaner_config = cleaner_config if cleaner_config is not None else CleanerConfig()
        self._cleaner: LogCleaner | None = None

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        """Load and recover every log, then start the background thread."""
        with self._lock:
            if self._started:
                return
            raise_nofile_limit()
            self.data_dir.mkdir(parents=True, exist_ok=True)
            (self.data_dir / TOPICS_DIR).mkdir(exist_ok=True)
            self._load_meta()
            self.producer_ids.load()
            clean_marker = self.data_dir / CLEAN_SHUTDOWN_FILE
            clean = clean_marker.exists()
            self.loaded_cleanly = clean
            recovery_points = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT)
            start_offsets = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT)
            for path in self.data_dir.glob("*.tmp"):
                path.unlink(missing_ok=True)
            for path in (self.data_dir / TOPICS_DIR).glob("*.tmp"):
                path.unlink(missing_ok=True)
            self._remove_deleted_dirs()
            self.refused_topics = {}
            for meta_path in sorted((self.data_dir / TOPICS_DIR).glob("*.json")):
                try:
                    self._load_topic(meta_path, recovery_points, start_offsets, clean)
                except (LogbusError, OSError) as e:
                    # One topic must not keep the broker from serving the others.
                    name = meta_path.name.removesuffix(".json")
                    self.refused_topics[name] = str(e)
                    _log.error(
                        "topic %r is not served: %s; its files are kept: fix the cause and "
                        "restart, or delete the topic (DELETE /topics/%s) to remove them",
                        name,
                        e,
                        name,
                    )
            self._remove_orphan_dirs()
            # From here on a crash must trigger recovery again.
            if clean:
                clean_marker.unlink()
                fsync_dir(self.data_dir)
            self.checkpoint()
            self._started = True
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="logbus-log-manager", daemon=True
            )
            self._thread.start()
            self._cleaner = LogCleaner(self.data_dir, self._all_logs, self.cleaner_config)
            self._cleaner.start()

    def shutdown(self) -> None:
        """Stop background work, flush every log, write checkpoints and ``.clean_shutdown``."""
        with self._lock:
            if not self._started:
                return
            self._stop.set()
            thread = self._thread
            cleaner = self._cleaner
        if cleaner is not None:
            cleaner.shutdown()
        if thread is not None:
            thread.join()
        with self._lock:
            logs = self._all_logs()
            for log in logs:
                log.flush()
            self.checkpoint()
            for log in logs:
                log.close()
            for _, dead_logs, paths in self._pending_dir_deletes:
                self._remove_dirs(dead_logs, paths)
            self._pending_dir_deletes = []
            (self.data_dir / CLEAN_SHUTDOWN_FILE).touch()
            fsync_dir(self.data_dir)
            self._topics = {}
            self._thread = None
            self._cleaner = None
            self._started = False

    def __enter__(self) -> LogManager:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _load_meta(self) -> None:
        path = self.data_dir / META_FILE
        if path.exists():
            try:
                meta = json.loads(path.read_text())
                broker_id = int(meta["broker_id"])
                self.cluster_id = str(meta["cluster_id"])
            except (ValueError, KeyError, TypeError) as e:
                raise KafkaStorageError(f"{path} is damaged: {e}") from e
            if broker_id != self.broker_id:
                raise KafkaStorageError(
                    f"{path} belongs to broker {broker_id}, not broker {self.broker_id}"
                )
            return
        self.cluster_id = new_kafka_id()
        meta = {
            "version": FORMAT_VERSION,
            "broker_id": self.broker_id,
            "cluster_id": self.cluster_id,
        }
        write_atomically(path, json.dumps(meta, indent=2).encode() + b"\n")

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        try:
            return OffsetCheckpointFile(self.data_dir / name).read()
        except (CheckpointCorrupt, OSError) as e:
            # Falling back to 0 means scanning everything / trusting the segments: safe.
            _log.warning("ignoring %s: %s", name, e)
            return {}

    def _load_topic(
        self,
        meta_path: Path,
        recovery_points: Mapping[tuple[str, int], int],
        start_offsets: Mapping[tuple[str, int], int],
        clean: bool,
    ) -> None:
        try:
            meta = json.loads(meta_path.read_text())
            name = str(meta["name"])
            partitions = int(meta["partitions"])
            overrides = dict(meta.get("configs", {}))
            topic_id = str(meta.get("topic_id", ""))
            listed = meta.get("hosted")
            # Checked before anything is opened, or built: the file may ask for any number.
            self.partition_budget.check_load(name, partitions if listed is None else len(listed))
            hosted = set(range(partitions) if listed is None else listed)
        except (ValueError, KeyError, TypeError) as e:
            raise KafkaStorageError(f"{meta_path} is damaged: {e}") from e
        if name != meta_path.name.removesuffix(".json"):
            raise KafkaStorageError(f"{meta_path} names another topic, {name!r}")
        if not topic_id and "hosted" not in meta:
            # From before ids were kept: one now, as Kafka gives older topics (cluster
            # topics take theirs from ZooKeeper), so no door answers the zero UUID.
            topic_id = legacy_topic_id(self.data_dir, name, partitions)
            meta["topic_id"] = topic_id
            write_atomically(meta_path, json.dumps(meta, indent=2).encode() + b"\n")
            _log.info("topic %s had no id: it is %s now", name, topic_id)
        config = self.default_config.with_overrides(overrides)
        topic = _Topic(name, topic_id, overrides, config, clustered="hosted" in meta)
        try:
            for p in range(partitions):
                if p not in hosted:
                    topic.logs.append(None)
                    continue
                self._open_log(
                    topic,
                    p,
                    recovery_point=recovery_points.get((name, p), 0),
                    log_start_offset=start_offsets.get((name, p), 0),
                    clean_shutdown=clean,
                )
        except BaseException:
            close_logs(topic.logs)  # their descriptors are needed by the other topics
            raise
        self._topics[name] = topic

    def _remove_deleted_dirs(self) -> None:
        for path in self.data_dir.iterdir():
            if path.is_dir() and path.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)

    def _remove_orphan_dirs(self) -> None:
        known = {
            f"{t.name}-{i}"
            for t in self._topics.values()
            for i, log in enumerate(t.logs)
            if log is not None
        }
        for path in self.data_dir.iterdir():
            m = _PARTITION_DIR.fullmatch(path.name)
            if not path.is_dir() or m is None or path.name in known:
                continue
            if m.group(1) in self.refused_topics:
                continue  # a topic refused at start: its data stays until it is deleted
            _log.warning("removing %s: its topic was deleted", path)
            shutil.rmtree(path, ignore_errors=True)

    def _open_log(
        self,
        topic: _Topic,
        p: int,
        *,
        clean_shutdown: bool,
        recovery_point: int = 0,
        log_start_offset: int = 0,
    ) -> None:
        """Open (or create) partition ``p``'s log as the topic's next one, with its
        ``partition.metadata``."""
        directory = self.data_dir / f"{topic.name}-{p}"
        topic.logs.append(
            Log(
                directory,
                topic.config,
                topic=topic.name,
                partition=p,
                recovery_point=recovery_point,
                log_start_offset=log_start_offset,
                clean_shutdown=clean_shutdown,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
            )
        )
        write_topic_id(directory, topic.topic_id)

    def _open_new_logs(self, topic: _Topic, partitions: range, hosted: Container[int]) -> None:
        """Append ``partitions`` to the topic's logs, new ones: an empty log for each
        partition in ``hosted``, None for the others (another broker holds them). A directory
        already at a new log's place is a leftover of an interrupted deletion or growth (no
        topic file names it): it goes first. Create, CreatePartitions and a cluster topic's
        growth make their logs here."""
        for p in partitions:
            if p not in hosted:
                topic.logs.append(None)
                continue
            directory = self.data_dir / f"{topic.name}-{p}"
            if directory.exists():
                shutil.rmtree(directory)
            self._open_log(topic, p, clean_shutdown=True)

    def _commit_new_logs(
        self, shadow: _Topic, partitions: range, hosted: Container[int], meta: dict[str, Any]
    ) -> None:
        """A topic's growth, all or nothing: the new logs in ``shadow``
        (:meth:`_open_new_logs`), then the topic file takes ``meta`` (the commit point: a
        crash before it leaves directories the next start removes as orphans). On any error
        the new logs are closed and their directories removed, and it propagates. The
        caller serves the logs after (``topic.logs.extend(shadow.logs)``)."""
        meta_path = self.data_dir / TOPICS_DIR / f"{shadow.name}.json"
        try:
            self._open_new_logs(shadow, partitions, hosted)
            stored = json.loads(meta_path.read_text())
            stored.update(meta)
            write_atomically(meta_path, json.dumps(stored, indent=2).encode() + b"\n")
            fsync_dir(self.data_dir)
        except BaseException:
            close_logs(list(shadow.logs))
            for p in partitions:
                if p in hosted:
                    shutil.rmtree(self.data_dir / f"{shadow.name}-{p}", ignore_errors=True)
            raise

    # -- topics ------------------------------------------------------------------

    def _check_started(self) -> None:
        if not self._started:
            raise KafkaStorageError("the log manager is not running")

    def create_topic(
        self,
        name: str,
        partitions: int,
        overrides: Mapping[str, object] = {},
        *,
        topic_id: str | None = None,
        hosted: Collection[int] | None = None,
        validate_only: bool = False,
    ) -> None:
        """Create ``name`` with ``partitions`` empty logs.

        In cluster mode the topic id comes from the cluster and only the ``hosted``
        partitions (this broker's replicas) get a log here. ``validate_only``: every
        check, nothing written.
        Raises InvalidTopic, InvalidPartitions, InvalidConfig or TopicAlreadyExists.
        """
        config, normalized = check_new_topic(name, partitions, overrides, self.default_config)
        with self._lock:
            self._check_started()
            if name in self._topics:
                raise TopicAlreadyExists(name)
            if name in self.refused_topics:
                raise KafkaStorageError(
                    f"topic {name!r} is on disk but was not loaded at start (see the broker's "
                    "log); delete it first to create it again"
                )
            clash = next((t for t in self._topics if collision_key(t) == collision_key(name)), None)
            if clash is not None:
                raise InvalidTopic(
                    name, f"collides with existing topic {clash!r} ('.' and '_' clash)"
                )
            if topic_id is None:
                topic_id = new_kafka_id()
            meta: dict[str, object] = {
                "name": name,
                "topic_id": topic_id,
                "partitions": partitions,
                "configs": normalized,
            }
            here = set(range(partitions)) if hosted is None else set(hosted)
            if hosted is not None:
                meta["hosted"] = sorted(here)
            # Before anything is written: a topic too large for the descriptors left would
            # fail half-way and leave the broker none for its connections.
            self.partition_budget.check_create(name, len(here), self._hosted_count())
            if validate_only:
                return
            meta_path = self.data_dir / TOPICS_DIR / f"{name}.json"
            topic = _Topic(name, topic_id, normalized, config, clustered=hosted is not None)
            try:
                write_atomically(meta_path, json.dumps(meta, indent=2).encode() + b"\n")
                self._open_new_logs(topic, range(partitions), here)
                fsync_dir(self.data_dir)
            except BaseException:
                # All or nothing: the topic file goes first (the commit point), then what
                # was made of its partitions, so neither a restart nor a retry finds a part.
                self._undo_create(meta_path, name, topic.logs, here)
                raise
            self._topics[name] = topic

    def _undo_create(
        self, meta_path: Path, name: str, logs: list[Log | None], partitions: Collection[int]
    ) -> None:
        for path in (meta_path, meta_path.with_name(meta_path.name + ".tmp")):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        close_logs(logs)
        for p in partitions:
            shutil.rmtree(self.data_dir / f"{name}-{p}", ignore_errors=True)
        with contextlib.suppress(OSError):
            fsync_dir(self.data_dir / TOPICS_DIR)

    def check_can_host(self, topic: str, partitions: int) -> None:
        """Raise PartitionLimitExceeded unless ``partitions`` more replicas of ``topic`` fit
        in this broker's partition budget now (what :meth:`create_topic` checks first): a
        cluster's creating broker asks before it writes the topic to ZooKeeper."""
        with self._lock:
            self.partition_budget.check_create(topic, partitions, self._hosted_count())

    def _hosted_count(self) -> int:
        return sum(1 for t in self._topics.values() for log in t.logs if log is not None)

    def delete_topic(self, name: str) -> None:
        """Delete ``name``; its files go after ``file.delete.delay.ms``. Raises UnknownTopicOrPartition."""
        with self._lock:
            self._check_started()
            if name in self.refused_topics:
                self._delete_refused(name)
                return
            topic = self._topics.pop(name, None)
            if topic is None:
                raise UnknownTopicOrPartition(name)
            (self.data_dir / TOPICS_DIR / f"{name}.json").unlink()
            fsync_dir(self.data_dir / TOPICS_DIR)
            paths: list[Path] = []
            hosted_logs = [log for log in topic.logs if log is not None]
            for log in hosted_logs:
                log.mark_offline()
                dead = log.dir.with_name(delete_dir_name(log.dir.name))
                log.dir.rename(dead)
                paths.append(dead)
            fsync_dir(self.data_dir)
            # The checkpoints forget its partitions now, as Kafka's asyncDelete does: a
            # topic created again under the name starts at 0, and a crash before the next
            # periodic write would load it with the old log start offset (a DeleteRecords'
            # or retention's), hiding its records, or dropping them all below that start.
            self.checkpoint()
            if self._cleaner is not None:
                self._cleaner.forget(name)
            due = now_ms() + topic.config.file_delete_delay_ms
            self._pending_dir_deletes.append((due, hosted_logs, paths))
            if topic.config.file_delete_delay_ms <= 0:
                self._delete_expired_dirs(due)

    def _delete_refused(self, name: str) -> None:
        """Delete a topic refused at start: its file, then its partition directories."""
        (self.data_dir / TOPICS_DIR / f"{name}.json").unlink(missing_ok=True)
        fsync_dir(self.data_dir / TOPICS_DIR)
        del self.refused_topics[name]
        for path in self.data_dir.iterdir():
            m = _PARTITION_DIR.fullmatch(path.name)
            if path.is_dir() and m is not None and m.group(1) == name:
                shutil.rmtree(path, ignore_errors=True)

    def _delete_expired_dirs(self, now: int) -> None:
        with self._lock:
            due = [d for d in self._pending_dir_deletes if d[0] <= now]
            self._pending_dir_deletes = [d for d in self._pending_dir_deletes if d[0] > now]
        for _, logs, paths in due:
            self._remove_dirs(logs, paths)

    @staticmethod
    def _remove_dirs(logs: list[Log], paths: list[Path]) -> None:
        for log in logs:
            with contextlib.suppress(OSError):
                log.close()
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)

    def topics(self) -> list[str]:
        return sorted(self._topics)

    def _topic(self, name: str) -> _Topic:
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(name)
        return topic

    def partition_count(self, topic: str) -> int:
        return len(self._topic(topic).logs)

    def topic_config(self, topic: str) -> LogConfig:
        return self._topic(topic).config

    def topic_overrides(self, topic: str) -> dict[str, object]:
        return dict(self._topic(topic).overrides)

    def alter_topic_config(
        self, name: str, overrides: ConfigChange, *, validate_only: bool = False
    ) -> None:
        """Replace a lone broker's topic overrides with ``overrides`` (Kafka's AlterConfigs:
        a config not named returns to the default), or with what ``overrides`` makes of
        the current ones (IncrementalAlterConfigs: read under the lock, so two changes
        never build on the same old set). Checked as a create checks them
        (InvalidConfig), then written to the topic file (atomically: a crash leaves the old
        or the new set) before the logs take the new config; ``validate_only`` writes
        nothing. A cluster's topics take their configs from ZooKeeper
        (:meth:`apply_cluster_assignment`): InvalidRequest here.

        Blocking (an fsync): call from a worker thread. A log reads its ``config`` per
        operation, so an append in flight uses the old one or the new one, whole."""
        if not callable(overrides):
            check_new_topic(name, 1, overrides, self.default_config)  # before the topic
        with self._lock:
            topic = self._standalone_topic(name, "its configs change")
            wanted = changed_overrides(overrides, topic.overrides)
            config, normalized = check_new_topic(name, 1, wanted, self.default_config)
            if validate_only:
                return
            meta_path = self.data_dir / TOPICS_DIR / f"{name}.json"
            meta = json.loads(meta_path.read_text())
            meta["configs"] = normalized
            write_atomically(meta_path, json.dumps(meta, indent=2).encode() + b"\n")
            topic.take_config(normalized, config)

    def _standalone_topic(self, name: str, how: str) -> _Topic:
        """The started broker's topic ``name``, one it created on its own; InvalidRequest
        for a cluster's topic (``how`` it changes instead, in its ZooKeeper assignment:
        :meth:`apply_cluster_assignment`). Under the lock."""
        self._check_started()
        topic = self._topic(name)
        if topic.clustered:
            raise InvalidRequest(
                f"topic {name!r} belongs to the cluster: {how} in its ZooKeeper assignment, "
                "not here"
            )
        return topic

    def add_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        """Grow a lone broker's topic to ``count`` partitions (Kafka's CreatePartitions).
        The new logs are made first, then the topic file names them (the commit point: a
        crash before it leaves directories the next start removes as orphans), then they
        are served. InvalidPartitions unless ``count`` adds partitions within the limits;
        InvalidRequest for a cluster's topic (its assignment is ZooKeeper's:
        :meth:`apply_cluster_assignment`).
        Blocking: call from a worker thread."""
        with self._lock:
            topic = self._standalone_topic(name, "it grows")
            have = len(topic.logs)
            if isinstance(count, bool) or not have < count <= MAX_PARTITIONS:
                raise InvalidPartitions(
                    f"topic {name!r} has {have} partitions: a new count must be above it "
                    f"and at most {MAX_PARTITIONS}, not {count!r}"
                )
            self.partition_budget.check_create(name, count - have, self._hosted_count())
            if validate_only:
                return
            shadow = replace(topic, logs=[])
            new = range(have, count)
            self._commit_new_logs(shadow, new, new, {"partitions": count})
            topic.logs.extend(shadow.logs)

    def apply_cluster_assignment(
        self,
        name: str,
        partitions: int,
        overrides: Mapping[str, object],
        hosted: Collection[int],
        *,
        topic_id: str,
    ) -> bool:
        """Bring a cluster topic in line with its ZooKeeper assignment (that of the topic
        with id ``topic_id``: UnknownTopicOrPartition, nothing changed, when the topic here
        is another one of that name, created again since): its config overrides
        become ``overrides`` (already checked by the broker that wrote them; a name this
        broker does not keep is InvalidConfig), and a count above the topic's grows it,
        with a log for each new partition in ``hosted``. Partitions never go away here
        and hosting of existing ones never changes (no reassignment). Whether anything
        changed.

        The new logs are made first, then the topic file names them (the commit point, as
        :meth:`add_partitions`: a crash before it leaves directories the next start
        removes as orphans, and the watch brings them back), then they are served; a
        config change is written to the topic file before the logs take it (a log reads
        its ``config`` per operation: an append in flight uses the old or the new one,
        whole). Blocking (fsyncs): call from a worker thread."""
        config, normalized = check_new_topic(name, 1, overrides, self.default_config)
        with self._lock:
            self._check_started()
            topic = self._topic(name)
            if not topic.clustered:
                raise InvalidRequest(f"topic {name!r} is a lone broker's, not the cluster's")
            if topic.topic_id != topic_id:
                raise UnknownTopicOrPartition(name)  # an assignment of a deleted topic
            have = len(topic.logs)
            grow = [p for p in range(have, partitions) if p in set(hosted)]
            if normalized == topic.overrides and partitions <= have:
                return False
            if grow:
                self.partition_budget.check_create(name, len(grow), self._hosted_count())
            shadow = replace(topic, logs=[], config=config)
            kept = {p for p, log in enumerate(topic.logs) if log is not None}
            self._commit_new_logs(
                shadow,
                range(have, partitions),
                grow,
                {
                    "configs": normalized,
                    "partitions": max(have, partitions),
                    "hosted": sorted(kept | set(grow)),
                },
            )
            topic.take_config(normalized, config)
            topic.logs.extend(shadow.logs)
            return True

    def topic_id(self, topic: str) -> str:
        return self._topic(topic).topic_id

    def get_log(self, topic: str, partition: int) -> Log:
        t = self._topics.get(topic)
        if t is None or not 0 <= partition < len(t.logs):
            raise UnknownTopicOrPartition(topic, partition)
        log = t.logs[partition]
        if log is None:
            raise UnknownTopicOrPartition(topic, partition)
        return log

    def standalone_topics(self) -> list[str]:
        """Topics this broker created on its own (not from a cluster's metadata)."""
        return sorted(t.name for t in self._topics.values() if not t.clustered)

    def hosted_partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic`` with a log on this broker (all of them unless clustered)."""
        return [p for p, log in enumerate(self._topic(topic).logs) if log is not None]

    def _all_logs(self) -> list[Log]:
        return [log for t in list(self._topics.values()) for log in t.logs if log is not None]

    def logs(self) -> list[Log]:
        """Every live partition log."""
        return self._all_logs()

    # -- background work ---------------------------------------------------------

    def checkpoint(self) -> None:
        """Write both offset checkpoint files if anything changed."""
        with self._checkpoint_lock:
            logs = self._all_logs()
            recovery = {(log.topic, log.partition): log.recovery_point for log in logs}
            starts = {(log.topic, log.partition): log.log_start_offset for log in logs}
            if self._last_checkpoint == (recovery, starts):
                return
            OffsetCheckpointFile(self.data_dir / RECOVERY_POINT_CHECKPOINT).write(recovery)
            OffsetCheckpointFile(self.data_dir / LOG_START_OFFSET_CHECKPOINT).write(starts)
            self._last_checkpoint = (recovery, starts)

    def run_retention(self, now: int | None = None) -> int:
        """Apply retention to every log now; returns the number of segments deleted."""
        return self._sum_over_logs(lambda log: log.delete_old_segments(now), "retention")

    def _sum_over_logs(self, step: Callable[[Log], int], what: str) -> int:
        """``step`` on every log, summed; a log whose step fails is logged and skipped."""
        total = 0
        for log in self._all_logs():
            try:
                total += step(log)
            except Exception:
                _log.exception("%s of %s-%s failed", what, log.topic, log.partition)
        return total

    def run_cleaner_once(self, now: int | None = None) -> CleanResult | None:
        """Compact the dirtiest log that qualifies now (``now`` defaults to each log's clock)."""
        self._check_started()
        assert self._cleaner is not None
        return self._cleaner.run_once(now)

    def cleaner_stats(self) -> dict[str, Any]:
        """Cleaner totals, last round, and per log dirty ratio and last pass (for /metrics)."""
        cleaner = self._cleaner
        return {} if cleaner is None else cleaner.stats()

    @property
    def cleaner(self) -> LogCleaner | None:
        return self._cleaner

    def expire_producers(self, now: int | None = None) -> int:
        """Forget idempotent producers idle for producer_id_expiration_ms; returns how many."""
        return self._sum_over_logs(
            lambda log: log.remove_expired_producers(now), "producer expiration"
        )

    def _run(self) -> None:
        tick = min(self.flush_scheduler_interval_ms, self.retention_check_interval_ms) / 1000
        next_retention = now_ms() + self.retention_check_interval_ms
        while not self._stop.wait(tick):
            now = now_ms()
            for log in self._all_logs():
                try:
                    log.flush_rolled()
                    log.maybe_flush(now)
                    log.delete_expired_files(now)
                except Exception:
                    _log.exception("background work on %s-%s failed", log.topic, log.partition)
            if now >= next_retention:
                self.run_retention(now)
                self.expire_producers(now)
                next_retention = now + self.retention_check_interval_ms
            self._delete_expired_dirs(now)
            try:
                self.checkpoint()
            except Exception:
                _log.exception("writing offset checkpoints failed")
