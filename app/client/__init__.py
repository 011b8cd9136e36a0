"""Logbus Python SDK: producer, consumer and admin, blocking and asyncio.

Everything goes over the broker's HTTP API: binary RecordBatch v2 bodies for
produce and fetch, JSON for the rest. Errors are the broker's own classes
(:mod:`app.common.errors`), rebuilt from its error body, plus the client-side
ones in :mod:`app.client.errors`. ``Consumer.subscribe`` joins a consumer
group (:mod:`app.client.group`); :mod:`app.client.schema_registry` and
:mod:`app.client.serialization` are the schema registry client and the serializers
(``Producer(value_serializer=...)``, ``Consumer(value_deserializer=...)``); :mod:`app.client.ws` is an asyncio iterator
over the WebSocket push API.

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

    # A consumer group: the coordinator splits the topic's partitions among the
    # members; each starts at the group's committed offsets, and positions are
    # committed every auto_commit_interval_ms and on close.
    with Consumer(url, auto_offset_reset="earliest") as member:
        member.subscribe(
            ["orders"],
            group_id="billing",
            on_assigned=lambda tps: print("assigned", sorted(tp.partition for tp in tps)),
        )
        billed = 0
        while billed < 4:
            billed += len(member.poll(timeout_ms=1000))
    # close() committed; the next member of "billing" starts after these 4 records.
"""

from app.client.admin import Admin, AsyncAdmin, GroupListing
from app.client.auth import BasicAuth, BearerAuth
from app.client.consumer import AsyncConsumer, Consumer, RecordColumns
from app.client.producer import AsyncProducer, DeliveryFuture, DeliveryReport, Producer
from app.client.schema_registry import AsyncSchemaRegistryClient, SchemaRegistryClient
from app.client.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)
from app.common.tls import configure as configure_tls

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "AsyncSchemaRegistryClient",
    "BasicAuth",
    "BearerAuth",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "DeliveryFuture",
    "DeliveryReport",
    "GroupListing",
    "OffsetAndTimestamp",
    "Producer",
    "RecordColumns",
    "RecordMetadata",
    "SchemaRegistryClient",
    "TopicPartition",
    "configure_tls",
]
