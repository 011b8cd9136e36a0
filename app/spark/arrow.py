"""Fetching one offset range and turning it into Arrow record batches.

Runs inside Spark's Python workers. A task fetches the raw RecordBatch v2
bytes of its offset range over the broker's HTTP fetch endpoint (one keep-alive
connection, the next fetch sent before the answer in hand is decoded, so the
broker prepares it meanwhile) and :mod:`app.spark.decode` writes the records
of several answers straight into the buffers of one Arrow batch: no Python
object per record, and Spark gets Arrow batches it hands to the JVM without a
per-row conversion.

``isolation.level=read_committed``: the fetches ask for ``read_committed`` and
:func:`~app.common.fetch_answer.interpret` drops the batches of aborted transactions
(and control batches); the position still advances past them.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from urllib.parse import quote

import numpy as np
import pyarrow as pa

from app import wire
from app.client import _cluster, _http
from app.client.types import TopicPartition
from app.common.batch import BatchHeader
from app.common.errors import LogbusError, OffsetOutOfRange
from app.common.fetch_answer import Action, Refused, interpret, verified_prefix
from app.spark.decode import Segment, decode, segment
from app.spark.options import DataLoss, OffsetRange

log = logging.getLogger(__name__)

# Spark moves Arrow batches from the Python worker to the JVM one at a time with a
# fixed cost each: 100k-row batches read ~1.3x faster than 10k-row ones, so fetch
# answers are merged until they hold this many rows ...
BATCH_ROWS = 100_000
# ... or this many record bytes, which bounds the memory a task holds.
BATCH_BYTES = 32 * 1024 * 1024
# Per fetch answer (the broker still sends a larger first batch whole), as the SDK's Consumer.
FETCH_MAX_BYTES = 8 * 1024 * 1024
FETCH_MAX_WAIT_MS = 200
REQUEST_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.1


def _repeated(text: str, n: int) -> pa.Array:
    """A string column holding ``text`` ``n`` times, built from its buffers (no list of ``n``)."""
    data = text.encode()
    ends = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(ends), pa.py_buffer(data * n)])


def to_batch(
    segments: list[Segment], r: OffsetRange, schema: pa.Schema, include_headers: bool
) -> pa.RecordBatch:
    """One Arrow batch of the records of ``segments`` (all of ``r``'s partition) inside ``r``."""
    cols = decode(
        segments, r.start, r.end, schema.field("headers").type if include_headers else None
    )
    n = len(cols)
    arrays: list[pa.Array] = [
        cols.key,
        cols.value,
        _repeated(r.topic, n),
        pa.array(np.full(n, r.partition, dtype=np.int32)),
        cols.offset,
        cols.timestamp,
        cols.timestamp_type,
    ]
    if include_headers:
        arrays.append(cols.headers)
    # Spark checks the batch schema for equality with the declared one, nullability included.
    return pa.RecordBatch.from_arrays(
        [a.cast(f.type) if a.type != f.type else a for a, f in zip(arrays, schema, strict=True)],
        schema=schema,
    )


def answer_records(
    body: bytearray | bytes,
    batches: list[tuple[int, BatchHeader]],
    position: int,
    r: OffsetRange,
    *,
    verified: bool = False,
) -> Segment | None:
    """The whole batches of a fetch answer that hold records of ``r`` at or after ``position``.

    CRCs are checked (as the SDK's Consumer does by default) unless ``verified``
    says :func:`~app.common.fetch_answer.interpret` did; a damaged batch raises
    :class:`~app.common.errors.StoredBatchCorrupt` (a ``CorruptRecord``). Control
    batches (transaction markers) are left out, as every Kafka consumer does;
    records of transactional batches are kept (read_uncommitted, like the SDK's
    Consumer).
    """
    if not verified:
        _, damaged = verified_prefix(body, batches, r.topic, r.partition)
        if damaged is not None:
            raise damaged
    wanted = [
        (pos, h)
        for pos, h in batches
        if not h.is_control and h.last_offset >= position and h.base_offset < r.end
    ]
    return segment(body, wanted) if wanted else None


def fetch_range(
    url: str,
    r: OffsetRange,
    *,
    fail_on_data_loss: bool,
    timeout_s: float,
    read_committed: bool = False,
) -> Iterator[tuple[Segment | None, int]]:
    """Fetch answers covering ``r`` as ``(records, position)``; ``position`` is the next offset to fetch.

    ``records`` holds the answer's whole, non-control batches that reach into
    ``r`` (None when there are none); they may start before ``r.start`` and end
    after ``r.end``: :func:`~app.spark.decode.decode` keeps the offsets inside.
    """
    # ``url``: one or several brokers (comma-separated). In a cluster the partition's
    # leader serves the fetch: found from /metadata, and again after a 307/421 or a
    # broker that stopped answering (the position is kept, so nothing repeats or skips).
    cluster = _cluster.Cluster(url)
    tp = TopicPartition(r.topic, r.partition)
    leader = _leader(cluster, tp)
    conn = wire.FetchConnection(wire.Endpoint.parse(leader), REQUEST_TIMEOUT_S)

    def reconnect(to: str | None) -> None:
        nonlocal conn, leader
        conn.close()
        leader = to or _leader(cluster, tp, refresh=True)
        conn = wire.FetchConnection(wire.Endpoint.parse(leader), REQUEST_TIMEOUT_S)

    target = (
        f"/topics/{quote(r.topic, safe='')}/partitions/{r.partition}/records"
        f"?max_bytes={FETCH_MAX_BYTES}&min_bytes=1&max_wait_ms={FETCH_MAX_WAIT_MS}"
        f"{'&isolation_level=read_committed' if read_committed else ''}&offset="
    )
    position = r.start
    sent: int | None = None  # the offset asked by the fetch in flight
    deadline = time.monotonic() + timeout_s

    def send(offset: int) -> int | None:
        try:
            conn.send(target + str(offset))
        except OSError:
            return None
        return offset

    try:
        while position < r.end:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{r.topic}-{r.partition}: no progress at offset {position} "
                    f"(reading up to {r.end}) for {timeout_s} s"
                )
            if sent is None and (sent := send(position)) is None:
                time.sleep(RETRY_BACKOFF_S)
                continue
            try:
                response = conn.read_response()
            except (OSError, ValueError):
                sent = None
                time.sleep(RETRY_BACKOFF_S)
                if cluster.is_multi():
                    cluster.failed(leader)
                    reconnect(None)
                continue
            sent = None
            outcome = interpret(response, r.topic, r.partition, read_committed=read_committed)
            if isinstance(outcome, Refused):
                error = outcome.error
                if outcome.action is Action.NOT_LEADER:
                    hint = cluster.leader_hint(tp, error)
                    if hint is None:
                        time.sleep(RETRY_BACKOFF_S)  # an election: ask the metadata again
                    reconnect(hint)
                    continue
                if outcome.action is Action.OUT_OF_RANGE:
                    assert isinstance(error, OffsetOutOfRange)
                    moved = _out_of_range(error, position, r, fail_on_data_loss)
                    if moved is None:
                        return
                    position = moved
                    continue
                if outcome.action is Action.RAISE:
                    raise error
                time.sleep(RETRY_BACKOFF_S)
                continue
            next_offset = outcome.next_offset
            if next_offset is None:
                if outcome.damaged is not None:
                    raise outcome.damaged  # nothing good before it
                continue  # the long poll ended with nothing new: ask again
            if next_offset <= position:
                continue  # nothing past the position (not expected from the broker): ask again
            if next_offset < r.end and outcome.damaged is None:
                # Pipelining: the broker reads the next answer while this one is decoded.
                sent = send(next_offset)
            # read_committed: the batches listed are the kept ones (maybe none).
            records = answer_records(outcome.body, outcome.batches, position, r, verified=True)
            position = next_offset
            deadline = time.monotonic() + timeout_s
            yield records, position
    finally:
        conn.close()


