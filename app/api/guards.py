"""Checks every HTTP request passes before its route runs: media types and query parameters.

Two rules FastAPI does not enforce on its own, applied in one ASGI middleware
so that every route gets them, including routes whose body a handler reads
itself (produce, create topic) and routes whose body FastAPI parses (groups):

- **A body must be of a media type its route documents** (the ``requestBody``
  content of its OpenAPI operation: ``application/json`` for JSON endpoints,
  ``application/octet-stream`` for binary produce). Anything else,
  including a body without ``Content-Type``, answers **415** before a byte of
  the body is read. This is also what keeps a web page from writing through
  a visitor's browser: an HTML form can only send ``text/plain``,
  ``multipart/form-data`` or ``application/x-www-form-urlencoded`` without a
  CORS preflight, and all three are refused. A request without a body is not
  checked here (its route says whether a body is required).
- **A query parameter is given at most once**, unless its route declares it
  repeatable (an array parameter). Starlette keeps the last value of a
  repeated one, so ``acks=all&acks=0`` would silently mean ``acks=0``; it
  answers **400** naming the parameter instead.

The rules come from the served OpenAPI spec, read on the first request that
needs them (every router is included by then): a route accepts what it
documents, no more. Requests that
carry no body and no repeated query parameter cost one scan of the query
string and no route lookup; the others one dict lookup once their path has been
seen (the route regexes run once per method and path, as in app/api/security.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.codec import BodyInvalid
from app.api.errors import UnsupportedMediaType, response_for
from app.common.errors import InvalidRequest

# Paths whose operation is remembered, at most (cleared whole when full): a produce loop
# asks the same few paths over and over.
ROUTE_CACHE_SIZE = 10_000
# Methods whose requests carry a body worth checking.
_BODY_METHODS = frozenset(("POST", "PUT", "PATCH"))
_PLACEHOLDER = re.compile(r"\{[^}/]+\}")


@dataclass(frozen=True, slots=True)
class _Operation:
    # Media types a body may have; None: the operation takes no body.
    media_types: frozenset[str] | None
    # Query parameters the operation declares as arrays.
    repeatable: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Path:
    pattern: re.Pattern[str]
    operations: dict[str, _Operation]


def _operation(spec: dict[str, Any]) -> _Operation:
    content = spec.get("requestBody", {}).get("content")
    media = frozenset(m.lower() for m in content) if content else None
    repeatable = frozenset(
        p["name"]
        for p in spec.get("parameters", ())
        if p.get("in") == "query" and _is_array(p.get("schema", {}))
    )
    return _Operation(media, repeatable)


def _is_array(schema: dict[str, Any]) -> bool:
    if schema.get("type") == "array":
        return True
    return any(_is_array(s) for s in [*schema.get("anyOf", []), *schema.get("oneOf", [])])


def route_table(spec: dict[str, Any]) -> list[_Path]:
    """The operations of an OpenAPI spec by path template, literal templates first."""
    table = []
    for template, item in spec.get("paths", {}).items():
        regex = (
            "^"
            + "".join(
                "[^/]+" if _PLACEHOLDER.fullmatch(part) else re.escape(part)
                for part in re.split(r"(\{[^}/]+\})", template)
            )
            + "$"
        )
        operations = {
            method.upper(): _operation(op) for method, op in item.items() if isinstance(op, dict)
        }
        table.append((len(_PLACEHOLDER.findall(template)), _Path(re.compile(regex), operations)))
    return [path for _, path in sorted(table, key=lambda entry: entry[0])]


def media_type(content_type: str | None) -> str | None:
    """``application/json; charset=utf-8`` -> ``application/json``; None when absent/blank."""
    if content_type is None:
        return None
    media = content_type.split(";", 1)[0].strip().lower()
    return media or None


def _has_body(headers: dict[bytes, bytes]) -> bool:
    if b"transfer-encoding" in headers:
        return True
    length = headers.get(b"content-length")
    # A malformed length is the server's (h11/httptools) to refuse; treat it as a body.
    return length is not None and length.strip() not in (b"0", b"")


def duplicate_parameters(query_string: bytes) -> list[str]:
    """Names given more than once in a query string, in first-seen order."""
    if b"&" not in query_string:
        return []
    # The common case, on every fetch: plain names, all different, no decoding needed.
    names = [part.partition(b"=")[0] for part in query_string.split(b"&") if part]
    if len(set(names)) == len(names) and not any(b"%" in n or b"+" in n for n in names):
        return []
    counts = Counter(
        name for name, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    )
    return [name for name, n in counts.items() if n > 1]


class RequestGuard:
    """ASGI middleware applying the rules of the module docstring to HTTP requests.

    ``openapi``: the app's spec (``FastAPI.openapi``), read on the first request
    that needs it: the rules are exactly what the served spec documents.
    """

    def __init__(self, app: ASGIApp, openapi: Callable[[], dict[str, Any]]) -> None:
        self.app = app
        self._openapi = openapi
        self._table: list[_Path] | None = None
        self._found: dict[tuple[str, str], _Operation | None] = {}

    def _find(self, scope: Scope) -> _Operation | None:
        key = (scope["method"], scope["path"])
        try:
            return self._found[key]
        except KeyError:
            pass
        if self._table is None:
            self._table = route_table(self._openapi())
        found = None
        for entry in self._table:
            if entry.pattern.match(key[1]):
                found = entry.operations.get(key[0])
                break
        if len(self._found) >= ROUTE_CACHE_SIZE:
            self._found.clear()
        self._found[key] = found
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        error = self.check(scope)
        if error is not None:
            await response_for(error)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def check(self, scope: Scope) -> InvalidRequest | None:
        """The error to answer ``scope``'s HTTP request with, or None when it passes."""
        duplicates = duplicate_parameters(scope.get("query_string", b""))
        has_body = False
        headers: dict[bytes, bytes] = {}
        if scope["method"] in _BODY_METHODS:
            headers = dict(scope["headers"])
            has_body = _has_body(headers)
        if not duplicates and not has_body:
            return None
        operation = self._find(scope)
        if operation is None:
            return None  # no such route or method: the router answers 404/405
        refused = [name for name in duplicates if name not in operation.repeatable]
        if refused:
            return BodyInvalid(
                f"query.{refused[0]}: given more than once; give each parameter once",
                [f"query.{name}" for name in refused],
            )
        if has_body and operation.media_types is not None:
            raw = headers.get(b"content-type")
            given = media_type(raw.decode("latin-1") if raw is not None else None)
            if given not in operation.media_types:
                return UnsupportedMediaType(given, sorted(operation.media_types))
        return None
