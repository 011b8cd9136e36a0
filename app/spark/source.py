"""``spark.read.format("logbus")``, ``df.write.format("logbus")`` and their streaming forms.

Built on PySpark 4's Python Data Source API. Offsets are planned on the
driver with the SDK's :class:`~app.client.Admin`, each lookup retried through
broker outages (:mod:`app.spark.lookup`); each Spark task fetches one offset
range and hands Spark Arrow record batches (see :mod:`app.spark.arrow`).

Writes go through the SDK's idempotent :class:`~app.client.Producer`, one per
task. Idempotence removes duplicates from the producer's own retries within
that task, but a task Spark retries (or a speculative copy) starts a new
producer session and sends its rows again: the sink is at-least-once across
task retries, like Spark's Kafka sink. ``abort`` cannot take back what a
failed job's tasks already appended. With ``deliveryGuarantee=exactly-once``
each task writes in a Logbus transaction that the driver commits, and a
replayed micro-batch skips the tasks whose transaction committed
(:mod:`app.spark.txn`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from app.client import Producer, TopicPartition
from app.common.isolation import READ_COMMITTED
from app.common.partitioner import StickyPartitioner, partition_for_key
from app.spark import options as opt
from app.spark.arrow import read_range
from app.spark.lookup import OffsetLookup
from app.spark.options import OffsetRange, OptionError
from app.spark.txn import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    Marker,
    Pending,
    TaskTransaction,
    end_transactions,
)
from app.spark.typed import Decoder, Encoder, TypedValues, single_topic, typed_columns, value_type

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS = ", headers array<struct<key: string, value: binary>>"
# Typed columns (valueFormat, keyFormat): each one's <column>_schema_id and <column>_error
# follow the others, the value's first.
TYPED_ORDER = ("value", "key")
log = logging.getLogger(__name__)
# Local properties Spark's micro-batch execution sets on each task (StreamExecution's
# QUERY_ID_KEY, MicroBatchExecution's BATCH_ID_KEY): the query id is kept in the
# checkpoint, so it names the sink across restarts.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
# How long a task waits for a fetch to make progress before failing (Kafka's pollTimeoutMs).
DEFAULT_POLL_TIMEOUT_MS = 120_000


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One Spark task's share: an offset range of one topic-partition."""

    range: OffsetRange

    def __init__(self, range: OffsetRange) -> None:
        object.__setattr__(self, "range", range)
        object.__setattr__(self, "value", range)


class LogbusDataSource(DataSource):
    """The ``logbus`` format: batch and streaming reads and writes of Logbus topics."""

    @classmethod
    def name(cls) -> str:
        return "logbus"

    def schema(self) -> str | StructType:
        include_headers = opt.flag(self.options, "includeHeaders", False)
        typed = typed_columns(self.options, single_topic(self.options))
        if not typed:
            return SCHEMA + (HEADERS if include_headers else "")
        return typed_schema(include_headers, {f: value_type(t) for f, t in typed.items()})

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogbusReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LogbusStreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if opt.exactly_once(self.options):
            return LogbusTxnWriter(dict(self.options), schema)
        return LogbusWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        if opt.exactly_once(self.options):
            return LogbusTxnStreamWriter(dict(self.options), schema)
        return LogbusStreamWriter(dict(self.options), schema)


def raw_schema(include_headers: bool) -> StructType:
    """:data:`SCHEMA` (and the headers) as a StructType."""
    fields = [
        T.StructField("key", T.BinaryType(), True),
        T.StructField("value", T.BinaryType(), True),
        T.StructField("topic", T.StringType(), True),
        T.StructField("partition", T.IntegerType(), True),
        T.StructField("offset", T.LongType(), True),
        T.StructField("timestamp", T.TimestampType(), True),
        T.StructField("timestampType", T.IntegerType(), True),
    ]
    if include_headers:
        header = T.StructType(
            [
                T.StructField("key", T.StringType(), True),
                T.StructField("value", T.BinaryType(), True),
            ]
        )
        fields.append(T.StructField("headers", T.ArrayType(header, True), True))
    return T.StructType(fields)


