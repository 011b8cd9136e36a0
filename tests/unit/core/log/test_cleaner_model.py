"""Compaction against a model: random writes, tombstones, rolls, clock ticks and passes with
small maps; after every pass the log must agree with a plain dict of the writes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_helpers import BASE_TS, kafka_python_batches

from app.common.batch import BatchBuilder, decode_records
from app.core.log import Log, LogConfig
from app.core.log.cleaner import CleanerConfig, LogCleaner
from app.core.log.offset_map import ENTRY_BYTES

CONFIG = LogConfig().with_overrides(
    {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": 0.0,
        "delete.retention.ms": 100,
        "file.delete.delay.ms": 0,
        "segment.bytes": 600,
    }
)

write_op = st.tuples(
    st.just("write"),
    st.lists(
        st.tuples(st.integers(0, 7), st.booleans(), st.integers(0, 3)), min_size=1, max_size=4
    ),
)
ops = st.lists(
    st.one_of(
        write_op,
        write_op,
        st.tuples(st.just("roll")),
        st.tuples(st.just("tick"), st.integers(1, 150)),
        st.tuples(st.just("clean"), st.integers(1, 12)),
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops)
def test_compaction_agrees_with_a_dict(
    tmp_path_factory: pytest.TempPathFactory, script: list[tuple[Any, ...]]
) -> None:
    root = tmp_path_factory.mktemp("model")
    clock = [BASE_TS]
    log = Log(root / "t-0", CONFIG, clock_ms=lambda: clock[0])
    writes: dict[int, tuple[bytes, bytes | None]] = {}
    n = 0
    for op in script:
        if op[0] == "write":
            builder = BatchBuilder()
            pairs = []
            for key_index, tombstone, size in op[1]:
                key = b"k%d" % key_index
                value = None if tombstone and key_index % 2 else b"v%d" % n + b"." * (size * 30)
                pairs.append((key, value))
                builder.append(value, key, timestamp=clock[0])
                n += 1
            info = log.append(builder.build())
            for i, pair in enumerate(pairs):
                writes[info.first_offset + i] = pair
        elif op[0] == "roll":
            log.roll()
        elif op[0] == "tick":
            clock[0] += op[1]
        else:
            cleaner = LogCleaner(
                root, lambda: [log], CleanerConfig(dedupe_buffer_bytes=op[1] * ENTRY_BYTES)
            )
            while cleaner.clean(log) is not None:
                pass
            check(log, writes, cleaner.first_dirty_offset(log))
    check(log, writes, 0)
    records = read_all(log)
    log.close()
    reopened = Log(root / "t-0", CONFIG)
    assert read_all(reopened) == records
    reopened.close()


def read_all(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    fetched = log.read(log.log_start_offset, 1 << 30)
    return [(r.offset, r.key, r.value) for r in decode_records(fetched.read_bytes())]


def check(log: Log, writes: dict[int, tuple[bytes, bytes | None]], cleaned_below: int) -> None:
    latest: dict[bytes, int] = {}
    for offset in sorted(writes):
        latest[writes[offset][0]] = offset
    records = read_all(log)
    offsets = [r[0] for r in records]
    assert offsets == sorted(set(offsets))
    for offset, key, value in records:
        assert writes[offset] == (key, value)
    present = set(offsets)
    for key, offset in latest.items():
        if writes[offset][1] is not None:
            assert offset in present, f"latest value of {key!r} at {offset} is gone"
    # Below the first dirty offset each key has at most one record, and only if it is
    # the newest the cleaned part knew of: so never a record older than a later one there.
    seen: set[bytes] = set()
    for offset, key, _ in reversed(records):
        if offset < cleaned_below:
            assert key not in seen, f"superseded {key!r} at {offset} survived"
            assert key is not None
            seen.add(key)
    for path in sorted(log.dir.glob("*.log")):
        kafka_python_batches(path.read_bytes())
