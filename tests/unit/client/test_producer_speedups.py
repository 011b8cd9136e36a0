"""The producer's compiled per-record path against its pure-Python reference.

``app.client.producer._native`` (C) and the pure-Python classes of
``_speedups`` must give the same bytes, partitions and callbacks; the batches
must also decode with an independent codec (kafka-python). The compiled tests
are skipped only where the extension was not built (``make install`` builds it).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KafkaBatch

from app.client.producer import _speedups
from app.client.producer.delivery import DeliveryFuture
from app.client.types import RecordMetadata, TopicPartition
from app.common.batch import decode_records, validate_batches
from app.common.partitioner import murmur2 as py_murmur2
from app.common.partitioner import partition_for_key

native = pytest.mark.skipif(not _speedups.COMPILED, reason="the C extension is not built here")

blobs = st.none() | st.binary(max_size=300)
headers = st.none() | st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3
)
records = st.lists(st.tuples(st.integers(0, 2**41), blobs, blobs, headers), min_size=1, max_size=40)


def fill(buf: Any, recs: list[Any]) -> list[bool | None]:
    return [buf.append(ts, k, v, h) for ts, k, v, h in recs]


GZIP = 1  # RecordBatch v2 attributes: compression codec 1


@native
@settings(max_examples=200, deadline=None)
@given(
    recs=records,
    compression=st.sampled_from([0, 1, 2, 3, 4]),
    batch_size=st.integers(61, 4000),
    producer=st.tuples(
        st.integers(-1, 2**40), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1)
    ),
    transactional=st.booleans(),
)
def test_compiled_buffer_builds_the_bytes_of_the_reference(
    recs: list[Any],
    compression: int,
    batch_size: int,
    producer: tuple[int, int, int],
    transactional: bool,
) -> None:
    assert _speedups.NativeRecordBuffer is not None
    fast = _speedups.NativeRecordBuffer(batch_size, compression)
    ref = _speedups.PyRecordBuffer(batch_size, compression)
    # The same records accepted, the same "full" answers (None) at the same records.
    assert fill(fast, recs) == fill(ref, recs)
    assert fast.count == ref.count and fast.size() == ref.size()
    fast.set_producer_state(*producer, transactional)
    ref.set_producer_state(*producer, transactional)
    data, ref_data = fast.build(), ref.build()
    if compression == GZIP:
        # A gzip stream carries its compression time (in seconds): two builds across a
        # second boundary differ there and only there, so compare what they decode to.
        assert [(r.offset, r.timestamp, r.key, r.value) for r in KafkaBatch(bytearray(data))] == [
            (r.offset, r.timestamp, r.key, r.value) for r in KafkaBatch(bytearray(ref_data))
        ]
    else:
        assert data == ref_data
    # ... and it is a valid batch an independent codec reads back.
    ((_, header),) = validate_batches(data, 1 << 30)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert KafkaBatch(bytearray(data)).is_transactional == transactional
    assert header.attributes & 0x10 == (0x10 if transactional else 0)
    accepted = [
        r
        for r, ok in zip(recs, fill(_speedups.PyRecordBuffer(batch_size, 0), recs), strict=True)
        if ok
    ]
    decoded = list(KafkaBatch(bytearray(data)))
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decoded] == [
        (i, ts, k, v) for i, (ts, k, v, _) in enumerate(accepted)
    ]
    assert [list(r.headers) for r in decoded] == [list(h or []) for _, _, _, h in accepted]


@native
def test_compiled_buffer_appends_in_bulk_like_one_by_one() -> None:
    assert _speedups.NativeRecordBuffer is not None
    values = [b"%d" % i * (i % 7) or None for i in range(500)]
    bulk, single = (_speedups.NativeRecordBuffer(2000, 0) for _ in range(2))
    it = iter(values)
    appended, full, carry = bulk.append_values(it, 1234)
    results = [single.append(1234, None, v) for v in values[: appended + 1]]
    # Stopped exactly where one-by-one appends first found the batch full.
    assert full and results == [True] * appended + [None] and carry == values[appended]
    assert next(it) == values[appended + 1]  # the iterator is left just after the carry
    assert bulk.count == single.count == appended and bulk.build() == single.build()
    _, full, carry = _speedups.NativeRecordBuffer(1 << 20, 0).append_values(iter([b"a"]), 1)
    assert (full, carry) == (False, None)


@native
def test_a_built_buffer_refuses_more_records() -> None:
    assert _speedups.NativeRecordBuffer is not None
    buf = _speedups.NativeRecordBuffer(1000, 0)
    buf.append(1, None, b"x")
    buf.build()
    with pytest.raises(RuntimeError):
        buf.append(1, None, b"y")


@native
def test_compiled_buffer_refuses_what_the_reference_refuses() -> None:
    assert _speedups.NativeRecordBuffer is not None
    for bad in ("text", 5, object()):
        for buf in (_speedups.NativeRecordBuffer(100, 0), _speedups.PyRecordBuffer(100, 0)):
            with pytest.raises(TypeError):
                buf.append(1, None, bad)
            with pytest.raises(TypeError):
                buf.append(1, bad, b"v")
            assert buf.count == 0


@native
@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=64), partitions=st.integers(1, 1000))
def test_compiled_murmur2_and_partition_match_kafkas(key: bytes, partitions: int) -> None:
    assert _speedups.murmur2(key) == py_murmur2(key)
    assert (_speedups.murmur2(key) & 0x7FFFFFFF) % partitions == partition_for_key(key, partitions)


@pytest.mark.parametrize(
    "make", [pytest.param("native", marks=native), "python"], ids=["compiled", "pure"]
)
def test_callbacks_run_once_each_in_order_with_their_metadata(make: str) -> None:
    buf: Any = (
        _speedups.NativeRecordBuffer(1 << 20, 0)
        if make == "native" and _speedups.NativeRecordBuffer is not None
        else _speedups.PyRecordBuffer(1 << 20, 0)
    )
    seen: list[tuple[RecordMetadata | None, BaseException | None]] = []
    kept: list[RecordMetadata] = []
    failures: list[BaseException] = []

    def keep(meta: RecordMetadata | None, exc: BaseException | None) -> None:
        assert meta is not None
        kept.append(meta)  # holds on to it: later callbacks must not change it

    def boom(meta: RecordMetadata | None, exc: BaseException | None) -> None:
        raise ValueError("callback bug")

    for i in range(10):
        buf.append(1000 + i, None, b"v")
        cb = keep if i % 3 == 0 else boom if i == 4 else lambda m, e: seen.append((m, e))
        buf.add_callback(i, 1000 + i, cb)
    assert buf.callback_count() == 10
    buf.run_callbacks("t", 2, 500, -1, None, RecordMetadata, failures.append)
    assert buf.callback_count() == 0
    expected = [RecordMetadata("t", 2, 500 + i, 1000 + i) for i in range(10)]
    assert kept == [expected[i] for i in (0, 3, 6, 9)]
    assert [m for m, _ in seen] == [expected[i] for i in (1, 2, 5, 7, 8)]
    assert all(type(m) is RecordMetadata for m in kept)
    assert [str(e) for e in failures] == ["callback bug"]
    # Run twice: nothing is called again.
    buf.run_callbacks("t", 2, 500, -1, None, RecordMetadata, failures.append)
    assert len(kept) == 4 and len(seen) == 5


@pytest.mark.parametrize(
    "make", [pytest.param("native", marks=native), "python"], ids=["compiled", "pure"]
)
def test_callbacks_get_the_error_or_acks0_offsets_and_append_time(make: str) -> None:
    def new() -> Any:
        if make == "native" and _speedups.NativeRecordBuffer is not None:
            return _speedups.NativeRecordBuffer(1 << 20, 0)
        return _speedups.PyRecordBuffer(1 << 20, 0)

    got: list[Any] = []
    buf = new()
    for i in range(3):
        buf.add_callback(i, 7, lambda m, e: got.append((m, e)))
    error = RuntimeError("gone")
    buf.run_callbacks("t", 0, -1, -1, error, RecordMetadata, got.append)
    assert got == [(None, error)] * 3
    got.clear()
    buf = new()
    for i in range(2):
        buf.add_callback(i, 7, lambda m, e: got.append(m))
    buf.run_callbacks("t", 0, -1, 99, None, RecordMetadata, got.append)  # acks=0, LogAppendTime
    assert got == [RecordMetadata("t", 0, -1, 99)] * 2


@native
def test_compiled_lock_is_a_lock_for_conditions() -> None:
    lock = _speedups.Lock()
    assert lock.acquire() and lock.locked()
    assert not lock.acquire(False) and not lock.acquire(timeout=0.01)
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()
    cond = threading.Condition(lock)
    ready: list[int] = []

    def wake() -> None:
        with cond:
            ready.append(1)
            cond.notify_all()

    with cond:
        threading.Timer(0.05, wake).start()
        assert cond.wait_for(lambda: ready, timeout=5)
    assert not lock.locked()


@native
@pytest.mark.parametrize("by_slot", [True, False], ids=["slot", "getattr"])
def test_fast_send_takes_only_its_case_and_hands_the_rest_over(by_slot: bool) -> None:
    """Keyed and null-key records go into the open batch of the right partition; anything
    the C path does not take reaches the Python send with its arguments unchanged."""
    from app.client.producer.batch import ProducerBatch
    from app.common.batch import Compression

    lock = _speedups.Lock()
    counts = {"t": 5}
    tps = {p: TopicPartition("t", p) for p in range(5)}
    batches = {tp: ProducerBatch(tp, Compression.NONE, 1 << 20) for tp in tps.values()}
    for b in batches.values():
        b.append(1.0, None, b"first")
    slow_calls: list[tuple[Any, Any]] = []

    def slow(*args: Any, **kwargs: Any) -> str:
        slow_calls.append((args, kwargs))
        return "slow"

    open_ = dict(batches)
    fs = _speedups.FastSend(
        lock,
        {"t": batches[tps[3]]},
        open_,
        counts,
        lambda t, p: tps[p],
        DeliveryFuture,
        slow,
        ProducerBatch if by_slot else None,
    )
    key_counts = {p: 0 for p in range(5)}
    for i in range(200):
        key = b"user-%d" % i
        before = time.time() * 1000
        fut = fs.send("t", b"v", key=key, on_delivery=lambda m, e: None)
        p = partition_for_key(key, 5)
        key_counts[p] += 1
        assert isinstance(fut, DeliveryFuture) and fut._batch is batches[tps[p]]
        assert fut._index == key_counts[p]
        # The wall clock in ms (a slack for a clock the machine's NTP may step meanwhile).
        assert before - 1000 <= fut._timestamp <= time.time() * 1000 + 1000
    fut = fs.send("t", None, timestamp=42)
    assert fut._batch is batches[tps[3]] and fut._timestamp == 42
    assert not lock.locked() and slow_calls == []
    # Everything else goes to the Python send as given.
    assert fs.send("t", b"v", partition=1) == "slow"
    assert fs.send("t", b"v", headers=[("h", b"1")]) == "slow"
    assert fs.send("t", "text") == "slow"
    assert fs.send("other", b"v", b"k") == "slow"  # no partition count yet
    assert fs.send("t", b"v", timestamp=1.5) == "slow"
    del open_[tps[partition_for_key(b"k", 5)]]
    assert fs.send("t", b"v", key=b"k") == "slow"  # no open batch: Python opens one
    assert [c[1] for c in slow_calls[:2]] == [{"partition": 1}, {"headers": [("h", b"1")]}]
    assert not lock.locked()
    # The callbacks kept by the batches: one per keyed record, run once at the answer.
    assert sum(b.builder.callback_count() for b in batches.values()) == 200
    # What went in decodes back, in order, per partition.
    for p, tp in tps.items():
        data = batches[tp].build()
        values = [r.key for r in decode_records(data)]
        assert values[0] is None and len(values) == 1 + key_counts[p] + (p == 3)


@native
def test_fast_send_keyed_topics_change_and_partition_counts_grow() -> None:
    """The keyed path's cached TopicPartitions (and hashes) follow the topic and its
    partition count: another topic, an equal topic string that is another object, a topic
    grown to more partitions, and forget() all find the right open batch."""
    from app.client.producer.batch import ProducerBatch
    from app.common.batch import Compression

    counts = {"alpha": 2, "beta": 3}
    made: dict[tuple[str, int], TopicPartition] = {}

    def tp(topic: str, p: int) -> TopicPartition:
        return made.setdefault((topic, p), TopicPartition(topic, p))

    open_: dict[TopicPartition, ProducerBatch] = {}

    def opened(topic: str, n: int) -> None:
        for p in range(n):
            if tp(topic, p) not in open_:
                batch = open_[tp(topic, p)] = ProducerBatch(tp(topic, p), Compression.NONE, 1 << 20)
                batch.append(1.0, None, b"first")

    opened("alpha", 2)
    opened("beta", 3)
    fs = _speedups.FastSend(
        _speedups.Lock(), {}, open_, counts, tp, DeliveryFuture, None, ProducerBatch
    )

    def where(topic: str, key: bytes) -> TopicPartition:
        fut = fs.send(topic, b"v", key=key)
        assert isinstance(fut, DeliveryFuture)
        return fut._batch.tp  # type: ignore[no-any-return]

    keys = [b"k%d" % i for i in range(40)]
    beta = "".join(["be", "ta"])  # equal to "beta", another object
    assert beta == "beta" and beta is not "beta"  # noqa: F632
    for topic in ("alpha", "beta", "alpha", beta, "alpha"):
        for key in keys:
            assert where(topic, key) == TopicPartition(topic, partition_for_key(key, counts[topic]))
    counts["alpha"] = 5  # the topic grew: the partition follows the new count
    opened("alpha", 5)
    for key in keys:
        assert where("alpha", key) == TopicPartition("alpha", partition_for_key(key, 5))
    fs.forget("alpha")
    for key in keys:
        assert where("alpha", key) == TopicPartition("alpha", partition_for_key(key, 5))


@native
def test_reused_futures_keep_their_own_fields_and_the_type_count_balances() -> None:
    """The compiled send keeps freed futures for its next sends: one still held is never
    handed out again, and the future type's reference count comes back where it was."""
    import gc
    import sys

    from app.client.producer.batch import ProducerBatch
    from app.common.batch import Compression

    tp = TopicPartition("t", 0)
    batch = ProducerBatch(tp, Compression.NONE, 1 << 20)
    batch.append(1.0, None, b"first")
    fs = _speedups.FastSend(
        _speedups.Lock(),
        {"t": batch},
        {tp: batch},
        {"t": 1},
        lambda t, p: tp,
        DeliveryFuture,
        None,
        ProducerBatch,
    )
    for _ in range(600):  # fills the free list
        fs.send("t", b"v", timestamp=1)
    gc.collect()
    type_refs = sys.getrefcount(DeliveryFuture)
    kept = []
    for i in range(2000):
        fut = fs.send("t", b"v", timestamp=i)
        if i % 3 == 0:
            kept.append((i, fut))
    assert len({id(f) for _, f in kept}) == len(kept)
    assert all(f._batch is batch and f._timestamp == i for i, f in kept)
    assert [f._index for _, f in kept] == sorted(f._index for _, f in kept)
    assert all(gc.is_tracked(f) and sys.getrefcount(f) == 3 for _, f in kept[:5])
    del kept, fut
    gc.collect()
    assert sys.getrefcount(DeliveryFuture) == type_refs