def typed_schema(include_headers: bool, types: dict[str, T.DataType]) -> StructType:
    """The source's schema with typed columns (``types``: ``value`` and/or ``key`` → the
    schema's Spark type): each such column of its type, then for each (value first)
    ``<column>_schema_id`` and ``<column>_error``."""
    raw = raw_schema(include_headers)
    fields = [
        T.StructField(f.name, types[f.name], True) if f.name in types else f for f in raw.fields
    ]
    for column in TYPED_ORDER:
        if column in types:
            fields.append(T.StructField(f"{column}_schema_id", T.IntegerType(), True))
            fields.append(T.StructField(f"{column}_error", T.StringType(), True))
    return T.StructType(fields)


def decoded_batch(
    decoders: dict[str, Decoder], batch: pa.RecordBatch, schema: pa.Schema, r: OffsetRange
) -> pa.RecordBatch:
    """``batch`` (raw keys and values) with its typed columns decoded (``decoders`` by
    column): the typed source's batch."""
    decoded: dict[str, pa.Array] = {}
    extra: list[pa.Array] = []
    for column in TYPED_ORDER:
        decoder = decoders.get(column)
        if decoder is None:
            continue
        values, ids, errors = decoder.column(
            batch.column(column), (r.topic, r.partition), batch.column("offset")
        )
        decoded[column] = values
        extra += [ids, errors]
    arrays = [
        decoded[name] if name in decoded else batch.column(name) for name in batch.schema.names
    ]
    return pa.RecordBatch.from_arrays([*arrays, *extra], schema=schema)


class _Reading:
    """What the batch and the stream reader share: options, offset lookups and the task-side read."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = options
        self.url = opt.url_of(options)
        opt.apply_tls(options)
        self.lookup = OffsetLookup(self.url, options)
        self.include_headers = opt.flag(options, "includeHeaders", False)
        self.fail_on_data_loss = opt.flag(options, "failOnDataLoss", True)
        self.min_partitions = opt.integer(options, "minPartitions")
        if self.min_partitions is not None and self.min_partitions < 1:
            raise OptionError("'minPartitions' must be positive")
        self.poll_timeout_ms = opt.integer(options, "pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS
        # isolation.level / kafka.isolation.level: read_committed ranges end at the LSO
        # (the lookup's "latest") and tasks drop the records of aborted transactions.
        self.read_committed = opt.isolation_level(options) == READ_COMMITTED
        # valueFormat / keyFormat: tasks read raw bytes, then decode them into ``schema``'s
        # types.
        self.typed: dict[str, TypedValues] = typed_columns(options, single_topic(options))
        self.out_schema = to_arrow_schema(schema, timezone="UTC")
        self.arrow_schema = (
            self.out_schema
            if not self.typed
            else to_arrow_schema(raw_schema(self.include_headers), timezone="UTC")
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            # When partitions() plans none, PySpark still runs one task, reading a
            # placeholder InputPartition(None): an empty read, not an error.
            if partition.value is None:
                return
            raise TypeError(f"not a partition of this source: {partition!r}")
        opt.apply_tls(self.options)  # this task's worker process
        batches = read_range(
            self.url,
            partition.range,
            self.arrow_schema,
            include_headers=self.include_headers,
            fail_on_data_loss=self.fail_on_data_loss,
            timeout_s=self.poll_timeout_ms / 1000,
            read_committed=self.read_committed,
        )
        if not self.typed:
            yield from batches
            return
        decoders = {column: Decoder(typed) for column, typed in self.typed.items()}
        for batch in batches:
            yield decoded_batch(decoders, batch, self.out_schema, partition.range)

    def _ranges(
        self,
        start: dict[TopicPartition, int],
        end: dict[TopicPartition, int],
        log_start: dict[TopicPartition, int],
    ) -> list[RangePartition]:
        ranges = []
        for tp, stop in end.items():
            begin = start.get(tp, log_start[tp])
            if begin > stop:
                raise OptionError(
                    f"{tp.topic}-{tp.partition}: starting offset {begin} is after ending offset {stop}"
                )
            begin = opt.check_loss(tp, begin, log_start[tp], self.fail_on_data_loss)
            ranges.append(OffsetRange(tp.topic, tp.partition, min(begin, stop), stop))
        return [RangePartition(r) for r in opt.split(ranges, self.min_partitions)]


class LogbusReader(_Reading, DataSourceReader):
    """Batch read: the offsets between startingOffsets and endingOffsets, resolved once."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        timestamp = opt.integer(options, "startingTimestamp")
        starting = opt.get(options, "startingOffsets")
        if timestamp is not None and starting is not None:
            raise OptionError("give 'startingOffsets' or 'startingTimestamp', not both")
        self.starting = opt.parse_offsets(starting or "earliest", "startingOffsets")
        self.ending = opt.parse_offsets(
            opt.get(options, "endingOffsets") or "latest", "endingOffsets"
        )
        if self.ending == "earliest":
            raise OptionError("'endingOffsets' cannot be earliest (as in Spark's Kafka source)")
        self.starting_timestamp = timestamp

    def partitions(self) -> Sequence[InputPartition]:
        bounds = self.lookup.bounds().require_all()
        tps, earliest, latest = bounds.partitions, bounds.earliest, bounds.latest
        if self.starting_timestamp is not None:
            found = self.lookup.offsets_at(tps, self.starting_timestamp)
            # No record at or after the timestamp: nothing to read there.
            start = {tp: latest[tp] if o is None else o for tp, o in found.items()}
        else:
            start = opt.resolve(self.starting, tps, earliest, latest, opt.EARLIEST)
        end = opt.resolve(self.ending, tps, earliest, latest, opt.LATEST)
        # Offsets past the end would never come: refuse them now rather than have a
        # task wait pollTimeoutMs for them.
        opt.check_within("endingOffsets", end, latest)
        # Nothing to read gives []: PySpark then reads a placeholder (see read()).
        return self._ranges(start, end, earliest)


class LogbusStreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch read; offsets are JSON per partition: ``{"topic": {"0": 42}}`` (next to read).

    Each micro-batch starts where the last one ended, as the checkpoint holds
    it; :func:`~app.spark.options.reconcile` checks those offsets against the
    logs first, so offsets that went back (a topic re-created, a log
    truncated) or partitions that went away are data loss, never a silent
    skip.
    """

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        starting = opt.get(options, "startingOffsets") or "latest"
        self.starting = opt.parse_offsets(starting, "startingOffsets")
        self.max_offsets_per_trigger = opt.integer(options, "maxOffsetsPerTrigger")
        self.available_now: dict[TopicPartition, int] | None = None

    def initialOffset(self) -> dict[str, Any]:
        bounds = self.lookup.bounds().require_all()
        start = opt.resolve(
            self.starting, bounds.partitions, bounds.earliest, bounds.latest, opt.LATEST
        )
        opt.check_within("startingOffsets", start, bounds.latest)
        return opt.offsets_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_offsets_per_trigger:
            return ReadMaxRows(self.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = self.lookup.bounds().latest

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        bounds = self.lookup.bounds()
        latest = bounds.latest
        if self.available_now is not None:
            # Partitions created after the AvailableNow target was taken wait for the next run.
            latest = {tp: min(o, self.available_now.get(tp, 0)) for tp, o in latest.items()}
        # Fails here, before Spark logs the batch, when offsets went back under
        # failOnDataLoss=true; otherwise partitions() reports what it skips.
        frm = opt.reconcile(
            opt.offsets_from_json(start),
            bounds.earliest,
            bounds.latest,
            self.fail_on_data_loss,
            report=False,
        )
        # max: an AvailableNow target below a partition's restart point reads nothing there.
        end = {tp: max(latest[tp], frm[tp]) for tp in frm}
        if isinstance(limit, ReadMaxRows):
            end = opt.cap(frm, end, limit.max_rows)
        return opt.offsets_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return opt.offsets_json(self.lookup.bounds().latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        stop = opt.offsets_from_json(end)
        bounds = self.lookup.bounds_of(stop)
        # ``start`` is where the last batch ended; latestOffset() planned ``stop`` from
        # where each partition really restarts: the same reconciliation, against the
        # planned ends, finds that again, and reports what is skipped (partitions
        # latestOffset() dropped as gone, or gone since, included).
        begin = opt.reconcile(
            opt.offsets_from_json(start),
            bounds.earliest,
            {tp: o for tp, o in stop.items() if tp in bounds.latest},
            self.fail_on_data_loss,
        )
        return self._ranges(begin, {tp: stop[tp] for tp in begin}, bounds.earliest)

    def commit(self, end: dict[str, Any]) -> None:
        # Nothing to do: the offsets live in Spark's checkpoint, not in the broker.
        pass


# ---- writes ---------------------------------------------------------------------------------


@dataclass
class WriteCommit(WriterCommitMessage):
    records: int


# A row to write: topic, value, key, partition (None: the partitioner's), headers.
Row = tuple[str, bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]] | None]


def _bytes(column: pa.Array | pa.ChunkedArray | None, n: int) -> list[bytes | None]:
    if column is None:
        return [None] * n
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if s is None else s.encode() for s in column.to_pylist()]
    return list(column.cast(pa.binary()).to_pylist())


class _Writing:
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.url = opt.url_of(options)
        self.options = options
        opt.apply_tls(options)
        self.topic = opt.get(options, "topic")
        names = set(schema.fieldNames())
        if "value" not in names:
            raise OptionError("the DataFrame to write needs a 'value' column")
        if self.topic is None and "topic" not in names:
            raise OptionError("give option 'topic' or a 'topic' column")
        # valueFormat / keyFormat: the column is encoded with its subject's schema in each task.
        self.typed: dict[str, TypedValues] = typed_columns(options, self.topic, sink=True)
        if "key" in self.typed and "key" not in names:
            raise OptionError("keyFormat is given but the DataFrame to write has no 'key' column")
        self._encoders: dict[str, Encoder] = {}
        self.producer_config: dict[str, Any] = {"enable_idempotence": True, "acks": "all"}
        linger = opt.integer(options, "lingerMs")
        if linger is not None:
            self.producer_config["linger_ms"] = linger

    def rows(self, batch: pa.RecordBatch) -> Iterator[Row]:
        """``batch``'s rows as ``(topic, value, key, partition or None, headers or None)``."""
        n = batch.num_rows
        names = batch.schema.names
        values = self._column(batch, "value")
        keys = self._column(batch, "key") if "key" in names else _bytes(None, n)
        topics = batch.column("topic").to_pylist() if "topic" in names else [self.topic] * n
        parts = batch.column("partition").to_pylist() if "partition" in names else [None] * n
        heads = batch.column("headers").to_pylist() if "headers" in names else [None] * n
        for value, key, topic, part, head in zip(values, keys, topics, parts, heads, strict=True):
            # The option wins over a null topic cell, as in Spark's Kafka sink.
            target = topic or self.topic
            if target is None:
                raise OptionError("a row has a null 'topic' and no 'topic' option is set")
            yield target, value, key, part, [(h["key"], h["value"]) for h in head] if head else None

    def _column(self, batch: pa.RecordBatch, column: str) -> list[bytes | None]:
        """``column``'s cells as bytes: encoded with its subject's schema when typed."""
        typed = self.typed.get(column)
        if typed is None:
            return _bytes(batch.column(column), batch.num_rows)
        encoder = self._encoders.get(column)
        if encoder is None:
            encoder = self._encoders[column] = Encoder(typed)
        return encoder.column(batch.column(column))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        errors: list[BaseException] = []

        def delivered(_meta: object, error: BaseException | None) -> None:
            if error is not None and not errors:
                errors.append(error)

        count = 0
        opt.apply_tls(self.options)  # this task's worker process
        with Producer(self.url, **self.producer_config) as producer:
            for batch in iterator:
                for topic, value, key, part, headers in self.rows(batch):
                    producer.send(
                        topic, value, key, partition=part, headers=headers, on_delivery=delivered
                    )
                count += batch.num_rows
                if errors:
                    break
            producer.flush()
        if errors:
            raise errors[0]
        return WriteCommit(count)


