"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from app.api.deps import StateDep
from app.api.errors import error_responses
from app.api.metrics import render_metrics
from app.api.models import Status
from app.api.openapi_docs import DocumentedRoute
from app.api.util import JSONBytes
from app.common.errors import BrokerNotAvailable

router = APIRouter(tags=["health"], route_class=DocumentedRoute)


@router.get("/healthz", response_model=Status)
async def healthz() -> Response:
    """Liveness

    200 while the process serves HTTP, even before the logs are loaded.
    """
    return JSONBytes({"status": "ok"})


@router.get("/readyz", response_model=Status, responses=error_responses(503))
async def readyz(state: StateDep) -> Response:
    """Readiness

    200 once every log is loaded and recovered and the broker takes requests; 503
    BROKER_NOT_AVAILABLE while starting or stopping.
    """
    if not state.ready:
        raise BrokerNotAvailable("the broker is starting or stopping")
    return JSONBytes({"status": "ready"})


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def get_metrics(state: StateDep) -> Response:
    """Prometheus metrics

    Text exposition format: HTTP request counts and latencies by route template and status,
    request/response bytes, zero-copy bytes, and per-partition log start offset, high watermark
    and log end offset.
    """
    body, content_type = render_metrics(state)
    return Response(body, media_type=content_type)
