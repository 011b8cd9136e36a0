"""Kafka's WriteTxnMarkers between brokers, the sending side: how this broker's
transaction coordinator writes a marker to a partition another broker leads (the
receiving side is ``POST /topics/{t}/partitions/{p}/markers`` in
``app/api/routers/transactions.py``). Installed as ``TxnPlacement.remote``: used for the partitions the topology says
another broker leads (none on a lone broker)."""

from __future__ import annotations

from urllib.parse import quote

import httpx

from app.api.inter_broker import InterBrokerHttp
from app.api.state import AppState
from app.common.error_body import error_from_body
from app.common.errors import NotLeaderOrFollower
from app.core.replication.auth import HEADER as AUTH_HEADER
from app.core.replication.auth import ID_HEADER
from app.txn.model import TxnMarker


class RemoteMarkerSender:
    """Kafka's WriteTxnMarkers between brokers: a marker for a partition another broker
    leads is sent to that leader's ``POST /topics/{t}/partitions/{p}/markers`` with this
    broker's inter-broker credential (``app/core/replication/auth.py``), over TLS as a
    follower fetches (:class:`~app.api.inter_broker.InterBrokerHttp`). One pooled
    HTTP client per broker; an error answer becomes the LogbusError it names."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self._http = InterBrokerHttp(state.settings)

    async def send(
        self, url: str, topic: str, partition: int, marker: TxnMarker, timeout_ms: int
    ) -> None:
        auth = getattr(self.state.topology, "auth", None)
        broker_id = self.state.topology.broker_id
        headers = {ID_HEADER: str(broker_id)}
        if auth is not None:
            headers[AUTH_HEADER] = auth.token(broker_id)
        try:
            r = await self._http.client().post(
                f"{url.rstrip('/')}/topics/{quote(topic, safe='')}/partitions/{partition}/markers",
                json=marker.as_json(),
                headers=headers,
                timeout=timeout_ms / 1000 + 5,
            )
        except httpx.HTTPError as exc:
            raise NotLeaderOrFollower(
                topic, partition, message=f"the leader at {url} did not answer: {exc!r}"
            ) from None
        if r.status_code >= 300:
            raise error_from_body(r.status_code, r.content)

    async def close(self) -> None:
        await self._http.close()
