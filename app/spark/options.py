"""Option parsing and offset-range planning for the Spark source, free of pyspark.

Names and JSON shapes follow Spark's Kafka source, so a job moves between the
two by changing the format name and the bootstrap option: per-partition
offsets are ``{"topic": {"0": 23, "1": -2}}`` with -2 = earliest and -1 =
latest.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from app.client import Admin, TopicPartition

EARLIEST = -2
LATEST = -1


class OptionError(ValueError):
    """A bad or missing source/sink option."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic-partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def get(options: Mapping[str, str], name: str) -> str | None:
    # Spark hands options to Python data sources lower-cased (a CaseInsensitiveDict in
    # some paths, a plain dict in others): look both up.
    value = options.get(name)
    if value is None:
        value = options.get(name.lower())
    return value


def url_of(options: Mapping[str, str]) -> str:
    raw = get(options, "logbus.url")
    if not raw:
        raise OptionError("option 'logbus.url' is required (a broker URL, e.g. http://host:8080)")
    # Several URLs may be given, like Kafka's bootstrap servers: the SDK clients take the
    # list (and route to partition leaders in a cluster).
    return ",".join(u.strip() for u in raw.split(",") if u.strip())


def flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = get(options, name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name!r} must be true or false, got {raw!r}")
    return value == "true"


def integer(options: Mapping[str, str], name: str) -> int | None:
    raw = get(options, name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {raw!r}") from None


def partitions_of(admin: Admin, options: Mapping[str, str]) -> list[TopicPartition]:
    """The topic-partitions named by exactly one of subscribe / subscribePattern / assign."""
    subscribe = get(options, "subscribe")
    pattern = get(options, "subscribePattern")
    assign = get(options, "assign")
    given = [
        n
        for n, v in (("subscribe", subscribe), ("subscribePattern", pattern), ("assign", assign))
        if v
    ]
    if len(given) != 1:
        raise OptionError(
            "exactly one of 'subscribe', 'subscribePattern' or 'assign' is needed, got "
            + (", ".join(given) or "none")
        )
    if assign:
        try:
            spec = json.loads(assign)
            return sorted(TopicPartition(str(t), int(p)) for t, ps in spec.items() for p in ps)
        except (ValueError, AttributeError, TypeError):
            raise OptionError(
                f"'assign' must be JSON like {{\"t\": [0, 1]}}, got {assign!r}"
            ) from None
    counts = admin.list_topics()
    if subscribe:
        topics = [t.strip() for t in subscribe.split(",") if t.strip()]
        missing = [t for t in topics if t not in counts]
        if missing:
            raise OptionError(f"unknown topic(s) {missing}")
    else:
        assert pattern is not None
        regex = re.compile(pattern)
        # __consumer_offsets is internal: Kafka's pattern subscription skips internal topics too.
        topics = [t for t in counts if regex.fullmatch(t) and not t.startswith("__")]
    return sorted(TopicPartition(t, p) for t in topics for p in range(counts[t]))


def parse_offsets(raw: str, what: str) -> dict[TopicPartition, int] | str:
    """``earliest`` / ``latest`` or a JSON object of per-partition offsets."""
    value = raw.strip()
    if value in ("earliest", "latest"):
        return value
    try:
        spec = json.loads(value)
        return {
            TopicPartition(str(t), int(p)): int(o)
            for t, parts in spec.items()
            for p, o in parts.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise OptionError(
            f'{what!r} must be earliest, latest or JSON like {{"t": {{"0": 23}}}}, got {raw!r}'
        ) from None


def log_bounds(
    admin: Admin, tps: list[TopicPartition]
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """(log start offsets, high watermarks) of the partitions."""
    starts = admin.list_offsets(tps, "earliest")
    ends = admin.list_offsets(tps, "latest")
    return (
        {tp: o.offset if o else 0 for tp, o in starts.items()},
        {tp: o.offset if o else 0 for tp, o in ends.items()},
    )


def resolve(
    spec: dict[TopicPartition, int] | str,
    tps: list[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    default: int,
) -> dict[TopicPartition, int]:
    """Concrete offsets for ``tps``; partitions a JSON spec leaves out get ``default`` (-2/-1)."""
    out: dict[TopicPartition, int] = {}
    for tp in tps:
        if spec == "earliest":
            o = EARLIEST
        elif spec == "latest":
            o = LATEST
        else:
            assert isinstance(spec, dict)
            o = spec.get(tp, default)
        out[tp] = earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o
    return out


def check_loss(tp: TopicPartition, offset: int, log_start: int, fail_on_data_loss: bool) -> int:
    """Where to start reading ``tp`` when ``offset`` may have been deleted by retention."""
    if offset >= log_start:
        return offset
    if fail_on_data_loss:
        raise DataLoss(
            f"{tp.topic}-{tp.partition}: offsets {offset}..{log_start - 1} were deleted "
            "(retention) before they were read; set failOnDataLoss=false to skip them"
        )
    return log_start


class DataLoss(RuntimeError):
    """Records a query needed are gone from the log (failOnDataLoss=true)."""


def split(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Cut ranges so there are at least ``min_partitions`` of them, bigger ranges into more parts.

    Each range gets a share of ``min_partitions`` proportional to its size
    (at least one part, never more parts than records), so tasks end up
    roughly equal whatever the skew between partitions.
    """
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(1, min(r.size, math.ceil(r.size * min_partitions / total)))
        step, extra = divmod(r.size, parts)
        start = r.start
        for i in range(parts):
            end = start + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out


def offsets_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Per-partition offsets as Spark's Kafka source writes them (string partition keys)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def offsets_from_json(spec: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(o) for t, ps in spec.items() for p, o in ps.items()}


def cap(
    start: dict[TopicPartition, int], end: dict[TopicPartition, int], max_rows: int
) -> dict[TopicPartition, int]:
    """``end`` moved back so at most ``max_rows`` offsets are read, shared by backlog size."""
    total = sum(end[tp] - start[tp] for tp in end)
    if total <= max_rows:
        return end
    out: dict[TopicPartition, int] = {}
    budget = max_rows
    for tp in sorted(end):
        backlog = end[tp] - start[tp]
        share = min(backlog, budget, max(1, backlog * max_rows // total)) if budget else 0
        out[tp] = start[tp] + share
        budget -= share
    return out
