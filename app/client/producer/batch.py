"""ProducerBatch: one RecordBatch v2 of one partition, from its first record to its answer.

Owns a batch's life and the record format it accepts:

* filling: records are encoded as they come (``append``) into the batch's
  record buffer (``builder``: the C one of :mod:`app.client.producer._speedups`
  where built, else aiokafka's builder), which returns None once
  ``batch_size`` is reached; ``count`` is the number appended, and record
  ``i`` of the batch has offset delta ``i``;
* sealing and sending: ``build()`` encodes (and compresses) the batch exactly
  once; producer id, epoch and base sequence are stamped just before (by the
  accumulator, in sending order);
* the answer: ``complete()`` records the base offset or the error once (later
  calls are ignored) and then wakes every kind of waiter: a
  :class:`threading.Event` for blocking callers, asyncio futures on their own
  loops, and the delivery callbacks, which the record buffer keeps and calls
  in one loop, in the order they were added, each exactly once.

Every record of a batch shares this one delivery state; the per-record futures
(:mod:`app.client.producer.delivery`) hold only the batch and an index.

Concurrency: a batch is filled by one thread at a time (under the accumulator's
lock, or checked out of it by ``send_many``), built and answered on the
sender's loop, and waited on from any thread or loop. ``lock`` guards
``done``, ``event`` and ``aio_waiters``, and callbacks added after the batch
left the open set (``add_callback``); a waiter added after
``complete()`` sees ``done`` under the lock and returns at once. Callbacks run
on the thread that completes the batch (the sender's, or the one closing the
producer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from app.client.producer import _speedups
from app.client.types import RecordMetadata, TopicPartition
from app.common.batch import Compression
from app.common.errors import RecordTooLarge

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes | None]]
DeliveryCallback = Callable[[RecordMetadata | None, BaseException | None], None]

# What a record costs in a batch beyond its key and value: length, attributes,
# timestamp and offset deltas, key/value lengths, header count (varints).
RECORD_OVERHEAD = 24
NO_HEADERS: list[tuple[str, bytes | None]] = []  # shared, never mutated: the builder only reads it


def record_headers(
    max_request_size: int, key: bytes | None, value: bytes | None, headers: Headers | None
) -> list[tuple[str, bytes | None]]:
    """The headers as the encoder wants them, after refusing a record no request could carry."""
    size = RECORD_OVERHEAD + (len(value) if value is not None else 0)
    if key is not None:
        size += len(key)
    if headers:
        size += sum(len(k) + (len(v) if v is not None else 0) + 8 for k, v in headers)
    if size > max_request_size:
        raise RecordTooLarge(size, max_request_size, what="record (max_request_size)")
    return list(headers) if headers else NO_HEADERS


class ProducerBatch:
    """One RecordBatch being filled, then sent, then answered; also the shared delivery result.

    Records go straight into the record buffer (``builder``, see
    :mod:`~app.client.producer._speedups`): ``append(timestamp, key, value,
    headers)`` returns None once the batch is full; the record's offset delta
    is ``count`` before the call.
    """

    __slots__ = (
        "aio_waiters",
        "append",
        "attempts",
        "base_offset",
        "builder",
        "created",
        "data",
        "done",
        "error",
        "event",
        "lock",
        "log_append_time",
        "sequence",
        "size",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        compression: Compression,
        batch_size: int,
    ) -> None:
        self.tp = tp
        # Producer id, epoch and base sequence are stamped when the batch goes out
        # (set_producer_state), so sequences follow the order batches go out in.
        self.builder = _speedups.RecordBuffer(batch_size, int(compression))
        self.append: Callable[..., Any] = self.builder.append
        self.sequence = -1
        self.created = time.monotonic()
        self.size = 0
        # Built once; a slice of a request body when built with others (build_all).
        self.data: bytes | memoryview | None = None
        self.attempts = 0
        self.lock = threading.Lock()
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.event: threading.Event | None = None
        self.aio_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] | None = None

    @property
    def count(self) -> int:
        """Records appended so far (the record buffer counts them)."""
        return self.builder.count

    def build(self) -> bytes | memoryview:
        # aiokafka's builder compresses its buffer in place: build exactly once.
        if self.data is None:
            self.data = self.builder.build()
        return self.data

    @staticmethod
    def build_all(batches: list[ProducerBatch]) -> bytes:
        """One request body: the batches built, one after the other.

        Batches not built yet and uncompressed are built straight into the body
        (compiled: one copy instead of a copy per batch and one for the join,
        the CRC and copy without the GIL); each batch's ``build()`` is then its
        slice of the body.
        """
        if len(batches) == 1:
            return bytes(batches[0].build())
        if all(b.data is None for b in batches):
            sizes = [b.builder.size() for b in batches]
            body = _speedups.build_plain_many([b.builder for b in batches])
            if body is not None:
                view, start = memoryview(body), 0
                for batch, size in zip(batches, sizes, strict=True):
                    batch.data = view[start : start + size]
                    start += size
                return body
        return b"".join(b.build() for b in batches)

    def metadata(self, index: int, timestamp: float) -> RecordMetadata:
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        ts = self.log_append_time if self.log_append_time >= 0 else int(timestamp)
        return RecordMetadata(self.tp.topic, self.tp.partition, offset, ts)

    def complete(self, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        with self.lock:
            if self.done:
                return
            self.base_offset = base_offset
            self.log_append_time = log_append_time
            self.error = error
            self.done = True
            event, waiters = self.event, self.aio_waiters
        if event is not None:
            event.set()
        if waiters:
            for loop, fut in waiters:
                with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                    loop.call_soon_threadsafe(_resolve, fut)
        # After done is set no callback is added any more (add_callback sees done under
        # the lock, send only fills open batches): this runs each one exactly once.
        if self.builder.callback_count():
            self.builder.run_callbacks(
                self.tp.topic,
                self.tp.partition,
                base_offset,
                log_append_time,
                error,
                RecordMetadata,
                self._callback_failed,
            )

    def _callback_failed(self, exc: BaseException) -> None:
        log.error("delivery callback for %s failed", self.tp, exc_info=exc)

    def add_callback(self, index: int, ts: float, cb: DeliveryCallback) -> None:
        with self.lock:
            if not self.done:
                self.builder.add_callback(index, ts, cb)
                return
        if self.error is None:
            cb(self.metadata(index, ts), None)
        else:
            cb(None, self.error)

    def wait(self, timeout: float | None) -> bool:
        if self.done:
            return True
        with self.lock:
            if self.done:
                return True
            if self.event is None:
                self.event = threading.Event()
            event = self.event
        return event.wait(timeout)

    def aio_future(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self.lock:
            if not self.done:
                if self.aio_waiters is None:
                    self.aio_waiters = []
                self.aio_waiters.append((loop, fut))
                return fut
        fut.set_result(None)
        return fut


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