@native
def test_batches_built_into_one_body_are_their_own_builds_joined() -> None:
    """ProducerBatch.build_all: the compiled one-copy body equals the batches built one by
    one and joined (the pure-Python way), and each batch's build() is its slice of it."""
    from app.client.producer.batch import ProducerBatch
    from app.common.batch import Compression

    def batches(compression: Compression) -> list[ProducerBatch]:
        out = []
        for p, n in enumerate((1, 300, 2000)):  # ~200 KiB: the CRC runs without the GIL
            batch = ProducerBatch(TopicPartition("t", p), compression, 1 << 20)
            for i in range(n):
                batch.append(1000.0 + i, b"k%d" % i, b"v" * (i % 150))
            batch.builder.set_producer_state(7, 1, 10 * p)
            out.append(batch)
        return out

    plain = batches(Compression.NONE)
    body = ProducerBatch.build_all(plain)
    assert body == b"".join(b.build() for b in batches(Compression.NONE))
    assert [bytes(b.build()) for b in plain] == [b.build() for b in batches(Compression.NONE)]
    assert [h.base_sequence for _, h in validate_batches(body, 1 << 30)] == [0, 10, 20]
    # Compressed batches are built one by one, as before.
    gz = batches(Compression.GZIP)
    assert len(validate_batches(ProducerBatch.build_all(gz), 1 << 30)) == 3
    # One batch: its own build.
    (single,) = batches(Compression.NONE)[:1]
    assert ProducerBatch.build_all([single]) == single.build()
    # A buffer built already, or given twice, is refused and nothing is built.
    fresh = batches(Compression.NONE)
    fresh[0].build()
    with pytest.raises(RuntimeError):
        _speedups.build_plain_many([b.builder for b in fresh])
    with pytest.raises(ValueError):
        _speedups.build_plain_many([fresh[1].builder, fresh[1].builder])
    assert fresh[1].build() == batches(Compression.NONE)[1].build()
    assert _speedups.py_build_plain_many([fresh[2].builder]) is None
    # Pure-Python buffers (the pure path's) are left to the caller to build one by one.
    assert _speedups.build_plain_many([_speedups.PyRecordBuffer(100, 0)]) is None


