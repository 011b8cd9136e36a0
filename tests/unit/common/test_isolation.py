"""The read_committed filter (app/common/isolation.py) on real logs: a random interleaving of
transactional writes by several producers, plain and idempotent writes, commits and aborts
is appended to a real :class:`~app.core.log.Log`; a reader then walks it from a random
offset with random answer sizes, the way every read path does, and must see exactly what
a model of read_committed says: the plain records and the committed transactions' records
below the last stable offset, nothing at or past it, nothing aborted, no control record.

Both halves of the contract are walked: the broker's decoded answer (``json_records``, the
JSON fetch and WebSocket JSON frames) and the binary answer as a client reads it
(``Logbus-Aborted-Transactions`` through :func:`app.common.fetch_answer.interpret`, as the
SDK consumer and Spark tasks do)."""

from __future__ import annotations

import base64
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.api.routers.fetch import aborted_pairs, json_records
from app.common.batch import (
    BatchBuilder,
    build_control_batch,
    decode_records,
    iter_headers,
    stamp,
)
from app.common.fetch_answer import Records, interpret
from app.common.http1 import Response
from app.common.isolation import (
    ABORTED_HEADER,
    LSO_HEADER,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    check_isolation_level,
    committed_batches,
    format_aborted,
    parse_aborted,
)
from app.core.log import Log, LogConfig
from app.core.log.results import FetchInfo

TS = 1_700_000_000_000
TXN_PIDS = (1, 2, 3)
IDEMPOTENT_PID = 9


@dataclass
class Model:
    """What read_committed must return: every data record with its fate."""

    seq: dict[int, int] = field(default_factory=dict)
    open: dict[int, list[int]] = field(default_factory=dict)  # pid -> offsets of its open txn
    first_open: dict[int, int] = field(default_factory=dict)  # pid -> first offset
    visible: set[int] = field(default_factory=set)  # committed or plain data offsets
    data: set[int] = field(default_factory=set)  # every data offset (read_uncommitted)
    values: dict[int, bytes] = field(default_factory=dict)

    def lso(self, end: int) -> int:
        return min(self.first_open.values(), default=end)


def apply(log: Log, model: Model, op: tuple[str, int, int]) -> None:
    kind, pid, n = op
    if kind == "end":
        if model.open.get(pid):
            commit = bool(n)
            log.append_control(pid, 0, commit=commit, coordinator_epoch=0)
            offsets = model.open.pop(pid)
            model.first_open.pop(pid)
            if commit:
                model.visible.update(offsets)
        return
    transactional = kind == "txn"
    producer = pid if transactional else IDEMPOTENT_PID if kind == "idem" else -1
    seq = model.seq.get(producer, 0)
    b = BatchBuilder(
        producer_id=producer,
        producer_epoch=0 if producer >= 0 else -1,
        base_sequence=seq if producer >= 0 else -1,
        transactional=transactional,
    )
    for i in range(n):
        b.append(f"{kind}-{producer}-{seq + i}".encode(), timestamp=TS)
    info = log.append(b.build())
    if producer >= 0:
        model.seq[producer] = seq + n
    offsets = list(range(info.first_offset, info.last_offset + 1))
    for i, o in enumerate(offsets):
        model.values[o] = f"{kind}-{producer}-{seq + i}".encode()
    model.data.update(offsets)
    if transactional:
        model.open.setdefault(pid, []).extend(offsets)
        model.first_open.setdefault(pid, info.first_offset)
    else:
        model.visible.update(offsets)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("txn"), st.sampled_from(TXN_PIDS), st.integers(1, 3)),
        st.tuples(st.just("plain"), st.just(-1), st.integers(1, 2)),
        st.tuples(st.just("idem"), st.just(IDEMPOTENT_PID), st.integers(1, 2)),
        st.tuples(st.just("end"), st.sampled_from(TXN_PIDS), st.integers(0, 1)),
    ),
    min_size=1,
    max_size=30,
)


Answer = tuple[list[tuple[int, bytes]], int]  # (offset, value) pairs read, next offset


def decode_json(log: Log, info: FetchInfo, offset: int) -> Answer:
    """The broker's decoded JSON answer."""
    records, next_offset = json_records(
        info.read_bytes(), offset, "binary", "binary", aborted=aborted_pairs(info)
    )
    return [(r["offset"], base64.b64decode(r["value"])) for r in records], next_offset


