"""ListOffsets: the earliest, the latest, or the first offset at or after a time."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from starlette.responses import Response

from app.api import openapi_docs as docs
from app.api.deps import ManagerDep, StateDep
from app.api.errors import error_responses, offsets_unavailable_doc
from app.api.models import OffsetAnswer
from app.api.openapi_docs import DocumentedRoute
from app.api.util import LONG_MAX, JSONBytes, PartitionPath, TopicPath
from app.common.errors import InvalidRequest
from app.common.isolation import READ_COMMITTED
from app.core.topology import OffsetSpec, list_offset

router = APIRouter(tags=["fetch"], route_class=DocumentedRoute)


def parse_at(at: str) -> OffsetSpec:
    text = at.strip().lower()
    if text == "earliest":
        return "earliest"
    if text == "latest":
        return "latest"
    try:
        ts = int(text)
    except ValueError:
        raise InvalidRequest(
            f"query.at: expected earliest, latest or a timestamp in ms, got {at!r}"
        ) from None
    if not 0 <= ts <= LONG_MAX:
        raise InvalidRequest(f"query.at: a timestamp must be between 0 and {LONG_MAX}, got {ts}")
    return ts


@router.get(
    "/topics/{topic}/partitions/{partition}/offsets",
    description=docs.LIST_OFFSETS,
    response_model=OffsetAnswer,
    responses={**error_responses(307, 400, 404, 421), 503: offsets_unavailable_doc()},
)
async def list_offsets(
    topic: TopicPath,
    partition: PartitionPath,
    state: StateDep,
    manager: ManagerDep,
    at: Annotated[
        str,
        Query(
            description="`earliest` (the log start offset), `latest` (the high watermark: "
            "the next offset to be written) or a timestamp in ms since the epoch.",
            examples=["earliest", "latest", "1700000000000"],
        ),
    ] = "latest",
    isolation_level: Annotated[
        Literal["read_uncommitted", "read_committed"],
        Query(
            description="As Kafka's ListOffsets: with `read_committed`, `latest` is the last "
            "stable offset (where a read_committed reader is held) and a timestamp lookup "
            "finds only offsets below it.",
            examples=["read_uncommitted", "read_committed"],
        ),
    ] = "read_uncommitted",
) -> Response:
    """Look up an offset (earliest, latest, or by timestamp)"""
    where = parse_at(at)
    replica = state.topology.leader_partition(topic, partition)
    offset, timestamp = list_offset(
        replica.log,
        where,
        read_committed=isolation_level == READ_COMMITTED,
        unavailable=replica.offsets_error(),
    )
    return JSONBytes({"offset": offset, "timestamp": timestamp})
