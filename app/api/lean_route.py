"""A FastAPI route class that reads plain path and query parameters itself on the hot path.

FastAPI's request handler resolves an endpoint's arguments with
``solve_dependencies``: a general engine (dependency graph, caches, pydantic
validation of each parameter, error collection) that measured ~100 us of a
one-record produce's ~230 us in-process, more than the produce itself. The hot
routes (produce, fetch) take only plain parameters: strings, integers with
bounds, ``Literal`` choices, the request, and the app's state and log manager, either
directly or as the fields of a dataclass dependency (the parameter list several routes
share, declared once). For those,
:class:`LeanRoute` builds at startup a small reader of exactly those parameters.

The schema and the error answers stay FastAPI's: the route is declared as any other
(so the OpenAPI document is unchanged) and FastAPI's own handler is kept as the slow
path. The lean reader accepts only the canonical form of each value (a decimal
integer without sign or zero padding beyond ``-``, within the declared bounds; a
``Literal`` choice spelled exactly) and hands every other request, including any it
would refuse, to FastAPI's handler, which then answers as it always did (the 400
naming the parameter). So the lean path can only accept what FastAPI accepts, with
the same values, and never judges bad input itself.

A route whose endpoint needs anything else (a body model, headers, another
dependency, an app-wide dependency such as a security scheme) is served by FastAPI's
handler alone: the lean reader is an optimisation, never a second contract.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, is_dataclass
from typing import Any
from urllib.parse import unquote_plus

import fastapi.routing
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import Receive, Scope, Send

from app.api import deps

# Dependencies the lean reader may call itself: each reads the app's state, no more.
_KNOWN_DEPENDENCIES: dict[Callable[..., Any], Callable[[Request], Any]] = {
    deps.get_state: deps.app_state,
    deps.get_manager: deps.manager_of,
    deps.get_settings: lambda request: deps.app_state(request).settings,
}
# The decimal integers every parser agrees on; other spellings go to FastAPI.
_CANONICAL_INT = re.compile(r"(?:0|-?[1-9][0-9]{0,18})\Z")
_MISSING = object()

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


@dataclass(frozen=True, slots=True)
class _Param:
    name: str  # the endpoint's argument
    alias: str  # the name in the path or query string
    kind: str  # "str", "int" or "choice"
    optional: bool  # None allowed (``int | None``)
    default: Any  # _MISSING when required
    lower: int | None
    upper: int | None
    choices: frozenset[str]

    def read(self, raw: str | None) -> Any:
        """The argument for ``raw`` (None: absent), or _MISSING when FastAPI must judge."""
        if raw is None:
            return self.default
        if self.kind == "str":
            return raw
        if self.kind == "choice":
            return raw if raw in self.choices else _MISSING
        if not _CANONICAL_INT.match(raw):
            return _MISSING
        value = int(raw)
        if (self.lower is not None and value < self.lower) or (
            self.upper is not None and value > self.upper
        ):
            return _MISSING
        return value


def _param(field: Any) -> _Param | None:
    info = field.field_info
    annotation = info.annotation
    optional = False
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1 or len(args) != 2:
            return None
        annotation, optional = rest[0], True
    lower = upper = None
    for item in info.metadata:
        ge, le = getattr(item, "ge", None), getattr(item, "le", None)
        if ge is None and le is None:
            return None  # a constraint the lean reader does not apply
        lower = ge if ge is not None else lower
        upper = le if le is not None else upper
    choices: frozenset[str] = frozenset()
    if annotation is int and type(annotation) is type:
        kind = "int"
    elif annotation is str:
        if lower is not None or upper is not None:
            return None
        kind = "str"
    elif typing.get_origin(annotation) is typing.Literal and all(
        type(a) is str for a in typing.get_args(annotation)
    ):
        kind, choices = "choice", frozenset(typing.get_args(annotation))
    else:
        return None
    default = _MISSING if info.is_required() else info.default
    if default is None and not optional:
        return None
    return _Param(field.name, field.alias, kind, optional, default, lower, upper, choices)


def _query(query_string: bytes) -> dict[str, str]:
    """``a=1&b=x`` as a dict (the last of a repeated name, as Starlette keeps; the
    RequestGuard middleware has refused repeated names already)."""
    found: dict[str, str] = {}
    if not query_string:
        return found
    text = query_string.decode("latin-1")
    for part in text.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        if "%" in part or "+" in part:
            name, value = unquote_plus(name), unquote_plus(value)
        found[name] = value
    return found


# FastAPI (0.16x) builds an included route's handler with the including router's
# context (its dependencies, e.g. a security scheme) in this variable; without it the
# lean reader cannot know them, so it is not used at all.
_CONTEXT_VAR = getattr(fastapi.routing, "_effective_route_context_var", None)


def lean_reader(route: Any) -> Callable[[Request], dict[str, Any] | None] | None:
    """The route's lean argument reader, or None when the route needs FastAPI's handler.

    ``route``: the APIRoute, or the context FastAPI builds it in (its ``dependant``
    then holds the including routers' dependencies too). The reader returns the
    endpoint's keyword arguments, or None to let FastAPI judge the request. It may raise
    what the state dependencies raise (BrokerNotAvailable), as FastAPI's handler would
    before validating parameters.
    """
    if route.body_field is not None:
        return None
    read_arguments = _arguments_reader(route.dependant)
    if read_arguments is None:
        return None
    overrides = route.dependency_overrides_provider

    def read(request: Request) -> dict[str, Any] | None:
        if overrides is not None and getattr(overrides, "dependency_overrides", None):
            return None  # a test's or an app's override: FastAPI resolves it
        return read_arguments(request, _query(request.scope.get("query_string", b"")))

    return read


# One dependant's arguments from the request and its query string (read once per
# request, shared with its dataclass dependencies); None: FastAPI must judge them.
_ArgumentsReader = Callable[[Request, dict[str, str]], dict[str, Any] | None]


def _arguments_reader(d: Dependant) -> _ArgumentsReader | None:
    """The reader of one dependant's arguments (the endpoint's, or a dataclass
    dependency's), or None when FastAPI must resolve them."""
    if d.header_params or d.cookie_params or d.body_params:
        return None
    if (
        d.websocket_param_name
        or d.http_connection_param_name
        or d.response_param_name
        or d.background_tasks_param_name
        or d.security_scopes_param_name
    ):
        return None
    # (argument, what gives it, the reader of its fields when it is a dataclass)
    calls: list[tuple[str, Callable[..., Any], _ArgumentsReader | None]] = []
    for sub in d.dependencies:
        if sub.name is None or sub.call is None:
            return None
        known = _KNOWN_DEPENDENCIES.get(sub.call)
        if known is not None and not sub.dependencies:
            calls.append((sub.name, known, None))
        elif isinstance(sub.call, type) and is_dataclass(sub.call):
            # A dataclass of parameters (several routes' shared parameter list): its
            # fields are read as the endpoint's own, then it is built from them.
            fields = _arguments_reader(sub)
            if fields is None:
                return None
            calls.append((sub.name, sub.call, fields))
        else:
            return None
    path = [_param(f) for f in d.path_params]
    query = [_param(f) for f in d.query_params]
    if any(p is None for p in (*path, *query)):
        return None
    path_params = [p for p in path if p is not None]
    query_params = [p for p in query if p is not None]
    request_name = d.request_param_name

    def read(request: Request, raw: dict[str, str]) -> dict[str, Any] | None:
        kwargs: dict[str, Any] = {}
        given = request.path_params
        for p in path_params:
            value = p.read(given.get(p.alias))
            if value is _MISSING:
                return None
            kwargs[p.name] = value
        for p in query_params:
            value = p.read(raw.get(p.alias))
            if value is _MISSING:
                return None
            kwargs[p.name] = value
        for name, call, fields in calls:
            if fields is None:
                kwargs[name] = call(request)
                continue
            found = fields(request, raw)
            if found is None:
                return None
            kwargs[name] = call(**found)
        if request_name is not None:
            kwargs[request_name] = request
        return kwargs

    return read


@dataclass(frozen=True, slots=True)
class Lean:
    """A route's lean path in one build context: its argument reader and its endpoint."""

    read: Callable[[Request], dict[str, Any] | None]
    endpoint: Callable[..., Coroutine[Any, Any, Response]]

    async def call(self, kwargs: dict[str, Any]) -> Response:
        response = await self.endpoint(**kwargs)
        if not isinstance(response, Response):
            raise TypeError(f"{self.endpoint.__name__} must return a Response on a LeanRoute")
        return response


# Where a LeanRoute leaves its Lean on the object it was built for (the route itself,
# or the context FastAPI includes it in), for HotRoutes to find.
LEAN_ATTRIBUTE = "logbus_lean"


class LeanRoute(APIRoute):
    """An APIRoute whose requests skip FastAPI's argument resolution when
    :func:`lean_reader` can read them (see the module docstring); the schema, the
    endpoint and every error answer are FastAPI's."""

    def get_route_handler(self) -> Handler:
        slow = super().get_route_handler()
        if _CONTEXT_VAR is None:
            return slow
        # As APIRoute.get_route_handler: an included route is built in its context.
        context = _CONTEXT_VAR.get()
        target = context if context is not None and context.original_route is self else self
        read = lean_reader(target)
        endpoint = self.endpoint
        # Only coroutine endpoints, which build their own Response (FastAPI's handler
        # would otherwise serialize a return value through the response model). A body
        # size limit of the including router is FastAPI's to apply.
        if (
            read is None
            or not inspect.iscoroutinefunction(endpoint)
            or getattr(target, "max_body_size", None) is not None
        ):
            return slow
        lean = Lean(read, endpoint)
        setattr(target, LEAN_ATTRIBUTE, lean)

        async def handler(request: Request) -> Response:
            kwargs = read(request)
            if kwargs is None:
                return await slow(request)
            return await lean.call(kwargs)

        return handler


# Scope key: no hot route matches this request (set by HotRoutes.lean_match).
_COLD = "logbus.cold"


@dataclass(frozen=True, slots=True)
class _Hot:
    route: APIRoute
    regex: re.Pattern[str]
    convertors: dict[str, Any]
    app: Any
    lean: Lean | None


class HotRoutes(BaseRoute):
    """The app's :class:`LeanRoute` operations, matched before every other route.

    FastAPI matches a request against the included routers one after another, each
    through its own context; for the produce and fetch paths, behind the health,
    metadata and topic routers, that walk cost ~15-20 us a request. This route, first
    in the app's router, looks the hot paths up by method and dispatches each to the
    very handler FastAPI built for it in its router's context (dependencies included),
    with the same ``route``, ``endpoint`` and ``path_params`` in the scope. Every other
    request (another path, or a hot path with another method, which answers 405) goes on
    to FastAPI's routing.

    It is right only while no route before a hot one matches the same path and method;
    the hot paths (``/topics/{topic}/.../records|batches``) are matched by no other route.
    The table is built on the first request, once every router is included.
    """

    def __init__(self, router: Any) -> None:
        self._router = router
        self._table: dict[str, list[_Hot]] | None = None

    def _build(self) -> dict[str, list[_Hot]]:
        table: dict[str, list[_Hot]] = {}
        for route in self._router.routes:
            contexts = getattr(route, "effective_route_contexts", None)
            if contexts is None:
                continue
            for context in contexts():
                original = context.original_route
                if not isinstance(original, LeanRoute) or context.app is None:
                    continue
                hot = _Hot(
                    original,
                    context.path_regex,
                    context.param_convertors,
                    context.app,
                    getattr(context, LEAN_ATTRIBUTE, None),
                )
                for method in context.methods or ():
                    table.setdefault(method, []).append(hot)
        return table

    def _match(self, scope: Scope) -> tuple[_Hot, Scope] | None:
        """The hot route of an HTTP ``scope`` and the scope entries the router would set."""
        if self._table is None:
            self._table = self._build()
        candidates = self._table.get(scope["method"])
        if candidates:
            path = get_route_path(scope)
            for hot in candidates:
                found = hot.regex.match(path)
                if found is None:
                    continue
                params = dict(scope.get("path_params", {}))
                for key, value in found.groupdict().items():
                    params[key] = hot.convertors[key].convert(value)
                return hot, {
                    "endpoint": hot.route.endpoint,
                    "path_params": params,
                    "route": hot.route,
                    "logbus.hot": hot,
                }
        return None

    def lean_match(self, scope: Scope) -> tuple[Lean, Scope] | None:
        """For the app's edge middleware (app/api/edge.py), which dispatches hot requests
        itself: the matched route's :class:`Lean` and the scope entries the router would
        set; None when no hot route with a lean path matches. A request no hot route
        matches is marked so that :meth:`matches` does not look again."""
        if _COLD in scope:
            return None
        found = self._match(scope)
        if found is None:
            scope[_COLD] = True
            return None
        if found[0].lean is None:
            return None
        return found[0].lean, found[1]

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or _COLD in scope:
            return Match.NONE, {}
        found = self._match(scope)
        if found is None:
            return Match.NONE, {}
        return Match.FULL, found[1]

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        hot: _Hot = scope["logbus.hot"]
        lean = hot.lean
        if lean is not None:
            # The lean path calls the endpoint itself: FastAPI's request wrapper (two
            # AsyncExitStacks for dependencies with yield, which a lean route has none
            # of, and an exception wrapper that the app's ExceptionMiddleware repeats)
            # cost more than the endpoint's own work on a one-record produce. An error
            # raised here reaches that ExceptionMiddleware, which answers it with the
            # same handlers.
            request = Request(scope, receive, send)
            kwargs = lean.read(request)
            if kwargs is not None:
                response = await lean.call(kwargs)
                await response(scope, receive, send)
                return
        await hot.app(scope, receive, send)
