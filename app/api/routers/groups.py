"""Consumer groups over HTTP: heartbeat (join/leave), offsets, and group admin.

Nothing is kept per connection: every request carries the member id and
epoch, so a consumer may reach the broker through any load balancer. The
coordinator (``app.groups``) does the work; this module only translates.

In cluster mode a group is served by its coordinator only (the leader of its
``__consumer_offsets`` partition, found with ``POST /coordinator``); any other
broker answers 421 NOT_COORDINATOR naming it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, FastAPI, Path, Query, Request
from starlette.responses import Response

from app.api.deps import serving_coordinator, start_into_state, stop_from_state
from app.api.errors import router_error_responses
from app.api.group_models import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    GroupDescription,
    GroupList,
    HeartbeatBody,
    HeartbeatResponseBody,
    OffsetCommitBody,
    OffsetsResponse,
    ResetOffsetsBody,
)
from app.api.openapi_docs import DocumentedRoute
from app.api.security import describable, visible
from app.api.state import AppState
from app.api.util import JSONBytes
from app.common.group_errors import CoordinatorNotAvailable
from app.core.security.acl import ResourceType
from app.groups.coordinator import (
    CommittedOffset,
    GroupConfig,
    GroupCoordinator,
    HeartbeatRequest,
    OffsetCommit,
    group_by_topic,
)

router = APIRouter(tags=["groups"], route_class=DocumentedRoute)

GroupPath = Annotated[
    str, Path(description="Group id (1 to 255 characters).", min_length=1, max_length=255)
]

_DESCRIPTIONS = {
    400: "Bad input: INVALID_REQUEST, INVALID_GROUP_ID, UNSUPPORTED_ASSIGNOR; "
    "INVALID_TOPIC_EXCEPTION for offsets of an internal topic (`__consumer_offsets`).",
    404: "GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID (rejoin with member_epoch 0) or "
    "UNKNOWN_TOPIC_OR_PARTITION.",
    409: "FENCED_MEMBER_EPOCH (rejoin with member_epoch 0), STALE_MEMBER_EPOCH (heartbeat, "
    "then retry the commit), UNRELEASED_INSTANCE_ID, NON_EMPTY_GROUP; UNSTABLE_OFFSET_COMMIT "
    "(retriable) for an offsets fetch with `require_stable=true` while a transaction's offsets "
    "are pending.",
    421: "NOT_COORDINATOR (cluster mode, retriable): another broker coordinates the group; "
    "`coordinator` and `coordinator_url` name it (null while unknown: POST /coordinator "
    "again).",
    503: "BROKER_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS (this broker just became the "
    "group's coordinator and is loading it) or COORDINATOR_NOT_AVAILABLE (cluster mode: no "
    "leader for the group's partition of `__consumer_offsets`, or its in-sync replicas did "
    "not acknowledge the write in time); all retriable.",
}


_errors = router_error_responses(_DESCRIPTIONS)


# -- lifecycle (called from the app's lifespan) ---------------------------------------------


async def start_coordinator(app: FastAPI, state: AppState) -> None:
    assert state.manager is not None
    settings = state.settings
    coordinator = GroupCoordinator(
        state.manager,
        GroupConfig(
            offsets_topic_num_partitions=settings.offsets_topic_num_partitions,
            session_timeout_ms=settings.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=settings.group_consumer_heartbeat_interval_ms,
            offsets_retention_ms=settings.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=settings.offsets_retention_check_interval_ms,
            node_id=settings.broker_id,
            url=settings.url,
            offsets_topic_replication_factor=settings.offsets_topic_replication_factor,
            offsets_commit_timeout_ms=settings.offsets_commit_timeout_ms,
            classic_min_session_timeout_ms=settings.group_min_session_timeout_ms,
            classic_max_session_timeout_ms=settings.group_max_session_timeout_ms,
            classic_initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
            classic_max_size=settings.group_max_size,
        ),
        # The groups of the __consumer_offsets partitions this broker leads (all of them
        # for a lone broker).
        cluster=state.topology,
    )
    if await start_into_state(
        app, "coordinator", coordinator, "the group coordinator could not start"
    ):
        # A deleted topic's committed offsets go with it (a coordinator whose leadership
        # can move listens by itself as it starts; a listener added twice is called once).
        state.topology.add_topic_listener(coordinator.topic_deleted)


async def stop_coordinator(app: FastAPI) -> None:
    await stop_from_state(app, "coordinator")


def get_coordinator(request: Request) -> GroupCoordinator:
    coordinator: GroupCoordinator = serving_coordinator(request, "coordinator", "group")
    return coordinator


def _offsets_answer(group: str, offsets: list[CommittedOffset]) -> Response:
    return JSONBytes(
        {
            "group": group,
            "offsets": [
                {
                    "topic": c.topic,
                    "partition": c.partition,
                    "offset": c.offset,
                    "leader_epoch": c.leader_epoch,
                    "metadata": c.metadata,
                    "commit_timestamp": c.commit_timestamp,
                }
                for c in offsets
            ],
        }
    )


# -- endpoints ------------------------------------------------------------------------------


@router.post(
    "/coordinator",
    response_model=FindCoordinatorResponse,
    responses=_errors(400, 503),
    tags=["groups"],
)
async def find_coordinator(request: Request, body: FindCoordinatorRequest) -> Response:
    """Find a group's coordinator (FindCoordinator)

    The broker that coordinates the group: send its heartbeats and commits there. The group
    lives in partition `abs(javaHashCode(group)) % offsets.topic.num.partitions` of
    `__consumer_offsets`, as in Kafka; in cluster mode its coordinator is that partition's
    leader (any broker answers; the first call creates `__consumer_offsets` with
    `offsets.topic.replication.factor`, capped by the live brokers). COORDINATOR_NOT_AVAILABLE
    while the partition has no leader. With `key_type: transaction` the key is a
    transactional id and the answer its transaction coordinator, the leader of its
    `__transaction_state` partition (as Kafka's FindCoordinator key type 1).
    """
    if body.key_type == "transaction":
        txn = serving_coordinator(request, "txn_coordinator", "transaction")
        node_id, url = await txn.find_coordinator(body.key)
        partition = txn.state.partition_of(body.key)
        if url is None:
            raise CoordinatorNotAvailable(
                f"the coordinator of transactional id {body.key!r} (broker {node_id}) has "
                "not published its URL yet; retry shortly",
                transactional_id=body.key,
            )
        return JSONBytes({"node_id": node_id, "url": url, "key": body.key, "partition": partition})
    info = await get_coordinator(request).find_coordinator(body.key, body.key_type)
    return JSONBytes(
        {"node_id": info.node_id, "url": info.url, "key": info.key, "partition": info.partition}
    )


@router.post(
    "/groups/{group}/heartbeat",
    response_model=HeartbeatResponseBody,
    responses=_errors(400, 404, 409, 421, 503),
)
async def heartbeat(request: Request, group: GroupPath, body: HeartbeatBody) -> Response:
    """Join, heartbeat or leave (ConsumerGroupHeartbeat)

    Join with `member_id: ""` and `member_epoch: 0` plus a subscription; then heartbeat every
    `heartbeat_interval_ms` with the id and epoch answered. The answer's assignment is what the
    member may consume now: partitions taken away must be released (commit, stop fetching)
    before they go to another member, so no two members ever hold one partition. Leave with
    `member_epoch: -1`. Members silent for `group_consumer_session_timeout_ms` are removed.
    """
    owned = None
    if body.owned_partitions is not None:
        owned = [(tp.topic, p) for tp in body.owned_partitions for p in tp.partitions]
    answer = await get_coordinator(request).heartbeat(
        group,
        HeartbeatRequest(
            member_id=body.member_id,
            member_epoch=body.member_epoch,
            instance_id=body.instance_id,
            subscribed_topics=body.subscribed_topics,
            subscribed_topic_regex=body.subscribed_topic_regex,
            server_assignor=body.server_assignor,
            owned_partitions=owned,
            rebalance_timeout_ms=body.rebalance_timeout_ms,
            topic_filter=describable(request, ResourceType.TOPIC),
        ),
    )
    return JSONBytes(
        {
            "member_id": answer.member_id,
            "member_epoch": answer.member_epoch,
            "heartbeat_interval_ms": answer.heartbeat_interval_ms,
            "assignment": {"partitions": group_by_topic(answer.assignment)},
        }
    )


@router.post(
    "/groups/{group}/offsets",
    response_model=OffsetsResponse,
    responses=_errors(400, 404, 409, 421, 503),
)
async def commit_offsets(request: Request, group: GroupPath, body: OffsetCommitBody) -> Response:
    """Commit offsets (OffsetCommit)

    Stored in `__consumer_offsets` before the answer (in cluster mode: on every in-sync replica,
    so it survives a coordinator failover). A member commits with its id and current epoch (an
    older epoch: STALE_MEMBER_EPOCH; an unknown member: UNKNOWN_MEMBER_ID); `member_epoch: -1`
    commits without membership, only while the group has no members. All or nothing.
    """
    done = await get_coordinator(request).commit_offsets(
        group,
        body.member_id,
        body.member_epoch,
        [
            OffsetCommit(o.topic, o.partition, o.offset, o.leader_epoch, o.metadata)
            for o in body.offsets
        ],
    )
    return _offsets_answer(group, done)


@router.get(
    "/groups/{group}/offsets",
    response_model=OffsetsResponse,
    responses=_errors(400, 409, 421, 503),
)
async def fetch_offsets(
    request: Request,
    group: GroupPath,
    topic: Annotated[list[str] | None, Query(description="Repeatable; default all.")] = None,
    require_stable: Annotated[
        bool,
        Query(
            description="KIP-447: refuse (409 UNSTABLE_OFFSET_COMMIT, retriable) while a "
            "transaction that committed offsets of these partitions has not ended yet."
        ),
    ] = False,
) -> Response:
    """Fetch committed offsets (OffsetFetch)

    Every committed offset of the group, or, with `topic`, every partition of those topics
    (`offset: -1` where nothing is committed). An unknown group answers an empty list. Offsets
    committed in a transaction count once it commits; with `require_stable=true` (a
    transactional consumer's read, Kafka's requireStable) a partition with such offsets still
    pending answers 409 UNSTABLE_OFFSET_COMMIT (retriable) rather than the offsets that
    transaction is about to replace.
    """
    found = await get_coordinator(request).fetch_committed_offsets(group, topic, require_stable)
    return _offsets_answer(group, found)


@router.post(
    "/groups/{group}/offsets/reset",
    response_model=OffsetsResponse,
    responses=_errors(400, 404, 409, 421, 503),
)
async def reset_offsets(request: Request, group: GroupPath, body: ResetOffsetsBody) -> Response:
    """Reset an empty group's offsets

    To the earliest or latest offset, the first offset at or after a timestamp (the end when
    none), or a given offset (clamped to the log's range); the end is the high watermark, or the
    last stable offset with `isolation_level: read_committed`. The group must have no members
    (NON_EMPTY_GROUP otherwise). In cluster mode the coordinator reads the offsets from its own
    replicas: a partition with no replica on it answers INVALID_REQUEST (look its offsets up at
    its leader and commit them with `member_epoch: -1`), and one it leads since an election
    too recent for its high watermark to be the end yet answers a retriable 503
    OFFSET_NOT_AVAILABLE for every target but `earliest`, before anything is written.
    """
    value = body.timestamp if body.to == "timestamp" else body.offset
    done = await get_coordinator(request).reset_offsets(
        group,
        body.topic,
        body.to,
        partitions=body.partitions,
        value=value,
        read_committed=body.isolation_level == "read_committed",
    )
    return _offsets_answer(group, done)


@router.get("/groups", response_model=GroupList, responses=_errors(503))
async def list_groups(request: Request) -> Response:
    """List groups

    Every group this broker coordinates, with its state and member count. In cluster mode that
    is the groups of the `__consumer_offsets` partitions this broker leads, not the cluster's:
    ask each broker (from `GET /metadata`) for all of them (COORDINATOR_LOAD_IN_PROGRESS while
    one of its partitions is loading).
    """
    groups = get_coordinator(request).list_groups()
    shown = visible(request, ResourceType.GROUP, (g["group"] for g in groups))
    return JSONBytes({"groups": [g for g in groups if g["group"] in shown]})


@router.get(
    "/groups/{group}", response_model=GroupDescription, responses=_errors(400, 404, 421, 503)
)
async def describe_group(
    request: Request,
    group: GroupPath,
    isolation_level: Annotated[
        Literal["read_uncommitted", "read_committed"],
        Query(
            description="The group's consumers' isolation level: the lag of a "
            "read_committed group is counted to the last stable offset."
        ),
    ] = "read_uncommitted",
) -> Response:
    """Describe a group

    State, epochs, members with their assignment (current, pending revocation, target), and
    committed offsets with lag = high watermark - committed offset (with
    `isolation_level=read_committed`: last stable offset - committed offset). In cluster mode
    the high watermark is this broker's replica's (exact on the partition's leader, up to a
    fetch behind on a follower); `high_watermark` and `lag` are null for partitions with no
    replica on the coordinator, and for those it leads since an election too recent for its
    high watermark to be the end yet (where ListOffsets answers OFFSET_NOT_AVAILABLE).
    """
    coordinator = get_coordinator(request)
    return JSONBytes(coordinator.describe_group(group, isolation_level == "read_committed"))


@router.delete("/groups/{group}", status_code=204, responses=_errors(400, 404, 409, 421, 503))
async def delete_group(request: Request, group: GroupPath) -> Response:
    """Delete an empty group and its offsets

    Writes tombstones for the group and its committed offsets to `__consumer_offsets`. A group
    with members answers NON_EMPTY_GROUP.
    """
    await get_coordinator(request).delete_group(group)
    return Response(status_code=204)