@pytest.mark.parametrize(
    "make", [pytest.param("native", marks=native), "python"], ids=["compiled", "pure"]
)
def test_latency_recorder_keeps_ack_time_minus_record_time(make: str) -> None:
    from array import array

    recorder: Any = (
        _speedups.LatencyRecorder() if make == "native" else _speedups.PyLatencyRecorder()
    )
    now_ms = int(time.time() * 1000)
    recorder(RecordMetadata("t", 0, 5, now_ms - 250), None)
    recorder(RecordMetadata("t", 0, 6, now_ms), None)
    error = RuntimeError("x")
    recorder(None, error)
    got = array("d")
    got.frombytes(recorder.latencies())
    assert len(got) == 2 and recorder.errors == [error]
    assert 250 <= got[0] < 250 + 5_000 and 0 <= got[1] < 5_000
    assert got[0] - got[1] == pytest.approx(250, abs=50)


def test_no_extensions_env_selects_the_pure_python_path() -> None:
    import os
    import subprocess
    import sys

    code = (
        "from app.client.producer import _speedups as s; "
        "print(s.COMPILED, s.RecordBuffer.__name__, s.FastSend)"
    )
    env = {**os.environ, "LOGBUS_NO_EXTENSIONS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "PyRecordBuffer", "None"]
