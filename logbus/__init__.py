"""Logbus's public Python face: ``from logbus import Producer, Consumer, Admin``.

The SDK lives in :mod:`app.client` (the broker, the SDK and the Spark source share one
distribution, laid out under ``app/``); this package is the import name applications use,
so they never spell the layout. Errors are importable as ``logbus.errors`` (every broker
error class by its Kafka name, plus the client-only ones), and the Spark data source as
``logbus.spark`` (needs the ``spark`` extra).
"""

from app.client import (
    Admin,
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    ConsumerRecord,
    DeliveryFuture,
    DeliveryReport,
    GroupListing,
    OffsetAndTimestamp,
    Producer,
    RecordColumns,
    RecordMetadata,
    TopicPartition,
)
from app.common.errors import LogbusError

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "Consumer",
    "ConsumerRecord",
    "DeliveryFuture",
    "DeliveryReport",
    "GroupListing",
    "LogbusError",
    "OffsetAndTimestamp",
    "Producer",
    "RecordColumns",
    "RecordMetadata",
    "TopicPartition",
]
