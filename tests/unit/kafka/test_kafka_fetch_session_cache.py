"""The fetch session cache (KIP-227, ``app/kafka/fetch_sessions.py``): its eviction and
ownership rules, and a state machine run against a plain model of sessions."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from app.kafka.fetch_sessions import (
    MAX_ID,
    CachedPartition,
    FetchSessionCache,
    SessionError,
    next_epoch,
)

KEYS = [("a", 0), ("a", 1), ("b", 0), ("c", 2)]
# Fetch v13+'s keys: (topic id, partition), the zero UUID among them (an id naming nothing).
IDS = [uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=0)]
ID_KEYS: list[tuple[str | uuid.UUID, int]] = [(IDS[0], 0), (IDS[0], 1), (IDS[1], 0), (IDS[2], 0)]


def keyed(keys: list[tuple[str | uuid.UUID, int]], offset: int) -> list[CachedPartition]:
    """Partitions named by ``keys`` (by id for the UUID ones, their names unknown)."""
    return [
        CachedPartition("", p, offset, 1 << 20, topic_id=t)
        if isinstance(t, uuid.UUID)
        else CachedPartition(t, p, offset, 1 << 20)
        for t, p in keys
    ]


def parts(*keys: tuple[str, int], offset: int = 0) -> list[CachedPartition]:
    return [CachedPartition(t, p, offset, 1 << 20) for t, p in keys]


def full(cache: FetchSessionCache, n: int, now: int, principal: str = "User:x") -> int:
    plan = cache.open(principal, 0, 0, parts(*[("t", i) for i in range(n)]), (), now)
    return plan.session_id


def test_epochs_wrap_as_kafkas() -> None:
    assert (next_epoch(0), next_epoch(7), next_epoch(MAX_ID), next_epoch(-1)) == (1, 8, 1, -1)


def test_a_full_cache_evicts_an_idle_session_first_then_a_smaller_old_one() -> None:
    cache = FetchSessionCache(slots=2, eviction_ms=100, rng=random.Random(1))
    small, big = full(cache, 1, now=0), full(cache, 3, now=0)
    assert small and big
    # Both younger than eviction_ms: no room, even for a larger session.
    assert full(cache, 5, now=50) == 0 and len(cache) == 2
    # ``big`` idle for longer than eviction_ms is evicted (the least recently used).
    cache.open("User:x", small, 1, (), (), 150)
    newer = full(cache, 1, now=200)
    assert newer and cache.get(big) is None and cache.get(small) is not None
    # Everything used recently: the smallest old session goes for a strictly larger one.
    cache.open("User:x", small, 2, (), (), 290)
    cache.open("User:x", newer, 1, (), (), 290)
    assert full(cache, 1, now=300) == 0  # not larger than ``small`` (one partition)
    larger = full(cache, 2, now=300)
    assert larger and cache.get(small) is None and cache.get(newer) is not None
    assert (
        FetchSessionCache(slots=0, eviction_ms=0).open("User:x", 0, 0, parts(), (), 0).session
        is None
    )


def test_sessions_belong_to_their_principal() -> None:
    cache = FetchSessionCache(slots=10, eviction_ms=100)
    mine = full(cache, 2, now=0, principal="User:alice")
    with pytest.raises(SessionError) as refused:
        cache.open("User:bob", mine, 1, (), (), 1)
    assert refused.value.code is ErrorCode.fetch_session_id_not_found
    # Bob's full fetch naming alice's id neither closes nor takes it.
    cache.open("User:bob", mine, 0, parts(("t", 0)), (), 1)
    cache.open("User:bob", mine, -1, parts(("t", 0)), (), 1)
    assert cache.open("User:alice", mine, 1, (), (), 2).session_id == mine


def test_answered_keeps_what_the_client_was_told() -> None:
    cache = FetchSessionCache(slots=1, eviction_ms=100)
    plan = cache.open("User:x", 0, 0, parts(("t", 0), ("t", 1)), (), 0)
    session = plan.session
    assert session is not None
    p0, p1 = plan.partitions
    assert session.answered(p0, 0, 5, 5, 0, 0, incremental=False)  # full: always
    assert session.answered(p1, 0, 0, 0, 0, 0, incremental=False)
    assert not session.answered(p0, 0, 5, 5, 0, 0, incremental=True)
    assert session.answered(p0, 0, 5, 5, 1, 0, incremental=True)  # log start moved
    assert session.answered(p0, 0, 5, 6, 1, 0, incremental=True)  # last stable moved
    # An error is answered every time, and once gone the partition is answered again.
    assert session.answered(p0, 6, -1, -1, -1, 0, incremental=True)
    assert session.answered(p0, 6, -1, -1, -1, 0, incremental=True)
    assert session.answered(p0, 0, 5, 6, 1, 0, incremental=True)
    # Records are answered, and move their partition to the end of the read order.
    assert session.answered(p0, 0, 5, 6, 1, 100, incremental=True)
    assert list(session.partitions) == [("t", 1), ("t", 0)]


class SessionCacheMachine(RuleBasedStateMachine):
    """Random requests against the cache and a model: sessions as {id: (principal,
    expected epoch, partitions)}; no session is ever evicted (eviction_ms is beyond the
    clock), so a full fetch gets a session exactly when the model has a free slot.
    Requests name partitions by name or (Fetch v13+) by topic id, some more than once
    (the last entry wins); a session refuses requests that do not use ids as it does."""

    SLOTS = 3

    def __init__(self) -> None:
        super().__init__()
        self.cache = FetchSessionCache(self.SLOTS, eviction_ms=10**9, rng=random.Random(7))
        self.model: dict[int, tuple[str, int, set[Any]]] = {}
        self.by_id: dict[int, bool] = {}
        self.now = 0

    def _tick(self) -> int:
        self.now += 1
        return self.now

    def _known(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from([*self.model, 0, 424242]))

    @rule(
        principal=st.sampled_from(["User:a", "User:b"]),
        uses_ids=st.booleans(),
        epoch=st.sampled_from([0, -1]),
        data=st.data(),
    )
    def full_fetch(self, principal: str, uses_ids: bool, epoch: int, data: st.DataObject) -> None:
        session_id = self._known(data)
        named = data.draw(st.lists(st.sampled_from(ID_KEYS if uses_ids else KEYS), max_size=8))
        offsets = data.draw(st.lists(st.integers(0, 5), min_size=len(named), max_size=len(named)))
        wanted = [
            p for key, offset in zip(named, offsets, strict=True) for p in keyed([key], offset)
        ]
        plan = self.cache.open(
            principal, session_id, epoch, wanted, (), self._tick(), uses_topic_ids=uses_ids
        )
        owned = self.model.get(session_id)
        if owned is not None and owned[0] == principal:
            del self.model[session_id]
        assert not plan.incremental
        # One entry per partition, in first-named order, with the last entry's offset.
        last = dict(zip(named, offsets, strict=True))
        assert [p.key for p in plan.partitions] == list(dict.fromkeys(named))
        assert all(p.fetch_offset == last[p.key] for p in plan.partitions)
        if epoch == -1 or len(self.model) >= self.SLOTS:
            assert plan.session is None
        else:
            assert plan.session_id not in self.model and plan.session_id > 0
            assert plan.session is not None and plan.session.uses_topic_ids is uses_ids
            self.model[plan.session_id] = (principal, 1, set(named))
            self.by_id[plan.session_id] = uses_ids

    @rule(
        principal=st.sampled_from(["User:a", "User:b"]),
        skew=st.sampled_from([0, 0, 0, 1, -1]),
        data=st.data(),
    )
    def incremental_fetch(self, principal: str, skew: int, data: st.DataObject) -> None:
        session_id = self._known(data)
        session_by_id = self.by_id.get(session_id, False)
        # Mostly as the session names partitions, sometimes not (a changed Fetch version).
        uses_ids = data.draw(st.sampled_from([session_by_id] * 4 + [not session_by_id]))
        pool = ID_KEYS if uses_ids else KEYS
        added = data.draw(st.sets(st.sampled_from(pool)))
        forgotten = data.draw(st.sets(st.sampled_from(pool)))
        found = self.model.get(session_id)
        epoch = (found[1] if found else 1) + skew
        if epoch <= 0:
            epoch = 2
        try:
            plan = self.cache.open(
                principal,
                session_id,
                epoch,
                keyed(sorted(added, key=str), offset=9),
                forgotten,
                self._tick(),
                uses_topic_ids=uses_ids,
            )
        except SessionError as exc:
            if found is None or found[0] != principal:
                assert exc.code is ErrorCode.fetch_session_id_not_found
            elif epoch != found[1]:
                assert exc.code is ErrorCode.invalid_fetch_session_epoch
            else:
                # Refused whole: the session and its epoch stay.
                assert exc.code is ErrorCode.fetch_session_topic_id_error
                assert uses_ids is not session_by_id
            return
        assert found is not None and found[0] == principal and found[1] == epoch
        assert uses_ids is session_by_id
        keys = (found[2] | added) - forgotten
        self.model[session_id] = (principal, epoch + 1, keys)
        assert plan.incremental and plan.session_id == session_id
        assert {p.key for p in plan.partitions} == keys
        assert all(p.fetch_offset == 9 for p in plan.partitions if p.key in added)

    @invariant()
    def same_sessions(self) -> None:
        assert len(self.cache) == len(self.model) <= self.SLOTS
        assert self.cache.partitions == sum(len(keys) for _, _, keys in self.model.values())
        for session_id, (principal, epoch, keys) in self.model.items():
            session = self.cache.get(session_id)
            assert session is not None
            assert (session.principal, session.epoch, set(session.partitions)) == (
                principal,
                epoch,
                keys,
            )


TestSessionCacheMachine = SessionCacheMachine.TestCase
TestSessionCacheMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_the_partitions_all_sessions_hold_are_bounded() -> None:
    cache = FetchSessionCache(slots=10, eviction_ms=100, max_partitions=5)
    first = full(cache, 3, now=0)
    assert first and cache.partitions == 3
    assert full(cache, 3, now=1) == 0  # 6 > 5: no session, answered sessionless
    second = full(cache, 2, now=1)
    assert second and cache.partitions == 5
    # Growing past the bound closes the session: the client starts over with a full fetch.
    with pytest.raises(SessionError) as closed:
        cache.open("User:x", second, 1, parts(("u", 0)), (), 2)
    assert closed.value.code is ErrorCode.fetch_session_id_not_found
    assert cache.get(second) is None and cache.partitions == 3
    # An idle session is evicted to make room for partitions, as for a slot.
    assert full(cache, 4, now=500) and cache.get(first) is None and cache.partitions == 4


def test_sessions_with_topic_ids_key_by_id_and_refuse_requests_without_them() -> None:
    cache = FetchSessionCache(slots=4, eviction_ms=100, rng=random.Random(3))
    a, b = uuid.uuid4(), uuid.uuid4()
    # Two ids whose names are both unknown ("") stay two partitions, keyed by id.
    wanted = [
        CachedPartition("", 0, 0, 1 << 20, topic_id=a),
        CachedPartition("", 0, 0, 1 << 20, topic_id=b),
    ]
    plan = cache.open("User:x", 0, 0, wanted, (), 0, uses_topic_ids=True)
    assert plan.session is not None and plan.session.uses_topic_ids
    assert [p.key for p in plan.partitions] == [(a, 0), (b, 0)]
    with pytest.raises(SessionError) as caught:
        cache.open("User:x", plan.session_id, 1, [], (), 1, uses_topic_ids=False)
    assert caught.value.code == ErrorCode.fetch_session_topic_id_error
    # The session stays and expects the same epoch; forgotten partitions are named by id.
    again = cache.open("User:x", plan.session_id, 1, [], [(a, 0)], 2, uses_topic_ids=True)
    assert [p.key for p in again.partitions] == [(b, 0)]
    # And a session made without ids refuses a request with them.
    named = cache.open("User:x", 0, 0, parts(("t", 0)), (), 3)
    with pytest.raises(SessionError) as caught:
        cache.open("User:x", named.session_id, 1, [], (), 4, uses_topic_ids=True)
    assert caught.value.code == ErrorCode.fetch_session_topic_id_error
