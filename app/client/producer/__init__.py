"""Producer: records in, per-partition RecordBatch v2 batches out, over HTTP keep-alive.

One module per role::

    config.py       ProducerConfig: the settings and the limits they must keep
    batch.py        ProducerBatch: one partition's RecordBatch, filled, sent, answered
    delivery.py     DeliveryFuture, DeliveryReport: what send / send_many return
    accumulator.py  RecordAccumulator: open and sealed batches, back-pressure, sequences
    sender.py       Sender: batches -> HTTP requests, retries, metadata (one event loop)
    txn.py          TransactionManager: a transactional producer's states and coordinator calls
    base.py         ProducerBase: the facades' shared state and I/O-free rules
    sync.py         Producer: blocking facade, sender on a background thread's loop
    aio.py          AsyncProducer: asyncio facade, sender as a task on the caller's loop
    _speedups.py    the per-record work: compiled (_native.c) where built, else pure Python
    _native.c       C: record encoding, murmur2, callbacks per batch, Producer.send's common case

How a record travels::

    send()  --(caller's thread, under one lock)-->  RecordAccumulator
              open batch per partition (ProducerBatch); full, lingered or flushed -> sealed
    Sender  --(one asyncio task)-->  POST /topics/{t}/partitions/{p}/batches
              one request per partition at a time, many partitions at once,
              consecutive sealed batches of a partition share one request body

``send_many(topic, values)`` fills the same batches in bulk: no lock, lookup
or future per record (one :class:`DeliveryReport` per call), for callers
that have many records at hand. ``send`` itself is one C call where the
extension is built (~0.2-0.35 us per record with a key and a callback on this
project's machine; ~0.7-1 us in the pure-Python path), see
:mod:`app.client.producer._speedups`.

Building (the caller's thread) overlaps sending and the broker's append: while
a request is out, ``send`` keeps filling the next batch, and requests for
different partitions are in flight together. :class:`Producer` runs the
sender on an event loop in a background thread; :class:`AsyncProducer` runs
it on the caller's loop. Both share the accumulator and the sender.

Ordering: ``max_in_flight_per_partition`` is 1, so a retried batch cannot be
overtaken by a later batch of its partition (separate HTTP connections give
no ordering between concurrent requests, unlike Kafka's one TCP connection
per broker). More than one needs idempotence: the broker's sequence checks
are what make a reordered arrival detectable.

Idempotence (producer id and epoch from ``POST /producers``, a sequence
number per partition stamped into every batch as it first goes out; the broker
answers an exact retry with the original offsets instead of appending it
again) makes retries exactly-once per partition. ``enable_idempotence``:

* ``None`` (default, as Kafka 3.2+): on whenever the broker offers
  ``POST /producers`` and ``acks`` is not 0; otherwise delivery is
  at-least-once (a retry after a lost answer may append a batch twice);
* ``True``: required; a broker without the endpoint fails the producer at
  start with :class:`~app.client.errors.UnsupportedByBroker`;
* ``False``: off.

The broker remembers the last 5 batches per producer and partition, so no
more than 5 batches of a partition are ever unacknowledged, and nothing new
goes to a partition while one of its requests is being retried.
"""

from app.client.producer.aio import AsyncProducer
from app.client.producer.batch import DeliveryCallback, Headers
from app.client.producer.config import ProducerConfig
from app.client.producer.delivery import DeliveryFuture, DeliveryReport
from app.client.producer.sender import CONNECTION_RETRY_MAX_S
from app.client.producer.sync import Producer

__all__ = [
    "CONNECTION_RETRY_MAX_S",
    "AsyncProducer",
    "DeliveryCallback",
    "DeliveryFuture",
    "DeliveryReport",
    "Headers",
    "Producer",
    "ProducerConfig",
]
