"""Consumer: the blocking shell, without threads of its own.

A fetch request is written at once; the broker's answer waits in the socket
buffers, and the next ``poll`` reads it with one ``recv_into`` (a reader
thread would have to win the GIL back from the decoding thread for every
``recv``). A selector says which answers arrived. Every rule is in
:class:`~app.client.consumer.base.ConsumerBase`; this module only drives its
flows with plain calls (:meth:`Consumer._run`) and owns the connections
(:class:`app.wire.FetchConnection`, one per assigned partition).

Group membership: :class:`~app.client.group.GroupMembership` heartbeats from a
thread; ``poll`` applies what it learnt.
"""

from __future__ import annotations

import contextlib
import selectors
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar, Unpack

from app import wire
from app.client import _cluster, _http
from app.client._cluster import Bootstrap
from app.client._drive import drive_sync
from app.client.consumer.base import BeatNow, ConsumerBase, Flow, Op
from app.client.consumer.core import ConsumerSettings
from app.client.consumer.records import Decoded, RecordColumns, as_columns, as_records
from app.client.consumer.state import PartitionState
from app.client.group import GroupMembership
from app.client.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition

T = TypeVar("T")


class Consumer(ConsumerBase[GroupMembership]):
    """Blocking consumer of assigned partitions.

    >>> with Consumer("http://127.0.0.1:8080", auto_offset_reset="earliest") as c:  # doctest: +SKIP
    ...     c.assign([TopicPartition("orders", 0)])
    ...     for record in c.poll(timeout_ms=1000):
    ...         print(record.offset, record.value)

    Not thread-safe (like Kafka's): one thread polls. Each assigned partition
    has its own keep-alive connection, so a long poll on a quiet partition
    never holds up a busy one. ``auto_offset_reset``
    decides where a partition without a position starts and what happens
    when a position falls out of the log: ``earliest``, ``latest`` or
    ``none`` (raise :class:`~app.common.errors.OffsetOutOfRange` /
    :class:`~app.client.errors.NoOffsetForPartition`). The keyword settings and their
    defaults: :class:`~app.client.consumer.core.ConsumerSettings`.

    ``isolation_level`` is Kafka's: ``read_uncommitted`` (the default, as Kafka's
    consumer) hands out every record up to the high watermark; ``read_committed``
    only those below the last stable offset that no aborted transaction holds
    (the broker lists the aborted transactions with each answer and the consumer
    drops their batches, :mod:`app.common.isolation`), so a transaction still open
    holds the partition at its first offset until it ends. Positions move past
    dropped batches and transaction markers; ``latest`` (``seek_to_end``,
    ``auto_offset_reset``) is the last stable offset.
    """

    def __init__(self, url: Bootstrap, **settings: Unpack[ConsumerSettings]) -> None:
        super().__init__(url, **settings)
        self._client = _http.sync_client(
            self.url, self._request_timeout_ms, authorization=self.cluster.authorization
        )
        self._selector = selectors.DefaultSelector()

    # ---- driving flows ----

    def _run(self, flow: Flow[T]) -> T:
        """Make the calls ``flow`` yields, one after the other; its return value."""
        return drive_sync(flow, self._perform)

    def _perform(self, op: Op) -> Any:
        if isinstance(op, BeatNow):
            return self._membership().beat_now(op.timeout_s)
        return _cluster.run_sync(self._client, self._route(op))

    def _join(self, group_id: str, settings: dict[str, Any]) -> GroupMembership:
        group = GroupMembership(self.cluster, group_id, **settings)
        group.start()
        return group

    # ---- groups, positions, offsets: the flows, driven ----

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (the next offset to read), by default every current position.

        Fenced by the member epoch: a stale epoch heartbeats and retries once;
        a member the coordinator no longer knows raises (its partitions are
        dropped and the consumer rejoins; records after the last commit will
        be read again by whoever gets them).
        """
        self._run(self._commit_flow(offsets))

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offset per partition (None where nothing is committed)."""
        return self._run(self._committed_flow(partitions))

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``poll`` will return for ``tp``."""
        return self._run(self._position_flow(tp))

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first offset whose timestamp is >= the given one (ms), or None."""
        return self._run(self._offsets_for_times_flow(timestamps))

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._run(self._offsets_flow(partitions, "earliest"))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition: the offset the next record will get."""
        return self._run(self._offsets_flow(partitions, "latest"))

    # ---- fetching ----

    def _connect(self, url: str) -> wire.FetchConnection:
        return wire.FetchConnection(self._endpoint(url), self.request_timeout_s)

    def _drop(self, st: PartitionState) -> None:
        if st.conn is not None:
            if st.conn.sock is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(st.conn.sock)
            st.conn.close()
        st.in_flight = None
        st.stale = False

    def _send_fetches(self) -> None:
        for st in self._due_fetches():
            conn = st.conn
            try:
                conn.send(self._target(st))
            except OSError as exc:
                self._drop(st)
                self._on_failure(st, exc)
                continue
            self._sent(st, True)
            assert conn.sock is not None
            self._selector.register(conn.sock, selectors.EVENT_READ, st)

    def _read(self, st: PartitionState) -> None:
        conn = st.conn
        asked = st.asked
        assert conn is not None and conn.sock is not None
        self._selector.unregister(conn.sock)
        st.in_flight = None
        try:
            response = conn.read_response()
        except (OSError, ValueError) as exc:
            self._drop(st)
            self._on_failure(st, exc)
            return
        self._on_answer(st, asked, response)
        # Pipelining: the next fetch goes out before the caller sees these records.
        self._send_fetches()

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions, waiting up to ``timeout_ms`` for some.

        Records of one partition come in offset order; partitions take turns
        across calls. An empty list means nothing arrived in time.
        """
        return self._deserialized_sync(as_records(self._poll(timeout_ms, max_records, False)))

    def poll_columns(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> list[RecordColumns]:
        """Like :meth:`poll`, as one :class:`RecordColumns` per partition run: the fast path."""
        return as_columns(self._poll(timeout_ms, max_records, True))

    def _poll(self, timeout_ms: int, max_records: int | None, columnar: bool) -> list[Decoded]:
        self._check_open()
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._run(self._before_fetch())
            records = self._drain(limit, columnar)
            self._send_fetches()
            if records:
                return records
            # Nothing decoded is left, so every answer in flight may be read now.
            ready = [
                st
                for st in self.states.values()
                if st.in_flight is not None and st.conn is not None and st.conn.has_buffered()
            ]
            if not ready:
                wait = self._wait_s(deadline - time.monotonic())
                if self._selector.get_map():
                    ready = [key.data for key, _ in self._selector.select(max(0.0, wait))]
                elif wait > 0:
                    time.sleep(wait)
            for st in ready:
                self._read(st)
            if not ready and time.monotonic() >= deadline:
                return []

    def close(self) -> None:
        """Leave the group (after a final auto-commit and ``on_revoked``) and close connections."""
        if self.closed:
            return
        group = self._group
        if group is not None:
            try:
                self._run(self._closing(group))
            finally:
                group.close(leave=True)
        self.closed = True
        for st in self.states.values():
            self._drop(st)
        self._selector.close()
        self._client.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
