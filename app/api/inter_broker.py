"""HTTP from this broker to another, for the API layer's inter-broker calls (Kafka's
WriteTxnMarkers to a partition's leader, ``app/api/txn_markers.py``): one client
factory, so every such call trusts and presents what the follower fetchers do
(``app/core/replication/fetcher.py: inter_broker_tls``)."""

from __future__ import annotations

import httpx

from app.common.tls import ClientTls, client_context
from app.config import Settings


def inter_broker_client(settings: Settings) -> httpx.AsyncClient:
    """A pooled client to other brokers: it verifies them against
    ``inter_broker_ca_file`` (else ``ssl_ca_file``, else the public roots) and presents
    this broker's listener certificate (``ssl_certfile``), so a broker whose listener
    has ``ssl_client_auth=required`` accepts the call. Redirects are not followed (a
    307 is an answer to act on). The caller closes it."""
    ca = settings.inter_broker_ca_file or settings.ssl_ca_file
    paths = (ca, settings.ssl_certfile, settings.ssl_keyfile)
    tls = ClientTls(*(None if p is None else str(p) for p in paths))
    return httpx.AsyncClient(verify=client_context(tls), follow_redirects=False)
