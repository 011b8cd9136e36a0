"""Producer: the blocking, thread-safe facade; the sender runs on a loop in its own thread.

Owns the background thread ``logbus-producer`` and its event loop (created with
the producer, closed when the thread ends), and the blocking forms of the
operations: ``send`` and ``send_many`` block only for a topic's first metadata
lookup and for back-pressure, each up to ``max_block_ms``; ``flush`` and
``close`` wait on the batches' events.

Concurrency: any number of caller threads call ``send``, ``send_many`` and
``flush``; everything that touches the sender hops onto its loop
(``call_soon_threadsafe``, ``run_coroutine_threadsafe``). A burst of batches
posts one wake-up at a time (``_wake_pending``). Callbacks run on the sender
thread, where ``flush`` would wait for itself and so refuses to run.

The hot path is ``send`` into a partition's open batch: with the compiled
extension (:mod:`app.client.producer._speedups`) ``send`` is one C call,
:class:`FastSend`, which takes the accumulator's lock, picks the partition
(sticky, or murmur2 of the key), encodes the record into the batch, keeps its
callback and returns the future; everything else (a full or missing batch,
explicit partition, headers, a topic not yet known) goes to the Python ``send``
below, which also has a null-key fast path of its own for the pure-Python build.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

import httpx

from app.client._cluster import Bootstrap
from app.client.errors import ProducerClosed
from app.client.producer import _speedups
from app.client.producer.base import ProducerBase, now
from app.client.producer.batch import NO_HEADERS, DeliveryCallback, Headers, ProducerBatch
from app.client.producer.delivery import DeliveryFuture, DeliveryReport
from app.client.producer.txn import TransactionManager
from app.client.types import ConsumerGroupMetadata, TopicPartition

log = logging.getLogger(__name__)


class Producer(ProducerBase):
    """Thread-safe blocking producer. ``send`` returns at once with a :class:`DeliveryFuture`.

    >>> with Producer("http://127.0.0.1:8080", linger_ms=5) as p:   # doctest: +SKIP
    ...     p.send("orders", b"payload", key=b"user-1").result(timeout=10)

    ``send`` blocks only to learn a topic's partition count (once per topic)
    and when ``buffer_memory`` bytes are waiting (back-pressure), each for at
    most ``max_block_ms``; then it raises :class:`~app.client.errors.BufferFull`.
    Idempotence is on whenever the broker offers ``POST /producers`` (see
    :mod:`app.client.producer`). Callbacks and future callbacks run on the sender
    thread: keep them short.
    """

    def __init__(
        self,
        url: Bootstrap,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        **config: Any,
    ) -> None:
        super().__init__(url, config)
        self._loop = asyncio.new_event_loop()
        self._wake_pending = False
        self._wake_lock = threading.Lock()
        # Bound once: send's fast path runs a million times a second.
        self._acquire = self._acc.lock.acquire
        self._release = self._acc.lock.release
        self._sticky_get = self._acc.sticky_batch.get
        if _speedups.FastSend is not None and type(self).send is Producer.send:
            # The compiled send, in front of the Python one (a subclass that overrides
            # send keeps its own). An instance attribute: found before the method.
            fast = _speedups.FastSend(
                self._acc.lock,
                self._acc.sticky_batch,
                self._acc.open,
                self._partition_counts,
                self._acc.tp,
                DeliveryFuture,
                self._send_python,
                ProducerBatch,
            )
            self.send = fast.send  # type: ignore[method-assign]
        if self._serializing:
            # Objects in, framed bytes out, then the usual send (fast or not): an instance
            # attribute in front of it. Serializing costs far more than the fast path saves.
            self._send_bytes = self.send
            self.send = self._send_serialized  # type: ignore[method-assign]
        started = threading.Event()
        self._start_error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(transport, started), name="logbus-producer", daemon=True
        )
        self._thread.start()
        started.wait()
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error

    def _run(self, transport: httpx.AsyncBaseTransport | None, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main(transport, started))
        finally:
            self._loop.close()

    async def _main(
        self, transport: httpx.AsyncBaseTransport | None, started: threading.Event
    ) -> None:
        async with self._client(transport) as client:
            try:
                self._sender = self._new_sender(client)
            except BaseException as exc:
                self._start_error = exc
                started.set()
                return
            started.set()
            try:
                await self._sender.run()
                await self._cancel_the_rest()
            except Exception as exc:
                # A bug in the sender must not leave send() queueing into the void.
                log.exception("the producer's sender stopped")
                self._closed = True
                failure = ProducerClosed(f"the producer's sender failed: {exc!r}")
                failure.__cause__ = exc
                self._acc.fail_all(failure)

    @staticmethod
    async def _cancel_the_rest() -> None:
        """The sender is done (closed, or it could not start): cancel what callers still
        wait for on this loop (a metadata lookup), so they fail at once instead of waiting
        out ``max_block_ms`` on a loop that no longer runs."""
        me = asyncio.current_task()
        rest = [t for t in asyncio.all_tasks() if t is not me]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    def _notify(self) -> None:
        # One wake-up in the loop's queue at a time: a burst of sealed batches needs one drain.
        with self._wake_lock:
            if self._wake_pending:
                return
            self._wake_pending = True
        with contextlib.suppress(RuntimeError):  # loop already closed
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        with self._wake_lock:
            self._wake_pending = False
        if self._sender is not None:
            self._sender.wake()

    def _on_loop(self, coro: Any, timeout: float) -> Any:
        if self._acc.closed or not self._thread.is_alive():
            coro.close()
            raise self._acc.closed_error()
        try:
            return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)
        except concurrent.futures.CancelledError:
            # The sender stopped meanwhile (see _cancel_the_rest): say why.
            raise self._acc.closed_error() from None

    def partitions_for(self, topic: str) -> int:
        """The topic's partition count (cached; the first call asks the broker)."""
        n = self._partition_counts.get(topic)
        if n is None:
            assert self._sender is not None
            try:
                n = int(self._on_loop(self._sender.refresh(topic), self.config.max_block_ms / 1000))
            except TimeoutError:
                raise self._no_metadata(topic) from None
        return n

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        timestamp: int | None = None,
        headers: Headers | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> DeliveryFuture:
        """Queue one record; ``on_delivery(metadata, None)`` or ``(None, error)`` runs once it is answered."""
        ts: float = now() * 1000.0 if timestamp is None else timestamp
        if key is None and partition is None and headers is None and on_delivery is None:
            # The common case, a null-key record into the topic's open sticky batch,
            # costs one lock and one encode; anything else takes the general path.
            # (acquire/try/release measured ~100 ns here against ~270 ns for a with block.)
            # Back-pressure needs no check here: the open batch is bounded by
            # batch_size, and the general path blocks before opening the next one.
            self._acquire()
            try:
                batch = self._sticky_get(topic)
                if batch is not None:
                    index = batch.count
                    if index and batch.append(ts, None, value, NO_HEADERS) is not None:
                        return DeliveryFuture(batch, index, ts)
            finally:
                self._release()
        if self._closed or self._acc.closed:
            raise self._acc.closed_error()
        if self._txn is not None:
            self._txn.check_send()
        n = self._partition_counts.get(topic) or self.partitions_for(topic)
        if partition is not None and not 0 <= partition < n:
            n = self._refresh_for(topic, partition)
        return self._acc.append(
            topic,
            partition,
            n,
            key,
            value,
            headers,
            ts,
            on_delivery,
            self.config.max_block_ms / 1000,
        )

    def _send_serialized(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        headers: Headers | None = None,
        **kwargs: Any,
    ) -> DeliveryFuture:
        """``send`` with ``key_serializer`` / ``value_serializer``: ``key`` and ``value``
        are objects, serialized (e.g. framed in Confluent's wire format) before queueing;
        a value that does not match its schema raises here (``RecordInvalid``)."""
        key, value = self._serialize_sync(topic, key, value, headers)
        return self._send_bytes(topic, value, key, headers=headers, **kwargs)

    def _send_python(self, *args: Any, **kwargs: Any) -> DeliveryFuture:
        # What the compiled send hands over: the method above, not the instance attribute.
        return Producer.send(self, *args, **kwargs)

    def send_many(
        self,
        topic: str,
        values: Iterable[bytes | None],
        *,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> DeliveryReport:
        """Queue many null-key records at once (the sticky partitioner, or ``partition``).

        The same batching, linger, retries and back-pressure as ``send``, at a
        fraction of its per-record cost: no lock, lookup or future per record.
        All records share ``timestamp`` (default: now).
        """
        self._check_sending()
        n = self._partition_counts.get(topic) or self.partitions_for(topic)
        if partition is not None and not 0 <= partition < n:
            n = self._refresh_for(topic, partition)
        ts = int(now() * 1000) if timestamp is None else timestamp
        spans, _ = self._acc.append_many(
            topic, partition, n, iter(values), ts, self.config.max_block_ms / 1000
        )
        return DeliveryReport(topic, spans, ts)

    def _refresh_for(self, topic: str, partition: int) -> int:
        assert self._sender is not None
        n = int(self._on_loop(self._sender.refresh(topic), self.config.max_block_ms / 1000))
        return self._in_range(topic, partition, n)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now (ignoring linger) and wait until every record is answered.

        Raises the producer's fatal error (an ACL refusing InitProducerId, say) if it has one.
        """
        self._wait_flushed(timeout)
        if self._acc.fatal is not None:
            raise self._acc.fatal

    def _wait_flushed(self, timeout: float | None) -> None:
        if threading.current_thread() is self._thread:
            # The sender thread answers the batches flush would wait for.
            raise RuntimeError("flush() cannot be called from a delivery callback")
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for batch in self._acc.begin_flush():
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not batch.wait(remaining):
                    raise TimeoutError(f"flush did not finish within {timeout} s")
        finally:
            self._acc.end_flush()

    # ---- transactions (Kafka's API; the rules and calls are TransactionManager's) ----

    def _txn_run(self, call: Callable[[TransactionManager, httpx.AsyncClient], Any]) -> None:
        """Run a coordinator call of the transaction manager on the sender's loop."""
        txn = self._transactions()
        assert self._sender is not None
        cfg = self.config
        self._on_loop(
            call(txn, self._sender.client), (cfg.max_block_ms + cfg.request_timeout_ms) / 1000
        )

    def init_transactions(self) -> None:
        """InitProducerId with the transactional id: fences older instances with the same
        id and completes or aborts what they left open. Once, before the first transaction."""
        self._txn_run(lambda txn, client: txn.init(client))

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group: str | ConsumerGroupMetadata
    ) -> None:
        """Commit a group's offsets (the next offset to read, per partition) in the
        transaction: they count only if it commits. ``group``: a group id, or
        ``consumer.group_metadata()`` (KIP-447: a fenced member cannot commit)."""
        self._txn_run(lambda txn, client: txn.send_offsets(client, offsets, group))

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit: every record sent and every offset sent in the transaction
        becomes visible at once. A failed record raises its error here (abort then)."""
        self._transactions().check_commit()
        self.flush(timeout)
        self._txn_run(lambda txn, client: txn.end(client, True))

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop what is not sent yet, wait for what is in flight, abort: nothing of the
        transaction is ever shown to ``read_committed`` readers."""
        self._transactions().begin_abort()
        self._wait_flushed(timeout)
        self._txn_run(lambda txn, client: txn.end(client, False))

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is buffered (up to ``timeout``), then stop; what is left fails with ProducerClosed."""
        if self._closed:
            return
        self._closed = True
        try:
            if threading.current_thread() is not self._thread:
                with contextlib.suppress(TimeoutError):
                    self._wait_flushed(timeout)
        finally:
            self._fail_unsent()
            if self._sender is not None and not self._loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._sender.stop)
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout)

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
