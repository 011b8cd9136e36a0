"""Authentication and authorization at the HTTP and WebSocket door, in one place.

Built from the settings by :func:`build` (None when ``authentication`` and
``authorizer`` are both ``none``: then nothing here runs and no request pays anything).
Otherwise one ASGI middleware, :class:`SecurityMiddleware`, runs before any route:

1. **Who**: the request's credentials (``Authorization: Basic`` or ``Bearer``; for a
   WebSocket also a bearer token offered as the subprotocol ``bearer.<token>`` beside
   ``logbus``, or a first ``{"type": "auth", ...}`` message, see :func:`ws_accept`)
   become an :class:`~app.core.security.authn.Identity`, kept in the ASGI scope. A
   follower broker proves itself with its inter-broker credential
   (``Logbus-Replica-Auth`` + ``Logbus-Replica-Id``, :mod:`app.core.replication.auth`):
   principal ``Broker:<id>``, mechanism ``inter-broker``, allowed everything. A client
   that presented a verified TLS certificate and no ``Authorization`` header is
   ``User:<subject DN>`` (Kafka's SSL listener with ``ssl.principal.mapping.rules=DEFAULT``:
   RFC 2253 order, ``User:CN=alice,O=Example``; app/api/peer.py), mechanism ``mtls``.
   No or bad credentials where they are required: **401**
   ``SASL_AUTHENTICATION_FAILED`` with ``WWW-Authenticate``; nothing else runs.
2. **What**: :data:`app.api.acl_rules.RULES` maps each operation of the OpenAPI spec (by ``operationId``)
   to the ACL actions Kafka's equivalent API requires, from the path, the query and,
   for the small JSON bodies of admin and group calls, the body (read once here and
   handed on unchanged). Every action must be allowed: else **403**
   ``TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED`` naming the resource
   and operation, before the route runs (so a refused request changes nothing).
   Listings (``GET /topics``, ``/metadata``, ``/groups``) are filtered by the routes
   with :func:`visible`. WebSocket messages are checked by their handlers with
   :func:`authorize` (``/ws/produce``: WRITE; ``/ws/subscribe``: READ on the topics,
   and on the group).

Authentication results and decisions are cached (:mod:`app.core.security`): a request
with credentials seen before costs a few dict lookups and no thread hop. A first Basic
check (scrypt, hundreds of ms) runs in a worker thread.

Denials and authentication failures go to the audit log (:mod:`app.core.security.audit`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.acl_rules import (
    BODY_RULES,
    IDEMPOTENT,
    INTERNAL_TOPIC,
    QUERY_RULES,
    RULES,
    TX,
    AutoCreate,
    Either,
    G,
    Rule,
    T,
)
from app.api.errors import response_for
from app.api.peer import peer_name
from app.common import errors as core
from app.config import Settings
from app.core.security import audit
from app.core.security.acl import (
    ANONYMOUS,
    CLUSTER,
    Action,
    Authorizer,
    Operation,
    Resource,
    ResourceType,
)
from app.core.security.authn import (
    BasicAuthenticator,
    Identity,
    JwtAuthenticator,
    jwt_authenticator,
)
from app.core.security.store import ACLS_FILE, AclStore, FileAclStore
from app.core.security.users import USERS_FILE

SCOPE_KEY = "logbus.identity"
REPLICA_ID_HEADER = b"logbus-replica-id"
REPLICA_AUTH_HEADER = b"logbus-replica-auth"
# The WebSocket subprotocol a browser client names beside its token.
WS_SUBPROTOCOL = "logbus"
WS_TOKEN_PREFIX = "bearer."
# Paths anyone may reach: probes and the API's own documents.
PUBLIC_PATHS = frozenset(
    ("/healthz", "/readyz", "/docs", "/docs/oauth2-redirect", "/openapi.json", "/asyncapi.yaml")
)
# A follower broker proven by its inter-broker credential: a principal type no user
# authenticator produces (they all answer User:...), recognised by its mechanism.
INTER_BROKER = "inter-broker"
# A client proven by its TLS certificate (ssl_client_auth=requested|required).
MTLS = "mtls"
# JSON bodies the rules read are small; a larger one is left for the route to refuse.
RULE_BODY_LIMIT = 1024 * 1024


@dataclass
class Security:
    """What the middleware and the handlers consult; one per app."""

    mechanisms: list[str]
    basic: BasicAuthenticator | None
    jwt: JwtAuthenticator | None
    authorizer: Authorizer | None
    store: AclStore | None
    # Basic checks under way, by cache key: concurrent requests with the same uncached
    # credentials (a client opening 64 connections at once) share one scrypt check.
    _checking: dict[bytes, asyncio.Future[Identity]] = field(default_factory=dict)

    async def start(self) -> None:
        """Connect the ACL store (ZooKeeper in a cluster) and load its bindings."""
        store, authorizer = self.store, self.authorizer
        if store is None or authorizer is None:
            return
        starter = getattr(store, "start", None)
        if starter is not None:
            await asyncio.to_thread(starter)
        authorizer.update(store.load())
        store.watch(authorizer.update)

    async def stop(self) -> None:
        if self.store is not None:
            await asyncio.to_thread(self.store.close)

    @property
    def challenge(self) -> str:
        parts = []
        if self.basic is not None:
            parts.append('Basic realm="logbus", charset="UTF-8"')
        if self.jwt is not None:
            parts.append('Bearer realm="logbus"')
        return ", ".join(parts)

    def failed(self, reason: str, host: str, mechanism: str) -> core.SaslAuthenticationFailed:
        audit.authentication_failed(mechanism, host, reason)
        exc = core.SaslAuthenticationFailed(reason)
        exc.challenge = self.challenge
        return exc

    async def authenticate(self, authorization: str | None, host: str) -> Identity:
        """The identity ``authorization`` (a header value) proves; ANONYMOUS when no
        authentication is configured; SaslAuthenticationFailed otherwise."""
        if not self.mechanisms:
            return Identity(ANONYMOUS, "none")
        if authorization is None:
            raise self.failed("credentials required (Authorization header)", host, "none")
        scheme, _, credentials = authorization.strip().partition(" ")
        scheme = scheme.lower()
        credentials = credentials.strip()
        try:
            if scheme == "basic" and self.basic is not None:
                name, password = _basic_pair(credentials)
                identity = self.basic.cached(name, password)
                if identity is None:
                    identity = await self._verify_once(self.basic, name, password)
                return identity
            if scheme == "bearer" and self.jwt is not None:
                identity = self.jwt.cached(credentials)
                if identity is None:
                    if self.jwt.needs_io:
                        identity = await asyncio.to_thread(self.jwt.authenticate, credentials)
                    else:
                        identity = self.jwt.authenticate(credentials)
                return identity
        except core.SaslAuthenticationFailed as exc:
            raise self.failed(exc.message, host, scheme) from None
        raise self.failed(
            f"authentication scheme {scheme or '(none)'!r} is not accepted here", host, scheme
        )

    async def _verify_once(self, basic: BasicAuthenticator, name: str, password: str) -> Identity:
        key = basic.cache_key(name, password)
        pending = self._checking.get(key)
        if pending is None:
            pending = asyncio.ensure_future(asyncio.to_thread(basic.verify, name, password))
            self._checking[key] = pending
            pending.add_done_callback(lambda _: self._checking.pop(key, None))
        return await asyncio.shield(pending)

    def allowed(self, identity: Identity, host: str, action: Action) -> bool:
        if self.authorizer is None or identity.mechanism == INTER_BROKER:
            return True
        return self.authorizer.authorize(identity.principal, host, action)

    def check(self, identity: Identity, host: str, actions: Iterable[Action]) -> None:
        """AuthorizationFailed (audited) for the first action the ACLs refuse."""
        for action in actions:
            if not self.allowed(identity, host, action):
                raise denial(identity.principal, host, action)

    def allowed_any_topic(self, identity: Identity, host: str, op: Operation) -> bool:
        """Kafka's ``authorizeByResourceType`` on topics (the KIP-679 idempotent producer)."""
        if self.authorizer is None or identity.mechanism == INTER_BROKER:
            return True
        return self.authorizer.authorize_any(identity.principal, host, op, T)


