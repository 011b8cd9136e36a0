"""Consumer: assigned partitions, positions the application owns, fetches kept in flight.

A position is the offset of the next record ``poll`` hands out; the fetch
offset runs ahead of it. Per partition there is at most one fetch in flight
and one answer being handed out: as soon as an answer is read, the next
fetch (from the answer's end) is sent, so the broker prepares it while the
application works through the records just read.

:class:`Consumer` does this without threads: the request is written at
once, the broker's answer waits in the socket buffers, and the next
``poll`` reads it with one ``recv_into`` (a reader thread would have to win
the GIL back from the decoding thread for every ``recv``).
:class:`AsyncConsumer` reads answers in tasks on the caller's loop.

Records are decoded in bulk, a whole RecordBatch at a time, with the cyclic
GC paused for that loop (decoding ran ~1.5 M records/s with collections
inside the loop and ~4 M without, on this project's machine). What remains
is the collector walking the records the caller still holds: ConsumerRecord
is a tuple subclass, which CPython never untracks, and that walk was ~25% of
``poll``. :meth:`Consumer.poll_columns` avoids it and the per-record tuple:
parallel lists per partition, about twice the rate of ``poll``.

Group membership (:meth:`Consumer.subscribe`, ``commit``, ``committed``):
:mod:`app.client.group` heartbeats from a thread (:class:`AsyncConsumer`: from a task), and ``poll`` applies the
assignment it learnt (revocations first), so the rebalance callbacks run
where the application polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
import selectors
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from app import wire
from app.client import _cluster, _http
from app.client._cluster import Bootstrap, Cluster, error_code
from app.client.errors import (
    ClientError,
    ConsumerClosed,
    NoOffsetForPartition,
    error_from_body,
    is_retriable,
)
from app.client.group import (
    AsyncGroupMembership,
    GroupMembership,
    commit_call,
    committed_call,
)
from app.client.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from app.common.batch import BatchHeader, RecordBatchReader, compute_crc, iter_headers
from app.common.errors import (
    FencedMemberEpoch,
    LogbusError,
    OffsetOutOfRange,
    StaleMemberEpoch,
    StoredBatchCorrupt,
    UnknownMemberId,
)

RESETS = ("earliest", "latest", "none")
log = logging.getLogger(__name__)
RebalanceCallback = Callable[[set[TopicPartition]], None]
# How long a grouped poll waits at most before looking at the heartbeat thread's news.
_GROUP_TICK_S = 0.05
_new_tuple = tuple.__new__
T = TypeVar("T")


def _records(
    topic: str, partition: int, data: bytes, header: BatchHeader, min_offset: int
) -> list[ConsumerRecord]:
    """Every record of one batch at or after ``min_offset`` (decompressed as needed)."""
    ts_type = header.timestamp_type
    batch = RecordBatchReader(data)
    cr = ConsumerRecord
    enabled = gc.isenabled()
    gc.disable()
    try:
        return [
            _new_tuple(
                cr,
                (
                    topic,
                    partition,
                    r.offset,
                    r.timestamp,
                    ts_type,
                    r.key,
                    r.value,
                    tuple(h) if (h := r.headers) else (),
                ),
            )
            for r in batch
            if r.offset >= min_offset
        ]
    finally:
        if enabled:
            gc.enable()


@dataclass(slots=True)
class RecordColumns:
    """Records of one partition as parallel lists: the bulk form :meth:`Consumer.poll_columns` returns.

    No object per record, so neither building nor collecting them costs per
    record: about twice the rate of :class:`ConsumerRecord` tuples. Row ``i``
    is ``offsets[i], timestamps[i], keys[i], values[i], headers[i]``; offsets
    increase. ``timestamp_type`` holds for every row (a change starts a new
    ``RecordColumns``).
    """

    topic: str
    partition: int
    timestamp_type: int
    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[tuple[tuple[str, bytes | None], ...]]

    def __len__(self) -> int:
        return len(self.offsets)

    def records(self) -> list[ConsumerRecord]:
        """The same rows as :class:`ConsumerRecord` tuples."""
        t, p, tt = self.topic, self.partition, self.timestamp_type
        return [
            ConsumerRecord(t, p, o, ts, tt, k, v, h)
            for o, ts, k, v, h in zip(
                self.offsets, self.timestamps, self.keys, self.values, self.headers, strict=True
            )
        ]

    def _slice(self, start: int, stop: int) -> RecordColumns:
        return RecordColumns(
            self.topic,
            self.partition,
            self.timestamp_type,
            self.offsets[start:stop],
            self.timestamps[start:stop],
            self.keys[start:stop],
            self.values[start:stop],
            self.headers[start:stop],
        )

    def _extend(self, other: RecordColumns) -> None:
        self.offsets += other.offsets
        self.timestamps += other.timestamps
        self.keys += other.keys
        self.values += other.values
        self.headers += other.headers


def _columns(
    topic: str, partition: int, data: bytes, header: BatchHeader, min_offset: int
) -> RecordColumns:
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[tuple[tuple[str, bytes | None], ...]] = []
    add_offset, add_ts = offsets.append, timestamps.append
    add_key, add_value, add_headers = keys.append, values.append, headers.append
    for r in RecordBatchReader(data):
        offset = r.offset
        if offset >= min_offset:
            add_offset(offset)
            add_ts(r.timestamp)
            add_key(r.key)
            add_value(r.value)
            add_headers(tuple(h) if (h := r.headers) else ())
    return RecordColumns(
        topic, partition, header.timestamp_type, offsets, timestamps, keys, values, headers
    )


Decoded = list[ConsumerRecord] | RecordColumns


def _offset_at(decoded: Decoded, i: int) -> int:
    return decoded.offsets[i] if isinstance(decoded, RecordColumns) else decoded[i].offset


def _convert(decoded: Decoded, columnar: bool) -> Decoded:
    """The other form of a batch half handed out when the caller switches poll flavours."""
    if columnar == isinstance(decoded, RecordColumns):
        return decoded
    if isinstance(decoded, RecordColumns):
        return decoded.records()
    first = decoded[0]
    return RecordColumns(
        first.topic,
        first.partition,
        first.timestamp_type,
        [r.offset for r in decoded],
        [r.timestamp for r in decoded],
        [r.key for r in decoded],
        [r.value for r in decoded],
        [r.headers for r in decoded],
    )


class _Fetched:
    """One fetch answer being handed out, batch by batch."""

    __slots__ = ("batches", "data", "decoded", "next_batch", "taken")

    def __init__(self, data: bytes | bytearray, batches: list[tuple[int, BatchHeader]]) -> None:
        self.data = memoryview(data)
        self.batches = batches
        self.next_batch = 0
        self.decoded: Decoded = []
        self.taken = 0


class _PartitionState:
    __slots__ = (
        "asked",
        "backoff_until",
        "conn",
        "fetch_offset",
        "fetched",
        "in_flight",
        "position",
        "redirect",
        "redirected",
        "reset",
        "stale",
        "tp",
        "url",
    )

    def __init__(self, tp: TopicPartition, reset: str | None) -> None:
        self.tp = tp
        self.position: int | None = None
        # A reset still to be looked up: "earliest" or "latest".
        self.reset: str | None = reset
        self.fetch_offset: int | None = None
        self.fetched: _Fetched | None = None
        self.in_flight: Any = None  # True (sync) or the task reading the answer (async)
        self.asked = -1  # the fetch offset of the request in flight
        self.stale = False  # the answer in flight was asked before a seek: drop it
        self.conn: Any = None
        self.backoff_until = 0.0
        self.url: str | None = None  # the broker ``conn`` is (or was) connected to
        # The leader a 307/421 named, for the next fetch only (None: the metadata's leader).
        self.redirect: str | None = None
        self.redirected = False  # the fetch in flight went to such a leader

    def set_position(self, offset: int) -> None:
        self.position = offset
        self.fetch_offset = offset
        self.reset = None
        self.fetched = None
        if self.in_flight is not None:
            self.stale = True


class _ConsumerCore:
    """Everything but I/O: assignment, positions, what to fetch, answers to records."""

    def __init__(
        self,
        url: Bootstrap,
        *,
        auto_offset_reset: str,
        fetch_min_bytes: int,
        fetch_max_wait_ms: int,
        max_partition_fetch_bytes: int,
        max_poll_records: int,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        check_crcs: bool,
        metadata_max_age_ms: int,
    ) -> None:
        if auto_offset_reset not in RESETS:
            raise ValueError(
                f"auto_offset_reset must be one of {RESETS}, got {auto_offset_reset!r}"
            )
        if max_poll_records < 1 or max_partition_fetch_bytes < 1:
            raise ValueError("max_poll_records and max_partition_fetch_bytes must be positive")
        self.cluster = Cluster(url, metadata_max_age_ms)
        self.url = self.cluster.bootstrap[0]
        self._endpoints: dict[str, wire.Endpoint] = {}
        # Look the leaders up again before the next fetches (a partition moved, a broker
        # went away); not more often than retry_backoff_ms.
        self._refresh_wanted = False
        self._refresh_not_before = 0.0
        self.auto_offset_reset = auto_offset_reset
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        # A long poll must be answered before the request times out.
        self.request_timeout_s = max(request_timeout_ms, fetch_max_wait_ms + 5_000) / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.check_crcs = check_crcs
        self.states: dict[TopicPartition, _PartitionState] = {}
        self._rotation = 0
        self.closed = False
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._on_assigned: RebalanceCallback | None = None
        self._on_revoked: RebalanceCallback | None = None
        self._auto_commit_s: float | None = None
        self._next_auto_commit = 0.0

    # ---- group membership: the parts both flavours share ----

    def _subscription(
        self,
        subscribed: bool,
        topics: Iterable[str] | str | re.Pattern[str] | None,
        pattern: str | re.Pattern[str] | None,
        on_assigned: RebalanceCallback | None,
        on_revoked: RebalanceCallback | None,
        enable_auto_commit: bool,
        auto_commit_interval_ms: int,
    ) -> tuple[list[str] | None, str | None]:
        """Check a subscribe call and keep its settings; the topic names or the regex."""
        self._check_open()
        if subscribed:
            raise ClientError("already subscribed; close() and use a new consumer to change")
        if self.states:
            raise ClientError("the consumer has assigned partitions: subscribe or assign, not both")
        if isinstance(topics, re.Pattern):
            pattern, topics = topics, None
        names = [topics] if isinstance(topics, str) else None if topics is None else list(topics)
        regex = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._auto_commit_s = auto_commit_interval_ms / 1000 if enable_auto_commit else None
        self._next_auto_commit = time.monotonic() + (self._auto_commit_s or 0)
        return names, regex

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {
            tp: st.position
            for tp in partitions
            if (st := self.states.get(tp)) is not None and st.position is not None
        }

    def _auto_commit_due(self) -> bool:
        if self._auto_commit_s is None or time.monotonic() < self._next_auto_commit:
            return False
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        return True

    # ---- assignment and positions ----

    def _check_open(self) -> None:
        if self.closed:
            raise ConsumerClosed("the consumer is closed")

    def _assign(self, partitions: Iterable[TopicPartition]) -> list[_PartitionState]:
        """Set the assignment; return the states dropped (their connections to close)."""
        self._check_open()
        wanted = [TopicPartition(tp.topic, int(tp.partition)) for tp in partitions]
        dropped = [st for tp, st in self.states.items() if tp not in wanted]
        initial = None if self.auto_offset_reset == "none" else self.auto_offset_reset
        self.states = {tp: self.states.get(tp) or _PartitionState(tp, initial) for tp in wanted}
        return dropped

    def assignment(self) -> set[TopicPartition]:
        return set(self.states)

    def _state(self, tp: TopicPartition) -> _PartitionState:
        st = self.states.get(tp)
        if st is None:
            raise ValueError(f"{tp} is not assigned to this consumer")
        return st

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record ``poll`` returns for ``tp``."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        st = self._state(tp)
        self._abandon(st)
        st.set_position(offset)

    def _abandon(self, st: _PartitionState) -> None:
        """Forget the fetch in flight: after a seek its answer is of no use."""
        if st.in_flight is not None:
            st.stale = True

    def _seek_to(self, where: str, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        for tp in list(partitions) or list(self.states):
            st = self._state(tp)
            self._abandon(st)
            st.position = st.fetch_offset = None
            st.fetched = None
            st.reset = where

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Start from the log start (all assigned partitions when none are named); looked up lazily."""
        self._seek_to("earliest", partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Start after the last record now in the log (the high watermark); looked up lazily."""
        self._seek_to("latest", partitions)

    def _needs_lookup(self) -> list[_PartitionState]:
        out = []
        for st in self.states.values():
            if st.position is None:
                if st.reset is None:
                    raise NoOffsetForPartition(
                        f"no position for {st.tp.topic}-{st.tp.partition} and "
                        "auto_offset_reset='none': seek() first"
                    )
                out.append(st)
        return out

    # ---- fetching ----

    def _target(self, st: _PartitionState) -> str:
        assert st.fetch_offset is not None
        return (
            f"/topics/{quote(st.tp.topic, safe='')}/partitions/{st.tp.partition}/records"
            f"?offset={st.fetch_offset}&max_bytes={self.max_partition_fetch_bytes}"
            f"&min_bytes={self.fetch_min_bytes}&max_wait_ms={self.fetch_max_wait_ms}"
        )

    def _endpoint(self, url: str) -> wire.Endpoint:
        endpoint = self._endpoints.get(url)
        if endpoint is None:
            endpoint = self._endpoints[url] = wire.Endpoint.parse(url)
        return endpoint

    def _fetch_url(self, st: _PartitionState) -> str:
        """Where ``st``'s next fetch goes: a leader a 307/421 just named, else the metadata's."""
        url, st.redirect = st.redirect, None
        st.redirected = url is not None
        return url or self.cluster.leader_url(st.tp)

    def _refresh_topics(self) -> list[str] | None:
        """The assigned topics when their metadata should be looked up now, else None."""
        if not self.states:
            return None
        topics = sorted({tp.topic for tp in self.states})
        if not (self._refresh_wanted or self.cluster.needs_refresh(topics)):
            return None
        now = time.monotonic()
        if now < self._refresh_not_before:
            return None
        self._refresh_not_before = now + self.retry_backoff_s
        self._refresh_wanted = False
        return topics

    def _refresh_failed(self, exc: LogbusError) -> None:
        log.debug("metadata refresh failed: %s", exc)
        self._refresh_wanted = self.cluster.is_multi()

    def _wants_fetch(self, st: _PartitionState, now: float) -> bool:
        # One answer being handed out plus one in flight per partition.
        return st.in_flight is None and st.fetch_offset is not None and st.backoff_until <= now

    def _on_answer(self, st: _PartitionState, asked: int, response: wire.Response) -> None:
        """Take one fetch answer for ``st`` (asked at offset ``asked``)."""
        if st.stale or asked != st.fetch_offset:
            st.stale = False
            return
        if response.status == 200:
            body = response.body
            batches = list(iter_headers(body))
            if self.check_crcs:
                for i, (pos, header) in enumerate(batches):
                    if compute_crc(body, pos, header.size) == header.crc:
                        continue
                    if i == 0:
                        # Nothing good before it: the application hears of the damage now,
                        # with the range to skip (seek past last_offset to go on).
                        raise StoredBatchCorrupt(
                            st.tp.topic, st.tp.partition, header.base_offset, header.last_offset
                        )
                    # Hand out the good batches before it; the next fetch starts at the
                    # damaged one and reports it then.
                    del batches[i:]
                    break
            if batches:
                st.fetch_offset = batches[-1][1].next_offset
                st.fetched = _Fetched(body, batches)
            return
        error = error_from_body(response.status, bytes(response.body))
        code = error_code(error)
        if code == "NOT_LEADER_OR_FOLLOWER":
            # Stale metadata (never a redirect to follow blindly): the named leader gets
            # the next fetch at once, from the same offset, and the metadata is refreshed.
            self._refresh_wanted = True
            hint = self.cluster.leader_hint(st.tp, error)
            if hint is not None and hint != st.url and not st.redirected:
                # Once in a row: two brokers naming each other are waited out.
                st.redirect = hint
                return
            st.backoff_until = time.monotonic() + self.retry_backoff_s
            return
        if code in _cluster.LEADER_MOVED or code in ("FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH"):
            self.cluster.mark_stale(st.tp.topic)
            self._refresh_wanted = True
        if isinstance(error, OffsetOutOfRange) and st.position == asked:
            if self.auto_offset_reset == "none":
                raise error
            # Kafka's rule: fall back to the policy when the position left the log.
            st.position = st.fetch_offset = None
            st.fetched = None
            st.reset = self.auto_offset_reset
            return
        if is_retriable(error):
            st.backoff_until = time.monotonic() + self.retry_backoff_s
            return
        raise error

    def _on_failure(self, st: _PartitionState, exc: BaseException) -> None:
        st.backoff_until = time.monotonic() + self.retry_backoff_s
        st.stale = False
        st.redirect = None
        if st.url is not None:
            self.cluster.failed(st.url)
        if self.cluster.is_multi():
            # The leader may be down: the other brokers know who leads now.
            self.cluster.mark_stale(st.tp.topic)
            self._refresh_wanted = True

    def _drain(self, max_records: int, columnar: bool) -> list[Decoded]:
        """Up to ``max_records`` decoded records as pieces in hand-out order, partitions in turn."""
        out: list[Decoded] = []
        count = 0
        states = list(self.states.values())
        if not states:
            return out
        start = self._rotation % len(states)
        self._rotation += 1
        decode = _columns if columnar else _records
        for st in states[start:] + states[:start]:
            fetched = st.fetched
            while fetched is not None and count < max_records and st.position is not None:
                decoded = fetched.decoded
                if fetched.taken >= len(decoded):
                    if fetched.next_batch >= len(fetched.batches):
                        break
                    pos, header = fetched.batches[fetched.next_batch]
                    fetched.next_batch += 1
                    fetched.taken = 0
                    if header.last_offset < st.position or header.is_control:
                        decoded = []
                    else:
                        data = bytes(fetched.data[pos : pos + header.size])
                        decoded = decode(st.tp.topic, st.tp.partition, data, header, st.position)
                    fetched.decoded = decoded
                    if not len(decoded):
                        # Past the batch even if it held nothing for us (control, compacted).
                        st.position = max(st.position, header.next_offset)
                        continue
                elif columnar != isinstance(decoded, RecordColumns):
                    decoded = fetched.decoded = _convert(decoded, columnar)
                    if isinstance(decoded, RecordColumns):
                        decoded = fetched.decoded = decoded._slice(fetched.taken, len(decoded))
                    else:
                        decoded = fetched.decoded = decoded[fetched.taken :]
                    fetched.taken = 0
                n = min(max_records - count, len(decoded) - fetched.taken)
                if fetched.taken == 0 and n == len(decoded):
                    piece = decoded
                elif isinstance(decoded, RecordColumns):
                    piece = decoded._slice(fetched.taken, fetched.taken + n)
                else:
                    piece = decoded[fetched.taken : fetched.taken + n]
                out.append(piece)
                count += n
                fetched.taken += n
                st.position = _offset_at(piece, n - 1) + 1
                if fetched.taken >= len(decoded):
                    last = fetched.batches[fetched.next_batch - 1][1]
                    st.position = max(st.position, last.next_offset)
            if (
                fetched is not None
                and fetched.next_batch >= len(fetched.batches)
                and fetched.taken >= len(fetched.decoded)
            ):
                st.fetched = None
            if count >= max_records:
                break
        return out

    @staticmethod
    def _as_records(pieces: list[Decoded]) -> list[ConsumerRecord]:
        if len(pieces) == 1 and isinstance(pieces[0], list):
            return pieces[0]
        out: list[ConsumerRecord] = []
        for piece in pieces:
            assert isinstance(piece, list)
            out.extend(piece)
        return out

    @staticmethod
    def _as_columns(pieces: list[Decoded]) -> list[RecordColumns]:
        out: list[RecordColumns] = []
        for piece in pieces:
            assert isinstance(piece, RecordColumns)
            last = out[-1] if out else None
            if (
                last is not None
                and last.partition == piece.partition
                and last.topic == piece.topic
                and last.timestamp_type == piece.timestamp_type
            ):
                last._extend(piece)
            else:
                # A copy: the batch it came from may still hand out the rest later.
                out.append(piece._slice(0, len(piece)))
        return out


def _offsets_result(found: tuple[int, int]) -> OffsetAndTimestamp | None:
    offset, timestamp = found
    return None if offset < 0 else OffsetAndTimestamp(offset, timestamp)


class Consumer(_ConsumerCore):
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
    :class:`~app.client.errors.NoOffsetForPartition`).
    """

    def __init__(
        self,
        url: Bootstrap,
        *,
        auto_offset_reset: str = "latest",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        max_partition_fetch_bytes: int = 8 * 1024 * 1024,
        max_poll_records: int = 10_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        check_crcs: bool = True,
        metadata_max_age_ms: int = 300_000,
    ) -> None:
        super().__init__(
            url,
            auto_offset_reset=auto_offset_reset,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_wait_ms=fetch_max_wait_ms,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            max_poll_records=max_poll_records,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            check_crcs=check_crcs,
            metadata_max_age_ms=metadata_max_age_ms,
        )
        self._client = _http.sync_client(self.url, request_timeout_ms)
        self._selector = selectors.DefaultSelector()
        self._group: GroupMembership | None = None

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing any earlier assignment)."""
        if self._group is not None:
            raise ClientError("the consumer is subscribed to a group: the group assigns")
        for st in self._assign(partitions):
            self._drop_connection(st)

    def _set_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for st in self._assign(partitions):
            self._drop_connection(st)

    # ---- consumer groups ----

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern[str] | None = None,
        *,
        group_id: str,
        pattern: str | re.Pattern[str] | None = None,
        on_assigned: RebalanceCallback | None = None,
        on_revoked: RebalanceCallback | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        group_instance_id: str | None = None,
        server_assignor: str | None = None,
        rebalance_timeout_ms: int | None = None,
    ) -> None:
        """Join ``group_id``; the group's coordinator decides which partitions ``poll`` reads.

        ``topics`` is a list of names (a single name or a compiled regex also
        work), or ``pattern`` a regex matched against whole topic names.
        A heartbeat thread keeps the membership; assignment changes are applied
        inside ``poll``: revoked partitions are committed (with auto-commit),
        ``on_revoked`` is called, and only then released to the coordinator;
        new partitions start at the group's committed offset (else
        ``auto_offset_reset``) and ``on_assigned`` is called before records
        of them are returned. A member the coordinator fenced (missed
        heartbeats, an old epoch) loses all its partitions without a commit:
        ``on_revoked`` is called for them (there is no separate ``on_lost``)
        and the consumer rejoins. Auto-commit commits the positions of the
        records already handed out, at the start of ``poll`` once per
        ``auto_commit_interval_ms`` and on ``close``: at-least-once.
        ``group_instance_id`` makes the member static: ``close`` keeps its
        partitions until the session timeout, for a restart with the same id.
        """
        names, regex = self._subscription(
            self._group is not None,
            topics,
            pattern,
            on_assigned,
            on_revoked,
            enable_auto_commit,
            auto_commit_interval_ms,
        )
        self._group = GroupMembership(
            self.cluster,
            group_id,
            topics=names,
            pattern=regex,
            instance_id=group_instance_id,
            server_assignor=server_assignor,
            rebalance_timeout_ms=rebalance_timeout_ms,
            request_timeout_ms=self._request_timeout_ms,
            retry_backoff_ms=self._retry_backoff_ms,
        )
        self._group.start()

    @property
    def group_id(self) -> str | None:
        return None if self._group is None else self._group.group_id

    def member(self) -> tuple[str, int]:
        """(member id, member epoch) as the coordinator last answered; ("", 0) before joining."""
        return ("", 0) if self._group is None else self._group.identity()

    def _membership(self) -> GroupMembership:
        if self._group is None:
            raise ClientError("subscribe(group_id=...) first: commits belong to a group")
        return self._group

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (the next offset to read), by default every current position.

        Fenced by the member epoch: a stale epoch heartbeats and retries once;
        a member the coordinator no longer knows raises (its partitions are
        dropped and the consumer rejoins; records after the last commit will
        be read again by whoever gets them).
        """
        self._check_open()
        group = self._membership()
        wanted = dict(offsets) if offsets is not None else self._positions(self.states)
        if wanted:
            self._commit(group, wanted)

    def _commit(self, group: GroupMembership, offsets: dict[TopicPartition, int]) -> None:
        for attempt in range(2):
            member_id, epoch = group.identity()
            try:
                self._group_call(group, commit_call(group.group_id, member_id, epoch, offsets))
                return
            except StaleMemberEpoch:
                if attempt:
                    raise
                group.beat_now(self._request_timeout_ms / 1000)
            except (FencedMemberEpoch, UnknownMemberId) as exc:
                group.mark_lost(exc)
                raise

    def _group_call(self, group: GroupMembership, call: _http.Call[T]) -> T:
        """A call at the group's coordinator (found again when it moves)."""
        return _cluster.run_group_sync(
            self._client, self.cluster, group.group_id, call, self.retry_backoff_s
        )

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offset per partition (None where nothing is committed)."""
        self._check_open()
        group = self._membership()
        wanted = list(partitions)
        if not wanted:
            return {}
        found = self._group_call(group, committed_call(group.group_id, (tp.topic for tp in wanted)))
        return {tp: found.get(tp) for tp in wanted}

    def _group_tick(self) -> None:
        """Apply what the heartbeat thread learnt; auto-commit when due."""
        group = self._group
        if group is None:
            return
        lost, target = group.take()
        if lost:
            dropped = set(self.states)
            self._set_partitions([])
            group.set_owned((), after_loss=True)
            if dropped and self._on_revoked is not None:
                self._on_revoked(dropped)
        if target is not None:
            current = set(self.states)
            revoked = current - target
            if revoked:
                if self._auto_commit_s is not None:
                    self._auto_commit(self._positions(revoked))
                if self._on_revoked is not None:
                    self._on_revoked(revoked)
                current -= revoked
                self._set_partitions(sorted(current))
                group.set_owned(current)
            added = target - current
            if added:
                self._take_over(group, added)
        if self._auto_commit_due():
            self._auto_commit(self._positions(self.states))

    def _take_over(self, group: GroupMembership, added: set[TopicPartition]) -> None:
        committed = self.committed(added)
        self._set_partitions(sorted(set(self.states) | added))
        for tp, offset in committed.items():
            if offset is not None:
                self.states[tp].set_position(offset)
        group.set_owned(self.states)
        if self._on_assigned is not None:
            self._on_assigned(added)

    def _auto_commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets or self._group is None:
            return
        try:
            self._commit(self._group, offsets)
        except LogbusError as exc:
            # Not fatal: the next commit covers these positions, and a lost member
            # was marked for rejoining by _commit.
            log.warning("auto-commit to group %s failed: %s", self._group.group_id, exc)

    def _abandon(self, st: _PartitionState) -> None:
        # A long poll may hold the connection for max_wait_ms; a new connection is
        # cheaper than waiting for an answer nobody wants.
        if st.in_flight is not None:
            self._drop_connection(st)

    def _drop_connection(self, st: _PartitionState) -> None:
        if st.conn is not None:
            if st.conn.sock is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(st.conn.sock)
            st.conn.close()
        st.in_flight = None
        st.stale = False

    def _list_offset(self, tp: TopicPartition, at: str | int) -> tuple[int, int]:
        return _cluster.run_leader_sync(
            self._client,
            self.cluster,
            tp,
            _http.list_offset_call(tp.topic, tp.partition, at),
            self.retry_backoff_s,
        )

    def _refresh(self) -> None:
        topics = self._refresh_topics()
        if topics is not None:
            try:
                _cluster.refresh_sync(self._client, self.cluster, topics)
            except LogbusError as exc:
                self._refresh_failed(exc)

    def _lookup_positions(self) -> None:
        for st in self._needs_lookup():
            assert st.reset is not None
            offset, _ = self._list_offset(st.tp, st.reset)
            st.set_position(offset)

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``poll`` will return for ``tp``."""
        self._check_open()
        st = self._state(tp)
        if st.position is None:
            self._lookup_positions()
        assert st.position is not None
        return st.position

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first offset whose timestamp is >= the given one (ms), or None."""
        return {tp: _offsets_result(self._list_offset(tp, ts)) for tp, ts in timestamps.items()}

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._list_offset(tp, "earliest")[0] for tp in partitions}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition: the offset the next record will get."""
        return {tp: self._list_offset(tp, "latest")[0] for tp in partitions}

    def _send_fetches(self) -> None:
        now = time.monotonic()
        for st in self.states.values():
            if not self._wants_fetch(st, now):
                continue
            url = self._fetch_url(st)
            if st.conn is not None and st.url != url:
                self._drop_connection(st)  # the partition moved (nothing is in flight)
                st.conn = None
            if st.conn is None:
                st.conn = wire.FetchConnection(self._endpoint(url), self.request_timeout_s)
                st.url = url
            try:
                st.conn.send(self._target(st))
            except OSError as exc:
                self._drop_connection(st)
                self._on_failure(st, exc)
                continue
            st.in_flight = True
            st.asked = -1 if st.fetch_offset is None else st.fetch_offset
            assert st.conn.sock is not None
            self._selector.register(st.conn.sock, selectors.EVENT_READ, st)

    def _read(self, st: _PartitionState) -> None:
        conn = st.conn
        asked = st.asked
        assert conn is not None and conn.sock is not None
        self._selector.unregister(conn.sock)
        st.in_flight = None
        try:
            response = conn.read_response()
        except (OSError, ValueError) as exc:
            self._drop_connection(st)
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
        return self._as_records(self._poll(timeout_ms, max_records, False))

    def poll_columns(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> list[RecordColumns]:
        """Like :meth:`poll`, as one :class:`RecordColumns` per partition run: the fast path."""
        return self._as_columns(self._poll(timeout_ms, max_records, True))

    def _poll(self, timeout_ms: int, max_records: int | None, columnar: bool) -> list[Decoded]:
        self._check_open()
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._group_tick()
            self._refresh()
            self._lookup_positions()
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
                now = time.monotonic()
                wait = deadline - now
                backoffs = [st.backoff_until for st in self.states.values() if st.in_flight is None]
                if backoffs and min(backoffs) > now:
                    wait = min(wait, min(backoffs) - now)
                if self._group is not None:
                    wait = min(wait, _GROUP_TICK_S)
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
                if self._auto_commit_s is not None:
                    self._auto_commit(self._positions(self.states))
                if self.states and self._on_revoked is not None and group.instance_id is None:
                    self._on_revoked(set(self.states))
            finally:
                group.close(leave=True)
        self.closed = True
        for st in self.states.values():
            self._drop_connection(st)
        self._selector.close()
        self._client.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncConsumer(_ConsumerCore):
    """The asyncio twin of :class:`Consumer`: ``await poll(...)``; fetch answers are read by tasks."""

    def __init__(
        self,
        url: Bootstrap,
        *,
        auto_offset_reset: str = "latest",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        max_partition_fetch_bytes: int = 8 * 1024 * 1024,
        max_poll_records: int = 10_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        check_crcs: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
        metadata_max_age_ms: int = 300_000,
    ) -> None:
        super().__init__(
            url,
            auto_offset_reset=auto_offset_reset,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_wait_ms=fetch_max_wait_ms,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            max_poll_records=max_poll_records,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            check_crcs=check_crcs,
            metadata_max_age_ms=metadata_max_age_ms,
        )
        self._transport = transport
        self._client = _http.async_client(self.url, request_timeout_ms, transport=transport)
        self._arrived = asyncio.Event()
        self._group: AsyncGroupMembership | None = None

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        if self._group is not None:
            raise ClientError("the consumer is subscribed to a group: the group assigns")
        self._set_partitions(partitions)

    def _set_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for st in self._assign(partitions):
            self._drop(st)

    # ---- consumer groups: as in Consumer, with a heartbeat task on the caller's loop ----

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern[str] | None = None,
        *,
        group_id: str,
        pattern: str | re.Pattern[str] | None = None,
        on_assigned: RebalanceCallback | None = None,
        on_revoked: RebalanceCallback | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        group_instance_id: str | None = None,
        server_assignor: str | None = None,
        rebalance_timeout_ms: int | None = None,
    ) -> None:
        """See :meth:`Consumer.subscribe`; call it from a running event loop.

        The callbacks are plain functions, called from within ``await poll()``.
        """
        names, regex = self._subscription(
            self._group is not None,
            topics,
            pattern,
            on_assigned,
            on_revoked,
            enable_auto_commit,
            auto_commit_interval_ms,
        )
        self._group = AsyncGroupMembership(
            self.cluster,
            group_id,
            topics=names,
            pattern=regex,
            instance_id=group_instance_id,
            server_assignor=server_assignor,
            rebalance_timeout_ms=rebalance_timeout_ms,
            request_timeout_ms=self._request_timeout_ms,
            retry_backoff_ms=self._retry_backoff_ms,
            transport=self._transport,
        )
        self._group.start()

    @property
    def group_id(self) -> str | None:
        return None if self._group is None else self._group.group_id

    def member(self) -> tuple[str, int]:
        return ("", 0) if self._group is None else self._group.identity()

    def _membership(self) -> AsyncGroupMembership:
        if self._group is None:
            raise ClientError("subscribe(group_id=...) first: commits belong to a group")
        return self._group

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        self._check_open()
        group = self._membership()
        wanted = dict(offsets) if offsets is not None else self._positions(self.states)
        if wanted:
            await self._commit(group, wanted)

    async def _commit(
        self, group: AsyncGroupMembership, offsets: dict[TopicPartition, int]
    ) -> None:
        for attempt in range(2):
            member_id, epoch = group.identity()
            try:
                await self._group_call(
                    group, commit_call(group.group_id, member_id, epoch, offsets)
                )
                return
            except StaleMemberEpoch:
                if attempt:
                    raise
                await group.beat_now(self._request_timeout_ms / 1000)
            except (FencedMemberEpoch, UnknownMemberId) as exc:
                group.mark_lost(exc)
                raise

    async def _group_call(self, group: AsyncGroupMembership, call: _http.Call[T]) -> T:
        return await _cluster.run_group_async(
            self._client, self.cluster, group.group_id, call, self.retry_backoff_s
        )

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        self._check_open()
        group = self._membership()
        wanted = list(partitions)
        if not wanted:
            return {}
        found = await self._group_call(
            group, committed_call(group.group_id, (tp.topic for tp in wanted))
        )
        return {tp: found.get(tp) for tp in wanted}

    async def _group_tick(self) -> None:
        group = self._group
        if group is None:
            return
        lost, target = group.take()
        if lost:
            dropped = set(self.states)
            self._set_partitions([])
            group.set_owned((), after_loss=True)
            if dropped and self._on_revoked is not None:
                self._on_revoked(dropped)
        if target is not None:
            current = set(self.states)
            revoked = current - target
            if revoked:
                if self._auto_commit_s is not None:
                    await self._auto_commit(self._positions(revoked))
                if self._on_revoked is not None:
                    self._on_revoked(revoked)
                current -= revoked
                self._set_partitions(sorted(current))
                group.set_owned(current)
            added = target - current
            if added:
                committed = await self.committed(added)
                self._set_partitions(sorted(set(self.states) | added))
                for tp, offset in committed.items():
                    if offset is not None:
                        self.states[tp].set_position(offset)
                group.set_owned(self.states)
                if self._on_assigned is not None:
                    self._on_assigned(added)
        if self._auto_commit_due():
            await self._auto_commit(self._positions(self.states))

    async def _auto_commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets or self._group is None:
            return
        try:
            await self._commit(self._group, offsets)
        except LogbusError as exc:
            log.warning("auto-commit to group %s failed: %s", self._group.group_id, exc)

    def _abandon(self, st: _PartitionState) -> None:
        if st.in_flight is not None:
            self._drop(st)

    def _drop(self, st: _PartitionState) -> None:
        if st.in_flight is not None:
            st.in_flight.cancel()
            st.in_flight = None
        if st.conn is not None:
            st.conn.close()
            st.conn = None
        st.stale = False

    async def _list_offset(self, tp: TopicPartition, at: str | int) -> tuple[int, int]:
        return await _cluster.run_leader_async(
            self._client,
            self.cluster,
            tp,
            _http.list_offset_call(tp.topic, tp.partition, at),
            self.retry_backoff_s,
        )

    async def _refresh(self) -> None:
        topics = self._refresh_topics()
        if topics is not None:
            try:
                await _cluster.refresh_async(self._client, self.cluster, topics)
            except LogbusError as exc:
                self._refresh_failed(exc)

    async def _lookup_positions(self) -> None:
        for st in self._needs_lookup():
            assert st.reset is not None
            offset, _ = await self._list_offset(st.tp, st.reset)
            st.set_position(offset)

    async def position(self, tp: TopicPartition) -> int:
        self._check_open()
        st = self._state(tp)
        if st.position is None:
            await self._lookup_positions()
        assert st.position is not None
        return st.position

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return {
            tp: _offsets_result(await self._list_offset(tp, ts)) for tp, ts in timestamps.items()
        }

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return {tp: (await self._list_offset(tp, "earliest"))[0] for tp in partitions}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: (await self._list_offset(tp, "latest"))[0] for tp in partitions}

    def _start_fetches(self) -> None:
        now = time.monotonic()
        for st in self.states.values():
            if not self._wants_fetch(st, now):
                continue
            url = self._fetch_url(st)
            if st.conn is not None and st.url != url:
                self._drop(st)  # the partition moved (nothing is in flight)
            if st.conn is None:
                st.conn = wire.async_connection(
                    self._endpoint(url), self.request_timeout_s, self.max_partition_fetch_bytes
                )
                st.url = url
            task = asyncio.get_running_loop().create_task(st.conn.fetch(self._target(st)))
            task.add_done_callback(self._landed)
            st.in_flight = task
            st.asked = -1 if st.fetch_offset is None else st.fetch_offset

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
        return self._as_records(await self._poll(timeout_ms, max_records, False))

    async def poll_columns(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> list[RecordColumns]:
        return self._as_columns(await self._poll(timeout_ms, max_records, True))

    async def _poll(
        self, timeout_ms: int, max_records: int | None, columnar: bool
    ) -> list[Decoded]:
        self._check_open()
        limit = max_records or self.max_poll_records
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            await self._group_tick()
            await self._refresh()
            await self._lookup_positions()
            self._collect()
            records = self._drain(limit, columnar)
            self._start_fetches()
            if records:
                return records
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            if any(st.position is None for st in self.states.values()):
                continue  # an answer asked for a reset: look the offset up now
            self._arrived.clear()
            if any(st.in_flight is not None and st.in_flight.done() for st in self.states.values()):
                continue
            backoffs = [
                st.backoff_until - time.monotonic()
                for st in self.states.values()
                if st.in_flight is None and st.backoff_until > time.monotonic()
            ]
            wait = min([remaining, *backoffs]) if backoffs else remaining
            if self._group is not None:
                wait = min(wait, _GROUP_TICK_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), max(0.0, wait))

    async def close(self) -> None:
        if self.closed:
            return
        group = self._group
        if group is not None:
            try:
                if self._auto_commit_s is not None:
                    await self._auto_commit(self._positions(self.states))
                if self.states and self._on_revoked is not None and group.instance_id is None:
                    self._on_revoked(set(self.states))
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
