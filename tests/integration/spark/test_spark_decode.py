"""The Spark reader's compiled decoder (app.spark.decode) against aiokafka's record decoder.

aiokafka's Cython ``DefaultRecordBatch`` is what the SDK's Consumer decodes
with; every column the Spark reader builds straight from the batch bytes must
hold exactly what it gives, for any records: null and empty keys and values,
headers, all codecs, LogAppendTime batches, control and transactional batches,
offset windows cutting batches, answers merged into one Arrow batch. No Spark
or broker needed.
"""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest
from aiokafka.record._crecords import DefaultRecordBatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.common.batch import (
    ATTRIBUTES,
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    build_batch,
    compute_crc,
    iter_headers,
    stamp,
    stamp_log_append_time,
)
from app.common.errors import CorruptRecord
from app.spark.arrow import answer_records, to_batch
from app.spark.decode import decode, segment
from app.spark.options import OffsetRange

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
KINDS = ["create", "log_append", "transactional", "control"]
CONTROL = 0x20
SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)
HEADERS_FIELD = pa.field(
    "headers",
    pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]))),
)

Rec = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]

records_st = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=12),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)), max_size=3),
        st.integers(0, 2**42),
    ),
    min_size=1,
    max_size=25,
)
batch_st = st.tuples(records_st, st.sampled_from(CODECS), st.sampled_from(KINDS), st.integers(0, 3))


def _batch(records: list[Rec], codec: str, kind: str, base: int) -> bytearray:
    buf = bytearray(
        build_batch(
            records,
            codec,
            transactional=kind in ("transactional", "control"),
            producer_id=7 if kind in ("transactional", "control") else -1,
            producer_epoch=0 if kind in ("transactional", "control") else -1,
        )
    )
    stamp(buf, 0, base, 0)
    if kind == "log_append":
        stamp_log_append_time(buf, 0, len(buf), 1_700_000_000_123)
    if kind == "control":
        (attributes,) = ATTRIBUTES.unpack_from(buf, ATTRIBUTES_OFFSET)
        ATTRIBUTES.pack_into(buf, ATTRIBUTES_OFFSET, attributes | CONTROL)
        struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return buf


def _log(batches: list[tuple[list[Rec], str, str, int]]) -> tuple[list[bytearray], int]:
    """The batches laid out one after another (a gap of ``skip`` offsets before each)."""
    out, base = [], 0
    for records, codec, kind, skip in batches:
        base += skip
        out.append(_batch(records, codec, kind, base))
        base += len(records)
    return out, base


def _expected(bufs: list[bytearray], lo: int, hi: int) -> list[tuple[Any, ...]]:
    rows = []
    for buf in bufs:
        (_, header) = next(iter_headers(buf))
        if header.is_control:
            continue
        for r in DefaultRecordBatch(bytes(buf)):
            if lo <= r.offset < hi:
                headers = [(k, v) for k, v in r.headers]
                rows.append((r.key, r.value, r.offset, r.timestamp, header.timestamp_type, headers))
    return rows


def _rows(batch: pa.RecordBatch, with_headers: bool) -> list[tuple[Any, ...]]:
    cols = batch.to_pydict()
    n = batch.num_rows
    heads = (
        [[(h["key"], h["value"]) for h in hs] for hs in cols["headers"]]
        if with_headers
        else [None] * n
    )
    # Microseconds since the epoch as integers (datetime.timestamp() is a float).
    micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
    assert all(us % 1000 == 0 for us in micros)
    return [
        (k, v, o, us // 1000, tt, h)
        for k, v, o, us, tt, h in zip(
            cols["key"],
            cols["value"],
            cols["offset"],
            micros,
            cols["timestampType"],
            heads,
            strict=True,
        )
    ]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(batch_st, min_size=1, max_size=6),
    cut=st.tuples(st.integers(0, 200), st.integers(0, 200)),
    pieces=st.integers(1, 3),
    with_headers=st.booleans(),
)
def test_to_batch_matches_aiokafka(
    batches: list[tuple[list[Rec], str, str, int]],
    cut: tuple[int, int],
    pieces: int,
    with_headers: bool,
) -> None:
    bufs, end = _log(batches)
    lo, hi = min(cut[0], end), min(max(cut), end + 1)
    r = OffsetRange("t", 3, lo, hi)
    # Consecutive batches go into up to ``pieces`` fetch answers, merged into one Arrow batch.
    step = max(1, -(-len(bufs) // pieces))
    segments = []
    for i in range(0, len(bufs), step):
        body = bytearray(b"".join(bufs[i : i + step]))
        seg = answer_records(body, list(iter_headers(body)), lo, r)
        if seg is not None:
            segments.append(seg)
    expected = _expected(bufs, lo, hi)
    if not segments:
        assert expected == []
        return
    schema = SCHEMA.append(HEADERS_FIELD) if with_headers else SCHEMA
    batch = to_batch(segments, r, schema, with_headers)
    batch.validate(full=True)
    assert batch.schema == schema
    got = _rows(batch, with_headers)
    if not with_headers:
        expected = [(*row[:5], None) for row in expected]
    assert got == expected
    assert batch.column("topic").to_pylist() == ["t"] * len(expected)
    assert batch.column("partition").to_pylist() == [3] * len(expected)


def test_control_batches_are_skipped_and_transactional_records_kept() -> None:
    bufs, _ = _log(
        [
            ([(None, b"a", [], 5)], "none", "transactional", 0),
            ([(None, b"\x00\x00\x00\x00\x00\x01", [], 6)], "none", "control", 0),
            ([(b"k", b"b", [], 7)], "zstd", "create", 0),
        ]
    )
    body = bytearray(b"".join(bufs))
    r = OffsetRange("t", 0, 0, 10)
    seg = answer_records(body, list(iter_headers(body)), 0, r)
    assert seg is not None
    batch = to_batch([seg], r, SCHEMA, False)
    assert batch.column("offset").to_pylist() == [0, 2]
    assert batch.column("value").to_pylist() == [b"a", b"b"]
    assert batch.column("key").to_pylist() == [None, b"k"]


def test_crc_mismatch_raises() -> None:
    body = bytearray(build_batch([(None, b"value")]))
    body[-1] ^= 0xFF
    with pytest.raises(CorruptRecord, match="CRC"):
        answer_records(body, list(iter_headers(body)), 0, OffsetRange("t", 0, 0, 1))


@settings(max_examples=500, deadline=None)
@given(
    records=records_st,
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1),
    count=st.none() | st.integers(0, 100),
    with_headers=st.booleans(),
)
def test_corrupt_records_raise_and_never_read_out_of_bounds(
    records: list[Rec],
    flips: list[tuple[int, int]],
    count: int | None,
    with_headers: bool,
) -> None:
    body = bytearray(build_batch(records))
    for at, byte in flips:
        body[HEADER_SIZE + at % (len(body) - HEADER_SIZE)] = byte
    if count is not None:
        struct.pack_into(">i", body, HEADER_SIZE - 4, count)
    headers = list(iter_headers(body))
    headers_type = HEADERS_FIELD.type if with_headers else None
    try:
        cols = decode([segment(body, headers)], 0, 1 << 62, headers_type)
    except CorruptRecord:
        return
    except UnicodeDecodeError:
        return
    except pa.ArrowInvalid:  # a header key that is not UTF-8
        assert with_headers
        return
    assert len(cols) <= len(body)
