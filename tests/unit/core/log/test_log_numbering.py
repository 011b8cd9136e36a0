"""Batches the log numbers itself (``UnnumberedBatch``, for a JSON produce inside a
transaction and TxnOffsetCommit): the sequence is the producer's next one on the
partition, read under the log's lock in the same hold as the append, so concurrent
appends of one producer never take each other's sequence."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from log_helpers import check_log_dir

from app.common.batch import TRANSACTIONAL_MASK, BatchBuilder, read_header
from app.common.errors import InvalidProducerEpoch
from app.core.log import Log
from app.core.log.config import LogConfig
from app.core.log.producer_state import INT32_MAX, BatchMetadata, ProducerEntry, UnnumberedBatch

PID = 77
TS = 1_700_000_000_000


def plain(*values: bytes) -> bytearray:
    """A batch without a producer (the broker built it for a stateless caller)."""
    b = BatchBuilder()
    for v in values:
        b.append(v, timestamp=TS)
    return bytearray(b.build())


def numbered(seq: int, count: int, *, epoch: int = 0) -> bytes:
    """A transactional batch the producer numbered itself (a binary produce)."""
    b = BatchBuilder(producer_id=PID, producer_epoch=epoch, base_sequence=seq, transactional=True)
    for i in range(count):
        b.append(f"own-{seq + i}".encode(), timestamp=TS)
    return b.build()


def batch_at(log: Log, offset: int) -> bytes:
    """The bytes of the batch holding ``offset``."""
    return log.read(offset, 1 << 20).read_bytes()


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    log = Log(tmp_path / "t-0")
    yield log
    log.close()


def test_next_sequence_follows_the_producer_state(log: Log) -> None:
    assert log.next_sequence(PID, 0) == 0  # unknown producer: it starts at 0
    log.append(numbered(0, 3))
    assert log.next_sequence(PID, 0) == 3
    assert log.next_sequence(PID, 1) == 0  # a new epoch starts at 0
    assert log.next_sequence(PID + 1, 0) == 0  # producers are independent
    log.append(numbered(0, 1, epoch=1))
    assert log.next_sequence(PID, 1) == 1
    assert log.next_sequence(PID, 0) == 0  # an older epoch: refused at the append


def test_next_sequence_wraps_at_int32_max(log: Log) -> None:
    # A producer whose last batch ended at 2^31 - 1 (set directly: reaching it by appends
    # would take 2^31 records).
    state = log.producer_state
    state._producers[PID] = ProducerEntry(
        PID, 0, [BatchMetadata(INT32_MAX - 1, INT32_MAX, 0, 1, TS)]
    )
    assert log.next_sequence(PID, 0) == 0
    log.append(numbered(0, 1))  # what the log then accepts


def test_an_unnumbered_batch_gets_the_next_sequence_and_the_producer_goes_on(log: Log) -> None:
    log.append(numbered(0, 2))
    info = log.append(UnnumberedBatch(plain(b"a", b"b", b"c"), PID, 0))
    assert (info.first_offset, info.last_offset, info.duplicates) == (2, 4, ())
    header = read_header(batch_at(log, 2))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, 0, 2)
    assert header.attributes & TRANSACTIONAL_MASK
    assert log.next_sequence(PID, 0) == 5
    log.append(numbered(5, 1))  # the producer's own numbering continues after it
    assert [v for _, v in check_log_dir(log.dir)][2:] == [b"a", b"b", b"c", b"own-5"]


def test_an_unnumbered_batch_of_a_fenced_epoch_is_refused(log: Log) -> None:
    log.append(numbered(0, 1, epoch=3))
    with pytest.raises(InvalidProducerEpoch):
        log.append(UnnumberedBatch(plain(b"zombie"), PID, 2))
    assert log.log_end_offset == 1


def test_the_lookup_holds_the_log_lock(log: Log, monkeypatch: pytest.MonkeyPatch) -> None:
    """No other thread can append between the lookup and the write: the lock is held
    while the batch is numbered (after the lookup, before the append)."""
    seen: list[bool] = []
    number = UnnumberedBatch.number

    def probing(self: UnnumberedBatch, sequence: int) -> bytearray:
        result: list[bool] = []

        def probe() -> None:
            got = log._lock.acquire(blocking=False)
            result.append(got)
            if got:
                log._lock.release()

        other = threading.Thread(target=probe)
        other.start()
        other.join()
        seen.extend(result)
        return number(self, sequence)

    monkeypatch.setattr(UnnumberedBatch, "number", probing)
    log.append(UnnumberedBatch(plain(b"x"), PID, 0))
    assert seen == [False]


def test_concurrent_appends_of_one_producer_never_share_a_sequence(log: Log) -> None:
    """Threads append same-sized batches of one producer, each numbered by the log. A
    sequence read outside the lock (the old callers') lets two batches carry the same
    range: the second is answered as a retry of the first and its records dropped, or
    it is refused. Every append must write its records, in sequence."""
    per_thread, writers, size = 200, 3, 2
    errors: list[BaseException] = []
    start = threading.Barrier(writers + 1)

    def writer(w: int) -> None:
        start.wait()
        try:
            for i in range(per_thread):
                values = [f"w{w}-{i}-{j}".encode() for j in range(size)]
                info = log.append(UnnumberedBatch(plain(*values), PID, 0))
                if info.duplicates or info.record_count != size:
                    errors.append(AssertionError(f"w{w}-{i} not written: {info}"))
        except Exception as exc:  # OutOfOrderSequence, ...: reported below
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        start.wait()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[:3]
    written = [v for _, v in check_log_dir(log.dir)]
    total = writers * per_thread * size
    assert len(written) == len(set(written)) == total
    headers = [read_header(batch_at(log, o)) for o in range(0, total, size)]
    assert [h.base_sequence for h in headers] == list(range(0, total, size))


class _FlushLockProbe:
    """Stands in for the log's flush lock and asks, at each acquire, whether another
    thread could take the log's lock then."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.inner = threading.Lock()
        self.log_lock_free: list[bool] = []

    def __enter__(self) -> _FlushLockProbe:
        result: list[bool] = []

        def probe() -> None:
            got = self.log._lock.acquire(blocking=False)
            result.append(got)
            if got:
                self.log._lock.release()

        other = threading.Thread(target=probe)
        other.start()
        other.join()
        self.log_lock_free.extend(result)
        self.inner.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.release()


def test_the_flush_an_unnumbered_append_triggers_runs_outside_the_log_lock(
    tmp_path: Path,
) -> None:
    """flush.messages: the append that reaches it fsyncs, taking the flush lock and then
    the log's lock (Log.flush). Any other flusher (the background thread's flush_rolled,
    another appender) does the same, so an append that takes the flush lock while it still
    holds the log's lock (the hold that numbered its batch) deadlocks with it: each waits
    for the lock the other holds, and the JSON produce or TxnOffsetCommit holding it
    blocks the event loop for good. The flush must start after the log's lock is let go,
    as a numbered append's does."""
    log = Log(tmp_path / "t-0", LogConfig().with_overrides({"flush.messages": 1}))
    try:
        probe = _FlushLockProbe(log)
        log._flush_lock = probe  # type: ignore[assignment]
        log.append(numbered(0, 1))
        log.append(UnnumberedBatch(plain(b"x"), PID, 0))
        assert log.recovery_point == 2  # both appends flushed
        assert probe.log_lock_free == [True, True]
    finally:
        log.close()
