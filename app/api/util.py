"""Small helpers shared by the routers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from starlette.responses import Response

from app.api.state import AppState
from app.common.errors import InvalidTopic, TopicAlreadyExists, UnknownTopicOrPartition
from app.core.topology import NewTopic
from app.groups.placement import INTERNAL_TOPICS

if TYPE_CHECKING:
    from app.core.log.log import Log
    from app.core.log.manager import LogManager

T = TypeVar("T")

# Kafka's wire types bound every integer a client sends: int64 offsets and timestamps,
# int32 partitions. A value outside them is refused as bad input (400) before it can
# reach a struct, an index or an error body that cannot hold it.
LONG_MAX = (1 << 63) - 1
LONG_MIN = -(1 << 63)
INT_MAX = (1 << 31) - 1
INT_MIN = -(1 << 31)

JSON = "application/json"
OCTET_STREAM = "application/octet-stream"

# Below this many bytes, decoding or reading inline costs less than a thread hop.
INLINE_WORK_BYTES = 256 * 1024


class JSONBytes(Response):
    """A JSON response serialized once with orjson (no jsonable_encoder pass)."""

    media_type = JSON

    def render(self, content: Any) -> bytes:
        if isinstance(content, bytes):
            return content
        return orjson.dumps(content)


async def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    """Run disk work (fsync, segment roll, large reads) off the event loop."""
    return await asyncio.to_thread(fn, *args)


@dataclass(frozen=True, slots=True)
class TopicPlan:
    """A produce target: the topic as it is, or as auto-create will make it."""

    partitions: int
    max_message_bytes: int
    exists: bool


def check_not_internal(topic: str) -> None:
    """Only the broker writes or deletes its internal topics (Kafka refuses clients the same)."""
    if topic in INTERNAL_TOPICS:
        raise InvalidTopic(topic, "it is internal to the broker; clients cannot write or delete it")


def plan_topic(state: AppState, manager: LogManager, topic: str) -> TopicPlan:
    """The topic's shape, or the shape Kafka's auto.create.topics.enable would give it.

    Nothing is created here: a request is checked against the plan first, so a
    bad request to a new topic leaves no topic behind. Internal topics are refused.
    """
    check_not_internal(topic)
    try:
        partitions = partition_count(state, topic)
    except UnknownTopicOrPartition:
        if not state.settings.auto_create_topics_enable:
            raise
        defaults = state.settings.log_config
        return TopicPlan(state.settings.num_partitions, defaults.max_message_bytes, False)
    return TopicPlan(partitions, manager.topic_config(topic).max_message_bytes, True)


async def create_planned(state: AppState, manager: LogManager, topic: str) -> int:
    """Create an auto-created topic; returns its partition count (another request may have won)."""
    topology = state.topology
    # A concurrent request may have created it first: same outcome, once it has leaders.
    with contextlib.suppress(TopicAlreadyExists):
        await topology.create_topic(NewTopic(topic, state.settings.num_partitions))
    await topology.wait_for_leaders(topic, 30.0)
    return partition_count(state, topic)


def partition_count(state: AppState, topic: str) -> int:
    """The topic's partitions, cluster-wide (a cluster's broker holds only some)."""
    return state.topology.partition_count(topic)


def topic_names(state: AppState) -> list[str]:
    return state.topology.topics()


def partition_info(state: AppState, topic: str, partition: int) -> dict[str, Any]:
    """Where a partition lives: ``partition``, ``leader``, ``leader_epoch``, ``replicas``,
    ``isr``."""
    return state.topology.partition_info(topic, partition)


def leader_log(state: AppState, topic: str, partition: int) -> Log:
    """The log to serve a client's produce or fetch from: only a leader's
    (NotLeaderOrFollower names the leader otherwise)."""
    return state.topology.leader_partition(topic, partition).log
