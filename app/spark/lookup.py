"""What the driver asks the brokers: the partitions to read and their offset bounds, retried.

Planning a batch read or a micro-batch asks the cluster which partitions the
options name and where each of their logs starts and ends (log start offset,
high watermark). A broker restarting or a leader election must not end a
streaming query, so every lookup is retried as Spark's Kafka source retries
its offset fetches, under its option names and defaults:

- ``fetchOffset.numRetries`` (3): attempts before the lookup fails;
- ``fetchOffset.retryIntervalMs`` (10): the pause between two attempts.

In Kafka's source each attempt waits for its admin client, which retries
until ``default.api.timeout.ms``; here each attempt likewise retries errors
that may pass (a broker down or starting, a leader moving, a topic deleted
between two calls) for up to :data:`ATTEMPT_TIMEOUT_S`, backing off from
100 ms to 1 s (Kafka's ``retry.backoff.ms`` / ``retry.backoff.max.ms``).
Every try goes through the SDK's :class:`~app.client.Admin`, which sends
topic calls to any configured URL or known broker that answers and offset
calls to each partition's current leader, learning the leaders anew after a
failure; each attempt starts with a fresh Admin, as Kafka's source resets its
admin client. With the defaults the driver rides out ~30 s without an answer
(3 attempts of 10 s); after that the last error is raised, with a note saying
how long it was retried, and fails the query (a restart resumes from its
checkpoint). Other errors (a topic the options name that does not exist at
the start of a query, a bad option) are raised at once.

One :class:`OffsetLookup` per reader, used from the one thread Spark plans in;
it holds no connection between calls, so readers pickle to Spark's workers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from app.client import Admin, TopicPartition
from app.client.errors import is_retriable
from app.common.errors import LogbusError, UnknownTopicOrPartition
from app.common.isolation import READ_UNCOMMITTED
from app.spark import options as opt
from app.spark.options import OptionError

log = logging.getLogger(__name__)
T = TypeVar("T")

# Spark's Kafka source: fetchOffset.numRetries and fetchOffset.retryIntervalMs.
DEFAULT_NUM_RETRIES = 3
DEFAULT_RETRY_INTERVAL_MS = 10
# How long one attempt retries (and the longest a single request may take).
ATTEMPT_TIMEOUT_S = 10.0
BACKOFF_S = 0.1
BACKOFF_MAX_S = 1.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a lookup is retried: ``attempts`` of up to ``attempt_timeout_s`` each,
    ``interval_s`` apart (the options set the first two, as in Spark's Kafka source)."""

    attempts: int = DEFAULT_NUM_RETRIES
    interval_s: float = DEFAULT_RETRY_INTERVAL_MS / 1000
    attempt_timeout_s: float = ATTEMPT_TIMEOUT_S

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> RetryPolicy:
        attempts = opt.integer(options, "fetchOffset.numRetries")
        interval_ms = opt.integer(options, "fetchOffset.retryIntervalMs")
        if attempts is not None and attempts < 1:
            raise OptionError("'fetchOffset.numRetries' must be at least 1")
        if interval_ms is not None and interval_ms < 0:
            raise OptionError("'fetchOffset.retryIntervalMs' must not be negative")
        return cls(
            attempts=DEFAULT_NUM_RETRIES if attempts is None else attempts,
            interval_s=(DEFAULT_RETRY_INTERVAL_MS if interval_ms is None else interval_ms) / 1000,
        )


def may_pass(error: LogbusError) -> bool:
    """Is ``error`` worth another try of a lookup?

    Retriable errors are; so is an unknown topic or partition, which here
    means a topic deleted between listing the topics and asking its offsets
    (the next try lists the topics again, without it).
    """
    return is_retriable(error) or isinstance(error, UnknownTopicOrPartition)


