"""Small helpers shared by the routers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import orjson
from fastapi import Path
from starlette.responses import Response

# Re-exported: the topic planning of a produce lives with the transport-neutral produce.
from app.api.produce_service import TopicPlan as TopicPlan
from app.api.produce_service import check_not_internal as check_not_internal
from app.api.produce_service import create_planned as create_planned
from app.api.produce_service import partition_count as partition_count
from app.api.produce_service import plan_topic as plan_topic
from app.api.state import AppState

if TYPE_CHECKING:
    from app.core.log.log import Log

T = TypeVar("T")

# Kafka's wire types bound every integer a client sends: int64 offsets and timestamps,
# int32 partitions. A value outside them is refused as bad input (400) before it can
# reach a struct, an index or an error body that cannot hold it.
LONG_MAX = (1 << 63) - 1
LONG_MIN = -(1 << 63)
INT_MAX = (1 << 31) - 1
INT_MIN = -(1 << 31)

# The path parameters of every route under /topics/{topic}/partitions/{partition}.
TopicPath = Annotated[str, Path(description="Topic name.")]
PartitionPath = Annotated[int, Path(description="Partition number.", ge=INT_MIN, le=INT_MAX)]

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


def topic_names(state: AppState) -> list[str]:
    return state.topology.topics()


def partition_info(state: AppState, topic: str, partition: int) -> dict[str, Any]:
    """Where a partition lives: ``partition``, ``leader``, ``leader_epoch``, ``replicas``,
    ``isr``, ``offline_replicas`` (:meth:`Topology.offline_replicas`: every broker's)."""
    topology = state.topology
    info = topology.partition_info(topic, partition)
    info["offline_replicas"] = topology.offline_replicas(topic, partition)
    return info


def leader_log(state: AppState, topic: str, partition: int) -> Log:
    """The log to serve a client's produce or fetch from: only a leader's
    (NotLeaderOrFollower names the leader otherwise)."""
    return state.topology.leader_partition(topic, partition).log
