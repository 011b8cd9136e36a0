"""Server-side assignors: uniform (balanced, sticky) and range (Kafka's RangeAssignor)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.common.group_errors import UnsupportedAssignor
from app.groups.assignors import MemberSpec, RangeAssignor, UniformAssignor, get_assignor

TP = tuple[str, int]


def members(n: int, topics: frozenset[str] = frozenset({"t"})) -> list[MemberSpec]:
    return [MemberSpec(f"m{i:02d}", topics) for i in range(n)]


def flat(out: dict[str, set[TP]]) -> list[TP]:
    return [tp for tps in out.values() for tp in tps]


@given(n=st.integers(1, 12), parts=st.integers(0, 40), topics=st.integers(1, 3))
@settings(max_examples=60, deadline=None)
def test_uniform_covers_disjoint_and_balanced(n: int, parts: int, topics: int) -> None:
    names = frozenset(f"t{i}" for i in range(topics))
    meta = {t: parts for t in names}
    out = UniformAssignor().assign(members(n, names), meta)
    assigned = flat(out)
    assert len(assigned) == len(set(assigned)) == parts * topics
    sizes = [len(v) for v in out.values()]
    assert max(sizes) - min(sizes) <= 1


def test_uniform_is_sticky_when_a_member_joins() -> None:
    first = UniformAssignor().assign(members(3), {"t": 12})
    specs = [MemberSpec(m, frozenset({"t"}), current=frozenset(tps)) for m, tps in first.items()]
    specs.append(MemberSpec("m99", frozenset({"t"})))
    second = UniformAssignor().assign(specs, {"t": 12})
    assert sorted(len(v) for v in second.values()) == [3, 3, 3, 3]
    # Only the partitions the newcomer needs move; everyone else keeps a subset of theirs.
    for m, tps in first.items():
        assert second[m] <= tps
    moved = sum(len(first[m] - second[m]) for m in first)
    assert moved == 3


def test_uniform_respects_subscriptions() -> None:
    specs = [
        MemberSpec("a", frozenset({"x"})),
        MemberSpec("b", frozenset({"x", "y"})),
        MemberSpec("c", frozenset({"y"})),
    ]
    out = UniformAssignor().assign(specs, {"x": 4, "y": 4, "z": 3})
    assert all(t == "x" for t, _ in out["a"])
    assert all(t == "y" for t, _ in out["c"])
    assert sorted(flat(out)) == [("x", p) for p in range(4)] + [("y", p) for p in range(4)]
    sizes = [len(v) for v in out.values()]
    assert max(sizes) - min(sizes) <= 1


def test_uniform_with_more_members_than_partitions() -> None:
    out = UniformAssignor().assign(members(5), {"t": 2})
    assert sorted(len(v) for v in out.values()) == [0, 0, 0, 1, 1]


def test_range_like_kafka() -> None:
    # Kafka's RangeAssignor javadoc: C0, C1 on t0, t1 with 3 partitions each.
    specs = [MemberSpec("C0", frozenset({"t0", "t1"})), MemberSpec("C1", frozenset({"t0", "t1"}))]
    out = RangeAssignor().assign(specs, {"t0": 3, "t1": 3})
    assert out["C0"] == {("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)}
    assert out["C1"] == {("t0", 2), ("t1", 2)}


def test_range_orders_static_members_by_instance_id() -> None:
    specs = [
        MemberSpec("zzz", frozenset({"t"}), sort_key="a-instance"),
        MemberSpec("aaa", frozenset({"t"}), sort_key="b-instance"),
    ]
    out = RangeAssignor().assign(specs, {"t": 4})
    assert out["zzz"] == {("t", 0), ("t", 1)}


def test_range_skips_missing_topics_and_unsubscribed() -> None:
    specs = [MemberSpec("a", frozenset({"t", "gone"})), MemberSpec("b", frozenset({"u"}))]
    out = RangeAssignor().assign(specs, {"t": 2, "u": 1})
    assert out == {"a": {("t", 0), ("t", 1)}, "b": {("u", 0)}}


def test_unknown_assignor() -> None:
    with pytest.raises(UnsupportedAssignor):
        get_assignor("cooperative-sticky")


def test_uniform_large_is_fast_enough() -> None:
    rng = random.Random(1)
    specs = members(50)
    out = UniformAssignor().assign(specs, {"t": 1000})
    specs = [MemberSpec(m, frozenset({"t"}), current=frozenset(v)) for m, v in out.items()]
    rng.shuffle(specs)
    out = UniformAssignor().assign(specs[:-1], {"t": 1000})
    assert sorted({len(v) for v in out.values()}) == [20, 21]


@given(
    n=st.integers(1, 9),
    parts=st.integers(0, 30),
    seed=st.integers(0, 1000),
)
@settings(max_examples=80, deadline=None)
def test_uniform_from_any_previous_assignment(n: int, parts: int, seed: int) -> None:
    rng = random.Random(seed)
    specs = [
        MemberSpec(
            f"m{i}",
            frozenset({"t"}),
            # Previous targets may be stale: out of range partitions, overlaps.
            current=frozenset(("t", rng.randrange(parts + 3)) for _ in range(rng.randrange(8))),
        )
        for i in range(n)
    ]
    out = UniformAssignor().assign(specs, {"t": parts})
    assigned = flat(out)
    assert sorted(assigned) == [("t", p) for p in range(parts)]
    sizes = [len(v) for v in out.values()]
    assert max(sizes) - min(sizes) <= 1
    # Nobody loses a partition it held while it is below its quota.
    base = parts // n
    for m in specs:
        kept = out[m.member_id] & m.current
        valid_current = {tp for tp in m.current if tp[1] < parts}
        if len(valid_current) <= base and all(
            not (valid_current & o.current) for o in specs if o is not m
        ):
            assert kept == valid_current


@given(
    subs=st.lists(st.sets(st.sampled_from(["a", "b", "c"]), min_size=1), min_size=1, max_size=7),
    counts=st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9)),
)
@settings(max_examples=80, deadline=None)
def test_uniform_heterogeneous_covers_disjoint(
    subs: list[set[str]], counts: tuple[int, int, int]
) -> None:
    meta = dict(zip("abc", counts, strict=True))
    specs = [MemberSpec(f"m{i}", frozenset(s)) for i, s in enumerate(subs)]
    out = UniformAssignor().assign(specs, meta)
    wanted = sorted((t, p) for t in set().union(*subs) for p in range(meta[t]))
    assert sorted(flat(out)) == wanted
    for m in specs:
        assert all(t in m.topics for t, _ in out[m.member_id])
