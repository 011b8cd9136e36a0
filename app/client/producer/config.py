"""ProducerConfig: the producer's settings, checked once when a producer is made.

Owns the settings and the limits that follow from them: ``acks`` normalised to
``"0"``, ``"1"`` or ``"all"``; ``1 <= batch_size <= buffer_memory``;
``max_request_size >= batch_size``; more than one request in flight per
partition only with idempotence (at most :data:`MAX_IN_FLIGHT_IDEMPOTENT`); a
``transactional_id`` only with idempotence and ``acks="all"`` (the default then).

Concurrency: a frozen dataclass, read from any thread and loop without a lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.common.batch import Compression

_ACKS = {"0": "0", "1": "1", "all": "all", "-1": "all"}
# Kafka's cap without idempotence would be 5, but it relies on one ordered TCP
# connection; with the broker's sequence checks 5 is what Kafka allows too.
MAX_IN_FLIGHT_IDEMPOTENT = 5
# How many batches per producer and partition the broker remembers to answer a
# retry with the original offsets (5, as Kafka).
DEDUP_WINDOW = 5


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """Producer settings, Kafka's names in snake case.

    ``batch_size`` is far above Kafka's 16 KiB: every batch here is (part of)
    an HTTP request, and the broker's per-request cost makes ~1 MB batches
    about 1.5x as fast as 256 KiB ones (measured on this project's
    machine). It stays under the broker's default ``max.message.bytes``
    (1,048,588). ``max_request_size`` lets a request carry several sealed
    batches of one partition, which happens when they pile up behind an
    in-flight request.
    """

    batch_size: int = 1_000_000
    linger_ms: float = 5.0
    buffer_memory: int = 64 * 1024 * 1024
    max_block_ms: int = 60_000
    compression: str = "none"
    acks: str = "1"
    retries: int = 2_147_483_647
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    max_in_flight_per_partition: int = 1
    max_request_size: int = 4 * 1024 * 1024
    enable_idempotence: bool | None = None
    max_connections: int = 64
    metadata_max_age_ms: int = 300_000
    # Kafka's transactional.id: set, the producer writes in transactions (see
    # app/client/producer/txn.py); needs idempotence and acks=all.
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        acks = _ACKS.get(str(self.acks).strip().lower())
        if acks is None:
            raise ValueError(f"acks must be 0, 1 or all, got {self.acks!r}")
        object.__setattr__(self, "acks", acks)
        Compression.parse(self.compression)
        if self.batch_size < 1 or self.buffer_memory < self.batch_size:
            raise ValueError("need 1 <= batch_size <= buffer_memory")
        if self.max_request_size < self.batch_size:
            raise ValueError("max_request_size must be at least batch_size")
        if self.enable_idempotence and self.acks == "0":
            raise ValueError("idempotence needs acknowledgements: acks=1 or all")
        # More than one request per partition is safe only with idempotence for sure.
        limit = MAX_IN_FLIGHT_IDEMPOTENT if self.enable_idempotence else 1
        if not 1 <= self.max_in_flight_per_partition <= limit:
            raise ValueError(
                f"max_in_flight_per_partition must be 1..{limit}"
                + (
                    ""
                    if self.enable_idempotence
                    else ": more than one request per partition may reorder records "
                    "unless enable_idempotence=True"
                )
            )
        if self.transactional_id is not None:
            if not self.transactional_id or self.enable_idempotence is False:
                raise ValueError("a transactional producer needs a non-empty id and idempotence")
            if self.acks != "all":
                raise ValueError("a transactional producer needs acks=all")
            if self.transaction_timeout_ms < 1:
                raise ValueError("transaction_timeout_ms must be at least 1")
        if self.linger_ms < 0 or self.retries < 0:
            raise ValueError("linger_ms and retries must not be negative")
