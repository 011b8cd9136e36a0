"""AsyncProducer: the asyncio facade; the sender runs as a task on the caller's loop.

Owns the sender task and the HTTP client (made by ``start``, closed by
``close``), and the awaiting forms of the operations: ``send`` and
``send_many`` suspend only for a topic's first metadata lookup and for
back-pressure (an :class:`asyncio.Event` set when an answer frees buffer
memory), each up to ``max_block_ms``.

Concurrency: one event loop, the caller's. The sender runs only when the
caller yields, so ``send`` yields once after opening or sealing a batch
(``_yield``) and ``send_many`` after every slice of :data:`ASYNC_SLICE`
values: full batches go out while the rest is encoded. The futures it returns
may also be waited on from other threads (see
:mod:`app.client.producer.delivery`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

import httpx

from app.client._cluster import Bootstrap
from app.client.errors import ProducerClosed
from app.client.producer.base import CLOSED, ProducerBase, now
from app.client.producer.batch import DeliveryCallback, Headers, ProducerBatch
from app.client.producer.delivery import DeliveryFuture, DeliveryReport
from app.client.types import ConsumerGroupMetadata, RecordMetadata, TopicPartition
from app.common.aio import wait_event

# How many values AsyncProducer.send_many encodes between yields to the loop.
ASYNC_SLICE = 8192


class AsyncProducer(ProducerBase):
    """The asyncio producer: ``await send(...)`` returns a :class:`DeliveryFuture` to await.

    ``send`` suspends only for a topic's first metadata lookup and for
    back-pressure (``buffer_memory``), each up to ``max_block_ms``. Use it
    from one event loop. Idempotence as for :class:`Producer` (see
    :mod:`app.client.producer`).

    >>> async with AsyncProducer("http://127.0.0.1:8080") as p:   # doctest: +SKIP
    ...     meta = await (await p.send("orders", b"payload"))
    """

    def __init__(
        self,
        url: Bootstrap,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        **config: Any,
    ) -> None:
        super().__init__(url, config)
        self._yield = False
        self._transport = transport
        self._space = asyncio.Event()
        self._acc.space_listeners.append(self._space.set)
        self._http_client: httpx.AsyncClient | None = None
        self._task: asyncio.Task[None] | None = None

    def _notify(self) -> None:
        # The sender shares this loop: it only runs when the caller yields, so a
        # sealed or new batch asks send() to yield once (see _pause).
        self._yield = True
        if self._sender is not None:
            self._sender.wake()

    async def _pause(self) -> None:
        self._yield = False
        await asyncio.sleep(0)

    async def start(self) -> None:
        if self._sender is not None:
            return
        if self._closed:
            raise ProducerClosed(CLOSED)
        self._http_client = self._client(self._transport)
        self._sender = self._new_sender(self._http_client)
        self._task = asyncio.get_running_loop().create_task(self._sender.run())

    async def partitions_for(self, topic: str) -> int:
        n = self._partition_counts.get(topic)
        if n is None:
            await self.start()
            assert self._sender is not None
            try:
                n = await asyncio.wait_for(
                    self._sender.refresh(topic), self.config.max_block_ms / 1000
                )
            except TimeoutError:
                raise self._no_metadata(topic) from None
        return n

    async def _refresh_for(self, topic: str, partition: int) -> int:
        assert self._sender is not None
        return self._in_range(topic, partition, await self._sender.refresh(topic))

    async def send(
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
        # Inline, as in Producer.send: a helper coroutine per record measured ~100 ns (7%).
        if self._serializing:  # key_serializer / value_serializer: objects in
            key, value = await self._serialize_async(topic, key, value, headers)
        # _check_sending, inline:
        if self._closed or self._acc.fatal is not None:
            raise self._acc.closed_error()  # the fatal error, if any
        if self._txn is not None:
            self._txn.check_send()
        n = self._partition_counts.get(topic) or await self.partitions_for(topic)
        if partition is not None and not 0 <= partition < n:
            n = await self._refresh_for(topic, partition)
        if not self._acc.has_space():
            await self._wait_for_space()
        future = self._acc.append(
            topic,
            partition,
            n,
            key,
            value,
            headers,
            now() * 1000.0 if timestamp is None else timestamp,
            on_delivery,
            0.0,
        )
        if self._yield:
            await self._pause()
        return future

    async def send_many(
        self,
        topic: str,
        values: Iterable[bytes | None],
        *,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> DeliveryReport:
        """Queue many null-key records at once; see :meth:`Producer.send_many`."""
        self._check_sending()
        n = self._partition_counts.get(topic) or await self.partitions_for(topic)
        if partition is not None and not 0 <= partition < n:
            n = await self._refresh_for(topic, partition)
        ts = int(now() * 1000) if timestamp is None else timestamp
        spans: list[tuple[ProducerBatch, int, int]] = []
        it = iter(values)
        while True:
            # A slice at a time, yielding between, so the sender (on this loop) sends
            # full batches while the rest is encoded.
            chunk = list(itertools.islice(it, ASYNC_SLICE))
            if not chunk:
                return DeliveryReport(topic, spans, ts)
            rest = iter(chunk)
            while True:
                if not self._acc.has_space():
                    await self._wait_for_space()
                more, finished = self._acc.append_many(topic, partition, n, rest, ts, None)
                spans.extend(more)
                if finished:
                    break
            await self._pause()

    async def _wait_for_space(self) -> None:
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        self._acc.seal_all()
        while not self._acc.has_space():
            self._space.clear()
            remaining = self._acc.time_left(deadline)
            await wait_event(self._space, remaining)

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        **kwargs: Any,
    ) -> RecordMetadata:
        """``send`` and await the acknowledgement: one record at a time, for tests and low rates."""
        future = await self.send(topic, value, key, **kwargs)
        await self.flush_nowait()
        return await future

    async def flush_nowait(self) -> None:
        self._acc.seal_all()

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until every record is answered.

        Raises the producer's fatal error (an ACL refusing InitProducerId, say) if it has one.
        """
        await self._wait_flushed(timeout)
        if self._acc.fatal is not None:
            raise self._acc.fatal

    async def _wait_flushed(self, timeout: float | None) -> None:
        try:
            pending = self._acc.begin_flush()
            if pending:
                waits = [b.aio_future() for b in pending]
                await asyncio.wait_for(asyncio.gather(*waits), timeout)
        finally:
            self._acc.end_flush()

    # ---- transactions: Producer's, awaited (the rules and calls are TransactionManager's) ----

    async def _txn_client(self) -> httpx.AsyncClient:
        await self.start()
        assert self._sender is not None
        return self._sender.client

    async def init_transactions(self) -> None:
        """See :meth:`Producer.init_transactions`."""
        await self._transactions().init(await self._txn_client())

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group: str | ConsumerGroupMetadata
    ) -> None:
        """See :meth:`Producer.send_offsets_to_transaction`."""
        await self._transactions().send_offsets(await self._txn_client(), offsets, group)

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """See :meth:`Producer.commit_transaction`."""
        self._transactions().check_commit()
        await self.flush(timeout)
        await self._transactions().end(await self._txn_client(), True)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """See :meth:`Producer.abort_transaction`."""
        self._transactions().begin_abort()
        await self._wait_flushed(timeout)
        await self._transactions().end(await self._txn_client(), False)

    async def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._sender is not None:
                with contextlib.suppress(TimeoutError):
                    await self._wait_flushed(timeout)
        finally:
            self._fail_unsent()
            if self._sender is not None and self._task is not None:
                self._sender.stop()
                with contextlib.suppress(asyncio.CancelledError):
                    try:
                        await asyncio.wait_for(self._task, 5)
                    except TimeoutError:
                        self._task.cancel()
            if self._http_client is not None:
                await self._http_client.aclose()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