@dataclass
class TxnWriteCommit(WriterCommitMessage):
    """A task's open transaction (None: it wrote nothing, or a replayed batch found its
    rows already committed) and how many rows it wrote."""

    pending: Pending | None
    records: int


class _TxnWriting(_Writing):
    """The exactly-once write (``deliveryGuarantee=exactly-once``): each task writes its
    rows in a transaction of its own that the driver commits (see :mod:`app.spark.txn`
    and app/spark/README.md for the guarantee and its limits)."""

    def __init__(self, options: dict[str, str], schema: StructType, streaming: bool) -> None:
        super().__init__(options, schema)
        prefix = opt.get(options, "transactional.id.prefix")
        if prefix is None and not streaming:
            # A batch job's own: its retried tasks fence their predecessors.
            prefix = f"logbus-spark-{uuid.uuid4().hex}"
        self.prefix = prefix
        self.streaming = streaming
        self.timeout_ms = (
            opt.integer(options, "transaction.timeout.ms") or DEFAULT_TRANSACTION_TIMEOUT_MS
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        opt.apply_tls(self.options)  # this task's worker process
        ctx = TaskContext.get()
        assert ctx is not None, "write() runs in a Spark task"
        # Set by Spark's micro-batch execution on every task of a batch (None in batch jobs).
        query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if self.streaming and (query is None or batch_id is None):
            # Without them a replayed micro-batch could not be recognized: refuse.
            raise RuntimeError(
                f"Spark set no {QUERY_ID_PROPERTY!r} / {BATCH_ID_PROPERTY!r} on this "
                "streaming write task: the exactly-once sink cannot recognize a replay"
            )
        prefix = self.prefix or f"logbus-spark-{query}"
        txn = TaskTransaction(
            self.url, prefix, ctx.partitionId(), ctx.attemptNumber(), self.timeout_ms
        )
        # Only the streaming sink marks its batches: a batch write inside foreachBatch
        # also runs with these properties set, but the same micro-batch may write
        # several times there, and would find its own mark.
        marker = Marker(query, int(batch_id)) if self.streaming and query and batch_id else None
        try:
            txn.init()
            txn.fence_earlier_attempts()
            if marker is not None and txn.committed(marker.query) >= marker.batch:
                log.info("%s: batch %d already committed", txn.transactional_id, marker.batch)
                for _ in iterator:  # read to its end, so the Python worker can be reused
                    pass
                return TxnWriteCommit(None, 0)
            count = self._send(txn, iterator)
            if marker is not None and txn.open:
                txn.commit_marker(marker)
        except BaseException:
            if txn.open:  # best effort: the next init of the id aborts it anyway
                try:
                    end_transactions(self.url, [txn.pending()], commit=False)
                except Exception:
                    log.exception("%s: abort failed", txn.transactional_id)
            raise
        finally:
            txn.close()
        return TxnWriteCommit(txn.pending() if txn.open else None, count)

    def _send(self, txn: TaskTransaction, iterator: Iterator[pa.RecordBatch]) -> int:
        """Send every row in ``txn``, each incoming Arrow batch's rows before the next is
        read (one transactional batch per partition, or more past
        :data:`~app.spark.txn.BATCH_BYTES`); the row count."""
        sticky = StickyPartitioner()
        count = 0
        for batch in iterator:
            now_ms = int(time.time() * 1000)
            chosen: dict[str, int] = {}
            for topic, value, key, part, headers in self.rows(batch):
                if part is None:
                    n = txn.partition_count(topic)
                    if key is not None:
                        part = partition_for_key(key, n)
                    else:  # one partition per Arrow batch, as the producer's sticky one
                        part = chosen.get(topic)
                        if part is None:
                            part = chosen[topic] = sticky.next_partition(topic, n)
                txn.append(topic, part, key, value, headers, now_ms)
            txn.flush()
            count += batch.num_rows
        return count


class LogbusWriter(_Writing, DataSourceArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        # Records are visible as soon as each task appended them; nothing to publish.
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # An append log cannot take records back: the rows of tasks that finished stay.
        pass


class LogbusTxnWriter(_TxnWriting, DataSourceArrowWriter):
    """Batch write, exactly-once: the job's rows become visible to ``read_committed``
    readers together when the job commits; a failed job's never."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema, streaming=False)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        end_transactions(self.url, _pending(messages), commit=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.url, messages)


class LogbusTxnStreamWriter(_TxnWriting, DataSourceStreamArrowWriter):
    """Streaming write, exactly-once: one transaction per task per micro-batch, all
    committed by the driver once the micro-batch's tasks succeeded."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema, streaming=True)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        end_transactions(self.url, _pending(messages), commit=True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _abort(self.url, messages)


def _pending(messages: list[WriterCommitMessage | None]) -> list[Pending]:
    return [m.pending for m in messages if isinstance(m, TxnWriteCommit) and m.pending]


def _abort(url: str, messages: list[WriterCommitMessage | None]) -> None:
    """Abort the transactions of the tasks that succeeded. Those of failed tasks were
    aborted by the task itself, or are by the next init of their id (a retry, the
    query's restart) or at their timeout."""
    try:
        end_transactions(url, _pending(messages), commit=False)
    except Exception:
        log.exception("aborting the sink's transactions failed; they end at their timeout")


class LogbusStreamWriter(_Writing, DataSourceStreamArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
