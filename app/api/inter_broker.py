"""HTTP from this broker to another, for the API layer's inter-broker calls (Kafka's
WriteTxnMarkers to a partition's leader, ``app/api/txn_markers.py``; a schema registry
request sent on to the ``_schemas`` leader, ``app/api/registry_forward.py``): one client
factory, so every such call trusts and presents what the follower fetchers do
(``app/core/replication/fetcher.py: inter_broker_tls``)."""

from __future__ import annotations

import httpx

from app.common.tls import ClientTls, client_context
from app.config import Settings


def inter_broker_client(
    settings: Settings, *, present_certificate: bool = True
) -> httpx.AsyncClient:
    """A pooled client to other brokers: it verifies them against
    ``inter_broker_ca_file`` (else ``ssl_ca_file``, else the public roots) and presents
    this broker's listener certificate (``ssl_certfile``), so a broker whose listener
    has ``ssl_client_auth=required`` accepts the call. ``present_certificate=False``
    for a call made on a client's behalf: the other broker would take this broker's
    certificate for the client's identity. Redirects are not followed (a 307 is an
    answer to act on). The caller closes it."""
    ca = settings.inter_broker_ca_file or settings.ssl_ca_file
    cert, key = (
        (settings.ssl_certfile, settings.ssl_keyfile) if present_certificate else (None, None)
    )
    tls = ClientTls(*(None if p is None else str(p) for p in (ca, cert, key)))
    return httpx.AsyncClient(verify=client_context(tls), follow_redirects=False)


class InterBrokerHttp:
    """One pooled :func:`inter_broker_client`, opened at its first use (a lone broker
    never opens one) and closed by :meth:`close` (from the app's lifespan). Event-loop
    only: the client belongs to the loop that opened it."""

    def __init__(self, settings: Settings, *, present_certificate: bool = True) -> None:
        self._settings = settings
        self._present_certificate = present_certificate
        self._client: httpx.AsyncClient | None = None

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = inter_broker_client(
                self._settings, present_certificate=self._present_certificate
            )
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
