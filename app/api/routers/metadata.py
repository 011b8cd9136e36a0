"""Cluster metadata: brokers, controller, and where every partition lives."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from app.api import openapi_docs as docs
from app.api.deps import ManagerDep, StateDep
from app.api.errors import error_responses
from app.api.models import Metadata
from app.api.util import JSONBytes
from app.core.errors import UnknownTopicOrPartition

router = APIRouter(tags=["metadata"])


@router.get(
    "/metadata",
    summary="Cluster metadata",
    description=docs.METADATA,
    response_model=Metadata,
    responses=error_responses(503),
)
async def metadata(state: StateDep, manager: ManagerDep) -> Response:
    broker = state.settings.broker_id
    topics = []
    for name in manager.topics():
        try:
            n = manager.partition_count(name)
        except UnknownTopicOrPartition:
            continue  # deleted between the two calls
        topics.append(
            {
                "name": name,
                "partitions": [
                    {"partition": p, "leader": broker, "replicas": [broker], "isr": [broker]}
                    for p in range(n)
                ],
            }
        )
    return JSONBytes(
        {
            "cluster_id": manager.cluster_id,
            "brokers": [{"id": broker, "url": state.settings.url}],
            "controller": broker,
            "topics": topics,
        }
    )