def decode_binary(log: Log, info: FetchInfo, offset: int) -> Answer:
    """A binary answer as a client gets it (the aborted list in a header), interpreted."""
    headers = {
        LSO_HEADER.lower(): str(info.last_stable_offset),
        ABORTED_HEADER.lower(): format_aborted(aborted_pairs(info) or ()),
    }
    outcome = interpret(
        Response(200, headers, bytearray(info.read_bytes())), "t", 0, read_committed=True
    )
    assert isinstance(outcome, Records) and outcome.next_offset is not None
    assert outcome.last_stable_offset == log.last_stable_offset
    out: list[tuple[int, bytes]] = []
    for pos, h in outcome.batches:
        assert not h.is_control
        piece = outcome.body[pos : pos + h.size]
        out += [(r.offset, r.value or b"") for r in decode_records(piece, min_offset=offset)]
    return out, outcome.next_offset


def walk(
    log: Log, start: int, max_bytes: int, decode: Callable[[Log, FetchInfo, int], Answer]
) -> Answer:
    """The read_committed answers from ``start`` until one is empty, decoded; the records
    and the offset the walk stopped at."""
    out: list[tuple[int, bytes]] = []
    offset = start
    while True:
        info = log.read(offset, max_bytes, isolation=READ_COMMITTED)
        if not info.size:
            return out, offset
        records, next_offset = decode(log, info, offset)
        out += records
        assert next_offset > offset
        offset = next_offset


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, start_at=st.floats(0, 1), max_bytes=st.integers(1, 400))
def test_read_committed_returns_exactly_the_model(
    ops: list[tuple[str, int, int]], start_at: float, max_bytes: int
) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="iso-"))
    log = Log(tmp / "t-0", LogConfig().with_overrides({"segment.bytes": 500}))
    try:
        model = Model()
        for op in ops:
            apply(log, model, op)
        end = log.log_end_offset
        lso = model.lso(end)
        assert log.last_stable_offset == lso
        start = int(start_at * end)
        expected = [(o, model.values[o]) for o in sorted(model.visible) if start <= o < lso]
        for decode in (decode_json, decode_binary):
            got, stopped = walk(log, start, max_bytes, decode)
            assert got == expected, decode.__name__
            # Held at the LSO, never past it into an open transaction.
            assert stopped == max(start, lso)
        # read_uncommitted sees every data record, never a control one.
        data = log.read(start, 1 << 20).read_bytes()
        seen = [r.offset for r in decode_records(data, min_offset=start)]
        assert seen == sorted(o for o in model.data if o >= start)
    finally:
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def batch_at(base: int, count: int, **kwargs: int | bool) -> bytes:
    builder = BatchBuilder(**kwargs)  # type: ignore[arg-type]
    for i in range(count):
        builder.append(b"v%d" % i, timestamp=TS)
    buf = bytearray(builder.build())
    stamp(buf, 0, base, 0)
    return bytes(buf)


def test_filter_keeps_idempotent_batches_of_an_aborting_producer_and_drops_controls() -> None:
    abort = bytearray(build_control_batch(5, 0, commit=False, coordinator_epoch=0, timestamp=TS))
    stamp(abort, 0, 4, 0)
    commit = bytearray(build_control_batch(6, 0, commit=True, coordinator_epoch=0, timestamp=TS))
    stamp(commit, 0, 7, 0)
    body = (
        batch_at(0, 2, producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
        + batch_at(2, 2, producer_id=6, producer_epoch=0, base_sequence=0, transactional=True)
        + bytes(abort)
        + batch_at(5, 2, producer_id=5, producer_epoch=0, base_sequence=2)
        + bytes(commit)
    )
    batches = list(iter_headers(body))
    kept = committed_batches(body, batches, [(5, 0)])
    assert [h.base_offset for _, h in kept] == [2, 5]
    # Without an aborted list only the control batches go.
    assert [h.base_offset for _, h in committed_batches(body, batches, [])] == [0, 2, 5]


def test_aborted_header_round_trips_and_bad_values_are_refused() -> None:
    assert format_aborted([]) == ""
    assert parse_aborted("") == []
    assert parse_aborted(format_aborted([(4001, 120), (7, 0)])) == [(4001, 120), (7, 0)]
    with pytest.raises(ValueError):
        parse_aborted("4001")
    with pytest.raises(ValueError):
        parse_aborted("a:b")
    assert check_isolation_level(READ_COMMITTED) == READ_COMMITTED
    assert check_isolation_level(READ_UNCOMMITTED) == READ_UNCOMMITTED
    with pytest.raises(ValueError, match="read_committed"):
        check_isolation_level("read_dirty")
