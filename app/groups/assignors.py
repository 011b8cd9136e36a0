"""Server-side assignors: from members' subscriptions to a target assignment.

``uniform`` balances partitions so that, among members subscribed to the same
topics, counts differ by at most one, moving as few partitions as it can from
the previous target (every move is a revoke and a reassign for the members).
``range`` is Kafka's RangeAssignor: per topic, members sorted by id get
contiguous ranges, the first ``partitions % members`` one extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from app.common.group_errors import UnsupportedAssignor

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    topics: frozenset[str]
    # Kafka sorts static members by instance id so restarts don't shuffle ranges.
    sort_key: str = ""
    current: frozenset[TopicPartition] = field(default_factory=frozenset)


class Assignor(Protocol):
    name: str

    def assign(
        self, members: Sequence[MemberSpec], topics: Mapping[str, int]
    ) -> dict[str, set[TopicPartition]]: ...


class UniformAssignor:
    name = "uniform"

    def assign(
        self, members: Sequence[MemberSpec], topics: Mapping[str, int]
    ) -> dict[str, set[TopicPartition]]:
        if not members:
            return {}
        subscribed = {t for m in members for t in m.topics if topics.get(t, 0) > 0}
        if all(m.topics & subscribed == subscribed for m in members):
            return self._homogeneous(members, topics, subscribed)
        return self._general(members, topics)

    @staticmethod
    def _homogeneous(
        members: Sequence[MemberSpec], topics: Mapping[str, int], subscribed: set[str]
    ) -> dict[str, set[TopicPartition]]:
        """Everyone subscribes to the same topics (the usual case): exact quotas in
        O(partitions + members log members), keeping what each member had up to its quota."""
        valid = {(t, p) for t in subscribed for p in range(topics[t])}
        base, extra = divmod(len(valid), len(members))
        out: dict[str, set[TopicPartition]] = {m.member_id: set() for m in members}
        taken: set[TopicPartition] = set()
        # Members that held the most keep first, so the fewest partitions move.
        order = sorted(members, key=lambda m: (-len(m.current & valid), m.member_id))
        surplus: dict[str, list[TopicPartition]] = {}
        for m in order:
            mine = sorted(m.current & valid - taken)
            out[m.member_id].update(mine[:base])
            taken.update(mine[:base])
            surplus[m.member_id] = mine[base:]
        plus_one: set[str] = set()
        for m in order:
            if len(plus_one) == extra:
                break
            for tp in surplus[m.member_id]:
                if tp not in taken:
                    out[m.member_id].add(tp)
                    taken.add(tp)
                    plus_one.add(m.member_id)
                    break
        free = sorted(valid - taken, reverse=True)
        for mid in sorted(out, key=lambda mid: (len(out[mid]), mid)):
            while len(out[mid]) < base:
                out[mid].add(free.pop())
        for mid in sorted(out):
            if not free:
                break
            if mid not in plus_one:
                out[mid].add(free.pop())
        return out

    def _general(
        self, members: Sequence[MemberSpec], topics: Mapping[str, int]
    ) -> dict[str, set[TopicPartition]]:
        out: dict[str, set[TopicPartition]] = {m.member_id: set() for m in members}
        subscribers: dict[str, list[str]] = {}
        for m in sorted(members, key=lambda m: m.member_id):
            for t in m.topics:
                if topics.get(t, 0) > 0:
                    subscribers.setdefault(t, []).append(m.member_id)
        owner: dict[TopicPartition, str] = {}
        # Stickiness: a partition stays with its previous owner while that member
        # still subscribes to the topic; balancing below moves only what it must.
        for m in members:
            for tp in m.current:
                t, p = tp
                if (
                    t in subscribers
                    and p < topics[t]
                    and tp not in owner
                    and m.member_id in subscribers[t]
                ):
                    owner[tp] = m.member_id
                    out[m.member_id].add(tp)
        for t in sorted(subscribers):
            for p in range(topics[t]):
                tp = (t, p)
                if tp not in owner:
                    target = min(subscribers[t], key=lambda mid: (len(out[mid]), mid))
                    owner[tp] = target
                    out[target].add(tp)
        self._balance(out, subscribers)
        return out

    @staticmethod
    def _balance(out: dict[str, set[TopicPartition]], subscribers: Mapping[str, list[str]]) -> None:
        # Move one partition at a time from the most loaded member to the least loaded
        # member subscribed to its topic, while that narrows a gap of two or more.
        # Each move lowers the sum of squared counts, so the loop ends.
        while True:
            moved = False
            for mid in sorted(out, key=lambda m: (-len(out[m]), m)):
                load = len(out[mid])
                best: tuple[int, str, str] | None = None
                for t in sorted({t for t, _ in out[mid]}):
                    for other in subscribers.get(t, ()):
                        if other != mid and len(out[other]) < load - 1:
                            cand = (len(out[other]), other, t)
                            if best is None or cand < best:
                                best = cand
                if best is not None:
                    _, other, topic = best
                    tp = max(tp for tp in out[mid] if tp[0] == topic)
                    out[mid].discard(tp)
                    out[other].add(tp)
                    moved = True
                    break
            if not moved:
                return


class RangeAssignor:
    name = "range"

    def assign(
        self, members: Sequence[MemberSpec], topics: Mapping[str, int]
    ) -> dict[str, set[TopicPartition]]:
        out: dict[str, set[TopicPartition]] = {m.member_id: set() for m in members}
        ordered = sorted(members, key=lambda m: (m.sort_key or m.member_id, m.member_id))
        for t in sorted({t for m in members for t in m.topics}):
            count = topics.get(t, 0)
            subs = [m.member_id for m in ordered if t in m.topics]
            if not subs or count <= 0:
                continue
            per, extra = divmod(count, len(subs))
            start = 0
            for i, mid in enumerate(subs):
                n = per + (1 if i < extra else 0)
                out[mid].update((t, p) for p in range(start, start + n))
                start += n
        return out


ASSIGNORS: dict[str, Assignor] = {"uniform": UniformAssignor(), "range": RangeAssignor()}
DEFAULT_ASSIGNOR = "uniform"


def get_assignor(name: str) -> Assignor:
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise UnsupportedAssignor(
            f"server assignor {name!r} is not supported; use one of {', '.join(ASSIGNORS)}"
        ) from None
