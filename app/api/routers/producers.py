"""Producers: InitProducerId, the id and epoch an idempotent producer stamps on its batches."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import Response

from app.api import openapi_docs as docs
from app.api.codec import BodyInvalid
from app.api.deps import ManagerDep, StateDep, read_body
from app.api.errors import error_responses
from app.api.models import InitProducerIdRequest, InitProducerIdResponse
from app.api.openapi_docs import DocumentedRoute
from app.api.util import JSONBytes, run_blocking
from app.common.errors import InvalidRequest

router = APIRouter(tags=["producers"], route_class=DocumentedRoute)

# The body is at most three small fields.
INIT_BODY_LIMIT = 64 * 1024


@router.post(
    "/producers",
    description=docs.INIT_PRODUCER_ID,
    response_model=InitProducerIdResponse,
    responses=error_responses(400, 409, 413, 421, 503),
    openapi_extra=docs.json_request_body(
        "InitProducerIdRequest", docs.INIT_PRODUCER_ID_EXAMPLES, required=False
    ),
)
async def init_producer_id(request: Request, state: StateDep, manager: ManagerDep) -> Response:
    """Get a producer id (InitProducerId)"""
    body = await read_body(request, min(INIT_BODY_LIMIT, state.settings.max_request_bytes))
    try:
        req = InitProducerIdRequest.model_validate_json(body or b"{}")
    except ValidationError as exc:
        raise BodyInvalid.from_validation(exc) from None
    if req.transactional_id is not None:
        # The transactional producer's InitProducerId: its transaction coordinator.
        from app.api.routers.transactions import get_txn_coordinator
        from app.txn.model import DEFAULT_TIMEOUT_MS

        pid, epoch = await get_txn_coordinator(request).init_producer_id(
            req.transactional_id,
            req.transaction_timeout_ms or DEFAULT_TIMEOUT_MS,
            req.producer_id,
            req.producer_epoch,
        )
        return JSONBytes({"producer_id": pid, "producer_epoch": epoch})
    if req.transaction_timeout_ms is not None:
        raise InvalidRequest("transaction_timeout_ms goes with a transactional_id")
    # A new block of ids is persisted (fsync) once per thousand ids: off the loop.
    producer_id, epoch = await run_blocking(
        manager.producer_ids.init_producer, req.producer_id, req.producer_epoch
    )
    return JSONBytes({"producer_id": producer_id, "producer_epoch": epoch})
