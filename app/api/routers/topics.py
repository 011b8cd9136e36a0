"""Topics: list, create, describe, delete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import Response

from app.api import openapi_docs as docs
from app.api import topic_service
from app.api.codec import BodyInvalid
from app.api.deps import ManagerDep, StateDep, read_body
from app.api.errors import error_responses
from app.api.models import CreateTopicRequest, TopicDescription, TopicList
from app.api.openapi_docs import DocumentedRoute
from app.api.security import permits, visible
from app.api.state import AppState
from app.api.util import JSONBytes, TopicPath, partition_count, topic_names
from app.common.errors import UnknownTopicOrPartition
from app.core.security.acl import Action, Operation, Resource, ResourceType

if TYPE_CHECKING:
    from app.core.log.manager import LogManager

router = APIRouter(tags=["topics"], route_class=DocumentedRoute)

# A topic-create body is a name and a few configs; a megabyte is generous.
CREATE_BODY_LIMIT = 1024 * 1024


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
    return {
        "name": topic,
        "partitions": partitions,
        "configs": manager.topic_config(topic).to_kafka(),
        "config_overrides": dict(manager.topic_overrides(topic)),
    }


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
    responses=error_responses(400, 409, 413, 503),
    openapi_extra=docs.json_request_body("CreateTopicRequest", docs.CREATE_TOPIC_EXAMPLES),
)
async def create_topic(request: Request, state: StateDep, manager: ManagerDep) -> Response:
    """Create a topic"""
    body = await read_body(request, min(CREATE_BODY_LIMIT, state.settings.max_request_bytes))
    try:
        req = CreateTopicRequest.model_validate_json(body)
    except ValidationError as exc:
        raise BodyInvalid.from_validation(exc) from None
    await topic_service.create_topic(
        state,
        topic_service.new_topic(
            state, req.name, req.partitions, req.replication_factor, req.configs
        ),
    )
    return JSONBytes(
        describe_topic(state, manager, req.name),
        status_code=201,
        headers={"Location": f"/topics/{req.name}"},
    )


@router.get(
    "/topics/{topic}",
    description=docs.DESCRIBE_TOPIC,
    response_model=TopicDescription,
    responses=error_responses(404, 503),
)
async def get_topic(
    topic: TopicPath,
    request: Request,
    state: StateDep,
    manager: ManagerDep,
) -> Response:
    """Describe a topic"""
    described = describe_topic(state, manager, topic)
    # Kafka's DescribeConfigs needs DESCRIBE_CONFIGS: without it the configs are left out.
    if not permits(
        request, Action(Operation.DESCRIBE_CONFIGS, Resource(ResourceType.TOPIC, topic))
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
