"""Logbus Python SDK: producer, consumer and admin, blocking and asyncio.

Everything goes over the broker's HTTP API: binary RecordBatch v2 bodies for
produce and fetch, JSON for the rest. Errors are the broker's own classes
(:mod:`app.core.errors`), rebuilt from its error body, plus the client-side
ones in :mod:`app.client.errors`.

Example (``tests/integration/client/test_examples.py`` runs it)::

    from app.client import Admin, Consumer, Producer, TopicPartition

    url = "http://127.0.0.1:8080"
    with Admin(url) as admin:
        admin.create_topic("orders", partitions=3)

    with Producer(url, linger_ms=5) as producer:
        future = producer.send("orders", b'{"total": 42}', key=b"customer-7")
        print(future.result(timeout=10))  # RecordMetadata(topic='orders', partition=..., offset=0, ...)
        producer.send_many("orders", [b"a", b"b", b"c"])  # bulk: no future per record
    # leaving the block flushed everything

    with Consumer(url, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("orders", p) for p in range(3)])
        seen = 0
        while seen < 4:
            for record in consumer.poll(timeout_ms=1000):
                print(record.partition, record.offset, record.key, record.value)
                seen += 1
"""

from app.client.admin import Admin, AsyncAdmin, GroupListing
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
    "GroupListing",
    "OffsetAndTimestamp",
    "Producer",
    "RecordColumns",
    "RecordMetadata",
    "TopicPartition",
]
