"""The Kafka listener: an asyncio server in the broker's process and event loop.

Started by the app's lifespan after the coordinators (``app/api/app.py``) when
``kafka_listener`` is set, and stopped before them; it serves the same
:class:`~app.api.state.AppState` (logs, topology, long-poll waiters) as HTTP and
WebSocket, so the three doors share one log. Limits, each a setting: frames up to
``kafka_socket_request_max_bytes`` (Kafka's ``socket.request.max.bytes``), at most
``kafka_max_connections_per_ip`` connections from one address (more are closed on
accept, with a log line), idle connections closed after
``kafka_connections_max_idle_ms``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.config.addresses import split_host_port
from app.kafka.apis import Context
from app.kafka.connection import KafkaConnection
from app.kafka.fetch_sessions import FetchSessionCache

if TYPE_CHECKING:
    from app.api.state import AppState
    from app.core.security.quotas import Quotas
    from app.core.security.scram_store import ScramStore
    from app.kafka.security import KafkaSecurity

log = logging.getLogger(__name__)


class KafkaListener:
    """The server and its connections (event-loop only)."""

    def __init__(
        self,
        state: AppState,
        txn: Callable[[], Any],
        groups: Callable[[], Any],
        security: KafkaSecurity | None = None,
        quotas: Quotas | None = None,
        scram: ScramStore | None = None,
    ) -> None:
        """``txn``, ``groups``: the coordinators as the app holds them now (None while
        they do not serve); ``security``: the door's (:mod:`app.kafka.security`), None
        for a PLAINTEXT listener without an authorizer; ``quotas``: the broker's client
        quotas, the same manager HTTP's requests are measured by and the store HTTP's
        ``/quotas`` changes (DescribeClientQuotas, AlterClientQuotas); ``scram``: the
        broker's SCRAM credentials (Describe/AlterUserScramCredentials), started and
        closed by its owner."""
        settings = state.settings
        assert settings.kafka_listener is not None
        self.host, self.port = split_host_port(settings.kafka_listener)
        self._state = state
        self._txn = txn
        self._groups = groups
        self._server: asyncio.Server | None = None
        self._connections: set[KafkaConnection] = set()
        self._per_ip: collections.Counter[str] = collections.Counter()
        self._security = security
        self._quotas = quotas
        self._scram = scram
        # One cache for the listener: a client may resume its session on a new connection.
        self._fetch_sessions = FetchSessionCache(
            settings.kafka_max_incremental_fetch_session_cache_slots,
            settings.kafka_fetch_session_eviction_ms,
            settings.kafka_fetch_session_cache_max_partitions,
        )

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        context = None if self._security is None else self._security.ssl_context
        self._server = await loop.create_server(self._accept, self.host, self.port, ssl=context)
        if self.port == 0:  # an ephemeral port (tests): advertise the one bound
            self.port = self._server.sockets[0].getsockname()[1]
        log.info("kafka listener on %s:%d", self.host, self.port)

    @property
    def advertised(self) -> tuple[str, int]:
        settings = self._state.settings
        found = settings.kafka_advertised
        assert found is not None
        host, port = found
        if not settings.kafka_advertised_listener and port == 0:
            port = self.port
        return host, port

    def _accept(self) -> KafkaConnection:
        settings = self._state.settings
        ctx = Context(
            self._state,
            self.advertised,
            self._txn,
            self._groups,
            self._security,
            quotas=self._quotas,
            fetch_sessions=self._fetch_sessions,
            scram=self._scram,
        )
        conn = KafkaConnection(
            ctx,
            settings.kafka_socket_request_max_bytes,
            settings.kafka_connections_max_idle_ms / 1000,
            self._opened,
            self._closed,
        )
        return conn

    def _opened(self, conn: KafkaConnection) -> bool:
        self._connections.add(conn)
        self._per_ip[conn.ip] += 1
        limit = self._state.settings.kafka_max_connections_per_ip
        if self._per_ip[conn.ip] > limit:
            log.warning(
                "kafka connection from %s refused: more than %d from that address "
                "(kafka_max_connections_per_ip)",
                conn.peer,
                limit,
            )
            return False
        return True

    def _closed(self, conn: KafkaConnection) -> None:
        if conn in self._connections:
            self._connections.discard(conn)
            self._per_ip[conn.ip] -= 1
            if self._per_ip[conn.ip] <= 0:
                del self._per_ip[conn.ip]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
