"""A hypothesis state machine: producers begin, write, commit and abort transactions,
interleaved with plain writes, rolls, flushes, epoch bumps, follower truncations and crashes (the directory as
a crash leaves it, a torn tail, lost ``.txnindex`` files, then a reopen), checked after
every step against a model that derives the open transactions, the LSO and the aborted
list from the events the log holds."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from log_helpers import check_log_dir

from app.common.batch import BatchBuilder, iter_headers
from app.common.errors import InvalidProducerEpoch, InvalidTxnState
from app.core.log import Log, LogConfig
from app.core.log.log import READ_COMMITTED
from app.core.log.txn_index import AbortedTxn

PIDS = (1, 2, 3)


@dataclass(frozen=True)
class Event:
    kind: str  # "data" (transactional), "plain", "commit", "abort"
    pid: int
    epoch: int
    first: int
    last: int
    seq: int = -1


@dataclass
class Derived:
    ongoing: dict[int, int]
    aborted: list[AbortedTxn]
    epochs: dict[int, int]
    next_seq: dict[int, int]


def derive(events: list[Event]) -> Derived:
    ongoing: dict[int, int] = {}
    aborted: list[AbortedTxn] = []
    epochs: dict[int, int] = {}
    next_seq: dict[int, int] = {}
    for e in events:
        if e.kind == "plain":
            continue
        if e.epoch != epochs.get(e.pid):
            epochs[e.pid] = e.epoch
            next_seq[e.pid] = 0
        if e.kind == "data":
            ongoing.setdefault(e.pid, e.first)
            next_seq[e.pid] = e.seq + (e.last - e.first) + 1
        else:
            first = ongoing.pop(e.pid, None)
            if first is not None and e.kind == "abort":
                lso = min(ongoing.values(), default=e.last + 1)
                aborted.append(AbortedTxn(e.pid, first, e.last, lso))
    return Derived(ongoing, aborted, epochs, next_seq)


def txn_batch(pid: int, epoch: int, seq: int, count: int, transactional: bool = True) -> bytes:
    b = BatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=transactional
    )
    for i in range(count):
        b.append(f"{pid}/{epoch}/{seq + i}".encode(), timestamp=1_700_000_000_000)
    return b.build()


class TransactionsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="txn-model-"))
        self.config = LogConfig().with_overrides({"segment.bytes": 400})
        self.generation = 0
        self.log = Log(self._dir(), self.config)
        self.events: list[Event] = []

    def _dir(self) -> Path:
        return self.tmp / f"g{self.generation}" / "t-0"

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def model(self) -> Derived:
        return derive(self.events)

    # -- steps -----------------------------------------------------------------

    @rule(pid=st.sampled_from(PIDS), count=st.integers(1, 3))
    def write_in_transaction(self, pid: int, count: int) -> None:
        m = self.model
        epoch, seq = m.epochs.get(pid, 0), m.next_seq.get(pid, 0)
        info = self.log.append(txn_batch(pid, epoch, seq, count))
        self.events.append(Event("data", pid, epoch, info.first_offset, info.last_offset, seq))

    @rule(count=st.integers(1, 2))
    def write_plain(self, count: int) -> None:
        b = BatchBuilder()
        for _ in range(count):
            b.append(b"plain")
        info = self.log.append(b.build())
        self.events.append(Event("plain", -1, -1, info.first_offset, info.last_offset))

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans(), bump=st.booleans())
    def end_transaction(self, pid: int, commit: bool, bump: bool) -> None:
        epoch = self.model.epochs.get(pid, 0) + (1 if bump and not commit else 0)
        info = self.log.append_control(pid, epoch, commit=commit, coordinator_epoch=0)
        kind = "commit" if commit else "abort"
        self.events.append(Event(kind, pid, epoch, info.first_offset, info.last_offset))

    @precondition(lambda self: any(e.kind == "data" for e in self.events))
    @rule(pid=st.sampled_from(PIDS))
    def zombie_or_plain_write_is_refused(self, pid: int) -> None:
        m = self.model
        epoch = m.epochs.get(pid, 0)
        end = self.log.log_end_offset
        if epoch > 0:
            try:
                self.log.append(txn_batch(pid, epoch - 1, 0, 1))
            except InvalidProducerEpoch:
                pass
            else:
                raise AssertionError("a batch of an older epoch was accepted")
        if pid in m.ongoing:
            try:
                self.log.append(txn_batch(pid, epoch, m.next_seq[pid], 1, transactional=False))
            except InvalidTxnState:
                pass
            else:
                raise AssertionError("a plain batch inside an open transaction was accepted")
        assert self.log.log_end_offset == end

    @precondition(lambda self: bool(self.events))
    @rule(data=st.data())
    def truncate_as_follower(self, data: st.DataObject) -> None:
        # A follower matching a new leader: every batch holding an offset >= the cut goes.
        cut = data.draw(st.integers(0, self.log.log_end_offset), label="cut")
        self.log.truncate_to(cut)
        self.events = [e for e in self.events if e.last < cut]

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def flush(self) -> None:
        self.log.flush()

    @rule(cut=st.integers(0, 200), lose_txnindex=st.booleans(), clean=st.booleans())
    def crash_and_reopen(self, cut: int, lose_txnindex: bool, clean: bool) -> None:
        old = self.log
        self.generation += 1
        new_dir = self._dir()
        if clean:
            old.close()
            shutil.copytree(old.dir, new_dir)
            self.log = Log(new_dir, self.config, clean_shutdown=True)
            return
        # The files as the crash leaves them (page cache included), then damage to what
        # was not fsynced: a torn tail of the active segment and lost index files.
        recovery_point = old.recovery_point
        shutil.copytree(old.dir, new_dir)
        old.close()
        active = max(new_dir.glob("*.log"))
        if int(active.stem) >= recovery_point:
            size = active.stat().st_size
            with open(active, "r+b") as f:
                f.truncate(max(size - cut, 0))
        if lose_txnindex:
            for p in new_dir.glob("*.txnindex"):
                if int(p.stem) >= recovery_point:
                    p.unlink()
        self.log = Log(new_dir, self.config, clean_shutdown=False, recovery_point=recovery_point)
        end = self.log.log_end_offset
        self.events = [e for e in self.events if e.last < end]

    # -- checks ----------------------------------------------------------------

    @invariant()
    def matches_the_model(self) -> None:
        log = self.log
        m = self.model
        end = self.events[-1].last + 1 if self.events else 0
        assert log.log_end_offset == end
        assert log.producer_state.ongoing_transactions() == m.ongoing
        lso = min(min(m.ongoing.values(), default=end), log.high_watermark)
        assert log.last_stable_offset == lso
        assert [e for s in log.segments for e in s.txn_index.entries] == m.aborted
        for start in {0, lso // 2, lso}:
            info = log.read(start, 1 << 20, isolation=READ_COMMITTED)
            # Nothing to read (start at the LSO): no list either, as Kafka answers.
            expected = [
                a
                for a in m.aborted
                if a.last_offset >= start and a.first_offset < lso and start < lso
            ]
            assert list(info.aborted_transactions or ()) == expected
            last = [h.last_offset for _, h in iter_headers(info.read_bytes())]
            assert all(x < lso for x in last)

    @invariant()
    def check_files(self) -> None:
        check_log_dir(self.log.dir, start=0)


TransactionsMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class TestTransactionsModel(TransactionsMachine.TestCase):  # type: ignore[name-defined]
    pass


def test_every_log_file_parses_with_kafka_python_after_a_run(tmp_path: Path) -> None:
    # A fixed, longer run than the machine's: interleaved transactions, a crash, more writes.
    m = TransactionsMachine()
    try:
        for i in range(30):
            m.write_in_transaction(PIDS[i % 3], 1 + i % 3)
            if i % 4 == 3:
                m.end_transaction(PIDS[i % 3], commit=i % 8 == 3, bump=i % 16 == 7)
            if i % 5 == 0:
                m.write_plain(1)
            m.matches_the_model()
        m.crash_and_reopen(37, lose_txnindex=True, clean=False)
        m.matches_the_model()
        m.check_files()
        for i in range(6):
            m.write_in_transaction(PIDS[i % 3], 2)
            m.end_transaction(PIDS[i % 3], commit=i % 2 == 0, bump=False)
            m.matches_the_model()
        m.check_files()
    finally:
        m.teardown()
