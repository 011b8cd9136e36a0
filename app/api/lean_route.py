"""A FastAPI route class that reads plain path and query parameters itself on the hot path.

FastAPI's request handler resolves an endpoint's arguments with
``solve_dependencies``: a general engine (dependency graph, caches, pydantic
validation of each parameter, error collection) that measured ~100 us of a
one-record produce's ~230 us in-process, more than the produce itself. The hot
routes (produce, fetch) take only plain parameters: strings, integers with
bounds, ``Literal`` choices, and the app's state and log manager. For those,
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
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

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


def lean_reader(route: APIRoute) -> Callable[[Request], dict[str, Any] | None] | None:
    """The route's lean argument reader, or None when the route needs FastAPI's handler.

    The reader returns the endpoint's keyword arguments, or None to let FastAPI judge
    the request. It may raise what the state dependencies raise (BrokerNotAvailable),
    as FastAPI's handler would before validating parameters.
    """
    d = route.dependant
    if d.header_params or d.cookie_params or d.body_params or route.body_field is not None:
        return None
    if (
        d.websocket_param_name
        or d.http_connection_param_name
        or d.response_param_name
        or d.background_tasks_param_name
        or d.security_scopes_param_name
    ):
        return None
    calls: list[tuple[str, Callable[[Request], Any]]] = []
    for sub in d.dependencies:
        call = _KNOWN_DEPENDENCIES.get(sub.call) if sub.call is not None else None
        if call is None or sub.name is None or sub.dependencies:
            return None
        calls.append((sub.name, call))
    path = [_param(f) for f in d.path_params]
    query = [_param(f) for f in d.query_params]
    if any(p is None for p in (*path, *query)):
        return None
    path_params = [p for p in path if p is not None]
    query_params = [p for p in query if p is not None]
    request_name = d.request_param_name

    def read(request: Request) -> dict[str, Any] | None:
        kwargs: dict[str, Any] = {}
        given = request.path_params
        for p in path_params:
            value = p.read(given.get(p.alias))
            if value is _MISSING:
                return None
            kwargs[p.name] = value
        raw = _query(request.scope.get("query_string", b""))
        for p in query_params:
            value = p.read(raw.get(p.alias))
            if value is _MISSING:
                return None
            kwargs[p.name] = value
        for name, call in calls:
            kwargs[name] = call(request)
        if request_name is not None:
            kwargs[request_name] = request
        return kwargs

    return read


class LeanRoute(APIRoute):
    """An APIRoute whose requests skip FastAPI's argument resolution when
    :func:`lean_reader` can read them (see the module docstring); the schema, the
    endpoint and every error answer are FastAPI's."""

    def get_route_handler(self) -> Handler:
        slow = super().get_route_handler()
        read = lean_reader(self)
        endpoint = self.endpoint
        # Only coroutine endpoints, which build their own Response (FastAPI's handler
        # would otherwise serialize a return value through the response model).
        if read is None or not inspect.iscoroutinefunction(endpoint):
            return slow

        async def handler(request: Request) -> Response:
            kwargs = read(request)
            if kwargs is None:
                return await slow(request)
            response = await endpoint(**kwargs)
            if not isinstance(response, Response):
                raise TypeError(f"{endpoint.__name__} must return a Response on a LeanRoute")
            return response

        return handler
