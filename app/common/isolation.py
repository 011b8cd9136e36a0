"""Fetch isolation levels and the ``read_committed`` filter (KIP-98, the reader's side). No I/O.

Kafka's two isolation levels, by Kafka's names:

- ``read_uncommitted`` (the default, as Kafka's consumer): every data record up to the
  high watermark, transactional or not, committed, aborted or still open. Control
  batches (transaction markers) are never handed to applications.
- ``read_committed``: records up to the *last stable offset* (LSO: the first offset of
  the oldest transaction still open) only, and of those only the ones not in an aborted
  transaction. A reader is held at the LSO while a transaction is open and released
  when its marker is written.

The broker answers a ``read_committed`` fetch with the batches below the LSO and the
aborted transactions overlapping them, each as ``(producer_id, first_offset)`` (Kafka's
FetchResponse ``AbortedTransactions``). :func:`committed_batches` is the one filter
that turns that into the batches a reader keeps, run by the broker for decoded answers
(JSON fetch, WebSocket frames) and by the SDK consumer and Spark tasks for binary
fetches (through :func:`app.common.fetch_answer.interpret`). It is Kafka's consumer
logic (``CompletedFetch.nextFetchedRecord``): walking the batches in offset order,

1. before each batch with a producer id, every aborted transaction whose first offset
   is at or below the batch's last offset makes its producer *aborting*;
2. a transactional data batch of an aborting producer is dropped;
3. the ABORT marker (a control batch) of a producer ends its aborting run;
4. every control batch is dropped.

A producer has at most one transaction open at a time, and its ABORT marker comes
after all of that transaction's batches, so a batch is dropped exactly when the
transaction holding it was aborted. The reader's position still advances past
dropped batches (the answer's ``next_offset``).

Binary fetch answers carry the list in the response header :data:`ABORTED_HEADER`:
``producer_id:first_offset`` pairs, comma-separated, in no particular order (empty
when there are none; the header is present on every ``read_committed`` answer, so a
reader can tell the broker filtered). :data:`LSO_HEADER` carries the LSO on every
fetch answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from app.common.batch import BatchHeader, read_control_marker

__all__ = [
    "ABORTED_HEADER",
    "ISOLATION_LEVELS",
    "LSO_HEADER",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "check_isolation_level",
    "committed_batches",
    "format_aborted",
    "parse_aborted",
]

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)

LSO_HEADER = "Logbus-Last-Stable-Offset"
ABORTED_HEADER = "Logbus-Aborted-Transactions"

Aborted = tuple[int, int]  # (producer_id, first_offset)


def check_isolation_level(level: str) -> str:
    """``level`` when it is one of :data:`ISOLATION_LEVELS`; ValueError naming them otherwise."""
    if level not in ISOLATION_LEVELS:
        raise ValueError(
            f"isolation_level must be {READ_UNCOMMITTED} or {READ_COMMITTED}, got {level!r}"
        )
    return level


def format_aborted(aborted: Iterable[Aborted]) -> str:
    """The :data:`ABORTED_HEADER` value: ``pid:first,pid:first`` (empty for none)."""
    return ",".join(f"{pid}:{first}" for pid, first in aborted)


def parse_aborted(text: str) -> list[Aborted]:
    """The pairs of an :data:`ABORTED_HEADER` value; ValueError when it is malformed."""
    out: list[Aborted] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        pid, sep, first = item.partition(":")
        if not sep:
            raise ValueError(f"malformed {ABORTED_HEADER} entry {item!r}")
        out.append((int(pid), int(first)))
    return out


def committed_batches(
    buf: bytes | bytearray | memoryview,
    batches: Sequence[tuple[int, BatchHeader]],
    aborted: Iterable[Aborted],
) -> list[tuple[int, BatchHeader]]:
    """The data batches of ``batches`` (``(position in buf, header)``, offset order) that a
    ``read_committed`` reader keeps, given the answer's aborted transactions.

    Control batches are always dropped; transactional batches of aborted transactions
    too (see the module docstring for the rule). ``buf`` is read only for the markers.
    """
    pending = sorted(aborted, key=lambda a: a[1])
    if not pending:
        return [b for b in batches if not b[1].is_control]
    out: list[tuple[int, BatchHeader]] = []
    aborting: set[int] = set()
    i = 0
    for pos, header in batches:
        pid = header.producer_id
        if pid >= 0:
            last = header.last_offset
            while i < len(pending) and pending[i][1] <= last:
                aborting.add(pending[i][0])
                i += 1
            if header.is_control:
                if pid in aborting and not read_control_marker(buf, pos).commit:
                    aborting.discard(pid)
                continue
            if header.is_transactional and pid in aborting:
                continue
        elif header.is_control:
            continue
        out.append((pos, header))
    return out
