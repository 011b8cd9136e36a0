"""Creating, growing and deleting topics and deleting records, transport-neutral: what
HTTP's ``/topics`` routes and the Kafka door's CreateTopics, DeleteTopics,
CreatePartitions and DeleteRecords share.

The checks themselves are the topology's (:meth:`app.core.topology.Topology.create_topic`:
name, partitions, configs, replication factor against the brokers, the partition budget,
an existing topic); here are the request-level rules both doors apply around them: a
partition count or replication factor of -1 (or none) is the broker's default, internal
topics cannot be deleted, and the per-topic state the API keeps (sticky partitions, fetch
waiters) is forgotten with the topic. Errors are the :mod:`app.common.errors` classes.
Runs on the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.api.produce_service import check_not_internal
from app.api.state import AppState
from app.common.errors import InvalidPartitions
from app.core.log import validate_topic_name
from app.core.topology import NewTopic


def new_topic(
    state: AppState,
    name: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: Mapping[str, object],
    *,
    validate_only: bool = False,
) -> NewTopic:
    """The topic a create request asks for: ``partitions`` None or -1 is
    ``num_partitions``, ``replication_factor`` None or -1 the topology's default
    (``default_replication_factor``). InvalidPartitions below 1."""
    count = state.settings.num_partitions if partitions in (None, -1) else partitions
    assert count is not None
    if count < 1:
        raise InvalidPartitions(f"partitions must be at least 1, got {count}")
    rf = None if replication_factor in (None, -1) else replication_factor
    return NewTopic(name, count, rf, dict(configs), validate_only)


async def create_topic(state: AppState, topic: NewTopic, *, timeout_ms: int = 30_000) -> None:
    """Create (or, ``validate_only``, check) ``topic``; returns once every partition has a
    leader, within ``timeout_ms`` in a cluster (RequestTimedOut after it, the topic
    created; 0: at once after the write). Raises what :meth:`Topology.create_topic`
    raises."""
    await state.topology.create_topic(topic, timeout_ms=timeout_ms)
    if not topic.validate_only:
        state.sticky.forget(topic.name)


async def create_partitions(
    state: AppState,
    name: str,
    count: int,
    *,
    validate_only: bool = False,
    timeout_ms: int = 30_000,
) -> None:
    """Grow ``name`` to ``count`` partitions (:meth:`Topology.create_partitions`); the
    sticky partitioner forgets the old count. Internal topics are refused."""
    check_not_internal(name)
    await state.topology.create_partitions(
        name, count, validate_only=validate_only, timeout_ms=timeout_ms
    )
    if not validate_only:
        state.sticky.forget(name)


async def delete_records(
    state: AppState, topic: str, partition: int, offset: int, *, timeout_ms: int
) -> int:
    """Move the partition's log start offset up to ``offset`` (-1: the high watermark) as
    its leader (:meth:`Topology.delete_records`); the low watermark. Internal topics are
    refused (InvalidTopic), as Kafka refuses them: their records are the coordinators'
    state."""
    check_not_internal(topic)
    return await state.topology.delete_records(topic, partition, offset, timeout_ms=timeout_ms)


async def delete_topic(state: AppState, name: str) -> None:
    """Delete a topic and its data. Internal topics and names no topic can have are
    refused (InvalidTopic), an unknown one is UnknownTopicOrPartition. The group
    coordinators forget its committed offsets as the topology's topic listeners hear."""
    check_not_internal(name)
    validate_topic_name(name)  # no topic has a name it refuses (INVALID_TOPIC, not unknown)
    await state.topology.delete_topic(name)
    state.sticky.forget(name)
    state.waiters.forget_topic(name)
