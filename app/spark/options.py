"""Option parsing and offset-range planning for the Spark source, free of pyspark.

Names and JSON shapes follow Spark's Kafka source, so a job moves between the
two by changing the format name and the bootstrap option: per-partition
offsets are ``{"topic": {"0": 23, "1": -2}}`` with -2 = earliest and -1 =
latest.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from app.client import Admin, TopicPartition
from app.common import tls
from app.common.isolation import ISOLATION_LEVELS, READ_UNCOMMITTED

log = logging.getLogger(__name__)

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


# librdkafka's names under the source's prefix: PEM files, readable on every executor.
TLS_OPTIONS = (
    "logbus.ssl.ca.location",
    "logbus.ssl.certificate.location",
    "logbus.ssl.key.location",
)


def apply_tls(options: Mapping[str, str]) -> None:
    """Make the ``logbus.ssl.*`` options this process's client TLS default.

    Called on the driver when a reader or writer is built and again in each
    task (the Python worker that runs it is another process). Without them the
    process keeps its default (``LOGBUS_CLIENT_*`` or public roots); hostname
    verification is always on.

    Raises:
        OptionError: a file is missing or is not PEM.
    """
    ca, cert, key = (get(options, name) for name in TLS_OPTIONS)
    if ca is None and cert is None and key is None:
        return
    try:
        tls.configure(ca, cert, key)
    except (OSError, ValueError) as exc:
        raise OptionError(f"options {', '.join(TLS_OPTIONS)}: {exc}") from None


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


def isolation_level(options: Mapping[str, str]) -> str:
    """The ``isolation.level`` option (Spark's Kafka name ``kafka.isolation.level`` too):
    ``read_uncommitted`` (the default, as Kafka's consumer and Spark's Kafka source) or
    ``read_committed`` (offset ranges end at the last stable offset; records of
    aborted transactions are left out)."""
    given = {n: v for n in ("isolation.level", "kafka.isolation.level") if (v := get(options, n))}
    values = {v.strip().lower() for v in given.values()}
    if len(values) > 1:
        raise OptionError(
            "'isolation.level' and 'kafka.isolation.level' disagree: "
            + ", ".join(f"{n}={v!r}" for n, v in given.items())
        )
    level = values.pop() if values else READ_UNCOMMITTED
    if level not in ISOLATION_LEVELS:
        raise OptionError(
            f"option 'isolation.level' must be {' or '.join(ISOLATION_LEVELS)}, got {level!r}"
        )
    return level


DELIVERY_GUARANTEES = ("at-least-once", "exactly-once")


def exactly_once(options: Mapping[str, str]) -> bool:
    """The sink's ``deliveryGuarantee`` option (Flink's Kafka sink's name):
    ``at-least-once`` (the default, as Spark's Kafka sink) or ``exactly-once``
    (transactions, :mod:`app.spark.txn`)."""
    raw = get(options, "deliveryGuarantee")
    level = (raw or DELIVERY_GUARANTEES[0]).strip().lower()
    if level not in DELIVERY_GUARANTEES:
        raise OptionError(
            f"option 'deliveryGuarantee' must be {' or '.join(DELIVERY_GUARANTEES)}, got {raw!r}"
        )
    return level == DELIVERY_GUARANTEES[1]


def named_partitions(
    options: Mapping[str, str], counts: Mapping[str, int]
) -> tuple[list[TopicPartition], list[str]]:
    """The topic-partitions named by exactly one of subscribe / subscribePattern / assign
    that exist (``counts``: topic -> partition count), and what is named but missing."""
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
            named = sorted({TopicPartition(str(t), int(p)) for t, ps in spec.items() for p in ps})
        except (ValueError, AttributeError, TypeError):
            raise OptionError(
                f"'assign' must be JSON like {{\"t\": [0, 1]}}, got {assign!r}"
            ) from None
        present = [tp for tp in named if tp.partition < counts.get(tp.topic, 0)]
        missing = [f"partition {tp.topic}-{tp.partition}" for tp in named if tp not in present]
        return present, missing
    if subscribe:
        wanted = list(dict.fromkeys(t.strip() for t in subscribe.split(",") if t.strip()))
        topics = [t for t in wanted if t in counts]
        missing = [f"topic {t!r}" for t in wanted if t not in counts]
    else:
        assert pattern is not None
        regex = re.compile(pattern)
        # __consumer_offsets is internal: Kafka's pattern subscription skips internal topics too.
        topics = [t for t in counts if regex.fullmatch(t) and not t.startswith("__")]
        missing = []
    return sorted(TopicPartition(t, p) for t in topics for p in range(counts[t])), missing


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
    admin: Admin, tps: list[TopicPartition], isolation: str = READ_UNCOMMITTED
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """(log start offsets, ends) of the partitions: the ends are the high watermarks, or
    the last stable offsets under ``read_committed`` (Kafka's ListOffsets)."""
    starts = admin.list_offsets(tps, "earliest")
    ends = admin.list_offsets(tps, "latest", isolation_level=isolation)
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


def _lost(fail_on_data_loss: bool, what: str, instead: str) -> None:
    """Raise DataLoss about ``what``, or log it with what is done ``instead``."""
    if fail_on_data_loss:
        raise DataLoss(f"{what}; set failOnDataLoss=false to go on ({instead})")
    log.warning("%s; failOnDataLoss=false: %s", what, instead)


def reconcile(
    checkpointed: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    fail_on_data_loss: bool,
    *,
    report: bool = True,
) -> dict[TopicPartition, int]:
    """Where each partition that exists (``latest``'s keys) is read from next.

    ``checkpointed``: the next offsets to read, as a checkpoint holds them;
    ``earliest``/``latest``: each log's start offset and high watermark now.
    A checkpointed offset past the high watermark means the log went back
    (its topic was deleted and created again, or it was truncated by an
    unclean leader election or a recovery), and a checkpointed partition that
    no longer exists went away with its topic: both are data loss. Under
    ``fail_on_data_loss`` they raise :class:`DataLoss` naming the partition,
    the checkpointed offset and what the log holds now; otherwise the
    partition is read from its log start (a gone one is dropped) and the skip
    is logged (``report=False``: not logged, the caller reports it later).
    Partitions new since the checkpoint are read from their log start.
    Offsets below the log start (retention) are left for :func:`check_loss`.
    """
    out: dict[TopicPartition, int] = {}
    for tp in sorted(set(checkpointed) | set(latest)):
        offset = checkpointed.get(tp)
        if tp not in latest:
            if report or fail_on_data_loss:
                _lost(
                    fail_on_data_loss,
                    f"{tp.topic}-{tp.partition}: the partition is gone (its topic was deleted, "
                    f"or re-created with fewer partitions) at checkpointed offset {offset}",
                    f"records it held from offset {offset} on, if any, are not read",
                )
        elif offset is None:
            out[tp] = earliest[tp]
        elif offset > latest[tp]:
            if report or fail_on_data_loss:
                _lost(
                    fail_on_data_loss,
                    f"{tp.topic}-{tp.partition}: checkpointed offset {offset} is past the end of "
                    f"the log, which holds offsets [{earliest[tp]}, {latest[tp]}) (the topic was "
                    "re-created, or the log truncated)",
                    f"reading it from offset {earliest[tp]}; records the old log held from "
                    f"offset {offset} on, if any, are not read",
                )
            out[tp] = earliest[tp]
        else:
            out[tp] = offset
    return out


def check_within(
    what: str, offsets: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> None:
    """OptionError when an offset ``what`` names is past its partition's high watermark."""
    for tp in sorted(offsets):
        if offsets[tp] > latest[tp]:
            raise OptionError(
                f"{what}: {tp.topic}-{tp.partition}: offset {offsets[tp]} is past the "
                f"partition's high watermark {latest[tp]}"
            )


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