def denial(principal: str, host: str, action: Action) -> core.AuthorizationFailed:
    resource = action.resource
    op = action.operation.value
    audit.denied(principal, host, op, f"{resource.type.value}:{resource.name}")
    cls: type[core.AuthorizationFailed] = {
        T: core.TopicAuthorizationFailed,
        G: core.GroupAuthorizationFailed,
        TX: core.TransactionalIdAuthorizationFailed,
    }.get(resource.type, core.ClusterAuthorizationFailed)
    kind = resource.type.value.lower().replace("_", " ")
    return cls(
        f"{principal} may not {op} {kind} {resource.name!r}",
        resource_type=resource.type.value,
        resource_name=resource.name,
        operation=op,
    )


def _basic_pair(credentials: str) -> tuple[str, str]:
    try:
        decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise core.SaslAuthenticationFailed(
            "Basic: credentials are not base64 of name:password"
        ) from None
    name, colon, password = decoded.partition(":")
    if not colon or not name:
        raise core.SaslAuthenticationFailed("Basic: credentials are not name:password")
    return name, password


def build(settings: Settings) -> Security | None:
    """The app's security from its settings; None when both halves are off."""
    mechanisms = settings.authentication_mechanisms
    if not mechanisms and settings.authorizer == "none":
        return None
    basic = None
    if "basic" in mechanisms:
        basic = BasicAuthenticator(settings.users_file or settings.data_dir / USERS_FILE)
    jwt = None
    if "jwt" in mechanisms:
        jwt = jwt_authenticator(settings)
    authorizer: Authorizer | None = None
    store: AclStore | None = None
    if settings.authorizer == "acl":
        if settings.zookeeper:
            # A cluster keeps its ACLs with its metadata, as Kafka's znodes; every broker
            # reloads them on a change notification (app/core/replication/zk_acls.py).
            from app.core.replication.zk_acls import ZkAclStore

            store = ZkAclStore(settings.zookeeper, settings.zookeeper_session_timeout_ms)
        else:
            store = FileAclStore(settings.acls_file or settings.data_dir / ACLS_FILE)
        # Empty until start() loads the store: nothing is allowed before (no super user
        # aside), and the app serves only after its lifespan started it.
        authorizer = Authorizer(settings.super_user_list, settings.allow_everyone_if_no_acl_found)
    return Security(mechanisms, basic, jwt, authorizer, store)


