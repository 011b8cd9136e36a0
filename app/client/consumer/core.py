"""ConsumerCore: assignment, positions, what to fetch and what an answer means. No I/O.

Owns the partition states (:mod:`~app.client.consumer.state`) and the rules
both shells follow:

* positions: ``seek``, ``seek_to_beginning``/``seek_to_end`` (looked up
  lazily), which partitions need a lookup, ``auto_offset_reset``;
* fetch planning: which partitions may fetch now (none in flight, a fetch
  offset, no backoff), where the fetch goes (a leader a 307/421 just named,
  once, else the metadata's), the request target, and when the metadata is
  to be looked up again (not more often than ``retry_backoff_ms``);
* answers: a fetch answer (read by :func:`app.common.fetch_answer.interpret`)
  becomes batches to hand out (CRC-checked), a redirect, a reset, a backoff or
  an error (:meth:`ConsumerCore._on_answer`);
  a failed connection a backoff (:meth:`ConsumerCore._on_failure`);
* handing out: :func:`~app.client.consumer.drain.drain`, partitions taking
  turns across polls.

The shells supply the connections: ``_connect(url)`` opens one,
``_drop(state)`` closes it and forgets the fetch in flight. Concurrency: one
polling thread (or the event loop); nothing here locks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any, TypedDict
from urllib.parse import quote

from app import wire
from app.client._cluster import Bootstrap, Cluster
from app.client.auth import Auth
from app.client.consumer.drain import drain
from app.client.consumer.records import Decoded
from app.client.consumer.state import Fetched, PartitionState
from app.client.errors import ConsumerClosed, NoOffsetForPartition
from app.client.types import ConsumerRecord, TopicPartition
from app.common.errors import LogbusError
from app.common.fetch_answer import Action, Records, interpret
from app.common.isolation import READ_COMMITTED, check_isolation_level

RESETS = ("earliest", "latest", "none")
log = logging.getLogger(__name__)


class ConsumerSettings(TypedDict, total=False):
    """The keyword settings of :class:`~app.client.Consumer` and
    :class:`~app.client.AsyncConsumer` (Kafka's names; defaults in
    :meth:`ConsumerCore.__init__`)."""

    auto_offset_reset: str
    fetch_min_bytes: int
    fetch_max_wait_ms: int
    max_partition_fetch_bytes: int
    max_poll_records: int
    request_timeout_ms: int
    retry_backoff_ms: int
    check_crcs: bool
    metadata_max_age_ms: int
    auth: Auth
    isolation_level: str
    key_deserializer: Any
    value_deserializer: Any


class ConsumerCore:
    """Everything but I/O: assignment, positions, what to fetch, answers to records."""

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
        auth: Auth = None,
        isolation_level: str = "read_uncommitted",
        key_deserializer: Any = None,
        value_deserializer: Any = None,
    ) -> None:
        check_isolation_level(isolation_level)
        if auto_offset_reset not in RESETS:
            raise ValueError(
                f"auto_offset_reset must be one of {RESETS}, got {auto_offset_reset!r}"
            )
        if max_poll_records < 1 or max_partition_fetch_bytes < 1:
            raise ValueError("max_poll_records and max_partition_fetch_bytes must be positive")
        self.cluster = Cluster(url, metadata_max_age_ms, auth)
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
        self.isolation_level = isolation_level
        self.read_committed = isolation_level == READ_COMMITTED
        # Appended to every fetch target (nothing for the default).
        self._isolation_query = "&isolation_level=read_committed" if self.read_committed else ""
        self.states: dict[TopicPartition, PartitionState] = {}
        self._rotation = 0
        self.closed = False
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff_ms = retry_backoff_ms
        # Deserializers (app/client/serialization.py, or any ``(bytes, ctx) -> object``):
        # poll's records then carry their results as key and value.
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer

    def _deserialized_sync(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """``records`` with key and value through the deserializers (None: as they are)."""
        if self.key_deserializer is None and self.value_deserializer is None:
            return records
        from app.client.serialization import MessageField, SerializationContext

        out = []
        for r in records:
            key, value = r.key, r.value
            if self.key_deserializer is not None:
                key = self.key_deserializer(
                    key, SerializationContext(r.topic, MessageField.KEY, r.headers)
                )
            if self.value_deserializer is not None:
                value = self.value_deserializer(
                    value, SerializationContext(r.topic, MessageField.VALUE, r.headers)
                )
            out.append(r._replace(key=key, value=value))
        return out

    async def _deserialized_async(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """As :meth:`_deserialized_sync`; deserializers with ``adeserialize`` awaited."""
        if self.key_deserializer is None and self.value_deserializer is None:
            return records
        from app.client.serialization import MessageField, SerializationContext

        async def one(des: Any, data: bytes | None, ctx: SerializationContext) -> Any:
            ades = getattr(des, "adeserialize", None)
            return await ades(data, ctx) if ades is not None else des(data, ctx)

        out = []
        for r in records:
            key, value = r.key, r.value
            if self.key_deserializer is not None:
                key = await one(
                    self.key_deserializer,
                    key,
                    SerializationContext(r.topic, MessageField.KEY, r.headers),
                )
            if self.value_deserializer is not None:
                value = await one(
                    self.value_deserializer,
                    value,
                    SerializationContext(r.topic, MessageField.VALUE, r.headers),
                )
            out.append(r._replace(key=key, value=value))
        return out

    # ---- the shell's connections ----

    def _connect(self, url: str) -> Any:
        """A new fetch connection to the broker at ``url``."""
        raise NotImplementedError

    def _drop(self, st: PartitionState) -> None:
        """Close ``st``'s connection and forget the fetch in flight (``in_flight``, ``stale``)."""
        raise NotImplementedError

    # ---- assignment and positions ----

    def _check_open(self) -> None:
        if self.closed:
            raise ConsumerClosed("the consumer is closed")

    def _assign(self, partitions: Iterable[TopicPartition]) -> list[PartitionState]:
        """Set the assignment; return the states dropped (their connections to close)."""
        self._check_open()
        wanted = [TopicPartition(tp.topic, int(tp.partition)) for tp in partitions]
        dropped = [st for tp, st in self.states.items() if tp not in wanted]
        initial = None if self.auto_offset_reset == "none" else self.auto_offset_reset
        self.states = {tp: self.states.get(tp) or PartitionState(tp, initial) for tp in wanted}
        return dropped

    def _set_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for st in self._assign(partitions):
            self._drop(st)

    def assignment(self) -> set[TopicPartition]:
        return set(self.states)

    def _state(self, tp: TopicPartition) -> PartitionState:
        st = self.states.get(tp)
        if st is None:
            raise ValueError(f"{tp} is not assigned to this consumer")
        return st

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {
            tp: st.position
            for tp in partitions
            if (st := self.states.get(tp)) is not None and st.position is not None
        }

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record ``poll`` returns for ``tp``."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        st = self._state(tp)
        self._abandon(st)
        st.set_position(offset)

    def _abandon(self, st: PartitionState) -> None:
        """Forget the fetch in flight: after a seek its answer is of no use.

        A long poll may hold the connection for max_wait_ms; a new connection is
        cheaper than waiting for an answer nobody wants.
        """
        if st.in_flight is not None:
            self._drop(st)

    def _seek_to(self, where: str, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        for tp in list(partitions) or list(self.states):
            st = self._state(tp)
            self._abandon(st)
            st.forget_position(where)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Start from the log start (all assigned partitions when none are named); looked up lazily."""
        self._seek_to("earliest", partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Start after the last record now in the log (the high watermark); looked up lazily."""
        self._seek_to("latest", partitions)

    def _needs_lookup(self) -> list[PartitionState]:
        out = []
        for st in self.states.values():
            if st.position is None and not st.awaiting_committed:
                if st.reset is None:
                    raise NoOffsetForPartition(
                        f"no position for {st.tp.topic}-{st.tp.partition} and "
                        "auto_offset_reset='none': seek() first"
                    )
                out.append(st)
        return out

    # ---- fetch planning ----

    def _target(self, st: PartitionState) -> str:
        assert st.fetch_offset is not None
        return (
            f"/topics/{quote(st.tp.topic, safe='')}/partitions/{st.tp.partition}/records"
            f"?offset={st.fetch_offset}&max_bytes={self.max_partition_fetch_bytes}"
            f"&min_bytes={self.fetch_min_bytes}&max_wait_ms={self.fetch_max_wait_ms}"
            f"{self._isolation_query}"
        )

    def _endpoint(self, url: str) -> wire.Endpoint:
        endpoint = self._endpoints.get(url)
        if endpoint is None:
            endpoint = wire.Endpoint.parse(url)
            if self.cluster.authorization is not None:
                header = f"Authorization: {self.cluster.authorization}\r\n".encode("latin-1")
                endpoint = replace(endpoint, extra_headers=header)
            self._endpoints[url] = endpoint
        return endpoint

    def _fetch_url(self, st: PartitionState) -> str:
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

    def _due_fetches(self) -> Iterator[PartitionState]:
        """The partitions whose next fetch may go now, each connected to where it goes.

        One answer being handed out plus one in flight per partition; the shell
        sends ``_target(st)`` on ``st.conn`` and calls :meth:`_sent`.
        """
        now = time.monotonic()
        for st in self.states.values():
            if st.in_flight is not None or st.fetch_offset is None or st.backoff_until > now:
                continue
            url = self._fetch_url(st)
            if st.conn is not None and st.url != url:
                self._drop(st)  # the partition moved (nothing is in flight)
                st.conn = None
            if st.conn is None:
                st.conn = self._connect(url)
                st.url = url
            yield st

    @staticmethod
    def _sent(st: PartitionState, in_flight: Any) -> None:
        st.in_flight = in_flight
        st.asked = -1 if st.fetch_offset is None else st.fetch_offset

    def _lookup_due(self) -> bool:
        """A partition without a position whose look-up may go now (not behind a backoff)."""
        now = time.monotonic()
        return any(st.position is None and st.backoff_until <= now for st in self.states.values())

    def _idle_wait_s(self, remaining: float) -> float:
        """How long a poll with nothing to hand out may wait: ``remaining``, or until a backoff ends."""
        now = time.monotonic()
        wait = remaining
        for st in self.states.values():
            if st.in_flight is None and st.backoff_until > now:
                wait = min(wait, st.backoff_until - now)
        return wait

    # ---- answers ----

    def _on_answer(self, st: PartitionState, asked: int, response: wire.Response) -> None:
        """Take one fetch answer for ``st`` (asked at offset ``asked``).

        What the answer means is :func:`app.common.fetch_answer.interpret`'s; what the
        consumer does about it (positions, redirects, backoff, resets) is decided here.
        """
        if st.stale or asked != st.fetch_offset:
            st.stale = False
            return
        tp = st.tp
        outcome = interpret(
            response,
            tp.topic,
            tp.partition,
            check_crcs=self.check_crcs,
            read_committed=self.read_committed,
        )
        if isinstance(outcome, Records):
            if outcome.next_offset is not None:
                # Hand out the good batches; the next fetch starts at a damaged one. Under
                # read_committed the batches dropped (aborted, control) are not listed, and
                # the position moves to ``end`` once the listed ones are handed out.
                st.fetch_offset = outcome.next_offset
                st.fetched = Fetched(outcome.body, outcome.batches, outcome.next_offset)
            elif outcome.damaged is not None:
                # Nothing good before it: the application hears of the damage now, with
                # the range to skip (seek past last_offset to go on).
                raise outcome.damaged
            return
        error, action = outcome.error, outcome.action
        if outcome.stale_metadata:
            self._refresh_wanted = True
        if action is Action.NOT_LEADER:
            # Stale metadata: the named leader gets the next fetch at once, from the same
            # offset, and the metadata is refreshed.
            hint = self.cluster.leader_hint(tp, error)
            if hint is not None and hint != st.url and not st.redirected:
                # Once in a row: two brokers naming each other are waited out.
                st.redirect = hint
                return
            st.backoff_until = time.monotonic() + self.retry_backoff_s
            return
        if outcome.stale_metadata:
            self.cluster.mark_stale(tp.topic)
        if action is Action.OUT_OF_RANGE and st.position == asked:
            if self.auto_offset_reset == "none":
                raise error
            # Kafka's rule: fall back to the policy when the position left the log.
            st.forget_position(self.auto_offset_reset)
            return
        if action is Action.RETRY:
            st.backoff_until = time.monotonic() + self.retry_backoff_s
            return
        raise error

    def _on_failure(self, st: PartitionState, exc: BaseException) -> None:
        """The connection failed (the shell closed it): back off, maybe look the leader up."""
        st.backoff_until = time.monotonic() + self.retry_backoff_s
        st.stale = False
        st.redirect = None
        if st.url is not None:
            self.cluster.failed(st.url)
        if self.cluster.is_multi():
            # The leader may be down: the other brokers know who leads now.
            self.cluster.mark_stale(st.tp.topic)
            self._refresh_wanted = True

    # ---- handing out ----

    def _drain(self, max_records: int, columnar: bool) -> list[Decoded]:
        """Up to ``max_records`` records; the partition that starts takes turns across polls."""
        states = list(self.states.values())
        if not states:
            return []
        start = self._rotation % len(states)
        self._rotation += 1
        return drain(states[start:] + states[:start], max_records, columnar)
