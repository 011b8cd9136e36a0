"""Incremental fetch sessions (Kafka's KIP-227): the cache and its rules, as pure logic.

A Fetch request v7+ carries ``session_id`` and ``session_epoch``:

- epoch ``0`` (INITIAL) is a *full* fetch: the request names every partition it wants.
  A session id given with it is closed first; a new session is created when the cache
  has room (or can make room, below) and its id answered, else the answer's session id
  is 0 and the client goes on with full fetches (Kafka's answer when its cache is full).
- epoch ``-1`` (FINAL) is a full, *sessionless* fetch; a session id given with it is
  closed.
- epoch ``> 0`` is *incremental*: ``session_id`` must name a session of this principal
  (else FETCH_SESSION_ID_NOT_FOUND) whose expected epoch is this one (else
  INVALID_FETCH_SESSION_EPOCH; the session stays). The request names only the partitions
  whose fetch position (offset, max bytes, leader epoch) changed or that join the
  session, and ``forgotten_topics_data`` those that leave it; the session then expects
  the next epoch (``epoch + 1``, wrapping from 2**31-1 to 1, as Kafka).

A session remembers, per partition, where the client fetches from and what the last
answer told it (high watermark, last stable offset, log start offset). An incremental
answer holds only the partitions with records, an error, or one of those three changed
(:meth:`FetchSession.answered`; Kafka's ``CachedPartition.maybeUpdateResponseData``, with
the last stable offset added so read_committed consumers learn it moved); a partition
answered with an error has its cached high watermark reset to -1, so it is answered again
once the error is gone. Partitions answered with records move to the end of the session,
so the next read starts with the others (Kafka's fairness under ``max_bytes``).

Eviction (``kafka_max_incremental_fetch_session_cache_slots`` sessions at most): a new
session takes a free slot; else it evicts the least recently used session if that one
was idle longer than ``kafka_fetch_session_eviction_ms``; else the smallest session
(fewest partitions, then least recently used) among those older than that, when the new
one has strictly more partitions; else it gets none. This is Kafka's ``FetchSessionCache``
for consumers (the Kafka door serves no followers, so no session is privileged), except
that Kafka also lets an equal-sized session evict by comparing random session ids, which
would make a full cache of busy consumers of one size evict each other at random; here
such a request stays sessionless instead.

The partitions all sessions hold together are bounded too
(``kafka_fetch_session_cache_max_partitions``; Kafka has no such bound, but a session
grows by every partition an incremental fetch adds, so without one a few clients could
hold the broker's memory): a full fetch that would go over it gets no session (after the
idle sessions are evicted), and an incremental one that would is refused
FETCH_SESSION_ID_NOT_FOUND and its session closed, so the client starts over with a full
fetch (answered sessionless while there is no room).

From Fetch v13 requests name topics by id (KIP-516): such a session keys its partitions by
(topic id, partition), and its ``forgotten_topics_data`` name ids; a request that uses
ids on a session made without them, or the other way round, is refused
FETCH_SESSION_TOPIC_ID_ERROR (the session stays), as Kafka refuses it, so a client
that changes Fetch versions starts over with a full fetch. A partition of an unknown id
(the zero UUID included) stays in its session, answered UNKNOWN_TOPIC_ID each time (so
always in an incremental answer), until the client forgets it or the id comes to name a
topic (the Fetch handler resolves such names again on each request, as Kafka does).

Sessions belong to the principal that created them (``User:ANONYMOUS`` for all when
security is off): another principal naming its id is answered FETCH_SESSION_ID_NOT_FOUND,
as if it did not exist. Sessions outlive connections (KIP-227: a client may reconnect and
go on) and are kept in memory only; a restarted broker answers FETCH_SESSION_ID_NOT_FOUND
and clients start over with a full fetch.

Concurrency: event loop only; no I/O, the clock is passed in (``now_ms``).
"""

from __future__ import annotations

import random
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from kio.schema.errors import ErrorCode

INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
NO_SESSION: Final = 0
MAX_ID: Final = 2**31 - 1

