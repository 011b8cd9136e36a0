"""Shared helpers of the log-engine and transaction tests, imported by name: tests/ is on
sys.path for every test (its conftest.py), so a subset such as tests/unit/txn runs alone."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kafka.record import MemoryRecords

from app.common.batch import TRANSACTIONAL_MASK, BatchBuilder, decode_records, iter_headers
from app.core.log.log import READ_COMMITTED, Log

BASE_TS = 1_700_000_000_000


def make_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamp: int = BASE_TS,
    compression: str = "none",
) -> bytes:
    """One batch of ``values``; record i gets timestamp ``timestamp + i``."""
    builder = BatchBuilder(compression)
    for i, value in enumerate(values):
        builder.append(value, None if keys is None else keys[i], timestamp=timestamp + i)
    return builder.build()


def value_batch(first: int, count: int, *, timestamp: int = BASE_TS, size: int = 0) -> bytes:
    """A batch whose record values name their intended offsets: ``b"v<offset>"`` (padded)."""
    return make_batch(
        [f"v{first + i}".encode().ljust(size, b".") for i in range(count)], timestamp=timestamp
    )


def kafka_python_batches(
    data: bytes,
) -> list[tuple[int, int, list[tuple[int, bytes | None, bytes | None]]]]:
    """Parse ``data`` with kafka-python's codec: ``(base, last, records)`` per batch.

    Fails if a CRC is wrong or bytes are left over.
    """
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch is not None
        assert batch.validate_crc(), f"kafka-python: bad CRC in batch at offset {batch.base_offset}"
        recs = [(r.offset, r.key, r.value) for r in batch]
        out.append((batch.base_offset, batch.last_offset, recs))
    assert records.valid_bytes() == len(data), "kafka-python left bytes unparsed"
    return out


def check_log_dir(directory: Path, *, start: int | None = None) -> list[tuple[int, bytes | None]]:
    """Every ``.log`` of a partition parses with kafka-python, offsets contiguous across files.

    Returns ``(offset, value)`` of every record in order.
    """
    out: list[tuple[int, bytes | None]] = []
    expected = start
    for path in sorted(directory.glob("*.log")):
        base = int(path.stem)
        data = path.read_bytes()
        batches = kafka_python_batches(data)
        for i, (first, last, recs) in enumerate(batches):
            if i == 0:
                assert first >= base, f"{path.name}: first batch {first} below the segment base"
            if expected is not None:
                assert first == expected, f"{path.name}: batch at {first}, expected {expected}"
            assert [r[0] for r in recs] == list(range(first, last + 1))
            out.extend((r[0], r[2]) for r in recs)
            expected = last + 1
    return out


def committed_values(log: Log) -> list[str]:
    """The values a read_committed reader gets from ``log``: up to the last stable offset,
    control batches and aborted transactions' records dropped (as a client filters a
    read_committed fetch with the aborted transactions it reports)."""
    info = log.read(0, 1 << 24, isolation=READ_COMMITTED)
    buf = info.read_bytes()
    aborted = info.aborted_transactions or ()
    out: list[str] = []
    for pos, h in iter_headers(buf):
        if h.is_control:
            continue
        if h.attributes & TRANSACTIONAL_MASK and any(
            a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
            for a in aborted
        ):
            continue
        out += [(r.value or b"").decode() for r in decode_records(buf[pos : pos + h.size])]
    return out
