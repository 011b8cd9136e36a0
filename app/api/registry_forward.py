"""A registry request this broker cannot answer, sent on to the ``_schemas`` leader
server-side (Confluent's clients do not follow redirects): writes anywhere but the
leader, and reads that found nothing at a follower (the read-your-writes rule of
``app/registry/service.py``).

The request goes out as it came in (method, path, query, body, ``Content-Type``,
``Accept``, ``Authorization``: the leader's door authenticates and authorizes the client
itself) with ``Logbus-Registry-Forwarded: <this broker's id>``; a request that arrives
with that header is never forwarded again (a leader that moved meanwhile answers
50001, retriable, rather than bouncing it around). One pooled HTTP client per app.

Known gap: brokers pass no client principal between them, so a client authenticated
by its TLS certificate alone (no ``Authorization``) is refused at the leader when it
writes through a follower; it writes at the leader itself.
"""

from __future__ import annotations

import httpx
from starlette.requests import Request
from starlette.responses import Response

from app.api.inter_broker import InterBrokerHttp
from app.api.state import AppState
from app.common.schema_errors import RegistryStoreError

FORWARDED = "logbus-registry-forwarded"
_PASSED = ("content-type", "accept", "authorization")
# Beyond the leader's own write timeout: the time to reach it and answer.
_SLACK_S = 5.0


class RegistryForwarder:
    def __init__(self, state: AppState) -> None:
        self.state = state
        # Verifies the leader as the follower fetchers do, but presents no certificate:
        # the leader would take this broker's certificate for the client's identity.
        self._http = InterBrokerHttp(state.settings, present_certificate=False)

    async def forward(self, request: Request, leader_url: str | None) -> Response:
        """The leader's answer to ``request``; RegistryStoreError (retriable) when there is
        no leader to ask, it does not answer, or the request was forwarded already."""
        if leader_url is None:
            raise RegistryStoreError("_schemas has no leader now (an election is under way)")
        if request.headers.get(FORWARDED) is not None:
            raise RegistryStoreError(
                "the _schemas leader moved while the request was forwarded; retry"
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() in _PASSED}
        headers[FORWARDED] = str(self.state.topology.broker_id)
        url = leader_url.rstrip("/") + request.url.path
        try:
            answer = await self._http.client().request(
                request.method,
                url,
                params=request.url.query or None,
                content=await request.body(),
                headers=headers,
                timeout=self.state.settings.schema_registry_write_timeout_ms / 1000 + _SLACK_S,
            )
        except httpx.HTTPError as exc:
            raise RegistryStoreError(
                f"the _schemas leader at {leader_url} did not answer: {type(exc).__name__}"
            ) from None
        return Response(
            answer.content,
            status_code=answer.status_code,
            media_type=answer.headers.get("content-type"),
        )

    async def close(self) -> None:
        await self._http.close()
