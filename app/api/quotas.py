"""Client quotas at the door (Kafka's client quotas; the model is app/core/security/quotas.py).

:class:`QuotaMiddleware` is one ASGI middleware for HTTP and WebSocket, inside the security
middleware (so the principal is known). Who: the user is the principal's name
(``User:alice`` -> ``alice``; ``ANONYMOUS`` without authentication), the client id the
``Logbus-Client-Id`` header or else the ``client_id`` query parameter (the SDK sends the
header; empty when neither). Follower brokers (``Broker:<id>``) are exempt, as Kafka's
replication traffic is from client quotas.

What is measured:

- HTTP: every request counts 1 toward ``request_rate``; the body of a produce
  (``POST .../records``, ``.../batches``) toward ``producer_byte_rate``; the answer of a
  fetch (``GET .../partitions/{p}/records``) toward ``consumer_byte_rate`` (its
  ``Content-Length``, or the bytes sent when it is streamed: then the debt delays the
  next answer).
- WebSocket: every message received counts 1 request; a ``/ws/produce`` message's bytes
  count as produced, a ``/ws/subscribe`` frame's bytes as fetched.

Enforcement, as Kafka: nothing is refused. An HTTP answer over quota is held back by the
throttle time before its first byte (the connection is muted meanwhile: an HTTP/1.1
client sends its next request after the answer) and carries ``Logbus-Throttle-Time-Ms``
(Kafka's ``throttle_time_ms``; ``0`` is not sent). A WebSocket message over quota is
handled (and a frame sent) after the delay, which holds back the socket's next reads.

Cost: with no quota configured one attribute test per request; otherwise a few dict
lookups and float operations per request, on the event loop (no thread hop).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_responses
from app.api.openapi_docs import DocumentedRoute
from app.api.peer import peer_name
from app.api.security import INTER_BROKER, SCOPE_KEY, identity_of
from app.api.util import JSONBytes
from app.common.errors import InvalidRequest
from app.config import Settings
from app.core.security.quotas import (
    DEFAULT,
    FETCH,
    PRODUCE,
    QUOTAS_FILE,
    REQUEST,
    Change,
    FileQuotaStore,
    InvalidQuota,
    QuotaManager,
    Quotas,
    QuotaStore,
    alteration,
)

CLIENT_ID_HEADER = b"logbus-client-id"
THROTTLE_HEADER = b"logbus-throttle-time-ms"
WS_PRODUCE = "/ws/produce"
WS_SUBSCRIBE = "/ws/subscribe"


def build(settings: Settings) -> Quotas:
    """The broker's quotas (:class:`~app.core.security.quotas.Quotas`, which both doors
    share) on the store this broker keeps them in: ZooKeeper in a cluster, else a file."""
    manager = QuotaManager(settings.quota_window_num, settings.quota_window_size_s)
    store: QuotaStore
    if settings.zookeeper:
        from app.core.replication.zk_quotas import ZkQuotaStore

        store = ZkQuotaStore(settings.zookeeper, settings.zookeeper_session_timeout_ms)
    else:
        store = FileQuotaStore(settings.quotas_file or settings.data_dir / QUOTAS_FILE)
    return Quotas(manager, store)


def _kind(method: str, path: str) -> str | None:
    """PRODUCE, FETCH or None for an HTTP request (by path: no route table lookup)."""
    if not path.startswith("/topics/"):
        return None
    if method == "POST" and (path.endswith("/records") or path.endswith("/batches")):
        return PRODUCE
    if method == "GET" and path.endswith("/records") and "/partitions/" in path:
        return FETCH
    return None


def _client_id(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == CLIENT_ID_HEADER:
            return str(value.decode("latin-1"))[:255]
    raw: bytes = scope.get("query_string", b"")
    if b"client_id=" in raw:
        from urllib.parse import parse_qs

        found = parse_qs(raw.decode("latin-1")).get("client_id")
        if found:
            return str(found[-1][:255])
    return ""


def _user(scope: Scope) -> str | None:
    """The principal's name, or None for an exempt follower broker."""
    identity = scope.get(SCOPE_KEY)
    if identity is None:
        # No security door: the certificate's subject, else Kafka's anonymous user.
        return peer_name(scope) or "ANONYMOUS"
    if identity.mechanism == INTER_BROKER:
        return None
    principal: str = identity.principal
    return principal.partition(":")[2]