def _out_of_range(
    error: OffsetOutOfRange, position: int, r: OffsetRange, fail_on_data_loss: bool
) -> int | None:
    """Where to go on after a 416 at ``position``: an offset to fetch, or None (the range is done).

    Raises :class:`DataLoss` under ``failOnDataLoss``.
    """
    if position > error.log_end_offset:
        # The log went back under this task (topic re-created, log truncated): the rest
        # of the range is not in it. A later micro-batch finds the same at planning and
        # reads the new log from its start.
        what = (
            f"{r.topic}-{r.partition}: offset {position} is past the end of the "
            f"log, which holds offsets [{error.log_start_offset}, "
            f"{error.log_end_offset}) (the topic was re-created, or the log "
            "truncated, while it was read)"
        )
        if fail_on_data_loss:
            raise DataLoss(f"{what}; set failOnDataLoss=false to go on") from error
        log.warning("%s; failOnDataLoss=false: offsets %d..%d skipped", what, position, r.end - 1)
        return None
    # Retention passed the position between planning and this task.
    if fail_on_data_loss:
        raise DataLoss(
            f"{r.topic}-{r.partition}: offset {position} was deleted before "
            f"it was read (log starts at {error.log_start_offset}); set "
            "failOnDataLoss=false to skip lost records"
        ) from error
    if error.log_start_offset >= r.end:
        return None
    return max(position, error.log_start_offset)


def _leader(cluster: _cluster.Cluster, tp: TopicPartition, *, refresh: bool = False) -> str:
    """The URL of ``tp``'s leader (the one broker given, when it is alone)."""
    if refresh or cluster.needs_refresh([tp.topic]):
        client = _http.sync_client(cluster.default_url, int(REQUEST_TIMEOUT_S * 1000), 4)
        with client, contextlib.suppress(LogbusError):
            _cluster.run_sync(client, _cluster.refresh_route(cluster, [tp.topic]))
    return cluster.leader_url(tp)


def read_range(
    url: str,
    r: OffsetRange,
    schema: pa.Schema,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    timeout_s: float,
    read_committed: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Every record of ``r`` (offsets ``[start, end)``) as Arrow batches, in offset order
    (``read_committed``: without the records of aborted transactions)."""
    if r.size <= 0:
        return
    pending: list[Segment] = []
    rows = size = 0
    for seg, position in fetch_range(
        url,
        r,
        fail_on_data_loss=fail_on_data_loss,
        timeout_s=timeout_s,
        read_committed=read_committed,
    ):
        if seg is not None:
            pending.append(seg)
            rows += seg.records
            size += len(seg.data)
        if pending and (rows >= BATCH_ROWS or size >= BATCH_BYTES or position >= r.end):
            batch = to_batch(pending, r, schema, include_headers)
            pending, rows, size = [], 0, 0
            if batch.num_rows:
                yield batch
    if pending:
        batch = to_batch(pending, r, schema, include_headers)
        if batch.num_rows:
            yield batch
