"""How many partitions this broker can hold open: the file-descriptor budget.

Every partition keeps file descriptors open for as long as the broker runs
(:class:`~app.core.log.segment.LogSegment` keeps its ``.log`` open, and the
active segment its ``.index`` and ``.timeindex``): ``FDS_PER_PARTITION`` for a
new, one-segment partition. A topic of 7,000 partitions on a broker allowed
20,000 descriptors used them all, failed half-way, and left no descriptor for
connections. So a create is checked here *before* anything is written, three
ways:

- per topic: at most ``max_per_topic`` partitions (``max_partitions_per_topic``);
- in total: at most ``max_total`` partitions hosted by this broker
  (``max_partitions``; by default a third of the descriptor limit's worth, so
  that rolled segments, connections and checkpoints keep two thirds);
- live: the descriptors in use now, plus the new partitions', plus
  ``reserved_fds`` kept free for connections, must fit in ``RLIMIT_NOFILE``.

The same budget decides at start whether a topic (written by an older broker,
or a damaged file) can be opened at all (:meth:`PartitionBudget.check_load`): one that cannot is
refused with a log line and the rest are served.

Thread-safety: the budget is immutable; its checks read the process's
current limit and open descriptors, so callers serialise creates themselves
(``LogManager`` does, under its lock).
"""

from __future__ import annotations

import contextlib
import os
import resource
from dataclasses import dataclass

from app.common.errors import PartitionLimitExceeded

# .log, .index and .timeindex of a partition's first segment (measured: 3.0 per partition).
FDS_PER_PARTITION = 3
# Descriptors left free when a topic is opened at start (connections, checkpoints).
LOAD_HEADROOM_FDS = 64
# The share of the descriptor limit the default total partition limit may use.
DEFAULT_PARTITION_FD_SHARE = 3


def raise_nofile_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit: every segment keeps its .log open,
    so the broker uses all the descriptors it is allowed (``LogManager.start`` calls this;
    so does the listener's setup, which sizes ``max_connections`` from the same number)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def nofile_limit() -> int:
    """The soft RLIMIT_NOFILE: the process's file-descriptor budget, the one number the
    partition budget here and the listener's connection limit (``app.api.limits``) are
    both cut from. Callers that size something for the broker's life call
    :func:`raise_nofile_limit` first."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def open_fds() -> int:
    """Descriptors this process has open now (Linux ``/proc``; 0 where unknown)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


@dataclass(frozen=True, slots=True)
class PartitionBudget:
    max_per_topic: int = 10_000
    # None: nofile_limit() // (FDS_PER_PARTITION * DEFAULT_PARTITION_FD_SHARE).
    max_total: int | None = None
    # None: a quarter of the descriptor limit.
    reserved_fds: int | None = None

    def total_limit(self) -> int:
        if self.max_total is not None:
            return self.max_total
        return nofile_limit() // (FDS_PER_PARTITION * DEFAULT_PARTITION_FD_SHARE)

    def reserve(self) -> int:
        return self.reserved_fds if self.reserved_fds is not None else nofile_limit() // 4

    def check_create(self, topic: str, partitions: int, hosted_now: int) -> None:
        """Raise :class:`PartitionLimitExceeded` unless ``partitions`` more (of ``topic``)
        fit beside the ``hosted_now`` this broker holds."""
        self.check_per_topic(topic, partitions)
        total = self.total_limit()
        if hosted_now + partitions > total:
            raise PartitionLimitExceeded(
                f"topic {topic!r} asks for {partitions} partitions; this broker holds "
                f"{hosted_now} of at most {total} (max_partitions, from the limit of "
                f"{nofile_limit()} open files)",
                total,
                "max_partitions",
            )
        self._check_descriptors(topic, partitions)

    def check_per_topic(self, topic: str, partitions: int) -> None:
        """Only the per-topic limit (cluster mode checks it before the cluster knows the
        topic; each broker checks the rest when it creates its replicas)."""
        if partitions > self.max_per_topic:
            raise PartitionLimitExceeded(
                f"topic {topic!r} asks for {partitions} partitions; this broker allows at most "
                f"{self.max_per_topic} per topic (max_partitions_per_topic)",
                self.max_per_topic,
                "max_partitions_per_topic",
            )

    def check_load(self, topic: str, partitions: int) -> None:
        """At start: raise unless ``topic``'s partitions can be opened beside what is open.
        Only a small headroom is kept here, not the reserve: a topic that was served
        before must not be refused because the reserve grew."""
        self._check_descriptors(topic, partitions, LOAD_HEADROOM_FDS)

    def _check_descriptors(self, topic: str, partitions: int, reserve: int | None = None) -> None:
        limit = nofile_limit()
        needed = partitions * FDS_PER_PARTITION
        in_use = open_fds()
        reserve = self.reserve() if reserve is None else reserve
        if in_use + needed + reserve > limit:
            raise PartitionLimitExceeded(
                f"topic {topic!r} needs {needed} file descriptors for {partitions} partitions; "
                f"{in_use} of the limit of {limit} are in use and {reserve} are kept for "
                "connections (reserved_file_descriptors)",
                max(0, (limit - in_use - reserve) // FDS_PER_PARTITION),
                "reserved_file_descriptors",
            )
