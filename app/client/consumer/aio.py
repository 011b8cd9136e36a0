"""AsyncConsumer: the asyncio shell; fetch answers are read by tasks on the caller's loop.

Every rule is in :class:`~app.client.consumer.base.ConsumerBase`; this module
drives its flows with ``await`` (:meth:`AsyncConsumer._run`) and owns the
connections (:func:`app.wire.async_connection`, one per assigned partition):
a fetch is a task, whose completion wakes ``poll``; a seek or a moved
partition cancels it. Group membership:
:class:`~app.client.group.AsyncGroupMembership` heartbeats from a task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar, Unpack

import httpx

from app import wire
from app.client import _cluster, _http
from app.client._cluster import Bootstrap
from app.client._drive import drive_async
from app.client.consumer.base import BeatNow, ConsumerBase, Flow, Op
from app.client.consumer.core import ConsumerSettings
from app.client.consumer.records import Decoded, RecordColumns, as_columns, as_records
from app.client.consumer.state import PartitionState
from app.client.group import AsyncGroupMembership
from app.client.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from app.common.aio import wait_event

T = TypeVar("T")


class AsyncConsumer(ConsumerBase[AsyncGroupMembership]):
    """The asyncio twin of :class:`Consumer`: ``await poll(...)``; fetch answers are read by tasks."""

    def __init__(
        self,
        url: Bootstrap,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        **settings: Unpack[ConsumerSettings],
    ) -> None:
        super().__init__(url, **settings)
        self._transport = transport
        self._client = _http.async_client(
            self.url,
            self._request_timeout_ms,
            transport=transport,
            authorization=self.cluster.authorization,
        )
        self._arrived = asyncio.Event()

    # ---- driving flows ----

    async def _run(self, flow: Flow[T]) -> T:
        """Await the calls ``flow`` yields, one after the other; its return value."""
        return await drive_async(flow, self._perform)

    async def _perform(self, op: Op) -> Any:
        if isinstance(op, BeatNow):
            return await self._membership().beat_now(op.timeout_s)
        return await _cluster.run_async(self._client, self._route(op))

    def _join(self, group_id: str, settings: dict[str, Any]) -> AsyncGroupMembership:
        group = AsyncGroupMembership(self.cluster, group_id, transport=self._transport, **settings)
        group.start()
        return group

    # ---- groups, positions, offsets: the flows, awaited ----

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        await self._run(self._commit_flow(offsets))

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        return await self._run(self._committed_flow(partitions))

    async def position(self, tp: TopicPartition) -> int:
        return await self._run(self._position_flow(tp))

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return await self._run(self._offsets_for_times_flow(timestamps))

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return await self._run(self._offsets_flow(partitions, "earliest"))

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._run(self._offsets_flow(partitions, "latest"))

    # ---- fetching ----

    def _connect(self, url: str) -> wire.AsyncConnection:
        return wire.async_connection(
            self._endpoint(url), self.request_timeout_s, self.max_partition_fetch_bytes
        )

    def _drop(self, st: PartitionState) -> None:
        if st.in_flight is not None:
            st.in_flight.cancel()
            st.in_flight = None
        if st.conn is not None:
            st.conn.close()
            st.conn = None
        st.stale = False

    def _start_fetches(self) -> None:
        loop = asyncio.get_running_loop()
        for st in self._due_fetches():
            task = loop.create_task(st.conn.fetch(self._target(st)))
            task.add_done_callback(self._landed)
            self._sent(st, task)

    def _landed(self, task: asyncio.Task[wire.Response]) -> None:
        self._arrived.set()

    def _collect(self) -> None:
        """Take every finished fetch; start the next one for each at once."""
        for st in list(self.states.values()):
            task = st.in_flight
            if task is None or not task.done() or st.fetched is not None:
                continue
            st.in_flight = None
            if task.cancelled():
                st.stale = False
                continue
            exc = task.exception()
            if exc is not None:
                if isinstance(
                    exc, OSError | ValueError | asyncio.IncompleteReadError | TimeoutError
                ):
                    if st.conn is not None:
                        st.conn.close()
                    self._on_failure(st, exc)
                    continue
                raise exc
            self._on_answer(st, st.asked, task.result())
        self._start_fetches()

    async def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> list[ConsumerRecord]:
        return await self._deserialized_async(
            as_records(await self._poll(timeout_ms, max_records, False))
        )

    async def poll_columns(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> list[RecordColumns]:
        return as_columns(await self._poll(timeout_ms, max_records, True))

    async def _poll(
        self, timeout_ms: int, max_records: int | None, columnar: bool
    ) -> list[Decoded]:
        self._check_open()
        limit = max_records or self.max_poll_records
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            await self._run(self._before_fetch())
            self._collect()
            records = self._drain(limit, columnar)
            self._start_fetches()
            if records:
                return records
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            if self._lookup_due():
                continue  # an answer asked for a reset: look the offset up now
            self._arrived.clear()
            if any(st.in_flight is not None and st.in_flight.done() for st in self.states.values()):
                continue
            await wait_event(self._arrived, self._wait_s(remaining))

    async def close(self) -> None:
        if self.closed:
            return
        group = self._group
        if group is not None:
            try:
                await self._run(self._closing(group))
            finally:
                await group.close(leave=True)
        self.closed = True
        for st in self.states.values():
            self._drop(st)
        await self._client.aclose()

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
