"""What ``send`` and ``send_many`` return: DeliveryFuture (one record), DeliveryReport (many).

Owns the caller's view of delivery. Neither holds state of its own: a future
is a batch, an index and the record's timestamp; a report is a list of
``(batch, first index, count)`` spans in input order. Offsets follow from the
batch's base offset once answered (``base_offset + index``; -1 with
``acks=0``); the timestamp is the broker's ``log_append_time`` when the topic
uses it, the record's own otherwise.

Concurrency: both work from any thread (``result``, ``wait``: they block on
the batch's event) and from any event loop (``await``: a future of the
awaiting loop, resolved thread-safely by :meth:`ProducerBatch.complete`), on
the objects returned by either producer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any

from app.client.producer._speedups import FutureBase
from app.client.producer.batch import ProducerBatch
from app.client.types import RecordMetadata


class DeliveryFuture(FutureBase):  # type: ignore[misc]
    """The outcome of one ``send``: a :class:`RecordMetadata` or the error that ended its batch.

    ``result(timeout)`` blocks (sync), ``await future`` suspends (asyncio);
    both work on futures from either producer. One small object per record:
    the state lives in the batch, shared by all of its records. Its fields
    (``_batch``, ``_index``, ``_timestamp``) are :data:`FutureBase`'s, a C type
    the compiled ``send`` fills without calling ``__init__``:
    ``DeliveryFuture(batch, index, timestamp)`` elsewhere.
    """

    __slots__ = ()
    _batch: ProducerBatch
    _index: int
    _timestamp: float

    def done(self) -> bool:
        return self._batch.done

    def result(self, timeout: float | None = None) -> RecordMetadata:
        if not self._batch.wait(timeout):
            raise TimeoutError(f"record to {self._batch.tp} not acknowledged within {timeout} s")
        if self._batch.error is not None:
            raise self._batch.error
        return self._batch.metadata(self._index, self._timestamp)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._batch.wait(timeout):
            raise TimeoutError(f"record to {self._batch.tp} not acknowledged within {timeout} s")
        return self._batch.error

    def add_done_callback(self, fn: Callable[[DeliveryFuture], None]) -> None:
        """Call ``fn(self)`` once delivered or failed (on the sender's thread; keep it short)."""
        self._batch.add_callback(self._index, self._timestamp, lambda _m, _e: fn(self))

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if not self._batch.done:
            yield from self._batch.aio_future().__await__()
        if self._batch.error is not None:
            raise self._batch.error
        return self._batch.metadata(self._index, self._timestamp)


class DeliveryReport:
    """The outcome of one ``send_many``: every record's :class:`RecordMetadata`, in input order."""

    __slots__ = ("_spans", "_timestamp", "_topic")

    def __init__(
        self, topic: str, spans: list[tuple[ProducerBatch, int, int]], timestamp: int
    ) -> None:
        self._topic = topic
        self._spans = spans
        self._timestamp = timestamp

    def __len__(self) -> int:
        return sum(count for _, _, count in self._spans)

    def done(self) -> bool:
        return all(batch.done for batch, _, _ in self._spans)

    def wait(self, timeout: float | None = None) -> None:
        """Block until every record is answered; raise the first error."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for batch, _, _ in self._spans:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not batch.wait(remaining):
                raise TimeoutError(f"records to {self._topic} not acknowledged within {timeout} s")
            if batch.error is not None:
                raise batch.error

    def _metadata(self) -> list[RecordMetadata]:
        out: list[RecordMetadata] = []
        for batch, start, count in self._spans:
            if batch.error is not None:
                raise batch.error
            out.extend(batch.metadata(i, self._timestamp) for i in range(start, start + count))
        return out

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        self.wait(timeout)
        return self._metadata()

    def __await__(self) -> Generator[Any, None, list[RecordMetadata]]:
        for batch, _, _ in self._spans:
            if not batch.done:
                yield from batch.aio_future().__await__()
        return self._metadata()
