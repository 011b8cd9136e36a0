"""RecordAccumulator: the batches of every partition, from the first record to the answer.

Owns the per-partition state between ``send`` and the sender:

* ``open``: at most one batch being filled per partition; ``sticky_batch`` is
  the open batch of each null-key topic's sticky partition (KIP-480: a topic's
  null-key records fill one partition's batch, then move on);
* ``ready``: sealed batches per partition, in the order they were sealed, which
  is the order they go out in (``take``); a retried batch is never overtaken,
  because the sender asks ``take`` for no more of a partition while one of its
  requests is being retried;
* ``incomplete``: every batch not yet answered (what ``flush`` waits for);
* ``buffered``: bytes of sealed batches not yet answered, held under
  ``buffer_memory`` by back-pressure (the overshoot is at most one record);
  open batches, each under ``batch_size``, are not counted, so the hot path
  compares one number;
* sequence numbers (idempotence): stamped on each batch as ``take`` hands it
  out, so they are gapless in sending order; ``rewind`` gives back the numbers
  of batches the broker refused outright.

Concurrency: every method is safe from any thread. ``lock`` guards all of the
above; ``space`` (a condition on it) wakes blocking callers when an answered
batch frees buffer memory, and ``space_listeners`` (called outside the lock)
wake asyncio ones. ``notify`` (the facade's, to wake the sender) is called
whenever a batch is opened or sealed, mostly outside the lock; it must not
take the lock itself. The compiled ``send`` (:mod:`app.client.producer._speedups`)
appends to ``open`` and ``sticky_batch`` batches under the same ``lock`` and opens
or seals nothing itself. ``send_many`` fills a batch it has checked out of
``open`` without the lock, so other senders and the sender thread go on.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from app.client.errors import BufferFull, ProducerClosed
from app.client.producer import _speedups
from app.client.producer.batch import (
    NO_HEADERS,
    DeliveryCallback,
    Headers,
    ProducerBatch,
    record_headers,
)
from app.client.producer.config import DEDUP_WINDOW, ProducerConfig
from app.client.producer.delivery import DeliveryFuture
from app.client.types import TopicPartition
from app.common.batch import NO_PRODUCER_ID, Compression
from app.common.partitioner import StickyPartitioner, partition_for_key


class RecordAccumulator:
    """Open and sealed batches per partition (see the module docs). Safe from any thread.

    ``notify`` wakes the sender; it is called with or without ``lock`` held, so it
    must not take it.
    """

    def __init__(self, cfg: ProducerConfig, notify: Callable[[], None]) -> None:
        self.cfg = cfg
        # threading.Lock's interface; the compiled send takes the C one without a Python call.
        self.lock = _speedups.Lock()
        self.space = threading.Condition(self.lock)
        self.open: dict[TopicPartition, ProducerBatch] = {}
        # The open batch of each null-key topic's sticky partition: one dict
        # lookup on the hot path.
        self.sticky_batch: dict[str, ProducerBatch] = {}
        self.ready: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.buffered = 0
        self.limit = cfg.buffer_memory
        self.closed = False
        self.closed_reason: str | None = None
        # Why the producer can never send (InitProducerId refused by an ACL, say): what
        # send and flush raise from then on, as Kafka's producer in its fatal state.
        self.fatal: BaseException | None = None
        self.flushing = 0
        self._notify = notify
        self._compression = Compression.parse(cfg.compression)
        self._sticky_choice = StickyPartitioner()
        self._sticky: dict[str, int] = {}
        self._tps: dict[tuple[str, int], TopicPartition] = {}
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        # A transactional producer's batches carry the attributes' transactional bit.
        self.transactional = False
        self._next_sequence: dict[TopicPartition, int] = {}
        self.space_listeners: list[Callable[[], None]] = []

    def _new_batch(self, tp: TopicPartition, register: bool = True) -> ProducerBatch:
        batch = ProducerBatch(tp, self._compression, self.cfg.batch_size)
        if register:
            self.open[tp] = batch
            if self._sticky.get(tp.topic) == tp.partition:
                self.sticky_batch[tp.topic] = batch
        self.incomplete.add(batch)
        return batch

    def _seal(self, batch: ProducerBatch) -> None:
        """Move an open batch to its partition's send queue. Caller holds the lock."""
        tp = batch.tp
        if self.open.get(tp) is batch:
            del self.open[tp]
        if self._sticky.get(tp.topic) == tp.partition:
            # KIP-480: a null-key topic moves on once its batch is complete.
            del self._sticky[tp.topic]
            self.sticky_batch.pop(tp.topic, None)
        if batch.count == 0:  # a record failed to encode (bad type): nothing to send
            self.incomplete.discard(batch)
            batch.complete(-1, -1, None)
            return
        batch.size = int(self.builder_size(batch))
        self.buffered += batch.size
        queue = self.ready.get(tp)
        if queue is None:
            queue = self.ready[tp] = deque()
        queue.append(batch)

    @staticmethod
    def builder_size(batch: ProducerBatch) -> int:
        return batch.builder.size()

    def tp(self, topic: str, partition: int) -> TopicPartition:
        """The one TopicPartition object of (topic, partition): dict keys found by identity."""
        tp = self._tps.get((topic, partition))
        if tp is None:
            tp = self._tps[(topic, partition)] = TopicPartition(topic, partition)
        return tp

    def append(
        self,
        topic: str,
        partition: int | None,
        num_partitions: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp: float,
        callback: DeliveryCallback | None,
        block_s: float,
    ) -> DeliveryFuture:
        """The general path: any key, partition, headers and callback; may block for space.

        Refuses a record no request could carry (RecordTooLarge) before anything else.
        """
        encoded_headers = record_headers(self.cfg.max_request_size, key, value, headers)
        notify = False
        try:
            with self.lock:
                if self.closed:
                    raise self.closed_error()
                if self.buffered >= self.limit:
                    self._wait_for_space(block_s)
                sticky = partition is None and key is None
                if partition is None:
                    if key is None:
                        partition = self._sticky.get(topic)
                        if partition is None:
                            partition = self._sticky_choice.next_partition(topic, num_partitions)
                            self._sticky[topic] = partition
                    else:
                        partition = partition_for_key(key, num_partitions)
                tp = self.tp(topic, partition)
                batch = self.open.get(tp)
                if batch is None:
                    batch = self._new_batch(tp)
                    notify = True
                index = batch.count
                if batch.append(timestamp, key, value, encoded_headers) is None:
                    self._seal(batch)
                    if sticky:
                        partition = self._sticky_choice.next_partition(topic, num_partitions)
                        self._sticky[topic] = partition
                        tp = self.tp(topic, partition)
                    batch = self.open.get(tp) or self._new_batch(tp)
                    if tp.partition == self._sticky.get(topic):
                        self.sticky_batch[topic] = batch
                    index = batch.count
                    # The first record of a batch always fits (an oversized one makes an oversized batch).
                    batch.append(timestamp, key, value, encoded_headers)
                    notify = True
                if callback is not None:
                    batch.builder.add_callback(index, timestamp, callback)
        finally:
            # Also after a failed encode: a batch opened for it must still get its linger timer.
            if notify:
                self._notify()
        return DeliveryFuture(batch, index, timestamp)

    def append_many(
        self,
        topic: str,
        partition: int | None,
        num_partitions: int,
        values: Iterator[bytes | None],
        timestamp: int,
        block_s: float | None,
    ) -> tuple[list[tuple[ProducerBatch, int, int]], bool]:
        """Append null-key records in bulk; return ``(batch, first index, count)`` spans and
        whether ``values`` is exhausted (False: the buffer is full and ``block_s`` is None).

        The batch being filled is checked out of the shared state, so the lock
        is held only between batches: the sender keeps taking sealed batches
        meanwhile, and concurrent ``send`` calls open a batch of their own.
        """
        spans: list[tuple[ProducerBatch, int, int]] = []
        carry: list[bytes | None] = []
        while True:
            with self.lock:
                if self.closed:
                    raise self.closed_error()
                if self.buffered >= self.limit:
                    if block_s is None:
                        return spans, False
                    self._wait_for_space(block_s)
                p = partition
                if p is None:
                    p = self._sticky.get(topic)
                    if p is None:
                        p = self._sticky.setdefault(
                            topic, self._sticky_choice.next_partition(topic, num_partitions)
                        )
                tp = self.tp(topic, p)
                batch = self.open.pop(tp, None)
                if batch is None:
                    batch = self._new_batch(tp, register=False)
                elif self.sticky_batch.get(topic) is batch:
                    del self.sticky_batch[topic]
            start = batch.count
            full = False
            try:
                if carry:
                    # It did not fit the batch before. The first of a batch always fits;
                    # a batch a concurrent send() opened meanwhile may be full already.
                    if batch.append(timestamp, None, carry[0], NO_HEADERS) is None:
                        full = True
                    else:
                        carry.clear()
                if not full:
                    _, full, rest = batch.builder.append_values(values, timestamp)
                    if full:
                        carry.append(rest)
            finally:
                i = batch.count
                if i > start:
                    spans.append((batch, start, i - start))
                with self.lock:
                    if full or self.open.get(tp) is not None or self.closed:
                        # Full, or a concurrent send() opened another batch for this partition.
                        self._seal(batch)
                    else:
                        self.open[tp] = batch
                        if self._sticky.get(topic) == p:
                            self.sticky_batch[topic] = batch
                self._notify()
            if not full:
                return spans, True

    def _wait_for_space(self, block_s: float) -> None:
        # A record is admitted while the buffer is under the limit, so the
        # overshoot is at most one record.
        deadline = time.monotonic() + block_s
        while self.buffered >= self.cfg.buffer_memory:
            remaining = self.time_left(deadline)
            # Whatever is open must go out, or nothing will ever free space.
            if self.open:
                for batch in list(self.open.values()):
                    self._seal(batch)
                self._notify()
            self.space.wait(remaining)
            if self.closed:
                raise self.fatal or ProducerClosed(
                    "the producer was closed while send() waited for space"
                )

    def closed_error(self) -> BaseException:
        """What a call on the closed producer raises: the fatal error that closed it (an
        authorization refusal, say), else ProducerClosed with the reason."""
        return self.fatal or ProducerClosed(self.closed_reason or "the producer is closed")

    def has_space(self) -> bool:
        return self.buffered < self.cfg.buffer_memory

    def time_left(self, deadline: float) -> float:
        """Seconds a caller waiting for space may still wait; BufferFull once ``deadline`` passed.

        The one rule of back-pressure, for the blocking wait above and the asyncio
        producer's alike.
        """
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BufferFull(
                f"{self.buffered} bytes buffered (buffer_memory={self.cfg.buffer_memory}) "
                f"for longer than max_block_ms={self.cfg.max_block_ms}"
            )
        return remaining

    def release(self, batch: ProducerBatch) -> None:
        with self.lock:
            self.incomplete.discard(batch)
            self.buffered -= batch.size
            self.space.notify_all()
        for listener in self.space_listeners:
            listener()

    def begin_flush(self) -> list[ProducerBatch]:
        """Seal everything, keep sealing until end_flush; return every batch not yet answered."""
        with self.lock:
            self.flushing += 1
        return self.seal_all()

    def end_flush(self) -> None:
        with self.lock:
            self.flushing -= 1

    def seal_all(self) -> list[ProducerBatch]:
        """Make every buffered record sendable now; return every batch not yet answered."""
        with self.lock:
            for batch in list(self.open.values()):
                self._seal(batch)
            pending = list(self.incomplete)
        self._notify()
        return pending

    def take(
        self, now: float, can_send: Callable[[TopicPartition], int]
    ) -> tuple[list[tuple[TopicPartition, list[ProducerBatch]]], float | None]:
        """Seal lingered batches and hand out sendable ones; also the next linger deadline."""
        linger = self.cfg.linger_ms / 1000
        max_request = self.cfg.max_request_size
        # The broker deduplicates a retry against the last few batches of each
        # producer and partition (5, as Kafka): the batches of a partition out at
        # once, over all its requests in flight, must not be more.
        max_batches = (
            max(1, DEDUP_WINDOW // self.cfg.max_in_flight_per_partition)
            if self.producer_id != NO_PRODUCER_ID
            else 1 << 30
        )
        out: list[tuple[TopicPartition, list[ProducerBatch]]] = []
        next_deadline: float | None = None
        with self.lock:
            for batch in list(self.open.values()):
                due = batch.created + linger
                if due <= now or self.flushing:
                    self._seal(batch)
                elif next_deadline is None or due < next_deadline:
                    next_deadline = due
            for tp, queue in self.ready.items():
                # can_send(tp) is how many more requests tp may have in flight.
                slots = can_send(tp)
                while queue and slots > 0:
                    slots -= 1
                    group = [queue.popleft()]
                    size = group[0].size
                    while (
                        queue and size + queue[0].size <= max_request and len(group) < max_batches
                    ):
                        size += queue[0].size
                        group.append(queue.popleft())
                    if self.producer_id != NO_PRODUCER_ID:
                        for batch in group:
                            self._stamp(batch)
                    out.append((tp, group))
            # Keep the dict small when partitions go quiet.
            for tp in [tp for tp, q in self.ready.items() if not q]:
                del self.ready[tp]
        return out, next_deadline

    def _stamp(self, batch: ProducerBatch) -> None:
        """Give a batch its producer id, epoch and base sequence, as it first goes out.

        Batches of a partition go out in queue order, so sequences handed out
        here are gapless in log order even when ``send_many`` and ``send``
        filled two batches of the partition at once (Kafka also numbers
        batches when it drains them).
        """
        tp = batch.tp
        batch.sequence = self._next_sequence.get(tp, 0)
        batch.builder.set_producer_state(
            self.producer_id, self.producer_epoch, batch.sequence, self.transactional
        )
        self._next_sequence[tp] = (batch.sequence + batch.count) & 0x7FFFFFFF

    def set_producer(self, producer_id: int, epoch: int, *, transactional: bool) -> None:
        """A new producer id or epoch (InitProducerId): sequences start again at 0."""
        with self.lock:
            self.producer_id, self.producer_epoch = producer_id, epoch
            self.transactional = transactional
            self._next_sequence.clear()

    def drop_unsent(self, error: BaseException) -> None:
        """Fail every batch not handed to the sender yet (an aborted transaction's); those
        in flight are answered as usual."""
        with self.lock:
            batches = self._take_unsent()
        self._fail(batches, error)

    def rewind(self, batches: list[ProducerBatch]) -> None:
        """The broker refused these batches outright: give their sequences back.

        Only when they were the last ones numbered for the partition; the next
        batch then starts where they did, so it does not open a gap the broker
        would refuse (a refusal from an error answer means nothing was appended).
        """
        first, last = batches[0], batches[-1]
        if first.sequence < 0:
            return
        with self.lock:
            tp = first.tp
            if self._next_sequence.get(tp) == (last.sequence + last.count) & 0x7FFFFFFF:
                self._next_sequence[tp] = first.sequence

    def fail_all(self, error: BaseException) -> list[ProducerBatch]:
        with self.lock:
            self.closed = True
            batches = self._take_unsent()
            self.sticky_batch.clear()
            self.space.notify_all()
        self._fail(batches, error)
        return batches

    def _take_unsent(self) -> list[ProducerBatch]:
        """Seal the open batches and take every batch not handed to the sender. Caller
        holds the lock."""
        for batch in list(self.open.values()):
            self._seal(batch)
        batches = [b for q in self.ready.values() for b in q]
        self.ready.clear()
        return batches

    def _fail(self, batches: list[ProducerBatch], error: BaseException) -> None:
        for batch in batches:
            batch.complete(-1, -1, error)
            self.release(batch)
