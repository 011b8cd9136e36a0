"""The topology of a lone broker (no ZooKeeper): :class:`LocalTopology`.

Every partition of every topic in the :class:`~app.core.log.manager.LogManager` is
here and led here, by this broker, in leader epoch 0, for the broker's life. So:

- the ISR of a partition is this broker alone: an append is durable once written
  (``acks=all`` waits for nobody), and ``min.insync.replicas`` above 1 refuses
  ``acks=all`` produce requests (:meth:`LocalReplica.check_min_isr`, called before
  appending; the ISR of one broker cannot shrink in between, so the append itself
  does not check again);
- a caller's leader epoch is never checked (there are no other terms to confuse),
  and a fetch claiming to be a follower's reads as a consumer's (there are no
  followers);
- a topic has one replica: a replication factor above 1 is refused.

Threads: lookups go to the LogManager (thread-safe); topic creation and deletion
run in a worker thread, and topic listeners are called on the loop afterwards.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.common.errors import (
    InvalidReplicationFactor,
    NotEnoughReplicas,
    OffsetNotAvailable,
    UnknownTopicOrPartition,
)
from app.core.listeners import notify
from app.core.replication.state import BrokerInfo
from app.core.topology import (
    LeaderAppend,
    LeadershipListener,
    NewTopic,
    TopicIdIndex,
    TopicListener,
    parse_topic_id,
)

if TYPE_CHECKING:
    from app.core.log.config import LogConfig
    from app.core.log.log import AppendInfo, Log
    from app.core.log.manager import LogManager
    from app.core.log.producer_state import UnnumberedBatch
    from app.core.log.topic_rules import ConfigChange

_log = logging.getLogger(__name__)


class LocalReplica:
    """A partition of a lone broker, led here: its log, and checks that always pass
    (but min.insync.replicas, see the module docstring)."""

    __slots__ = ("log",)

    leader_epoch = 0

    def __init__(self, log: Log) -> None:
        self.log = log

    def check_min_isr(self) -> None:
        needed = self.log.config.min_insync_replicas
        if needed > 1:
            raise NotEnoughReplicas(
                f"{self.log.topic}-{self.log.partition} has 1 in-sync replica (a single "
                f"broker), fewer than min.insync.replicas={needed}; nothing was written"
            )

    def check_epoch(self, epoch: int | None) -> None:
        return None

    def on_follower_fetch(
        self, replica_id: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None:
        return None

    def offsets_error(self) -> OffsetNotAvailable | None:
        return None  # led here for good: the high watermark is the log end

    def append_as_leader(
        self, data: bytes | bytearray | memoryview | UnnumberedBatch, *, acks_all: bool
    ) -> AppendInfo:
        return self.log.append(data)

    def append_control(
        self, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int
    ) -> AppendInfo:
        return self.log.append_control(
            producer_id, producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch
        )

    async def wait_replicated(
        self, last_offset: int, timeout_ms: int, epoch: int | None = None
    ) -> None:
        return None  # the only in-sync replica wrote it


class LocalTopology:
    """A lone broker's :class:`~app.core.topology.Topology` over its LogManager."""

    leadership_moves = False
    controller_id: int | None

    def __init__(self, logs: LogManager, broker_id: int, url: str) -> None:
        self.logs = logs
        self.broker_id = broker_id
        self.url = url
        # The lone broker is its own controller.
        self.controller_id = broker_id
        self.brokers: Mapping[int, BrokerInfo] = {broker_id: BrokerInfo(broker_id, url)}
        self._topic_listeners: list[TopicListener] = []
        self._topic_ids = TopicIdIndex(self.logs.topics, self.topic_id)

    @property
    def cluster_id(self) -> str:
        return self.logs.cluster_id  # read at LogManager.start, from meta.json

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    # -- topics and partitions ---------------------------------------------------------

    def topics(self) -> list[str]:
        return self.logs.topics()

    def partition_count(self, topic: str) -> int:
        return self.logs.partition_count(topic)

    def partition_info(self, topic: str, partition: int) -> dict[str, Any]:
        broker = self.broker_id
        return {
            "partition": partition,
            "leader": broker,
            "leader_epoch": 0,
            "replicas": [broker],
            "isr": [broker],
        }

    def offline_replicas(self, topic: str, partition: int) -> list[int]:
        return []

    def topic_configs(self, topic: str) -> tuple[LogConfig, dict[str, object]]:
        return self.logs.topic_config(topic), self.logs.topic_overrides(topic)

    def topic_id(self, topic: str) -> uuid.UUID:
        return parse_topic_id(self.logs.topic_id(topic))  # made by LogManager.create_topic

    def topic_named_by(self, topic_id: uuid.UUID) -> str:
        return self._topic_ids.name_of(topic_id)

    def replica_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get_log(topic, partition)

    def offsets_error(self, topic: str, partition: int) -> OffsetNotAvailable | None:
        return None

    def leader_of(self, topic: str, partition: int) -> tuple[int | None, str | None]:
        self.logs.get_log(topic, partition)  # UnknownTopicOrPartition if none
        return self.broker_id, self.url

    def is_leader(self, topic: str, partition: int) -> bool:
        try:
            self.logs.get_log(topic, partition)
        except UnknownTopicOrPartition:
            return False
        return True

    def leader_partition(self, topic: str, partition: int) -> LocalReplica:
        return LocalReplica(self.logs.get_log(topic, partition))

    def append_to_leaders(
        self, work: Sequence[LeaderAppend], *, acks_all: bool
    ) -> list[AppendInfo]:
        # Each log checks its batches before writing any; leadership cannot have moved.
        return [replica.log.append(data) for replica, _, data in work]

    def authorize_follower(self, replica_id: int, credential: str | None) -> bool:
        return False

    # -- changes -----------------------------------------------------------------------

    async def create_topic(self, topic: NewTopic, *, timeout_ms: int = 30_000) -> None:
        # Led here once made: there is nothing to wait for.
        replication_factor = topic.replication_factor
        if replication_factor not in (None, 1):
            assert replication_factor is not None
            reason = (
                "larger than the available brokers: 1"
                if replication_factor > 1
                else "must be at least 1"
            )
            raise InvalidReplicationFactor(
                f"replication factor {replication_factor} is not possible: {reason}"
            )
        await asyncio.to_thread(
            functools.partial(
                self.logs.create_topic,
                topic.name,
                topic.partitions,
                topic.configs,
                validate_only=topic.validate_only,
            )
        )

    async def alter_topic_config(
        self,
        name: str,
        overrides: ConfigChange,
        *,
        validate_only: bool = False,
        timeout_ms: int = 30_000,
    ) -> None:
        # Applied here before the answer: there is nothing to wait for.
        await asyncio.to_thread(
            functools.partial(
                self.logs.alter_topic_config, name, overrides, validate_only=validate_only
            )
        )

    async def delete_records(
        self, topic: str, partition: int, offset: int, *, timeout_ms: int = 30_000
    ) -> int:
        log = self.leader_partition(topic, partition).log
        log.check_records_deletable()  # PolicyViolation: compacted only
        return await asyncio.to_thread(log.delete_records, offset)

    async def create_partitions(
        self, name: str, count: int, *, validate_only: bool = False, timeout_ms: int = 30_000
    ) -> None:
        # Led here once made: there is nothing to wait for.
        await asyncio.to_thread(
            functools.partial(self.logs.add_partitions, name, count, validate_only=validate_only)
        )

    async def wait_for_leaders(self, name: str, wait_s: float) -> None:
        return None  # led here from creation

    async def delete_topic(self, name: str) -> None:
        await asyncio.to_thread(self.logs.delete_topic, name)
        notify(self._topic_listeners, name, log=_log, what="topic listener")

    def add_leadership_listener(self, cb: LeadershipListener) -> None:
        return None  # leadership never moves

    def add_topic_listener(self, cb: TopicListener) -> None:
        if cb not in self._topic_listeners:
            self._topic_listeners.append(cb)
