"""Logbus Python SDK: producer, consumer and admin, blocking and asyncio.

Everything goes over the broker's HTTP API: binary RecordBatch v2 bodies for
produce and fetch, JSON for the rest. Errors are the broker's own classes
(:mod:`app.core.errors`), rebuilt from its error body, plus the client-side
ones in :mod:`app.client.errors`.
"""

from app.client.admin import Admin, AsyncAdmin
from app.client.consumer import AsyncConsumer, Consumer, RecordColumns
from app.client.producer import AsyncProducer, DeliveryFuture, DeliveryReport, Producer
from app.client.types import ConsumerRecord, OffsetAndTimestamp, RecordMetadata, TopicPartition

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "Consumer",
    "ConsumerRecord",
    "DeliveryFuture",
    "DeliveryReport",
    "OffsetAndTimestamp",
    "Producer",
    "RecordColumns",
    "RecordMetadata",
    "TopicPartition",
]
