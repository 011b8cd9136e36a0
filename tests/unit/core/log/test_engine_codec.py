"""The batch codec against itself (hypothesis) and against kafka-python's independent codec."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatchBuilder
from log_helpers import BASE_TS, check_log_dir, kafka_python_batches

from app.common.batch import BatchBuilder, Compression, decode_records, validate_batches
from app.core.log import Log, LogConfig

KAFKA_CODECS = {
    "none": (0, lambda: True),
    "gzip": (1, kafka_codec.has_gzip),
    "snappy": (2, kafka_codec.has_snappy),
    "lz4": (3, kafka_codec.has_lz4),
    "zstd": (4, kafka_codec.has_zstd),
}

record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(
        st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=10))), max_size=3
    ),
    st.integers(0, 2**41),
)


@settings(max_examples=80, deadline=None)
@given(
    records=st.lists(record_st, min_size=1, max_size=30),
    compression=st.sampled_from(list(Compression)),
)
def test_codec_round_trip(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    compression: Compression,
) -> None:
    builder = BatchBuilder(compression)
    for key, value, headers, ts in records:
        assert builder.append(value, key, headers, ts)
    data = builder.build()
    [(pos, header)] = validate_batches(data, 1 << 30)
    assert pos == 0 and header.record_count == len(records)
    assert header.compression == compression
    decoded = list(decode_records(data))
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in decoded] == [
        (i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(records)
    ]


@pytest.mark.parametrize("name", list(KAFKA_CODECS))
def test_kafka_python_batches_are_accepted_and_decoded(tmp_path: Path, name: str) -> None:
    code, available = KAFKA_CODECS[name]
    # The test extra installs python-snappy, lz4 and zstandard so kafka-python has every codec.
    assert available(), f"kafka-python cannot {name}-compress: install the test extra"
    log = Log(tmp_path / "t-0", LogConfig())
    expected = []
    for n in range(3):
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=code,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 20,
        )
        for i in range(10):
            value = f"{name}-{n}-{i}".encode() * 20
            builder.append(
                i, timestamp=BASE_TS + i, key=b"k%d" % i, value=value, headers=[("h", b"x")]
            )
            expected.append((n * 10 + i, b"k%d" % i, value))
        info = log.append(bytes(builder.build()))
        assert (info.first_offset, info.last_offset, info.record_count) == (n * 10, n * 10 + 9, 10)
    data = log.read(0, 1 << 20).read_bytes()
    assert [(r.offset, r.key, r.value) for r in decode_records(data)] == expected
    assert all(r.headers == [("h", b"x")] for r in decode_records(data))
    # And the bytes on disk parse back with kafka-python, offsets stamped.
    parsed = [rec for _, _, recs in kafka_python_batches(data) for rec in recs]
    assert parsed == expected
    assert [v for _, v in check_log_dir(log.dir, start=0)] == [e[2] for e in expected]
    log.close()


@pytest.mark.parametrize("compression", ["snappy", "lz4", "zstd"])
def test_our_compressed_batches_survive_the_log(tmp_path: Path, compression: str) -> None:
    # kafka-python cannot decode these here, so they are checked with our decoder and
    # kafka-python's header-level CRC check.
    log = Log(tmp_path / "t-0", LogConfig())
    builder = BatchBuilder(compression)
    for i in range(50):
        builder.append(b"value-%d" % i * 10, timestamp=BASE_TS)
    batch = builder.build()
    log.append(batch)
    log.append(batch)
    data = log.read(0, 1 << 20).read_bytes()
    assert [r.offset for r in decode_records(data)] == list(range(100))
    from kafka.record import MemoryRecords

    records = MemoryRecords(data)
    bases = []
    while records.has_next():
        batch = records.next_batch()
        assert batch is not None and batch.validate_crc()
        bases.append((batch.base_offset, batch.last_offset))
    assert bases == [(0, 49), (50, 99)]
    log.close()


@pytest.mark.parametrize("compression", list(Compression))
def test_build_twice_returns_the_same_batch(compression: Compression) -> None:
    builder = BatchBuilder(compression)
    builder.append(b"x" * 100, timestamp=BASE_TS)
    first = builder.build()
    assert builder.build() == first
    assert [r.value for r in decode_records(builder.build())] == [b"x" * 100]
