"""Topics: list, create, describe, delete; grow, change configs, delete records (the
Kafka door's CreatePartitions, AlterConfigs and DeleteRecords, through the same
:class:`~app.core.topology.Topology` methods: a lone broker or a cluster)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from app.api import openapi_docs as docs
from app.api import topic_service
from app.api.codec import BodyInvalid
from app.api.deps import ManagerDep, StateDep, read_body
from app.api.errors import error_responses
from app.api.models import (
    INT_MAX,
    LONG_MAX,
    AlterTopicConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    DeleteRecordsAnswer,
    TopicDescription,
    TopicList,
)
from app.api.openapi_docs import DocumentedRoute
from app.api.security import permits, visible
from app.api.state import AppState
from app.api.util import JSONBytes, TopicPath, partition_count, topic_names
from app.common.errors import UnknownTopicOrPartition
from app.core.log.topic_rules import check_new_topic
from app.core.security.acl import Action, Operation, Resource, ResourceType
from app.core.topology import NewTopic

if TYPE_CHECKING:
    from app.core.log.manager import LogManager

router = APIRouter(tags=["topics"], route_class=DocumentedRoute)

# A topic-create body is a name and a few configs; a megabyte is generous.
CREATE_BODY_LIMIT = 1024 * 1024
_Model = TypeVar("_Model", bound=BaseModel)


def describe_topic(state: AppState, manager: LogManager, topic: str) -> dict[str, Any]:
    topology = state.topology
    partitions = []
    for p in range(topology.partition_count(topic)):
        entry = topology.partition_info(topic, p)
        entry["offline_replicas"] = topology.offline_replicas(topic, p)
        log = topology.replica_log(topic, p)  # None: held by other brokers only
        entry["log_start_offset"] = None if log is None else log.log_start_offset
        entry["high_watermark"] = None if log is None else log.high_watermark
        entry["log_end_offset"] = None if log is None else log.log_end_offset
        partitions.append(entry)
    config, overrides = topology.topic_configs(topic)
    return {
        "name": topic,
        "partitions": partitions,
        "configs": config.to_kafka(),
        "config_overrides": overrides,
    }


def _written_description(manager: LogManager, topic: NewTopic) -> dict[str, Any]:
    """A topic created in a cluster without waiting (timeout_ms 0) that this broker has
    not seen yet: its partitions with no leader and no replicas known here, its configs
    as written."""
    config, overrides = check_new_topic(
        topic.name, topic.partitions, topic.configs, manager.default_config
    )
    return {
        "name": topic.name,
        "partitions": [
            {
                "partition": p,
                "leader": -1,
                "leader_epoch": -1,
                "replicas": [],
                "isr": [],
                # No replicas known here yet, so none offline (a subset of them).
                "offline_replicas": [],
                "log_start_offset": None,
                "high_watermark": None,
                "log_end_offset": None,
            }
            for p in range(topic.partitions)
        ],
        "configs": config.to_kafka(),
        "config_overrides": dict(overrides),
    }


async def _body(request: Request, state: AppState, model: type[_Model]) -> _Model:
    """The request's JSON body as ``model`` (a topic change's body is small:
    CREATE_BODY_LIMIT); 400 naming the field that does not read."""
    body = await read_body(request, min(CREATE_BODY_LIMIT, state.settings.max_request_bytes))
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise BodyInvalid.from_validation(exc) from None


@dataclass(frozen=True, slots=True)
class TopicCall:
    """What the routes on one topic that answer its description take, declared once as a
    dependency: the topic, the request, the broker's state and log manager."""

    topic: TopicPath
    request: Request
    state: StateDep
    manager: ManagerDep

    async def body(self, model: type[_Model]) -> _Model:
        return await _body(self.request, self.state, model)

    def described(self) -> Response:
        return JSONBytes(describe_topic(self.state, self.manager, self.topic))


TopicCallDep = Annotated[TopicCall, Depends()]


@router.get("/topics", response_model=TopicList, responses=error_responses(503))
async def list_topics(request: Request, state: StateDep, manager: ManagerDep) -> Response:
    """List topics

    Every topic with its partition count, sorted by name.
    """
    topics = []
    names = topic_names(state)
    shown = visible(request, ResourceType.TOPIC, names)  # what the principal may DESCRIBE
    for name in names:
        if name not in shown:
            continue
        try:
            topics.append({"name": name, "partitions": partition_count(state, name)})
        except UnknownTopicOrPartition:
            continue  # deleted between the two calls
    return JSONBytes({"topics": topics})


@router.post(
    "/topics",
    status_code=201,
    description=docs.CREATE_TOPIC,
    response_model=TopicDescription,
    responses=error_responses(400, 409, 413, 503, 504),
    openapi_extra=docs.json_request_body("CreateTopicRequest", docs.CREATE_TOPIC_EXAMPLES),
)
async def create_topic(request: Request, state: StateDep, manager: ManagerDep) -> Response:
    """Create a topic"""
    req = await _body(request, state, CreateTopicRequest)
    topic = topic_service.new_topic(
        state, req.name, req.partitions, req.replication_factor, req.configs
    )
    await topic_service.create_topic(state, topic, timeout_ms=req.timeout_ms)
    try:
        described = describe_topic(state, manager, req.name)
    except UnknownTopicOrPartition:
        # timeout_ms 0 in a cluster: written, not yet seen by this broker's watch.
        described = _written_description(manager, topic)
    return JSONBytes(
        described,
        status_code=201,
        headers={"Location": f"/topics/{req.name}"},
    )


