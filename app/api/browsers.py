"""Browsers: which web pages may call the broker (CORS) and open WebSockets to it.

A browser lets any page send some requests to any address without asking the server
first ("simple" requests: GET, HEAD, and POST with a form's content types and no custom
header), and lets any page open a WebSocket anywhere; the server is expected to look at
the ``Origin`` header. Logbus does, in one ASGI middleware (:class:`OriginGuard`):

- **Allowed origins** are ``cors_allowed_origins`` (``scheme://host[:port]``, or ``*``),
  plus the broker's own origin (the page's origin names the ``Host`` the request was sent
  to: ``/docs`` calling the broker it is served from). Empty by default: CORS is off.
- **An HTTP request with an ``Origin`` that is not allowed answers 403**
  ``CLUSTER_AUTHORIZATION_FAILED`` whatever its method, before its route runs: nothing is
  created, produced or changed, and no CORS header lets the page read the answer. Browsers
  send ``Origin`` on every cross-origin request made by script and on every POST.
- **A cross-site request without ``Origin``** (``Sec-Fetch-Site: cross-site`` or
  ``same-site``: an ``<img>``, ``<script>`` or a no-cors ``fetch`` of a GET) answers 403
  too, unless it is a top-level navigation (someone following a link to a GET).
- **A WebSocket upgrade with an ``Origin`` that is not allowed is refused before the
  handshake completes** (HTTP 403; the ASGI app closes before accepting).
- For allowed origins, Starlette's ``CORSMiddleware`` answers preflights and adds the
  ``Access-Control-*`` headers, with ``cors_allowed_methods`` and ``cors_allowed_headers``.

Requests without ``Origin`` or ``Sec-Fetch-Site`` (curl, the SDK, other brokers) are not
browsers' and are not checked here. The 415 rule of :mod:`app.api.guards` (JSON endpoints
take only ``application/json``) is a second wall: a form cannot send JSON.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import response_for
from app.common.errors import ClusterAuthorizationFailed

_CROSS = (b"cross-site", b"same-site")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


class OriginNotAllowed(ClusterAuthorizationFailed):
    """A page from an origin the broker does not allow (HTTP 403)."""

    def __init__(self, origin: str | None) -> None:
        what = f"origin {origin!r}" if origin else "a cross-site page"
        super().__init__(
            f"requests from {what} are not allowed: add the origin to cors_allowed_origins "
            "to let its pages call this broker",
            origin=origin,
        )


def normalize_origin(origin: str) -> str | None:
    """``scheme://host:port`` with the default port spelled out and lower case; None
    when ``origin`` is not a URL origin (``null`` from a sandboxed page or a file)."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}:{port or _DEFAULT_PORTS[parts.scheme]}"


class OriginPolicy:
    """Which origins are allowed (``*``: all)."""

    def __init__(self, origins: Iterable[str]) -> None:
        given = [o.strip() for o in origins if o.strip()]
        self.any = "*" in given
        self.origins = frozenset(n for n in map(normalize_origin, given) if n is not None)

    def allows(self, origin: str, host: str | None, scheme: str) -> bool:
        if self.any:
            return True
        normalized = normalize_origin(origin)
        if normalized is None:
            return False
        if normalized in self.origins:
            return True
        # The broker's own origin: the page was served by the address it now calls.
        if host:
            http_scheme = "https" if scheme in ("https", "wss") else "http"
            return normalize_origin(f"{http_scheme}://{host}") == normalized
        return False


class OriginGuard:
    """ASGI middleware applying the module docstring's rules to HTTP and WebSocket."""

    def __init__(self, app: ASGIApp, origins: Iterable[str]) -> None:
        self.app = app
        self.policy = OriginPolicy(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.allowed(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            # Closing before accepting makes the server refuse the handshake with 403.
            await send({"type": "websocket.close", "code": 1008, "reason": ""})
            return
        headers = dict(scope["headers"])
        origin = headers.get(b"origin")
        error = OriginNotAllowed(origin.decode("latin-1") if origin is not None else None)
        await response_for(error)(scope, receive, send)

    def allowed(self, scope: Scope) -> bool:
        """Whether the module docstring's rules let ``scope`` through (no answer sent)."""
        # One dict built in C costs less than a Python loop over the headers. A repeated
        # header keeps its last value, as the loop did.
        headers = dict(scope["headers"])
        origin = headers.get(b"origin")
        if origin is None:
            fetch_site = headers.get(b"sec-fetch-site")
            fetch_mode = headers.get(b"sec-fetch-mode")
            if fetch_site not in _CROSS:
                return True  # not a browser, or the broker's own page
            return (
                scope["type"] == "http"
                and fetch_mode == b"navigate"
                and (scope["method"] in ("GET", "HEAD"))
            )
        host = headers.get(b"host")
        return self.policy.allows(
            origin.decode("latin-1"),
            host.decode("latin-1") if host is not None else None,
            scope.get("scheme", "http"),
        )
