"""ProducerBase: what the blocking and the asyncio producer share, written once.

Owns the state of a producer and the rules of ``send`` that do no I/O; the
facades (:mod:`~app.client.producer.sync`, :mod:`~app.client.producer.aio`)
add only how they wait (a thread and an event, or ``await``):

* state: the checked :class:`ProducerConfig`, the cluster view, the partition
  counts (written by the sender, read here without a lock), the accumulator,
  the closed flag, the sender once started;
* before a record is queued: the producer must be open; an explicit partition
  must be below the topic's partition count, after one metadata refresh if it
  is not (a topic may have grown);
* what a metadata lookup that outlasts ``max_block_ms`` raises, and what the
  records still buffered at close get (:class:`ProducerClosed`);
* with a ``transactional_id``, the :class:`~app.client.producer.txn.TransactionManager`
  (its rules and calls; the facades' transactional methods are
  ``init_transactions``, ``begin_transaction``, ``send_offsets_to_transaction``,
  ``commit_transaction``, ``abort_transaction``, as Kafka's producer).

Concurrency: as the facade that inherits it. ``_notify`` is the facade's
wake-up for the sender; the accumulator calls it from any thread that queues or
seals a batch.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from app.client import _http
from app.client._cluster import Bootstrap, Cluster
from app.client.errors import BufferFull, ProducerClosed
from app.client.producer.accumulator import RecordAccumulator
from app.client.producer.config import ProducerConfig
from app.client.producer.sender import Sender
from app.client.producer.txn import TransactionManager
from app.common.errors import InvalidTxnState, UnknownTopicOrPartition

# ``send`` stamps records with ``time() * 1000.0``, a float: the encoder truncates it
# to whole ms exactly as int() would, and skipping int() (or time_ns() // 10**6,
# a bignum division) saves ~60 ns of the ~650 ns a send costs. RecordMetadata
# gets the int.
now = time.time

CLOSED = "the producer is closed"


class ProducerBase:
    """State and I/O-free rules of a producer; subclasses supply ``_notify`` and the waiting."""

    def __init__(self, url: Bootstrap, config: dict[str, Any]) -> None:
        # ``auth``: credentials for a secured broker (app/client/auth.py), not a tuning knob.
        auth = config.pop("auth", None)
        # Serializers (app/client/serialization.py, or any ``(obj, ctx) -> bytes | None``):
        # set, ``send`` takes objects and frames them first (not tuning knobs either).
        self._key_serializer: Any = config.pop("key_serializer", None)
        self._value_serializer: Any = config.pop("value_serializer", None)
        self._serializing = self._key_serializer is not None or self._value_serializer is not None
        if config.get("transactional_id") is not None:
            config.setdefault("acks", "all")  # as Kafka: transactions need acks=all
        self.config = ProducerConfig(**config)
        self._cluster = Cluster(url, self.config.metadata_max_age_ms, auth)
        self._url = self._cluster.bootstrap[0]
        self._partition_counts: dict[str, int] = {}
        self._acc = RecordAccumulator(self.config, self._notify)
        self._sender: Sender | None = None
        self._closed = False
        self._txn = (
            TransactionManager(self._acc, self.config, self._cluster)
            if self.config.transactional_id is not None
            else None
        )

    def _serialize_sync(
        self, topic: str, key: Any, value: Any, headers: Any
    ) -> tuple[bytes | None, bytes | None]:
        """``(key, value)`` through the serializers (each None: as given)."""
        from app.client.serialization import MessageField, SerializationContext

        if self._key_serializer is not None:
            key = self._key_serializer(key, SerializationContext(topic, MessageField.KEY, headers))
        if self._value_serializer is not None:
            value = self._value_serializer(
                value, SerializationContext(topic, MessageField.VALUE, headers)
            )
        return key, value

    async def _serialize_async(
        self, topic: str, key: Any, value: Any, headers: Any
    ) -> tuple[bytes | None, bytes | None]:
        """As :meth:`_serialize_sync`; a serializer with ``aserialize`` (those of
        app/client/serialization.py) is awaited, so an asyncio registry client works."""
        from app.client.serialization import MessageField, SerializationContext

        for field, ser in (
            (MessageField.KEY, self._key_serializer),
            (MessageField.VALUE, self._value_serializer),
        ):
            if ser is None:
                continue
            ctx = SerializationContext(topic, field, headers)
            obj = key if field is MessageField.KEY else value
            aser = getattr(ser, "aserialize", None)
            out = await aser(obj, ctx) if aser is not None else ser(obj, ctx)
            if field is MessageField.KEY:
                key = out
            else:
                value = out
        return key, value

    def _notify(self) -> None:
        """Wake the sender: a batch was opened or sealed (any thread, maybe under the lock)."""
        raise NotImplementedError

    def _client(self, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
        cfg = self.config
        return _http.async_client(
            self._url,
            cfg.request_timeout_ms,
            cfg.max_connections,
            transport,
            authorization=self._cluster.authorization,
        )

    def _new_sender(self, client: httpx.AsyncClient) -> Sender:
        return Sender(
            self._acc, self.config, client, self._partition_counts, self._cluster, self._txn
        )

    def _check_sending(self) -> None:
        """What a send_many call meets first, blocking or asyncio alike: a closed or failed
        producer's error (the fatal error, if any), a transactional producer's refusal
        outside a transaction. (``send`` runs the same checks inline: per record, a call
        costs.)"""
        if self._closed or self._acc.fatal is not None:
            raise self._acc.closed_error()
        if self._txn is not None:
            self._txn.check_send()

    def _no_metadata(self, topic: str) -> BufferFull:
        return BufferFull(
            f"no metadata for {topic!r} within max_block_ms={self.config.max_block_ms}"
        )

    @staticmethod
    def _in_range(topic: str, partition: int, num_partitions: int) -> int:
        """``num_partitions`` (just refreshed) if ``partition`` is below it; else the error."""
        if not 0 <= partition < num_partitions:
            raise UnknownTopicOrPartition(topic, partition)
        return num_partitions

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise InvalidTxnState(
                "transactional methods need a transactional producer: "
                "Producer(url, transactional_id=...)"
            )
        return self._txn

    def begin_transaction(self) -> None:
        """Start a transaction (after ``init_transactions``; no I/O: the broker hears of it
        with its first partition or offsets)."""
        self._transactions().begin()

    def _fail_unsent(self) -> None:
        """Closing: whatever is still buffered fails, and nothing more is accepted."""
        self._acc.fail_all(ProducerClosed("the producer was closed before delivery"))
