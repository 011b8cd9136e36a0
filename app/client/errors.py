"""Errors the SDK raises: the broker's own error classes, plus a few that only a client meets.

A broker error body (``{"error_code", "message", "retriable", ...}``) becomes
the :mod:`app.common.errors` class with the same ``error_code``, so
``except OffsetOutOfRange`` works the same in the broker and in an
application, and the body's extra fields (``log_start_offset``, ``topic``, ...)
become attributes. Codes this SDK does not know become :class:`ServerError`
carrying the code and the broker's ``retriable`` flag. That reading is
:mod:`app.common.error_body`'s (follower brokers read their leaders' answers
with it too); it is re-exported here.
"""

from __future__ import annotations

from app.common import errors as core
from app.common.error_body import ServerError, error_from_body, error_from_fields, is_retriable
from app.common.errors import LogbusError

__all__ = [
    "BrokerUnavailable",
    "BufferFull",
    "ClientError",
    "ConsumerClosed",
    "DeliveryTimeout",
    "NetworkTimeout",
    "NoOffsetForPartition",
    "ProducerClosed",
    "ServerError",
    "TransactionAborted",
    "UnsupportedByBroker",
    "error_from_body",
    "error_from_fields",
    "is_connection_error",
    "is_retriable",
]


class ClientError(LogbusError, error_code="CLIENT_ERROR"):
    """Raised by the SDK itself, not answered by a broker."""


class BrokerUnavailable(core.BrokerNotAvailable, error_code="NETWORK_EXCEPTION", retriable=True):
    """The broker could not be reached or the connection broke (retriable).

    A subclass of :class:`~app.common.errors.BrokerNotAvailable`, so one
    ``except`` covers a broker that is down and one that says it is not ready.
    """

    # True when the connection itself failed: the request surely never reached a broker.
    connect_failed = False


class NetworkTimeout(core.RequestTimedOut):
    """No answer in time from a broker (a client-side timeout, not the broker's 504)."""


def is_connection_error(exc: BaseException) -> bool:
    """The broker could not be reached or did not answer: another broker may."""
    return isinstance(exc, BrokerUnavailable | NetworkTimeout)


class UnsupportedByBroker(ClientError, error_code="UNSUPPORTED_VERSION"):
    """The broker lacks an endpoint this feature needs (an older broker)."""


class DeliveryTimeout(ClientError, error_code="REQUEST_TIMED_OUT"):
    """A record was not acknowledged within ``delivery_timeout_ms`` (retries included)."""


class BufferFull(ClientError, error_code="REQUEST_TIMED_OUT"):
    """``send`` waited ``max_block_ms`` for buffer memory or metadata and gave up."""


class ProducerClosed(ClientError):
    """``send`` after ``close()``, or a record still buffered when ``close`` gave up."""


class ConsumerClosed(ClientError):
    """The consumer was used after ``close()``."""


class NoOffsetForPartition(ClientError, error_code="OFFSET_OUT_OF_RANGE"):
    """No position and ``auto_offset_reset="none"`` (Kafka's NoOffsetForPartitionException)."""


class TransactionAborted(ClientError):
    """A record of a transaction that ``abort_transaction`` aborted before it was sent
    (Kafka's TransactionAbortedException): it was never written."""
