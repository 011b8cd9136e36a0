"""Topics: list, create, describe, delete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import ValidationError
from starlette.responses import Response

from app.api import openapi_docs as docs
from app.api.codec import BodyInvalid
from app.api.deps import ManagerDep, StateDep, read_body
from app.api.errors import error_responses
from app.api.models import CreateTopicRequest, TopicDescription, TopicList
from app.api.util import JSONBytes, check_not_internal, run_blocking
from app.core.errors import (
    InvalidPartitions,
    InvalidReplicationFactor,
    UnknownTopicOrPartition,
)

if TYPE_CHECKING:
    from app.core.log.manager import LogManager

router = APIRouter(tags=["topics"])

# A topic-create body is a name and a few configs; a megabyte is generous.
CREATE_BODY_LIMIT = 1024 * 1024


def describe_topic(manager: LogManager, topic: str, broker_id: int) -> dict[str, Any]:
    n = manager.partition_count(topic)
    partitions = []
    for p in range(n):
        log = manager.get_log(topic, p)
        partitions.append(
            {
                "partition": p,
                "leader": broker_id,
                "replicas": [broker_id],
                "isr": [broker_id],
                "log_start_offset": log.log_start_offset,
                "high_watermark": log.high_watermark,
                "log_end_offset": log.log_end_offset,
            }
        )
    return {
        "name": topic,
        "partitions": partitions,
        "configs": manager.topic_config(topic).to_kafka(),
        "config_overrides": dict(manager.topic_overrides(topic)),
    }


@router.get(
    "/topics",
    summary="List topics",
    description="Every topic with its partition count, sorted by name.",
    response_model=TopicList,
    responses=error_responses(503),
)
async def list_topics(manager: ManagerDep) -> Response:
    topics = []
    for name in manager.topics():
        try:
            topics.append({"name": name, "partitions": manager.partition_count(name)})
        except UnknownTopicOrPartition:
            continue  # deleted between the two calls
    return JSONBytes({"topics": topics})


@router.post(
    "/topics",
    status_code=201,
    summary="Create a topic",
    description=docs.CREATE_TOPIC,
    response_model=TopicDescription,
    responses=error_responses(400, 409, 413, 503),
    openapi_extra=docs.json_request_body("CreateTopicRequest", docs.CREATE_TOPIC_EXAMPLES),
)
async def create_topic(request: Request, state: StateDep, manager: ManagerDep) -> Response:
    body = await read_body(request, min(CREATE_BODY_LIMIT, state.settings.max_request_bytes))
    try:
        req = CreateTopicRequest.model_validate_json(body)
    except ValidationError as exc:
        raise BodyInvalid.from_validation(exc) from None
    partitions = state.settings.num_partitions if req.partitions in (None, -1) else req.partitions
    assert partitions is not None
    if partitions < 1:
        raise InvalidPartitions(f"partitions must be at least 1, got {partitions}")
    if req.replication_factor not in (None, -1, 1):
        if req.replication_factor > 1:
            reason = "larger than the available brokers: 1"
        else:
            reason = "must be at least 1"
        raise InvalidReplicationFactor(
            f"replication factor {req.replication_factor} is not possible: {reason}"
        )
    await run_blocking(manager.create_topic, req.name, partitions, req.configs)
    state.sticky.forget(req.name)
    return JSONBytes(
        describe_topic(manager, req.name, state.settings.broker_id),
        status_code=201,
        headers={"Location": f"/topics/{req.name}"},
    )


@router.get(
    "/topics/{topic}",
    summary="Describe a topic",
    description=docs.DESCRIBE_TOPIC,
    response_model=TopicDescription,
    responses=error_responses(404, 503),
)
async def get_topic(
    topic: Annotated[str, Path(description="Topic name.")],
    state: StateDep,
    manager: ManagerDep,
) -> Response:
    return JSONBytes(describe_topic(manager, topic, state.settings.broker_id))


@router.delete(
    "/topics/{topic}",
    status_code=204,
    summary="Delete a topic",
    description="Deletes the topic and all its data. Fetches already being answered from its "
    "files finish (files are removed after file.delete.delay.ms). Internal topics "
    "(`__consumer_offsets`) cannot be deleted: 400 INVALID_TOPIC_EXCEPTION.",
    response_class=Response,
    responses=error_responses(400, 404, 503),
)
async def delete_topic(
    topic: Annotated[str, Path(description="Topic name.")],
    state: StateDep,
    manager: ManagerDep,
) -> Response:
    check_not_internal(topic)
    await run_blocking(manager.delete_topic, topic)
    state.sticky.forget(topic)
    state.waiters.forget_topic(topic)
    return Response(status_code=204)