class QuotaMiddleware:
    """The module docstring's enforcement, for HTTP and WebSocket."""

    def __init__(self, app: ASGIApp, quotas: Quotas) -> None:
        self.app = app
        self.manager = quotas.manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if not self.manager.config or kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        user = _user(scope)
        if user is None:
            await self.app(scope, receive, send)
            return
        client = _client_id(scope)
        if kind == "websocket":
            await self._websocket(scope, receive, send, client)
            return
        manager = self.manager
        throttle = manager.record(REQUEST, user, client, 1.0)
        what = _kind(scope["method"], scope["path"])
        counted = 0
        # A streamed fetch answer (no Content-Length) is counted as its bytes are sent.
        count_sent = what == FETCH
        wrapped_receive = receive
        if what == PRODUCE:

            async def wrapped_receive() -> Message:
                nonlocal counted
                message = await receive()
                counted += len(message.get("body", b""))
                return message

        async def wrapped_send(message: Message) -> None:
            nonlocal throttle, counted, count_sent
            kind = message["type"]
            if kind == "http.response.start":
                if what == PRODUCE and counted:
                    throttle = max(throttle, manager.record(PRODUCE, user, client, counted))
                    counted = 0
                elif what == FETCH:
                    length = _content_length(message)
                    if length is not None:
                        throttle = max(throttle, manager.record(FETCH, user, client, length))
                        count_sent = False
                if throttle > 0.0:
                    ms = int(throttle * 1000 + 0.5)
                    message = dict(message)
                    message["headers"] = [
                        *message.get("headers", ()),
                        (THROTTLE_HEADER, str(ms).encode()),
                    ]
                    await asyncio.sleep(throttle)
            elif kind == "http.response.body" and count_sent:
                counted += len(message.get("body", b""))
                if not message.get("more_body", False):
                    manager.record(FETCH, user, client, counted)
            elif kind == "http.response.zerocopysend" and count_sent:
                counted += int(message.get("count") or 0)
                if not message.get("more_body", False):
                    manager.record(FETCH, user, client, counted)
            await send(message)

        await self.app(scope, wrapped_receive, wrapped_send)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send, client: str) -> None:
        manager = self.manager
        path = scope["path"]
        produce = path == WS_PRODUCE
        subscribe = path == WS_SUBSCRIBE

        async def wrapped_receive() -> Message:
            message = await receive()
            if message["type"] == "websocket.receive":
                user = _user(scope)  # known after a first auth message, too
                if user is not None:
                    throttle = manager.record(REQUEST, user, client, 1.0)
                    if produce:
                        size = _frame_size(message)
                        throttle = max(throttle, manager.record(PRODUCE, user, client, size))
                    if throttle > 0.0:
                        await asyncio.sleep(throttle)
            return message

        async def wrapped_send(message: Message) -> None:
            if subscribe and message["type"] == "websocket.send":
                user = _user(scope)
                if user is not None:
                    throttle = manager.record(FETCH, user, client, _frame_size(message))
                    if throttle > 0.0:
                        await asyncio.sleep(throttle)
            await send(message)

        await self.app(scope, wrapped_receive, wrapped_send)


def _frame_size(message: Message) -> int:
    data = message.get("bytes")
    if data is not None:
        return len(data)
    text = message.get("text")
    return len(text.encode()) if text is not None else 0


def _content_length(message: Message) -> int | None:
    for name, value in message.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


# --- the endpoint: Kafka's DescribeClientQuotas / AlterClientQuotas --------------------

router = APIRouter(tags=["quotas"], route_class=DocumentedRoute)

QuotaKey = Literal["producer_byte_rate", "consumer_byte_rate", "request_rate"]


class EntityComponent(BaseModel):
    """One part of an entity; ``entity_name`` null is Kafka's ``<default>``."""

    entity_type: Literal["user", "client-id"]
    entity_name: str | None = Field(default=None, min_length=1, max_length=255)


class QuotaEntry(BaseModel):
    entity: list[EntityComponent]
    values: dict[QuotaKey, float]


class QuotaList(BaseModel):
    quotas: list[QuotaEntry]


class QuotaOp(BaseModel):
    key: QuotaKey
    value: float | None = Field(default=None, gt=0, description="Absent with remove=true.")
    remove: bool = False


class AlterEntry(BaseModel):
    entity: list[EntityComponent] = Field(min_length=1, max_length=2)
    ops: list[QuotaOp] = Field(min_length=1, max_length=3)


class AlterQuotasBody(BaseModel):
    entries: list[AlterEntry] = Field(min_length=1, max_length=1000)


def quotas_of(request: Request) -> Quotas:
    quotas: Quotas = request.app.state.logbus_quotas
    return quotas


def _part(value: str | None) -> str | None:
    if value is None:
        return None
    return DEFAULT if value in ("<default>", "") else value


@router.get("/quotas", response_model=QuotaList, responses=error_responses(400, 401, 403))
async def describe_quotas(
    request: Request,
    user: Annotated[str | None, Query(max_length=255)] = None,
    client_id: Annotated[str | None, Query(max_length=255)] = None,
) -> Response:
    """Describe client quotas (DescribeClientQuotas)

    The quotas set on the entities the filter selects. `user` and `client_id` each: absent
    (any), a name, or `<default>` (the default entity). Keys: producer_byte_rate,
    consumer_byte_rate (bytes/s), request_rate (requests/s).
    """
    config = quotas_of(request).manager.config
    selected = config.select(_part(user), _part(client_id))
    return JSONBytes({"quotas": [{"entity": e.to_json(), "values": v} for e, v in selected]})


@router.post("/quotas", response_model=QuotaList, responses=error_responses(400, 401, 403))
async def alter_quotas(request: Request, body: AlterQuotasBody) -> Response:
    """Alter client quotas (AlterClientQuotas)

    Sets or removes (`remove: true`) quota keys of entities; all or none. An entity is one or
    two components (`user`, `client-id`), `entity_name` null standing for `<default>`. Takes
    effect on every broker within a second. Answers the quotas of the altered entities after the
    change.
    """
    quotas = quotas_of(request)
    changes: list[Change] = []
    try:
        for entry in body.entries:
            changes.append(
                alteration(
                    ((c.entity_type, c.entity_name) for c in entry.entity),
                    ((op.key, op.value, op.remove) for op in entry.ops),
                )
            )
    except InvalidQuota as exc:
        raise InvalidRequest(str(exc)) from None
    config = await quotas.alter(changes, identity_of(request).principal)
    entities = {e for e, _ in changes}
    answer = [
        {"entity": e.to_json(), "values": v} for e, v in config.select(None, None) if e in entities
    ]
    return JSONBytes({"quotas": answer})
