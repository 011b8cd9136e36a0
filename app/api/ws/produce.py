"""``WS /ws/produce``: a stream of JSON produce requests on one socket.

Each text message is ``{"id", "topic", "partition"?, "records", "key_format",
"value_format", "timeout_ms"?}`` and is answered by ``{"type": "ack", "id",
"offsets"}`` or ``{"type": "error", "id", ...}``. The records are parsed and
appended by the HTTP JSON produce code (:func:`append_json_records`), so the
semantics (placement, formats, auto-create, all-or-nothing) are the same. A message
with ``transactional_id``, ``producer_id`` and ``producer_epoch`` writes inside that
transaction through the HTTP transactional JSON produce
(:func:`~app.api.routers.transactions.produce_in_transaction`: the topic must exist,
acks=all; ``base_sequence`` numbers the batch so a message resent after a lost ack is
written once).

Requests on one socket are applied one at a time in the order sent, so
answers come back in that order and a partition keeps the socket's order.
uvicorn stops reading the socket while a message waits for the app, so a
client that sends faster than the log appends is slowed by TCP, not buffered.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

import orjson
from starlette.websockets import WebSocket

from app.api import typed
from app.api.produce_body import parse_produce_object
from app.api.routers.records import append_json_records
from app.api.routers.transactions import get_txn_coordinator, produce_in_transaction
from app.api.security import authorize
from app.api.ws import common
from app.api.ws.common import ClientGone, send_error, send_text
from app.api.ws.protocol import (
    PRODUCE_CLIENT,
    Close,
    Ping,
    Produce,
    internal_error_frame,
    validate,
)
from app.common.errors import LogbusError
from app.core.security.acl import Action, Operation, Resource, ResourceType

if TYPE_CHECKING:
    from app.api.state import AppState
    from app.api.ws.stats import WsStats

logger = logging.getLogger(__name__)

_BODY_FIELDS = (
    "records",
    "key_format",
    "value_format",
    "key_schema_id",
    "key_subject",
    "key_schema_version",
    "value_schema_id",
    "value_subject",
    "value_schema_version",
    "key_message",
    "value_message",
)
# Requests up to this size are appended on the event loop (see append_json_records):
# a socket's requests run one at a time, so a thread hop per request is its throughput.
INLINE_APPEND_BYTES = 64 * 1024


def _request_id(obj: dict[str, Any]) -> str | int | None:
    rid = obj.get("id")
    # bool is an int to Python, not an id.
    return rid if type(rid) in (str, int) else None


async def _serve(ws: WebSocket, state: AppState, idle_timeout: float) -> None:
    idle = common.IdleTimer(ws, idle_timeout)
    try:
        await _serve_requests(ws, state, idle)
    finally:
        idle.cancel()


async def _serve_requests(ws: WebSocket, state: AppState, idle: common.IdleTimer) -> None:
    limit = state.settings.max_request_bytes
    while True:
        rid: str | int | None = None
        try:
            obj = await common.receive_message(ws, idle, limit)
            rid = _request_id(obj)
            msg = validate(obj, PRODUCE_CLIENT, default="produce")
            if isinstance(msg, Ping):
                pong: dict[str, Any] = {"type": "pong"}
                if msg.id is not None:
                    pong["id"] = msg.id
                await send_text(ws, orjson.dumps(pong).decode())
                continue
            assert isinstance(msg, Produce)
            manager = state.manager
            if manager is None or not state.ready:
                await common.close(ws, Close.GOING_AWAY, "the broker is stopping")
                return
            txn = msg.transaction()
            authorize(ws, Action(Operation.WRITE, Resource(ResourceType.TOPIC, msg.topic)))
            if txn is not None:
                # As the HTTP route: WRITE on the transactional id too.
                authorize(
                    ws, Action(Operation.WRITE, Resource(ResourceType.TRANSACTIONAL_ID, txn[0]))
                )
            body = {name: obj[name] for name in _BODY_FIELDS if name in obj}
            req = parse_produce_object(body, "message")
            if req.typed:  # avro, jsonschema, protobuf: framed before anything is built
                req = typed.encode_request(typed.schema_cache(ws), req)
            if txn is None:
                offsets = await append_json_records(
                    state,
                    manager,
                    msg.topic,
                    req,
                    msg.timeout_ms,
                    msg.partition,
                    INLINE_APPEND_BYTES,
                )
            else:
                # EndTxn waits for the append permit this takes around its checked append
                # (app/txn/permits.py), not for this socket's task, which lasts as long
                # as the socket.
                offsets = await produce_in_transaction(
                    state,
                    get_txn_coordinator(ws),
                    *txn,
                    msg.topic,
                    req,
                    msg.partition,
                    base_sequence=msg.base_sequence,
                )
            await send_text(
                ws, orjson.dumps({"type": "ack", "id": rid, "offsets": offsets}).decode()
            )
        except LogbusError as exc:
            await send_error(ws, exc, id=rid)
        except ClientGone:
            return
        except Exception as exc:
            # A bug must cost this request, not the socket or the broker.
            logger.exception("WebSocket produce failed")
            with contextlib.suppress(ClientGone):
                await send_text(ws, internal_error_frame(exc, id=rid))


async def endpoint(ws: WebSocket) -> None:
    async def run(state: AppState, stats: WsStats, idle: float) -> None:
        await _serve(ws, state, idle)

    await common.serve(ws, "produce", run)