# Paths whose operation is remembered, at most (cleared whole when full).
ROUTE_CACHE_SIZE = 10_000


@dataclass(frozen=True, slots=True)
class _Route:
    pattern: re.Pattern[str]
    operations: dict[str, str]  # method -> operationId


def route_table(spec: dict[str, Any]) -> list[_Route]:
    table = []
    for template, item in spec.get("paths", {}).items():
        regex = "^" + re.sub(r"\\\{([^}/]+)\\\}", r"(?P<\1>[^/]+)", re.escape(template)) + "$"
        ops = {m.upper(): op["operationId"] for m, op in item.items() if isinstance(op, dict)}
        table.append((template.count("{"), _Route(re.compile(regex), ops)))
    return [r for _, r in sorted(table, key=lambda e: e[0])]


def identity_of(conn: HTTPConnection) -> Identity:
    identity: Identity | None = conn.scope.get(SCOPE_KEY)
    return identity if identity is not None else Identity(ANONYMOUS, "none")


def security_of(conn: HTTPConnection) -> Security | None:
    return getattr(conn.app.state, "logbus_security", None)


def _host(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else "*"


def authorize(conn: HTTPConnection, *actions: Action) -> None:
    """AuthorizationFailed unless the connection's principal may do every action (a
    no-op when no authorizer is configured). For WebSocket messages and route checks."""
    security = security_of(conn)
    if security is None or security.authorizer is None:
        return
    security.check(identity_of(conn), _host(conn.scope), actions)


def permits(conn: HTTPConnection, action: Action) -> bool:
    """Whether the connection's principal may do ``action`` (True without an authorizer);
    for answers that show a part only to those allowed (a topic's configs)."""
    security = security_of(conn)
    if security is None or security.authorizer is None:
        return True
    return security.allowed(identity_of(conn), _host(conn.scope), action)


def describable(conn: HTTPConnection, resource_type: ResourceType) -> Callable[[str], bool] | None:
    """Whether the connection's principal may DESCRIBE a resource of ``resource_type`` by
    name; None when no authorizer is configured (everything is). Asks the authorizer at
    each call, so a function kept (a group member's regex subscription) follows ACL
    changes."""
    security = security_of(conn)
    if security is None or security.authorizer is None:
        return None
    identity, host, allowed = identity_of(conn), _host(conn.scope), security.allowed

    def may_describe(name: str) -> bool:
        return allowed(identity, host, Action(Operation.DESCRIBE, Resource(resource_type, name)))

    return may_describe


def visible(conn: HTTPConnection, resource_type: ResourceType, names: Iterable[str]) -> set[str]:
    """The names the principal may DESCRIBE (every one when no authorizer is configured)."""
    may_describe = describable(conn, resource_type)
    return set(names) if may_describe is None else set(filter(may_describe, names))


class SecurityMiddleware:
    """ASGI middleware applying the module docstring's steps to HTTP and WebSocket."""

    def __init__(
        self,
        app: ASGIApp,
        security: Security,
        openapi: Callable[[], dict[str, Any]],
        verify_broker: Callable[[int, str], bool],
        topic_exists: Callable[[str], bool],
    ) -> None:
        self.app = app
        self._topic_exists = topic_exists
        self.security = security
        self._openapi = openapi
        self._verify_broker = verify_broker
        self._table: list[_Route] | None = None
        # (method, path) -> its operation: a produce or fetch loop asks the same few paths
        # over and over, so the route regexes run once per path, not once per request.
        self._routes: dict[tuple[str, str], tuple[str, dict[str, str]] | None] = {}

    def _operation(self, method: str, path: str) -> tuple[str, dict[str, str]] | None:
        key = (method, path)
        try:
            return self._routes[key]
        except KeyError:
            pass
        if self._table is None:
            self._table = route_table(self._openapi())
        found = None
        for route in self._table:
            m = route.pattern.match(path)
            if m is not None:
                op = route.operations.get(method)
                found = None if op is None else (op, m.groupdict())
                break
        if len(self._routes) >= ROUTE_CACHE_SIZE:
            self._routes.clear()
        self._routes[key] = found
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        host = _host(scope)
        headers = dict(scope["headers"])
        try:
            identity = self._broker(headers)
            if identity is None and b"authorization" not in headers:
                # Kafka's SSL listener: a verified client certificate names the principal
                # (User:<subject DN>, app/api/peer.py) unless other credentials are given.
                name = peer_name(scope)
                if name is not None:
                    identity = Identity(f"User:{name}", MTLS)
            if identity is None:
                if kind == "websocket":
                    identity = await self._ws_identity(headers, host)
                else:
                    raw = headers.get(b"authorization")
                    identity = await self.security.authenticate(
                        None if raw is None else raw.decode("latin-1"), host
                    )
        except core.SaslAuthenticationFailed as exc:
            if kind == "websocket":
                await _refuse_ws(scope, send, exc)
            else:
                await response_for(exc)(scope, receive, send)
            return
        scope[SCOPE_KEY] = identity
        if kind == "http" and identity is not None and self.security.authorizer is not None:
            receive, error = await self._authorize(scope, receive, identity, host, headers)
            if error is not None:
                await response_for(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _broker(self, headers: dict[bytes, bytes]) -> Identity | None:
        raw_id = headers.get(REPLICA_ID_HEADER)
        credential = headers.get(REPLICA_AUTH_HEADER)
        if raw_id is None or credential is None or not raw_id.isdigit():
            return None
        try:
            ok = self._verify_broker(int(raw_id), credential.decode("latin-1"))
        except core.LogbusError:
            ok = False
        return Identity(f"Broker:{int(raw_id)}", INTER_BROKER) if ok else None

    async def _ws_identity(self, headers: dict[bytes, bytes], host: str) -> Identity | None:
        """From the handshake: the Authorization header or a ``bearer.<token>`` subprotocol;
        None (authenticate with the first message) when the handshake carries neither."""
        raw = headers.get(b"authorization")
        if raw is not None:
            return await self.security.authenticate(raw.decode("latin-1"), host)
        token = _subprotocol_token(headers)
        if token is not None:
            return await self.security.authenticate(f"Bearer {token}", host)
        if not self.security.mechanisms:
            return Identity(ANONYMOUS, "none")
        return None

    async def _authorize(
        self,
        scope: Scope,
        receive: Receive,
        identity: Identity,
        host: str,
        headers: dict[bytes, bytes],
    ) -> tuple[Receive, core.LogbusError | None]:
        found = self._operation(scope["method"], scope["path"])
        if found is None:
            return receive, None  # no such route: the router answers 404/405
        op_id, path_params = found
        rule: Rule | None = _deny_unmapped
        if op_id in RULES:
            rule = RULES[op_id]
        if rule is None:
            return receive, None
        body: Any = None
        if op_id in BODY_RULES:
            raw, receive = await _read_body(receive)
            try:
                body = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                body = None  # the route answers 400
        query = _query(scope.get("query_string", b"")) if op_id in QUERY_RULES else {}
        try:
            for action in rule(path_params, query, body):
                self._check(identity, host, action, path_params)
        except core.AuthorizationFailed as exc:
            return receive, exc
        return receive, None

    def _check(self, identity: Identity, host: str, action: Any, path: dict[str, str]) -> None:
        security = self.security
        if isinstance(action, AutoCreate):
            if not self._topic_exists(action.topic):
                create = Action(Operation.CREATE, Resource(T, action.topic))
                self._check(identity, host, Either(Action(Operation.CREATE, CLUSTER), create), path)
            return
        if isinstance(action, Either):
            if not security.allowed(identity, host, action.first):
                security.check(identity, host, [action.second])
            return
        if action is IDEMPOTENT:
            if not security.allowed(identity, host, action) and not security.allowed_any_topic(
                identity, host, Operation.WRITE
            ):
                raise denial(identity.principal, host, action)
            return
        if (
            action.resource.type is T
            and action.resource.name == INTERNAL_TOPIC
            and (action.operation is not Operation.DESCRIBE)
        ):
            # __consumer_offsets: only super users (and brokers) read or write it directly.
            assert security.authorizer is not None
            if identity.principal not in security.authorizer.super_users and (
                identity.mechanism != INTER_BROKER
            ):
                raise denial(identity.principal, host, action)
        security.check(identity, host, [action])


def _deny_unmapped(path: dict[str, str], query: dict[str, list[str]], body: Any) -> list[Action]:
    """An operation without a rule is for super users only (a test keeps RULES complete)."""
    return [Action(Operation.ALL, CLUSTER)]


def _query(raw: bytes) -> dict[str, list[str]]:
    from urllib.parse import parse_qsl

    out: dict[str, list[str]] = {}
    for k, v in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
        out.setdefault(k, []).append(v)
    return out


async def _read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The whole body (up to RULE_BODY_LIMIT; past it the rest is left to the route), and
    a ``receive`` that hands it to the app again."""
    chunks: list[bytes] = []
    size = 0
    more = True
    messages: list[Message] = []
    while more and size <= RULE_BODY_LIMIT:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = message.get("more_body", False)

    async def replay() -> Message:
        if messages:
            return messages.pop(0)
        return await receive()

    return (b"".join(chunks) if size <= RULE_BODY_LIMIT else b""), replay


def _subprotocol_token(headers: dict[bytes, bytes]) -> str | None:
    raw = headers.get(b"sec-websocket-protocol")
    if raw is None:
        return None
    for proto in raw.decode("latin-1").split(","):
        proto = proto.strip()
        if proto.startswith(WS_TOKEN_PREFIX):
            return proto[len(WS_TOKEN_PREFIX) :]
    return None


async def _refuse_ws(scope: Scope, send: Send, exc: core.SaslAuthenticationFailed) -> None:
    """Refuse a WebSocket handshake: a 401 answer where the server can send one (the ASGI
    ``websocket.http.response`` extension), else a close before accepting (HTTP 403)."""
    if "websocket.http.response" in scope.get("extensions", {}):
        body = orjson.dumps(
            {"error_code": exc.error_code, "message": exc.message, "retriable": False}
        )
        headers = [(b"content-type", b"application/json")]
        if exc.challenge:
            headers.append((b"www-authenticate", exc.challenge.encode()))
        await send({"type": "websocket.http.response.start", "status": 401, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "websocket.close", "code": 4401, "reason": exc.message[:120]})


# --- WebSocket: accept, then authenticate by the first message ------------------------

WS_AUTH_TIMEOUT_S = 10.0
# Close code of a WebSocket whose authentication failed or whose token expired.
CLOSE_UNAUTHENTICATED = 4401


def ws_subprotocol(conn: HTTPConnection) -> str | None:
    """The subprotocol to accept: ``logbus`` when the client offered it (a browser that
    sent its token as ``bearer.<token>`` must get one of its offers back)."""
    offered = conn.headers.get("sec-websocket-protocol")
    if offered is None:
        return None
    names = [p.strip() for p in offered.split(",")]
    return WS_SUBPROTOCOL if WS_SUBPROTOCOL in names else None


async def ws_authenticate(conn: HTTPConnection, receive_text: Callable[[], Any]) -> Identity:
    """After accepting a socket whose handshake carried no credentials: the first message
    must be ``{"type": "auth", "token": ...}`` or ``{"type": "auth", "username", "password"}``.
    Raises SaslAuthenticationFailed otherwise (the caller closes with 4401)."""
    security = security_of(conn)
    assert security is not None
    host = _host(conn.scope)
    try:
        text = await asyncio.wait_for(receive_text(), WS_AUTH_TIMEOUT_S)
        obj = orjson.loads(text) if isinstance(text, str) else None
    except (TimeoutError, orjson.JSONDecodeError):
        obj = None
    if not isinstance(obj, dict) or obj.get("type") != "auth":
        raise security.failed('the first message must be {"type": "auth", ...}', host, "none")
    token, name, password = obj.get("token"), obj.get("username"), obj.get("password")
    if isinstance(token, str):
        header = f"Bearer {token}"
    elif isinstance(name, str) and isinstance(password, str):
        header = "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()
    else:
        raise security.failed(
            "an auth message carries token, or username and password", host, "none"
        )
    identity = await security.authenticate(header, host)
    conn.scope[SCOPE_KEY] = identity
    return identity