# (topic name, partition), or (topic id, partition) in a session that uses topic ids.
Key = tuple[str | uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    """The epoch expected after ``epoch`` (Kafka's ``FetchMetadata.nextEpoch``)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_ID else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition a fetch reads: where from (``fetch_offset``, ``max_bytes``, the
    client's ``leader_epoch`` or -1, its ``last_fetched_epoch`` or -1) and, in a session,
    what the last answer said.
    ``topic_id``: the id the request named it by (Fetch v13+; None before), and then
    ``topic`` the name that id had when the partition joined ("" for an id that named no
    topic, the zero UUID included: keyed by that id all the same)."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    leader_epoch: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    topic_id: uuid.UUID | None = None
    # The epoch of the last record the client fetched (Fetch v12+; -1: not given).
    last_fetched_epoch: int = -1

    @property
    def key(self) -> Key:
        if self.topic_id is not None:
            return (self.topic_id, self.partition)
        return (self.topic, self.partition)


@dataclass(slots=True)
class FetchSession:
    """One client's session: its partitions in read order and the epoch it expects next."""

    id: int
    principal: str
    partitions: OrderedDict[Key, CachedPartition]
    created_ms: int
    last_used_ms: int
    epoch: int = 1
    # Made by a Fetch v13+ request: its partitions are keyed by topic id.
    uses_topic_ids: bool = False

    def answered(
        self,
        part: CachedPartition,
        error: int,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        records: int,
        incremental: bool,
    ) -> bool:
        """Record what the answer tells the client of ``part``; whether an incremental
        answer must hold it (always True for a full one)."""
        changed = (
            records > 0
            or error != 0
            or part.high_watermark != high_watermark
            or part.last_stable_offset != last_stable_offset
            or part.log_start_offset != log_start_offset
        )
        part.high_watermark = -1 if error != 0 else high_watermark
        part.last_stable_offset = last_stable_offset
        part.log_start_offset = log_start_offset
        if incremental and records > 0 and part.key in self.partitions:
            self.partitions.move_to_end(part.key)
        return changed or not incremental


class SessionError(Exception):
    """A fetch refused as a whole, with its Kafka error code (top-level, session id 0)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class FetchPlan:
    """What one Fetch request reads and how it is answered.

    ``partitions``: in read order. ``session``: the session to report in the answer
    (None: session id 0). ``incremental``: answer only what :meth:`FetchSession.answered`
    selects."""

    partitions: list[CachedPartition]
    session: FetchSession | None = None
    incremental: bool = False

    @property
    def session_id(self) -> int:
        return NO_SESSION if self.session is None else self.session.id


@dataclass
class FetchSessionCache:
    """The listener's sessions (module docstring). ``slots`` 0 creates none."""

    slots: int
    eviction_ms: int
    max_partitions: int = 200_000
    rng: random.Random = field(default_factory=random.Random)
    # The partitions all sessions hold (kept up to date by open/close/evict).
    partitions: int = 0
    # Sessions by id, least recently used first.
    _sessions: OrderedDict[int, FetchSession] = field(default_factory=OrderedDict)

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def open(
        self,
        principal: str,
        session_id: int,
        epoch: int,
        wanted: Iterable[CachedPartition],
        forgotten: Iterable[Key],
        now_ms: int,
        uses_topic_ids: bool = False,
    ) -> FetchPlan:
        """The plan of one Fetch request (the rules of the module docstring); raises
        :class:`SessionError` for an incremental fetch of an unknown session or epoch, or
        one whose use of topic ids (``uses_topic_ids``: Fetch v13+) is not its session's."""
        if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
            if session_id != NO_SESSION:
                self.close(principal, session_id)
            parts = list(OrderedDict((p.key, p) for p in wanted).values())
            if epoch == FINAL_EPOCH:
                return FetchPlan(parts)
            return FetchPlan(parts, self._create(principal, parts, now_ms, uses_topic_ids))
        if epoch < FINAL_EPOCH:
            raise SessionError(
                ErrorCode.invalid_fetch_session_epoch, f"session epoch {epoch} is not valid"
            )
        session = self._sessions.get(session_id)
        if session is None or session.principal != principal:
            raise SessionError(
                ErrorCode.fetch_session_id_not_found,
                f"fetch session {session_id} is not in this broker's cache",
            )
        if session.epoch != epoch:
            raise SessionError(
                ErrorCode.invalid_fetch_session_epoch,
                f"fetch session {session_id} expects epoch {session.epoch}, not {epoch}",
            )
        if session.uses_topic_ids != uses_topic_ids:
            raise SessionError(
                ErrorCode.fetch_session_topic_id_error,
                f"fetch session {session_id} was made "
                + ("with" if session.uses_topic_ids else "without")
                + " topic ids (Fetch v13+), this request "
                + ("uses" if uses_topic_ids else "does not use")
                + " them",
            )
        partitions = session.partitions
        before = len(partitions)
        for p in wanted:
            cached = partitions.get(p.key)
            if cached is None:
                partitions[p.key] = p
            else:
                cached.fetch_offset = p.fetch_offset
                cached.max_bytes = p.max_bytes
                cached.leader_epoch = p.leader_epoch
                cached.last_fetched_epoch = p.last_fetched_epoch
        for key in forgotten:
            partitions.pop(key, None)
        self.partitions += len(partitions) - before
        if self.partitions > self.max_partitions:
            self._evict(session)
            raise SessionError(
                ErrorCode.fetch_session_id_not_found,
                f"fetch session {session_id} closed: the sessions would hold more than "
                f"{self.max_partitions} partitions (kafka_fetch_session_cache_max_partitions)",
            )
        session.epoch = next_epoch(epoch)
        self._touch(session, now_ms)
        return FetchPlan(list(partitions.values()), session, incremental=True)

    def close(self, principal: str, session_id: int) -> bool:
        """Remove the principal's session ``session_id``; whether there was one."""
        session = self._sessions.get(session_id)
        if session is None or session.principal != principal:
            return False
        self._evict(session)
        return True

    def _evict(self, session: FetchSession) -> None:
        del self._sessions[session.id]
        self.partitions -= len(session.partitions)

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        self._sessions.move_to_end(session.id)

    def _create(
        self,
        principal: str,
        parts: list[CachedPartition],
        now_ms: int,
        uses_topic_ids: bool = False,
    ) -> FetchSession | None:
        if not self._make_room(len(parts), now_ms):
            return None
        session_id = self.rng.randint(1, MAX_ID)
        while session_id in self._sessions:
            session_id = self.rng.randint(1, MAX_ID)
        session = FetchSession(
            session_id,
            principal,
            OrderedDict((p.key, p) for p in parts),
            created_ms=now_ms,
            last_used_ms=now_ms,
            uses_topic_ids=uses_topic_ids,
        )
        self._sessions[session_id] = session
        self.partitions += len(session.partitions)
        return session

    def _make_room(self, size: int, now_ms: int) -> bool:
        sessions = self._sessions
        # Idle sessions (least recently used first) go while a slot or partitions lack.
        while sessions and (
            len(sessions) >= self.slots or self.partitions + size > self.max_partitions
        ):
            oldest = next(iter(sessions.values()))
            if now_ms - oldest.last_used_ms <= self.eviction_ms:
                break
            self._evict(oldest)
        if self.partitions + size > self.max_partitions:
            return False
        if len(sessions) < self.slots:
            return True
        if not sessions:
            return False  # slots == 0
        # The smallest evictable session, least recently used first among equals (the
        # OrderedDict's order); O(slots), only when the cache is full.
        smallest: FetchSession | None = None
        for s in sessions.values():
            if now_ms - s.created_ms <= self.eviction_ms:
                continue
            if smallest is None or len(s.partitions) < len(smallest.partitions):
                smallest = s
        if smallest is not None and size > len(smallest.partitions):
            self._evict(smallest)
            return True
        return False
