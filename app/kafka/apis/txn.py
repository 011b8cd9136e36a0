"""InitProducerId (and the transaction APIs), on the transaction coordinator."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from app.common.errors import (
    BrokerNotAvailable,
    LogbusError,
)
from app.kafka.apis.base import (
    NO_THROTTLE,
    Context,
    response_module,
)
from app.kafka.encode import build, error_code
from app.kafka.versions import (
    INIT_PRODUCER_ID,
)

if TYPE_CHECKING:
    pass


async def init_producer_id(ctx: Context, body: Any, version: int) -> Any:
    """An idempotent producer's id and epoch (the HTTP ``POST /producers``'s two paths): a
    transactional id goes to the transaction coordinator, else the broker's id block."""
    m = response_module(INIT_PRODUCER_ID, version)
    # -1/-1 (and versions before 3): a new producer; Logbus's services take None for that.
    raw_id = int(getattr(body, "producer_id", -1))
    raw_epoch = int(getattr(body, "producer_epoch", -1))
    given_id = None if raw_id < 0 else raw_id
    given_epoch = None if raw_id < 0 else raw_epoch
    try:
        if body.transactional_id is not None:
            coordinator = ctx.txn()
            if coordinator is None:
                raise BrokerNotAvailable("the transaction coordinator is not serving")
            timeout_ms = int(body.transaction_timeout.total_seconds() * 1000)
            pid, epoch = await coordinator.init_producer_id(
                body.transactional_id, timeout_ms, given_id, given_epoch
            )
        else:
            assert ctx.state.manager is not None
            # A new block of ids is persisted (fsync) once per thousand ids: off the loop.
            pid, epoch = await asyncio.to_thread(
                ctx.state.manager.producer_ids.init_producer, given_id, given_epoch
            )
        code = ErrorCode.none
    except LogbusError as exc:
        pid, epoch, code = -1, -1, error_code(exc)
    return build(
        m.InitProducerIdResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        producer_id=pid,
        producer_epoch=epoch,
    )
