"""Limits of the HTTP listener: how many connections, from whom, how slow, how big a head.

A client that never finishes its request head, trickles a body a byte a second, sends a
300 MB header line or opens sockets until the broker runs out of descriptors costs the
broker for as long as it is let: every limit here is a setting with a safe default
(``app.config.Settings``, Kafka's names where Kafka has one), enforced by the server's
protocol (:class:`app.api.protocol.GuardedHttpToolsProtocol`) before the request reaches
the app:

===========================  ===================================  ============================
setting                      breach                               answer
===========================  ===================================  ============================
``max_connections``          one connection too many              503 ``BROKER_NOT_AVAILABLE``
``max_connections_per_ip``   one too many from one address        429 ``THROTTLING_QUOTA_EXCEEDED``
``connections_max_idle_ms``  no request for this long             connection closed
``request_header_timeout_ms`` head not complete this long after   408 ``REQUEST_TIMED_OUT``
                             its first byte
``request_body_timeout_ms``  body not complete this long after    408 ``REQUEST_TIMED_OUT``
                             the head (while the server reads)
``max_header_bytes``         request line and headers larger      431 ``INVALID_REQUEST``
``max_header_count``         more header fields                   431 ``INVALID_REQUEST``
``max_request_bytes``        ``Content-Length`` larger            413 ``MESSAGE_TOO_LARGE``
``send_timeout_ms``          the client takes none of an answer   connection aborted, the
                             for this long                        answer's buffers freed
===========================  ===================================  ============================

Every refusal is the usual JSON error body and closes the connection (the rest of what
the client sends is not read). This module holds the rules and the accounting and does
no I/O; the protocol applies them.

Concurrency: a :class:`ConnectionCounter` belongs to one server and is used from its
event loop only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.common import errors as core
from app.core.limits import nofile_limit, raise_nofile_limit

if TYPE_CHECKING:
    from app.config import Settings


class TooManyConnections(core.BrokerNotAvailable):
    """The broker holds ``max_connections`` connections already (Kafka's max.connections)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the broker has reached max_connections={limit}; retry later or use another broker",
            max_connections=limit,
        )


class ConnectionQuotaExceeded(core.LogbusError):
    """One client address holds ``max_connections_per_ip`` connections already."""

    error_code = "THROTTLING_QUOTA_EXCEEDED"
    retriable = True

    def __init__(self, address: str, limit: int) -> None:
        super().__init__(
            f"{address} has reached max_connections_per_ip={limit}; reuse keep-alive "
            "connections or close idle ones",
            max_connections_per_ip=limit,
        )


class HeadersTooLarge(core.InvalidRequest):
    """The request line and headers are over ``max_header_bytes`` or ``max_header_count``."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"request {what} over the broker's limit of {limit}", limit=limit)


class RequestReadTimeout(core.RequestTimedOut):
    """The client did not send its request head or body in time (HTTP 408)."""

    def __init__(self, part: str, timeout_ms: int) -> None:
        super().__init__(
            f"the request {part} did not arrive within {timeout_ms} ms", timeout_ms=timeout_ms
        )


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    """The listener's limits, in the units the protocol uses (seconds, bytes)."""

    max_connections: int
    max_connections_per_ip: int
    idle_timeout_s: float
    header_timeout_s: float
    body_timeout_s: float
    send_timeout_s: float
    max_header_bytes: int
    max_header_count: int
    max_request_bytes: int

    @classmethod
    def from_settings(cls, settings: Settings, fd_budget: int | None = None) -> ListenerLimits:
        """Connections may use at most half of the descriptors, whatever ``max_connections``
        says: the other half is for segment files, so a connection flood cannot stop a
        partition from opening its log."""
        if fd_budget is None:
            # The same budget the partition limits are cut from (app.core.limits), after
            # the raise to the hard limit LogManager also makes at start.
            raise_nofile_limit()
            fd_budget = nofile_limit()
        budget = fd_budget
        return cls(
            max_connections=max(1, min(settings.max_connections, budget // 2)),
            max_connections_per_ip=settings.max_connections_per_ip,
            idle_timeout_s=settings.connections_max_idle_ms / 1000,
            header_timeout_s=settings.request_header_timeout_ms / 1000,
            body_timeout_s=settings.request_body_timeout_ms / 1000,
            send_timeout_s=settings.send_timeout_ms / 1000,
            max_header_bytes=settings.max_header_bytes,
            max_header_count=settings.max_header_count,
            max_request_bytes=settings.max_request_bytes,
        )


class ConnectionCounter:
    """Open connections, in total and per client address, against the limits."""

    def __init__(self, limits: ListenerLimits) -> None:
        self.limits = limits
        self.total = 0
        self._per_address: Counter[str] = Counter()

    def admit(self, address: str) -> core.LogbusError | None:
        """Count a new connection, or say why it is refused (and count nothing)."""
        if self.total >= self.limits.max_connections:
            return TooManyConnections(self.limits.max_connections)
        if self._per_address[address] >= self.limits.max_connections_per_ip:
            return ConnectionQuotaExceeded(address, self.limits.max_connections_per_ip)
        self.total += 1
        self._per_address[address] += 1
        return None

    def release(self, address: str) -> None:
        """Forget a connection :meth:`admit` counted (exactly once per admitted one)."""
        self.total -= 1
        left = self._per_address[address] - 1
        if left > 0:
            self._per_address[address] = left
        else:
            del self._per_address[address]

    def of(self, address: str) -> int:
        return self._per_address.get(address, 0)


def head_bytes(data: bytes) -> int:
    """How many bytes of ``data`` belong to a request head still being read: up to and
    including the blank line that ends it, or all of it."""
    end = data.find(b"\r\n\r\n")
    return len(data) if end < 0 else end + 4
