"""What a fetch answer means: the one interpreter of ``GET .../records`` answers. No I/O.

The SDK consumer (:mod:`app.client.consumer.core`), Spark tasks
(:mod:`app.spark.arrow`) and follower brokers (:mod:`app.core.replication.fetcher`)
read a binary fetch answer (``Accept: application/octet-stream``) over
:mod:`app.wire` and hand the :class:`~app.common.http1.Response` to
:func:`interpret`, which says what it is:

- :class:`Records` (200): the body's whole RecordBatch v2 batches as
  ``(position, header)``, in offset order. With ``check_crcs`` they are the
  *verified prefix*: the batches before the first one whose CRC-32C fails;
  that one is ``damaged`` (a :class:`~app.common.errors.StoredBatchCorrupt`
  naming its range), to raise once the good batches before it are handed out
  (an answer whose first batch is damaged has no batches). A partial batch at
  the end (the broker cut the answer at ``max_bytes``) is not listed.
  ``high_watermark`` is the ``Logbus-High-Watermark`` header (leaders send it
  to followers), else None; ``last_stable_offset`` the ``Logbus-Last-Stable-Offset``
  header, else None.

  ``interpret(..., read_committed=True)`` (the answer to a fetch sent with
  ``isolation_level=read_committed``) reads the answer's aborted transactions
  (``Logbus-Aborted-Transactions``) into ``aborted`` and lists in ``batches`` only
  the batches a read_committed reader keeps (:func:`app.common.isolation.committed_batches`:
  no control batch, no batch of an aborted transaction). Either way ``next_offset``
  is the offset after the last whole, verified batch of the answer, dropped or not:
  where the next fetch starts, and how far a reader's position may advance even when
  every batch was dropped.
- :class:`Refused` (any other status): the error the body names
  (:mod:`app.common.error_body`) and the one thing to do about it, ``action``:

  ============== =========================================================================
  ``NOT_LEADER``  307/421 NOT_LEADER_OR_FOLLOWER: fetch from ``leader_url`` when it names
                  one (a hint, never a redirect to follow blindly), else look the leader
                  up; the metadata is stale either way
  ``OUT_OF_RANGE`` 416 OFFSET_OUT_OF_RANGE: ``error`` is an
                  :class:`~app.common.errors.OffsetOutOfRange` carrying the log's
                  ``log_start_offset`` and ``log_end_offset``; what to do is the caller's
                  policy (the consumer's ``auto_offset_reset``, Spark's
                  ``failOnDataLoss``, a follower's restart at the leader's log start)
  ``RETRY``       a retriable error: back off and fetch the same offset again;
                  ``stale_metadata`` says whether the leader may have moved
                  (LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH)
  ``RAISE``       anything else: retrying cannot help
  ============== =========================================================================

What a caller keeps between answers (positions, backoff deadlines, which broker it
asked) stays with the caller; this module holds no state and is safe from any
thread.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from app.common.batch import BatchHeader, compute_crc, iter_headers
from app.common.error_body import error_from_body
from app.common.errors import LogbusError, OffsetOutOfRange, StoredBatchCorrupt
from app.common.http1 import Response
from app.common.isolation import ABORTED_HEADER, LSO_HEADER, committed_batches, parse_aborted

__all__ = ["Action", "FetchOutcome", "Records", "Refused", "interpret", "verified_prefix"]

HIGH_WATERMARK_HEADER = "logbus-high-watermark"
LOG_START_HEADER = "logbus-log-start-offset"
_LSO = LSO_HEADER.lower()
_ABORTED = ABORTED_HEADER.lower()

# Retriable codes after which the partition's leader may be another broker.
_LEADER_MAY_HAVE_MOVED = frozenset(
    {
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
    }
)


class Action(enum.Enum):
    """What a refused fetch calls for (see the module docstring's table)."""

    NOT_LEADER = "not_leader"
    OUT_OF_RANGE = "out_of_range"
    RETRY = "retry"
    RAISE = "raise"


@dataclass(frozen=True, slots=True)
class Records:
    """A 200 answer: ``batches`` of ``body`` (``(position, header)``), ``damaged`` after them."""

    body: bytearray
    batches: list[tuple[int, BatchHeader]]
    damaged: StoredBatchCorrupt | None
    high_watermark: int | None
    next_offset: int | None = None
    """The offset after the answer's last whole verified batch, listed or dropped (None: none)."""
    last_stable_offset: int | None = None
    aborted: list[tuple[int, int]] | None = None
    """read_committed answers: the aborted transactions, ``(producer_id, first_offset)``."""
    log_start_offset: int | None = None
    """The ``Logbus-Log-Start-Offset`` header (a follower follows its leader's), else None."""


@dataclass(frozen=True, slots=True)
class Refused:
    """An error answer: ``error`` to raise or learn from, ``action`` to take."""

    error: LogbusError
    action: Action
    stale_metadata: bool
    leader_url: str | None = None
    """NOT_LEADER_OR_FOLLOWER's hint: the leader's URL as the broker advertises it."""


FetchOutcome = Records | Refused


def verified_prefix(
    body: bytes | bytearray | memoryview,
    batches: list[tuple[int, BatchHeader]],
    topic: str,
    partition: int,
) -> tuple[list[tuple[int, BatchHeader]], StoredBatchCorrupt | None]:
    """``batches`` up to the first whose CRC-32C fails, and that one's error (or None)."""
    for i, (pos, header) in enumerate(batches):
        if compute_crc(body, pos, header.size) != header.crc:
            damaged = StoredBatchCorrupt(topic, partition, header.base_offset, header.last_offset)
            return batches[:i], damaged
    return batches, None


def interpret(
    response: Response,
    topic: str,
    partition: int,
    *,
    check_crcs: bool = True,
    read_committed: bool = False,
) -> FetchOutcome:
    """What ``response``, the answer to a binary fetch of ``topic``-``partition``, means.

    ``read_committed``: the fetch asked for ``isolation_level=read_committed``; the
    batches listed are those a read_committed reader keeps (see the module docstring).
    """
    if response.status == 200:
        body = response.body
        headers = response.headers
        batches = list(iter_headers(body))
        damaged = None
        if check_crcs:
            batches, damaged = verified_prefix(body, batches, topic, partition)
        next_offset = batches[-1][1].next_offset if batches else None
        hw = headers.get(HIGH_WATERMARK_HEADER)
        start = headers.get(LOG_START_HEADER)
        lso = headers.get(_LSO)
        aborted = None
        if read_committed:
            aborted = parse_aborted(headers.get(_ABORTED, ""))
            batches = committed_batches(body, batches, aborted)
        return Records(
            body,
            batches,
            damaged,
            int(hw) if hw is not None else None,
            next_offset,
            int(lso) if lso is not None else None,
            aborted,
            int(start) if start is not None else None,
        )
    error = error_from_body(response.status, response.body)
    code = error.error_code
    stale = code in _LEADER_MAY_HAVE_MOVED
    if code == "NOT_LEADER_OR_FOLLOWER":
        url = getattr(error, "leader_url", None)
        hint = url if isinstance(url, str) and url else None
        return Refused(error, Action.NOT_LEADER, stale, hint)
    if isinstance(error, OffsetOutOfRange):
        return Refused(error, Action.OUT_OF_RANGE, stale)
    return Refused(error, Action.RETRY if error.retriable else Action.RAISE, stale)
