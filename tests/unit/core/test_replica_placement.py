"""placement.assign_replicas: Kafka's rack-unaware replica assignment.

Kafka's reference is ``org.apache.kafka.admin.AdminUtils.assignReplicasToBrokersRackUnaware``:
partition ``p`` leads on broker index ``(p + start) % n``; the follower shift starts at
``shift`` and grows by one whenever ``p > 0 and p % n == 0``; follower ``j`` sits
``1 + (shift + j) % (n - 1)`` places after the leader.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.common.errors import InvalidReplicationFactor
from app.core.replication.placement import assign_replicas

broker_sets = st.sets(st.integers(min_value=0, max_value=1000), min_size=1, max_size=8)


def kafka_rack_unaware(
    partitions: int, rf: int, brokers: list[int], start: int, shift: int
) -> list[tuple[int, ...]]:
    """Kafka's algorithm, transcribed (fixed start index and initial shift given apart)."""
    ids = sorted(brokers)
    n = len(ids)
    out: list[tuple[int, ...]] = []
    next_shift = shift % n  # Kafka draws it from [0, n)
    for p in range(partitions):
        if p > 0 and p % n == 0:
            next_shift += 1
        first = (p + start) % n
        replicas = [ids[first]]
        for j in range(rf - 1):
            replicas.append(ids[(first + 1 + (next_shift + j) % (n - 1)) % n])
        out.append(tuple(replicas))
    return out


@st.composite
def placements(draw: st.DrawFn) -> tuple[int, int, list[int], int, int]:
    brokers = sorted(draw(broker_sets))
    rf = draw(st.integers(min_value=1, max_value=len(brokers)))
    partitions = draw(st.integers(min_value=0, max_value=60))
    start = draw(st.integers(min_value=0, max_value=50))
    shift = draw(st.integers(min_value=0, max_value=50))
    return partitions, rf, brokers, start, shift


@given(placements())
def test_every_partition_gets_rf_distinct_brokers_of_the_set(
    case: tuple[int, int, list[int], int, int],
) -> None:
    partitions, rf, brokers, start, shift = case
    out = assign_replicas(partitions, rf, brokers, start=start, shift=shift)
    assert len(out) == partitions
    for replicas in out:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf, replicas
        assert set(replicas) <= set(brokers)


@given(placements())
def test_leaders_are_spread_evenly(case: tuple[int, int, list[int], int, int]) -> None:
    partitions, rf, brokers, start, shift = case
    out = assign_replicas(partitions, rf, brokers, start=start, shift=shift)
    leaders = Counter(r[0] for r in out)
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1, counts
    # Round robin from `start`: consecutive partitions lead on consecutive brokers.
    ids = sorted(brokers)
    assert [r[0] for r in out] == [ids[(start + p) % len(ids)] for p in range(partitions)]


@given(
    st.integers(min_value=2, max_value=7).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.integers(min_value=2, max_value=n),
            st.integers(min_value=1, max_value=3),
            st.integers(min_value=0, max_value=20),
            st.integers(min_value=0, max_value=20),
        )
    )
)
def test_followers_of_one_brokers_partitions_spread_over_all_the_others(
    case: tuple[int, int, int, int, int],
) -> None:
    n, rf, rounds, start, shift = case
    brokers = [10 * i + 3 for i in range(n)]
    # n * (n - 1) partitions per round: each broker leads (n - 1) per round with every shift.
    partitions = rounds * n * (n - 1)
    out = assign_replicas(partitions, rf, brokers, start=start, shift=shift)
    for leader in brokers:
        followers = Counter(b for r in out if r[0] == leader for b in r[1:])
        others = [b for b in brokers if b != leader]
        assert set(followers) == set(others)
        assert {followers[b] for b in others} == {rounds * (rf - 1)}, (leader, followers)


@given(
    st.integers(min_value=3, max_value=6).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.integers(min_value=n * (n - 1), max_value=4 * n * (n - 1)),
            st.integers(min_value=0, max_value=20),
            st.integers(min_value=0, max_value=20),
        )
    )
)
def test_rf2_followers_of_a_leader_differ_by_at_most_one_when_partitions_exceed_brokers(
    case: tuple[int, int, int, int],
) -> None:
    n, partitions, start, shift = case
    brokers = list(range(n))
    out = assign_replicas(partitions, 2, brokers, start=start, shift=shift)
    for leader in brokers:
        followers = Counter(r[1] for r in out if r[0] == leader)
        counts = [followers.get(b, 0) for b in brokers if b != leader]
        assert max(counts) - min(counts) <= 1, (leader, followers)