def retried(
    url: str,
    policy: RetryPolicy,
    what: str,
    call: Callable[[Admin], T],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``call(admin)``, retried under ``policy`` while it fails with errors that may pass."""
    began = clock()
    last: LogbusError | None = None
    tries = 0
    for attempt in range(1, policy.attempts + 1):
        deadline = clock() + policy.attempt_timeout_s
        backoff = BACKOFF_S
        with Admin(url, request_timeout_ms=int(policy.attempt_timeout_s * 1000)) as admin:
            while True:
                tries += 1
                try:
                    return call(admin)
                except LogbusError as error:
                    if not may_pass(error):
                        raise
                    last = error
                remaining = deadline - clock()
                if remaining <= 0:
                    break
                pause = min(backoff, remaining)  # the last try at the attempt's deadline
                log.info("%s: %s; trying again in %.1f s", what, last, pause)
                sleep(pause)
                backoff = min(2 * backoff, BACKOFF_MAX_S)
        if attempt < policy.attempts:
            log.warning("%s: attempt %d of %d failed: %s", what, attempt, policy.attempts, last)
            sleep(policy.interval_s)
    assert last is not None
    last.add_note(
        f"{what}: gave up after {policy.attempts} attempts ({tries} tries, "
        f"{clock() - began:.1f} s) at {url}; fetchOffset.numRetries sets how many attempts"
    )
    raise last


@dataclass(frozen=True, slots=True)
class Bounds:
    """The partitions asked for that exist, with their log start offsets and high watermarks
    (last stable offsets under ``isolation.level=read_committed``)."""

    earliest: dict[TopicPartition, int]
    latest: dict[TopicPartition, int]
    # What the options name that the cluster does not have ("topic 'x'", "partition x-3").
    missing: list[str]

    @property
    def partitions(self) -> list[TopicPartition]:
        return sorted(self.latest)

    def require_all(self) -> Bounds:
        """Self, or OptionError when the options name something that does not exist."""
        if self.missing:
            raise OptionError(f"unknown {', '.join(self.missing)}")
        return self


class OffsetLookup:
    """The driver's lookups for one reader, each retried (see the module docstring)."""

    def __init__(self, url: str, options: Mapping[str, str]) -> None:
        self.url = url
        self.options = dict(options)
        self.policy = RetryPolicy.from_options(options)
        self.isolation = opt.isolation_level(options)

    def bounds(self) -> Bounds:
        """The partitions the options name (subscribe, subscribePattern or assign), bounded."""
        return retried(self.url, self.policy, "looking up offsets", self._named_bounds)

    def bounds_of(self, tps: Iterable[TopicPartition]) -> Bounds:
        """The bounds of ``tps``, those that still exist."""
        wanted = sorted(set(tps))
        return retried(
            self.url,
            self.policy,
            "looking up offsets",
            lambda admin: _bounds(admin, wanted, [], isolation=self.isolation),
        )

    def offsets_at(
        self, tps: list[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int | None]:
        """Each partition's first offset at or after ``timestamp`` (ms); None when there is none."""

        def call(admin: Admin) -> dict[TopicPartition, int | None]:
            found = admin.list_offsets(tps, timestamp, isolation_level=self.isolation)
            return {tp: None if o is None else o.offset for tp, o in found.items()}

        return retried(self.url, self.policy, "looking up offsets by timestamp", call)

    def _named_bounds(self, admin: Admin) -> Bounds:
        counts = admin.list_topics()
        named, missing = opt.named_partitions(self.options, counts)
        return _bounds(admin, named, missing, counts, isolation=self.isolation)


def _bounds(
    admin: Admin,
    tps: list[TopicPartition],
    missing: list[str],
    counts: Mapping[str, int] | None = None,
    *,
    isolation: str = READ_UNCOMMITTED,
) -> Bounds:
    if counts is None:
        counts = admin.list_topics()
    present = [tp for tp in tps if tp.partition < counts.get(tp.topic, 0)]
    gone = [f"partition {tp.topic}-{tp.partition}" for tp in tps if tp not in present]
    earliest, latest = opt.log_bounds(admin, present, isolation)
    return Bounds(earliest, latest, missing + gone)
