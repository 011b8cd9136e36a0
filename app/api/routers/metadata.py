"""Cluster metadata: brokers, controller, and where every partition lives."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.api import openapi_docs as docs
from app.api.deps import ManagerDep, StateDep
from app.api.errors import error_responses
from app.api.models import Metadata
from app.api.openapi_docs import DocumentedRoute
from app.api.security import visible
from app.api.util import (
    JSONBytes,
    create_planned,
    partition_count,
    partition_info,
    topic_names,
)
from app.common.errors import UnknownTopicOrPartition
from app.core.log import validate_topic_name
from app.core.security.acl import ResourceType

router = APIRouter(tags=["metadata"], route_class=DocumentedRoute)


def _requested(topics: str | None) -> list[str] | None:
    if topics is None:
        return None
    # Order kept, duplicates dropped: the answer lists each topic once.
    return list(dict.fromkeys(t.strip() for t in topics.split(",") if t.strip()))


@router.get(
    "/metadata",
    description=docs.METADATA,
    response_model=Metadata,
    responses=error_responses(400, 503),
)
async def get_metadata(
    request: Request,
    state: StateDep,
    manager: ManagerDep,
    topics: Annotated[
        str | None,
        Query(
            description="Comma-separated topic names: describe only these (absent ones are "
            "left out of the answer). Omitted: every topic.",
            examples=["orders,payments"],
        ),
    ] = None,
    allow_auto_topic_creation: Annotated[
        bool,
        Query(
            description="Create the requested topics that do not exist, with the broker's "
            "`num_partitions`, when `auto_create_topics_enable` is on (Kafka's "
            "MetadataRequest.allow_auto_topic_creation). Off by default: a GET creates "
            "nothing unless asked to.",
        ),
    ] = False,
) -> Response:
    """Cluster metadata"""
    names = _requested(topics)
    if names and allow_auto_topic_creation and state.settings.auto_create_topics_enable:
        # Every name is checked before anything is created: a bad list creates nothing.
        for name in names:
            validate_topic_name(name)
        existing = set(topic_names(state))
        for name in names:
            if name not in existing:
                await create_planned(state, manager, name)
                state.sticky.forget(name)
    answer = []
    listed = topic_names(state) if names is None else names
    shown = visible(request, ResourceType.TOPIC, listed)  # what the principal may DESCRIBE
    for name in listed:
        if name not in shown:
            continue
        try:
            n = partition_count(state, name)
            parts = [partition_info(state, name, p) for p in range(n)]
        except UnknownTopicOrPartition:
            continue  # absent, or deleted between the two calls
        answer.append({"name": name, "partitions": parts})
    topology = state.topology
    brokers = [
        {"id": b.id, "url": b.url} for b in sorted(topology.brokers.values(), key=lambda b: b.id)
    ]
    controller = topology.controller_id if topology.controller_id is not None else -1
    cluster_id = topology.cluster_id
    return JSONBytes(
        {"cluster_id": cluster_id, "brokers": brokers, "controller": controller, "topics": answer}
    )