@router.get(
    "/topics/{topic}",
    description=docs.DESCRIBE_TOPIC,
    response_model=TopicDescription,
    responses=error_responses(404, 503),
)
async def get_topic(call: TopicCallDep) -> Response:
    """Describe a topic"""
    described = describe_topic(call.state, call.manager, call.topic)
    # Kafka's DescribeConfigs needs DESCRIBE_CONFIGS: without it the configs are left out.
    if not permits(
        call.request, Action(Operation.DESCRIBE_CONFIGS, Resource(ResourceType.TOPIC, call.topic))
    ):
        described["configs"], described["config_overrides"] = {}, {}
    return JSONBytes(described)


@router.delete(
    "/topics/{topic}",
    status_code=204,
    response_class=Response,
    responses=error_responses(400, 404, 503),
)
async def delete_topic(
    topic: TopicPath,
    state: StateDep,
    manager: ManagerDep,
) -> Response:
    """Delete a topic

    Deletes the topic and all its data, and every group's committed offsets for it (a topic
    created again under the name is read from its start). Fetches already being answered from
    its files finish (files are removed after file.delete.delay.ms). Internal topics
    (`__consumer_offsets`) cannot be deleted, and a name no topic can have is refused: 400
    INVALID_TOPIC_EXCEPTION.
    """
    # 400 for an internal topic or a name no topic can have (not 404); the group
    # coordinators (every broker's, in a cluster) forget the topic's committed offsets.
    await topic_service.delete_topic(state, topic)
    return Response(status_code=204)


@router.post(
    "/topics/{topic}/partitions",
    response_model=TopicDescription,
    responses=error_responses(400, 404, 503, 504),
)
async def create_partitions(call: TopicCallDep) -> Response:
    """Add partitions to a topic

    Kafka's CreatePartitions (ALTER on the topic): the topic grows to `count` partitions.
    In a cluster the new partitions' replicas are placed over the live brokers (the
    topic's replication factor) and the answer waits for their leaders, up to `timeout_ms`
    (then 504 REQUEST_TIMED_OUT: the partitions are made; 0: no wait). A count that does
    not grow the topic: 400 INVALID_PARTITIONS; internal topics: 400
    INVALID_TOPIC_EXCEPTION. Records keyed to a partition by hash may go to another one
    from now on, as in Kafka.
    """
    req = await call.body(CreatePartitionsRequest)
    await topic_service.create_partitions(
        call.state,
        call.topic,
        req.count,
        validate_only=req.validate_only,
        timeout_ms=req.timeout_ms,
    )
    return call.described()


@router.put(
    "/topics/{topic}/configs",
    response_model=TopicDescription,
    responses=error_responses(400, 404, 503, 504),
)
async def alter_topic_configs(call: TopicCallDep) -> Response:
    """Replace a topic's config overrides

    Kafka's AlterConfigs on a topic (ALTER_CONFIGS on it): its overrides become `configs`,
    checked as on create (400 INVALID_CONFIG), and every replica takes them (retention,
    cleanup, min.insync.replicas...). In a cluster they are written to the topic's
    ZooKeeper assignment and every broker applies them; the answer comes once this broker
    has, up to `timeout_ms` (then 504 REQUEST_TIMED_OUT: the change is made; 0: no wait).
    """
    req = await call.body(AlterTopicConfigsRequest)
    await call.state.topology.alter_topic_config(
        call.topic, req.configs, validate_only=req.validate_only, timeout_ms=req.timeout_ms
    )
    return call.described()


@router.delete(
    "/topics/{topic}/partitions/{partition}/records",
    response_model=DeleteRecordsAnswer,
    responses=error_responses(400, 404, 416, 503, 504),
)
async def delete_records(
    topic: TopicPath,
    partition: Annotated[int, Path(ge=0, le=INT_MAX, description="Partition.")],
    state: StateDep,
    before: Annotated[
        int,
        Query(
            ge=-1,
            le=LONG_MAX,
            description="Records below this offset go (-1: below the high watermark): the "
            "log start offset moves up to it.",
        ),
    ],
    timeout_ms: Annotated[
        int,
        Query(
            ge=0,
            le=INT_MAX,
            description="In a cluster, how long to wait for every live replica to move its "
            "start (else 504 REQUEST_TIMED_OUT; the leader's start has moved).",
        ),
    ] = 30_000,
) -> Response:
    """Delete a partition's records below an offset

    Kafka's DeleteRecords (DELETE on the topic), by the partition's leader (elsewhere: 307
    to it): what is below `before` is never served again, through any door. Above the
    high watermark: 416 OFFSET_OUT_OF_RANGE; internal topics: 400 INVALID_TOPIC_EXCEPTION
    (their records are the coordinators' state); a topic whose `cleanup.policy` lacks
    `delete` (compacted only): 400 POLICY_VIOLATION, as Kafka. In a cluster the followers
    follow the leader's new log start offset, and `low_watermark` is answered once every
    live replica and every ISR member has moved its own (Kafka's low watermark).
    """
    low = await topic_service.delete_records(state, topic, partition, before, timeout_ms=timeout_ms)
    return JSONBytes({"low_watermark": low})
