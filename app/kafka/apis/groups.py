"""FindCoordinator, OffsetCommit and OffsetFetch (and the group APIs), on the group coordinator.

Committed offsets are the one store every door uses (``__consumer_offsets``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from app.common.errors import (
    CoordinatorNotAvailable,
    InvalidRequest,
    LogbusError,
)
from app.groups.offsets import OffsetCommit
from app.kafka.apis.base import (
    NO_THROTTLE,
    Context,
    group_coordinator,
    kafka_brokers,
    response_module,
)
from app.kafka.apis.txn import find_txn_coordinator
from app.kafka.encode import build, error_code
from app.kafka.versions import (
    FIND_COORDINATOR,
    OFFSET_COMMIT,
    OFFSET_FETCH,
)

if TYPE_CHECKING:
    pass


async def find_coordinator(ctx: Context, body: Any, version: int) -> Any:
    """The coordinator of a group (key type 0): its broker's Kafka listener, from the
    same list as Metadata (:func:`kafka_brokers`). A coordinator with no Kafka listener
    known (none configured, or its registration not seen yet) answers
    COORDINATOR_NOT_AVAILABLE, which clients retry. Transactional ids (key type 1):
    :func:`app.kafka.apis.txn.find_txn_coordinator`; any other key type INVALID_REQUEST."""
    m = response_module(FIND_COORDINATOR, version)
    key_type = int(getattr(body, "key_type", 0))
    if key_type == 1:
        return await find_txn_coordinator(ctx, body.key, version)
    try:
        if key_type != 0:
            raise InvalidRequest(f"key_type {key_type}: groups (0) and transactions (1) only")
        info = await group_coordinator(ctx).find_coordinator(body.key, "group")
        listener = kafka_brokers(ctx).get(info.node_id)
        if listener is None:
            raise CoordinatorNotAvailable(
                f"group {body.key!r} is coordinated by broker {info.node_id}, "
                "which has no Kafka listener known here"
            )
        host, port = listener
        return build(
            m.FindCoordinatorResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            node_id=info.node_id,
            host=host,
            port=port,
        )
    except LogbusError as exc:
        return build(
            m.FindCoordinatorResponse,
            throttle_time=NO_THROTTLE,
            error_code=error_code(exc),
            error_message=exc.message,
            node_id=-1,
            host="",
            port=-1,
        )


async def offset_commit(ctx: Context, body: Any, version: int) -> Any:
    """Commit through the group coordinator HTTP's ``POST /groups/{g}/offsets`` uses: one
    store for every door. A Kafka client outside any group (``assign``) commits with
    generation -1 and no member id, which the coordinator takes while the group has no
    members (as Kafka does); all partitions answer the one outcome (all or nothing)."""
    m = response_module(OFFSET_COMMIT, version)
    offsets = [
        OffsetCommit(
            t.name,
            int(p.partition_index),
            int(p.committed_offset),
            int(getattr(p, "committed_leader_epoch", -1)),
            p.committed_metadata or "",
        )
        for t in body.topics
        for p in t.partitions
    ]
    try:
        await group_coordinator(ctx).commit_offsets(
            body.group_id, body.member_id, int(body.generation_id_or_member_epoch), offsets
        )
        code = ErrorCode.none
    except LogbusError as exc:
        code = error_code(exc)
    return build(
        m.OffsetCommitResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            build(
                m.OffsetCommitResponseTopic,
                name=t.name,
                partitions=tuple(
                    build(
                        m.OffsetCommitResponsePartition,
                        partition_index=p.partition_index,
                        error_code=code,
                    )
                    for p in t.partitions
                ),
            )
            for t in body.topics
        ),
    )


async def offset_fetch(ctx: Context, body: Any, version: int) -> Any:
    """Committed offsets from the one store (HTTP's ``GET /groups/{g}/offsets``); -1 where
    nothing is committed, every committed partition when ``topics`` is null."""
    m = response_module(OFFSET_FETCH, version)
    wanted = (
        None if body.topics is None else {t.name: set(t.partition_indexes) for t in body.topics}
    )
    try:
        found = await group_coordinator(ctx).fetch_committed_offsets(
            body.group_id, None if wanted is None else list(wanted)
        )
        code = ErrorCode.none
    except LogbusError as exc:
        found, code = [], error_code(exc)
    by_topic: dict[str, dict[int, Any]] = {}
    for c in found:
        by_topic.setdefault(c.topic, {})[c.partition] = c
    if wanted is not None:
        for topic, partitions in wanted.items():
            seen = by_topic.setdefault(topic, {})
            by_topic[topic] = {p: seen.get(p) for p in sorted(partitions)}
    return build(
        m.OffsetFetchResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        topics=tuple(
            build(
                m.OffsetFetchResponseTopic,
                name=topic,
                partitions=tuple(
                    build(
                        m.OffsetFetchResponsePartition,
                        partition_index=p,
                        committed_offset=-1 if c is None else c.offset,
                        committed_leader_epoch=-1 if c is None else c.leader_epoch,
                        metadata="" if c is None else c.metadata,
                        error_code=ErrorCode.none,
                    )
                    for p, c in sorted(parts.items())
                ),
            )
            for topic, parts in sorted(by_topic.items())
        ),
    )
