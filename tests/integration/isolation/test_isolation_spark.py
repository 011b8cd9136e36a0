"""The Spark source's ``isolation.level`` (and Spark's Kafka name ``kafka.isolation.level``):
read_committed offset ranges end at the last stable offset and tasks leave the records of
aborted transactions out. The reader classes are driven directly, as Spark drives them
(planning on the "driver", ``read`` as a task would), without a JVM: a local Spark costs
~60 s here, and tests/e2e/test_e2e_spark.py already runs these classes through one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from isolation_helpers import Broker, Writer, scenario

pytest.importorskip("pyspark")
pytest.importorskip("numba")

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from app.spark import options as opt
from app.spark.options import OptionError
from app.spark.source import LogbusReader, LogbusStreamReader

MakeTopic = Callable[[], tuple[str, Writer]]


def schema() -> StructType:
    """The source's schema (app.spark.source.SCHEMA), built without a Spark session."""
    return StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
        ]
    )


def read_all(reader: LogbusReader | LogbusStreamReader, parts: Any) -> list[tuple[int, bytes]]:
    rows: list[tuple[int, bytes]] = []
    for part in parts:
        for batch in reader.read(part):
            cols = batch.to_pydict()
            rows += list(zip(cols["offset"], cols["value"], strict=True))
    return sorted(rows)


@pytest.mark.parametrize("name", ["isolation.level", "kafka.isolation.level"])
def test_batch_read_committed_ends_at_the_lso_without_aborted_records(
    broker: Broker, topic: MakeTopic, name: str
) -> None:
    topic_name, w = topic()
    s = scenario(w)
    options = {"logbus.url": broker.url, "subscribe": topic_name, name: "read_committed"}
    reader = LogbusReader(options, schema())
    parts = reader.partitions()
    assert [(p.range.start, p.range.end) for p in parts] == [(0, s["lso"])]  # type: ignore[attr-defined]
    assert [v for _, v in read_all(reader, parts)] == s["committed"]
    # read_uncommitted (the default): to the high watermark, every data record.
    plain = LogbusReader({"logbus.url": broker.url, "subscribe": topic_name}, schema())
    parts = plain.partitions()
    assert [p.range.end for p in parts] == [s["end"]]  # type: ignore[attr-defined]
    assert [v for _, v in read_all(plain, parts)] == s["uncommitted"]


def test_streaming_micro_batches_wait_for_the_commit(broker: Broker, topic: MakeTopic) -> None:
    topic_name, w = topic()
    s = scenario(w)
    options = {
        "logbus.url": broker.url,
        "subscribe": topic_name,
        "startingOffsets": "earliest",
        "kafka.isolation.level": "read_committed",
    }
    reader = LogbusStreamReader(options, schema())
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {topic_name: {"0": s["lso"]}}
    assert [v for _, v in read_all(reader, reader.partitions(start, end))] == s["committed"]
    # Held: nothing new until the transaction ends.
    assert reader.latestOffset(end, reader.getDefaultReadLimit()) == end
    w.abort(3)
    later = reader.latestOffset(end, reader.getDefaultReadLimit())
    assert later == {topic_name: {"0": s["end"] + 1}}
    assert [v for _, v in read_all(reader, reader.partitions(end, later))] == [b"p11"]


def test_isolation_options_are_checked() -> None:
    assert opt.isolation_level({}) == "read_uncommitted"
    assert opt.isolation_level({"kafka.isolation.level": "READ_COMMITTED"}) == "read_committed"
    assert (
        opt.isolation_level(
            {"isolation.level": "read_committed", "kafka.isolation.level": "read_committed"}
        )
        == "read_committed"
    )
    with pytest.raises(OptionError, match="disagree"):
        opt.isolation_level(
            {"isolation.level": "read_committed", "kafka.isolation.level": "read_uncommitted"}
        )
    with pytest.raises(OptionError, match="read_uncommitted or read_committed"):
        opt.isolation_level({"isolation.level": "serializable"})
