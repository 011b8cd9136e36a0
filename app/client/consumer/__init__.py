"""Consumer: assigned partitions, positions the application owns, fetches kept in flight.

One module per role; the rules are written once, the shells only do I/O::

    records.py  RecordColumns, decoding batches into tuples or columns
    state.py    PartitionState, Fetched: what is known of one assigned partition
    drain.py    drain: fetched batches -> the records one poll hands out
    core.py     ConsumerCore: assignment, positions, fetch planning, fetch answers
    base.py     ConsumerBase: commits, committed offsets, offset lookups and the
                group tick as flows (generators yielding the calls to make)
    sync.py     Consumer: blocking shell (a selector over plain sockets)
    aio.py      AsyncConsumer: asyncio shell (a task per fetch in flight)

A position is the offset of the next record ``poll`` hands out; the fetch
offset runs ahead of it. Per partition there is at most one fetch in flight
and one answer being handed out: as soon as an answer is read, the next
fetch (from the answer's end) is sent, so the broker prepares it while the
application works through the records just read.

:class:`Consumer` does this without threads: the request is written at
once, the broker's answer waits in the socket buffers, and the next
``poll`` reads it with one ``recv_into``. :class:`AsyncConsumer` reads
answers in tasks on the caller's loop.

Records are decoded in bulk, a whole RecordBatch at a time, with the cyclic
GC paused for that loop (decoding ran ~1.5 M records/s with collections
inside the loop and ~4 M without, on this project's machine). What remains
is the collector walking the records the caller still holds: ConsumerRecord
is a tuple subclass, which CPython never untracks, and that walk was ~25% of
``poll``. :meth:`Consumer.poll_columns` avoids it and the per-record tuple:
parallel lists per partition, about twice the rate of ``poll``.

Isolation (``isolation_level="read_committed"``, Kafka's): fetches ask the broker to
stop at the last stable offset and to list the aborted transactions of each answer;
:func:`app.common.fetch_answer.interpret` drops their batches (and the control
batches), and a position moves past dropped batches once the kept ones are handed
out (``Fetched.end``).

Group membership (:meth:`Consumer.subscribe`, ``commit``, ``committed``):
:mod:`app.client.group` heartbeats from a thread (:class:`AsyncConsumer`:
from a task), and ``poll`` applies the assignment it learnt (revocations
first), so the rebalance callbacks run where the application polls.
"""

from app.client.consumer.aio import AsyncConsumer
from app.client.consumer.base import RebalanceCallback
from app.client.consumer.core import RESETS
from app.client.consumer.records import Decoded, RecordColumns
from app.client.consumer.sync import Consumer
from app.client.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition

__all__ = [
    "RESETS",
    "AsyncConsumer",
    "Consumer",
    "ConsumerRecord",
    "Decoded",
    "OffsetAndTimestamp",
    "RebalanceCallback",
    "RecordColumns",
    "TopicPartition",
]
