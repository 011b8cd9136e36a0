"""The one ASGI middleware in front of the routes: metrics, origins, credentials, quotas,
the request rules, and the produce and fetch routes' own dispatch.

These were five middlewares (metrics, :class:`~app.api.browsers.OriginGuard`, the
security door, :class:`~app.api.quotas.QuotaMiddleware`,
:class:`~app.api.guards.RequestGuard`), each a coroutine layer, and some a send wrapper,
on every request; FastAPI's exception, exit-stack and routing layers followed. Under
``wrk`` a profile of a one-record produce showed these layers costing about as much
as the produce itself. :class:`EdgeMiddleware` keeps every rule, in the same order
(outside in), as one layer:

1. **metrics** (:mod:`app.api.metrics`): every HTTP answer, refusals included;
2. **origin** (:mod:`app.api.browsers`): a page from an origin not allowed is refused,
   HTTP and WebSocket;
3. **security** (:mod:`app.api.security`), only when authentication or an authorizer is
   configured: its middleware runs here, with the rest of this list as its app;
4. **quotas** (:mod:`app.api.quotas`), only while some quota is configured (the check
   is made per request: quotas change at run time);
5. **request rules** (:mod:`app.api.guards`): media types and repeated parameters;
6. **dispatch**: a request :class:`~app.api.lean_route.HotRoutes` matches whose
   parameters the route's lean reader accepts goes straight to its endpoint, with the
   app's exception handlers (as Starlette's ExceptionMiddleware applies them: same
   handlers, same answers); everything else goes on to FastAPI's own stack (exception
   middleware, router), which answers as it always did.

Outside this layer stay uvicorn's and FastAPI's own (server errors, telemetry, body
size) and, when CORS is configured, Starlette's CORS middleware. A produce or fetch
request skips FastAPI's outer layers too: :class:`EdgeApp` (the app ``create_app``
builds) hands it to this layer directly, under Starlette's server-error middleware with
the app's own 500 handler, when nothing those layers do applies: no CORS, no body size
limit, no root path, and FastAPI's native OpenTelemetry not configured when the stack
was built (else every request takes FastAPI's whole stack, as before). Concurrency: one
event loop; the only state is the route caches of the guard and the hot routes.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import Any

from fastapi import FastAPI
from starlette._exception_handler import _lookup_exception_handler
from starlette._utils import is_async_callable
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.browsers import OriginGuard
from app.api.errors import response_for
from app.api.guards import RequestGuard
from app.api.lean_route import HotRoutes, Lean
from app.api.metrics import count_request
from app.api.quotas import QuotaMiddleware
from app.api.zerocopy import ZEROCOPY_EXTENSION
from app.core.security.quotas import Quotas

# Scope key: the hot route EdgeApp matched before entering the edge (see _dispatch).
_MATCHED = "logbus.matched"

# What builds the security middleware around the stages after it (None: security off).
SecurityFactory = Callable[[ASGIApp], ASGIApp]


class EdgeMiddleware:
    """The module docstring's layer. ``app``: the rest of FastAPI's stack (its
    ExceptionMiddleware, whose handler tables the hot dispatch applies)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        origins: list[str],
        quotas: Quotas,
        openapi: Callable[[], dict[str, Any]],
        hot: HotRoutes | None = None,
        security: SecurityFactory | None = None,
    ) -> None:
        self.app = app
        self._hot = hot
        self._guard = RequestGuard(self._dispatch, openapi)
        self._quotas = QuotaMiddleware(self._guarded, quotas)
        self._quota_manager = quotas.manager
        self._has_security = security is not None
        self._secured: ASGIApp = (
            self._after_security if security is None else security(self._after_security)
        )
        self._origin = OriginGuard(self._secured, origins)
        # Starlette's ExceptionMiddleware keeps its handler tables in these attributes;
        # without them (another Starlette) hot requests take the ordinary path.
        handlers = getattr(app, "_exception_handlers", None)
        statuses = getattr(app, "_status_handlers", None)
        self._handlers = None if handlers is None or statuses is None else (handlers, statuses)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            # WebSocket: origin, security and quotas; lifespan: straight through.
            if scope["type"] == "websocket":
                await self._origin(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        # Metrics, as app.api.metrics documents them, and the common case of every check,
        # in this one frame: each stage a coroutine call would cost a frame more.
        start = perf_counter()
        received = 0
        sent = 0
        status = 500

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
            return message

        async def counting_send(message: Message) -> None:
            nonlocal sent, status
            kind = message["type"]
            if kind == "http.response.start":
                status = message["status"]
            elif kind == "http.response.body":
                sent += len(message.get("body", b""))
            elif kind == ZEROCOPY_EXTENSION:
                sent += int(message.get("count") or 0)
            await send(message)

        try:
            if not self._origin.allowed(scope):
                await self._origin(scope, counting_receive, counting_send)  # answers the 403
            elif self._has_security:
                await self._secured(scope, counting_receive, counting_send)
            elif self._quota_manager.config:
                await self._quotas(scope, counting_receive, counting_send)
            else:
                error = self._guard.check(scope)
                if error is not None:
                    await response_for(error)(scope, counting_receive, counting_send)
                else:
                    await self._dispatch(scope, counting_receive, counting_send)
        finally:
            count_request(scope, status, perf_counter() - start, received, sent)

    async def _after_security(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._quota_manager.config:
            await self._quotas(scope, receive, send)
        else:
            await self._guarded(scope, receive, send)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            error = self._guard.check(scope)
            if error is not None:
                await response_for(error)(scope, receive, send)
                return
        await self._dispatch(scope, receive, send)

    def lean_match(self, scope: Scope) -> tuple[Lean, Scope] | None:
        """The lean path of a hot route matching the HTTP ``scope`` (None: another
        route, or no dispatch here)."""
        if self._hot is None or self._handlers is None:
            return None
        return self._hot.lean_match(scope)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = scope.pop(_MATCHED, None)
        if found is None and scope["type"] == "http":
            found = self.lean_match(scope)
        if found is None:
            await self.app(scope, receive, send)
            return
        lean, child = found
        scope.update(child)
        request = Request(scope, receive, send)
        # The app's exception handlers, as Starlette's ExceptionMiddleware would apply
        # them (also read by FastAPI's stack when the lean reader hands over).
        scope["starlette.exception_handlers"] = self._handlers
        # A lean endpoint builds its whole Response before sending anything, so an
        # exception it raises always finds the response unstarted: the handlers apply
        # around the call, and the answer is sent with the request's own send (no
        # wrapper per request and per message to learn whether the response started, as
        # Starlette's wrap_app_handling_exceptions makes). An exception while sending
        # goes on to the server-error layer, as an unhandled one did.
        try:
            kwargs = lean.read(request)
            if kwargs is None:
                response = None  # a value the lean reader leaves to FastAPI
            else:
                response = await lean.call(kwargs)
        except Exception as exc:
            await self._handled(request, exc, scope, receive, send)
            return
        if response is None:
            await self.app(scope, receive, send)
        else:
            await response(scope, receive, send)

    async def _handled(
        self, request: Request, exc: Exception, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Answer ``exc`` with the app's handler for it (Starlette's choice: a status
        handler for an HTTPException, else the nearest class in its MRO); re-raised when
        none applies."""
        assert self._handlers is not None  # lean_match matched only with them
        handlers, statuses = self._handlers
        handler = None
        if isinstance(exc, HTTPException):
            handler = statuses.get(exc.status_code)
        if handler is None:
            handler = _lookup_exception_handler(handlers, exc)
        if handler is None:
            raise exc
        if is_async_callable(handler):
            response = await handler(request, exc)  # type: ignore[arg-type]  # as Starlette calls it
        else:
            response = await run_in_threadpool(handler, request, exc)
        if response is not None:
            await response(scope, receive, send)
        # Reused exception instances would accumulate tracebacks across requests.
        exc.__traceback__ = None


class EdgeApp(FastAPI):
    """FastAPI whose produce and fetch requests enter at its :class:`EdgeMiddleware`.

    FastAPI's own entry runs, per request, its OpenTelemetry check (three provider
    lookups, each reading the environment), Starlette's entry and three middlewares
    (server errors, exception telemetry, body size): on a one-record produce about as
    much Python as the produce's batch building. When none of them can apply (module
    docstring), a request that a hot route matches goes from here to the edge under a
    server-error middleware of its own, built like FastAPI's (the app's 500 handler,
    its debug flag); every other request, and every request when they may apply, takes
    FastAPI's entry.
    """

    _edge_entry: ASGIApp | None = None
    _edge: EdgeMiddleware | None = None

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        edge: Any = stack
        while edge is not None and not isinstance(edge, EdgeMiddleware):
            edge = getattr(edge, "app", None)
        self._edge = edge
        self._edge_entry = None
        if edge is not None and self._outer_layers_idle(edge):
            handler = None
            for key, value in self.exception_handlers.items():
                if key in (500, Exception):
                    handler = value  # as FastAPI's build_middleware_stack picks it
            self._edge_entry = ServerErrorMiddleware(edge, handler=handler, debug=self.debug)
        return stack

    def _outer_layers_idle(self, edge: EdgeMiddleware) -> bool:
        """Whether FastAPI's layers outside the edge would only pass a request on."""
        telemetry = getattr(self, "_native_telemetry", None)
        outermost: Any = self.user_middleware[0].cls
        return (
            outermost is EdgeMiddleware  # no CORS middleware outside it
            and getattr(self, "max_body_size", None) is None
            and not self.root_path
            and (telemetry is None or not telemetry.enabled())
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        entry, edge = self._edge_entry, self._edge
        if entry is not None and edge is not None and scope["type"] == "http":
            found = edge.lean_match(scope)
            if found is not None:
                scope["app"] = self
                scope[_MATCHED] = found
                await entry(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