@given(broker_sets, st.integers(min_value=-3, max_value=0))
def test_replication_factor_below_one_is_refused(brokers: set[int], rf: int) -> None:
    with pytest.raises(InvalidReplicationFactor, match="at least 1"):
        assign_replicas(3, rf, sorted(brokers))


@given(broker_sets, st.integers(min_value=1, max_value=5))
def test_replication_factor_above_the_broker_count_is_refused(
    brokers: set[int], extra: int
) -> None:
    with pytest.raises(InvalidReplicationFactor, match=f"available brokers: {len(brokers)}"):
        assign_replicas(3, len(brokers) + extra, sorted(brokers))


def test_duplicate_and_unsorted_broker_ids_count_once() -> None:
    assert assign_replicas(3, 2, [5, 1, 5, 3], start=0, shift=0) == [(1, 3), (3, 5), (5, 1)]
    with pytest.raises(InvalidReplicationFactor):
        assign_replicas(1, 3, [2, 2, 7])


def test_kafkas_documented_example_start_0() -> None:
    # AdminUtils' javadoc table: 5 brokers, 10 partitions, 3 replicas, fixed start index 0
    # (which is also the initial shift), as in Kafka's AdminZkClientTest.testReplicaAssignment.
    expected = [
        (0, 1, 2),
        (1, 2, 3),
        (2, 3, 4),
        (3, 4, 0),
        (4, 0, 1),
        (0, 2, 3),
        (1, 3, 4),
        (2, 4, 0),
        (3, 0, 1),
        (4, 1, 2),
    ]
    assert assign_replicas(10, 3, [0, 1, 2, 3, 4], start=0, shift=0) == expected
    assert expected == kafka_rack_unaware(10, 3, [0, 1, 2, 3, 4], 0, 0)
    # The second round of n partitions shifts every follower one broker further.
    six = assign_replicas(7, 3, [0, 1, 2, 3, 4, 5], start=0, shift=0)
    assert six[0] == (0, 1, 2) and six[6] == (0, 2, 3)


@given(placements())
@settings(max_examples=200)
def test_deterministic_given_start_and_shift(case: tuple[int, int, list[int], int, int]) -> None:
    partitions, rf, brokers, start, shift = case
    first = assign_replicas(partitions, rf, brokers, start=start, shift=shift)
    assert first == assign_replicas(partitions, rf, brokers, start=start, shift=shift)
    assert first == assign_replicas(
        partitions, rf, brokers, start=start, shift=shift, rng=random.Random(99)
    )
    # start/shift are taken modulo the broker count.
    n = len(brokers)
    assert first == assign_replicas(partitions, rf, brokers, start=start + n, shift=shift + n)


def test_random_start_and_shift_come_from_the_given_rng() -> None:
    a = assign_replicas(12, 2, [1, 2, 3, 4], rng=random.Random(7))
    assert a == assign_replicas(12, 2, [1, 2, 3, 4], rng=random.Random(7))
    starts = {assign_replicas(1, 1, [1, 2, 3, 4], rng=random.Random(s))[0][0] for s in range(40)}
    assert starts == {1, 2, 3, 4}, "the first leader is random over all brokers"


@given(placements())
def test_matches_kafkas_algorithm(case: tuple[int, int, list[int], int, int]) -> None:
    partitions, rf, brokers, start, shift = case
    n = len(brokers)
    assert assign_replicas(partitions, rf, brokers, start=start, shift=shift) == (
        kafka_rack_unaware(partitions, rf, brokers, start % n, shift)
    )


# Regression: the shift once grew when the leader index wrapped ((start + p) % n == 0), so a
# non-zero start put two shifts in one row of n partitions (3 brokers, rf 2, start 1: 2/1/3
# replicas per broker instead of 2/2/2).
def test_matches_kafka_with_a_nonzero_start() -> None:
    assert assign_replicas(3, 2, [0, 1, 2], start=1, shift=0) == [(1, 2), (2, 0), (0, 1)]


@pytest.mark.parametrize("n", [3, 4, 5])
def test_replicas_spread_evenly_over_brokers_for_every_start(n: int) -> None:
    # Kafka's goal 1: a multiple of n partitions puts exactly partitions * rf / n replicas on
    # every broker, whatever the (random) start.
    brokers = list(range(n))
    bad = []
    for start in range(n):
        for rf in range(2, n + 1):
            for rounds in (1, 2, 3):
                out = assign_replicas(rounds * n, rf, brokers, start=start, shift=0)
                load = Counter(b for r in out for b in r)
                if set(load.values()) != {rounds * rf}:
                    bad.append((start, rf, rounds, dict(load)))
    assert bad == []
