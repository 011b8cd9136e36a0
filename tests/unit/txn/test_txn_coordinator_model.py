"""The transaction coordinator's state machine against a model (hypothesis, stateful).

A real coordinator over a real LogManager (one broker's topology), with a clock the test
moves, is driven through InitProducerId (also by zombies holding an older epoch),
AddPartitionsToTxn, transactional writes checked as the produce path does, EndTxn,
timeouts and restarts (a new coordinator loading ``__transaction_state``). After every
step each id's state, producer and epoch match the model, and every data partition's
read_committed view (the core's read up to the LSO, aborted records dropped) holds
exactly the values of committed transactions, in order, with the LSO at the first
record of a transaction still open.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from log_helpers import committed_values

from app.common.batch import BatchBuilder
from app.common.errors import LogbusError
from app.core.local_topology import LocalTopology
from app.core.log import LogManager
from app.core.log.log import Log
from app.txn import TransactionCoordinator, TxnConfig

IDS = ["t0", "t1", "t2"]
PARTITIONS = [0, 1]
TIMEOUT_MS = 10_000
EXPIRATION_MS = 60_000


@dataclass
class ModelTxn:
    producer_id: int
    epoch: int
    state: str = "Empty"
    partitions: set[int] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = 0
    # Values written in the open transaction, per partition, in order.
    pending: dict[int, list[str]] = field(default_factory=dict)


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="txn-coord-"))
        self.loop = asyncio.new_event_loop()
        self.manager = LogManager(self.tmp / "data")
        self.manager.start()
        self.manager.create_topic("d", len(PARTITIONS), {})
        self.topology = LocalTopology(self.manager, 0, "http://b0")
        self.now = 1_000_000
        self.coordinator = self._start()
        self.model: dict[str, ModelTxn] = {}
        # Every (producer id, epoch) each id was handed, oldest first: zombies use old ones.
        self.handles: dict[str, list[tuple[int, int]]] = {}
        self.committed: dict[int, list[str]] = {p: [] for p in PARTITIONS}
        self.counter = 0

    def _start(self) -> TransactionCoordinator:
        tc = TransactionCoordinator(
            self.topology,
            self.manager.producer_ids,
            TxnConfig(
                num_partitions=3, abort_check_interval_ms=10**8, id_expiration_ms=EXPIRATION_MS
            ),
            clock_ms=lambda: self.now,
        )
        self.loop.run_until_complete(tc.start())
        return tc

    def teardown(self) -> None:
        self.loop.run_until_complete(self.coordinator.stop())
        self.loop.close()
        self.manager.shutdown()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _run(self, coro: object) -> tuple[object, str | None]:
        try:
            return self.loop.run_until_complete(coro), None  # type: ignore[arg-type]
        except LogbusError as exc:
            return None, exc.error_code

    def _finish(self, m: ModelTxn, commit: bool) -> None:
        for p, values in sorted(m.pending.items()):
            if commit:
                self.committed[p] += values
        m.pending = {}
        m.partitions = set()
        m.state = "CompleteCommit" if commit else "CompleteAbort"
        m.last_update_ms = self.now

    # -- steps -------------------------------------------------------------------------

    @rule(tid=st.sampled_from(IDS))
    def init(self, tid: str) -> None:
        result, error = self._run(self.coordinator.init_producer_id(tid, TIMEOUT_MS))
        assert error is None, error
        assert isinstance(result, tuple)
        pid, epoch = result
        m = self.model.get(tid)
        if m is None:
            assert epoch == 0
            self.model[tid] = ModelTxn(pid, 0, last_update_ms=self.now)
        else:
            assert pid == m.producer_id
            bump = 1
            if m.state == "Ongoing":
                self._finish(m, commit=False)
                bump = 2  # the fencing abort took one
            assert epoch == m.epoch + bump
            m.epoch = epoch
            m.state = "Empty"
            m.last_update_ms = self.now
        self.handles.setdefault(tid, []).append((pid, epoch))

    @rule(tid=st.sampled_from(IDS), partition=st.sampled_from(PARTITIONS), zombie=st.booleans())
    def add_partition(self, tid: str, partition: int, zombie: bool) -> None:
        m = self.model.get(tid)
        pid, epoch = self._handle(tid, zombie)
        _, error = self._run(self.coordinator.add_partitions(tid, pid, epoch, [("d", partition)]))
        if m is None:
            assert error == "TRANSACTIONAL_ID_NOT_FOUND"
            return
        if pid != m.producer_id:  # a zombie from before the id expired
            assert error == "INVALID_PRODUCER_ID_MAPPING"
            return
        if epoch < m.epoch:
            assert error == "PRODUCER_FENCED"
            return
        assert error is None, error
        if m.state != "Ongoing" or partition not in m.partitions:
            m.last_update_ms = self.now
        if m.state != "Ongoing":
            m.state, m.start_ms = "Ongoing", self.now
        m.partitions.add(partition)

    @rule(tid=st.sampled_from(IDS), partition=st.sampled_from(PARTITIONS), zombie=st.booleans())
    def write(self, tid: str, partition: int, zombie: bool) -> None:
        m = self.model.get(tid)
        if m is None:
            return
        pid, epoch = self._handle(tid, zombie)
        log = self.manager.get_log("d", partition)
        self.counter += 1
        value = f"{tid}-{self.counter}"
        try:
            self.coordinator.check_produce("d", partition, pid, epoch)
            entry = log.producer_state.producers.get(pid)
            seq = entry.last_seq + 1 if entry is not None and entry.epoch == epoch else 0
            b = BatchBuilder(
                producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True
            )
            b.append(value.encode())
            log.append(b.build())
            error = None
        except LogbusError as exc:
            error = exc.error_code
        if pid != m.producer_id:
            assert error == "INVALID_TXN_STATE"
        elif epoch < m.epoch:
            assert error == "PRODUCER_FENCED"
        elif m.state != "Ongoing" or partition not in m.partitions:
            assert error == "INVALID_TXN_STATE"
        else:
            assert error is None, error
            m.pending.setdefault(partition, []).append(value)

    @rule(tid=st.sampled_from(IDS), commit=st.booleans(), zombie=st.booleans())
    def end(self, tid: str, commit: bool, zombie: bool) -> None:
        m = self.model.get(tid)
        pid, epoch = self._handle(tid, zombie)
        result, error = self._run(self.coordinator.end_txn(tid, pid, epoch, commit))
        if m is None:
            assert error == "TRANSACTIONAL_ID_NOT_FOUND"
        elif pid != m.producer_id:
            assert error == "INVALID_PRODUCER_ID_MAPPING"
        elif epoch < m.epoch:
            assert error == "PRODUCER_FENCED"
        elif m.state == "Ongoing":
            assert error is None, error
            self._finish(m, commit)
            assert result == m.state
        elif m.state == ("CompleteCommit" if commit else "CompleteAbort"):
            assert error is None and result == m.state  # a retry
        else:
            assert error == "INVALID_TXN_STATE", (m.state, commit, error)

    @rule(ms=st.sampled_from([1_000, 6_000, 11_000, 61_000]))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        self.loop.run_until_complete(self.coordinator.abort_timed_out())
        for m in self.model.values():
            if m.state == "Ongoing" and self.now - m.start_ms > TIMEOUT_MS:
                self._finish(m, commit=False)
                m.epoch += 1  # aborted with a bumped epoch: its producer is fenced
        self.loop.run_until_complete(self.coordinator.expire_ids())
        for tid, m in list(self.model.items()):
            if m.state != "Ongoing" and self.now - m.last_update_ms >= EXPIRATION_MS:
                del self.model[tid]  # forgotten: the next init starts afresh

    @rule()
    def restart(self) -> None:
        self.loop.run_until_complete(self.coordinator.stop())
        self.coordinator = self._start()

    def _handle(self, tid: str, zombie: bool) -> tuple[int, int]:
        handles = self.handles.get(tid) or [(999_999, 0)]
        return handles[0] if zombie else handles[-1]

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def ids_match_the_model(self) -> None:
        for tid in IDS:
            m = self.model.get(tid)
            if m is None:
                assert self.coordinator.state.get(tid) is None
                continue
            d = self.coordinator.describe(tid)
            assert (d["transaction_state"], d["producer_id"], d["producer_epoch"]) == (
                m.state,
                m.producer_id,
                m.epoch,
            )
            parts = {p for t in d["topics"] for p in t["partitions"]}
            assert parts == (m.partitions if m.state == "Ongoing" else set())

    @invariant()
    def committed_readers_see_committed_transactions(self) -> None:
        for p in PARTITIONS:
            log = self.manager.get_log("d", p)
            assert committed_values(log) == self.committed[p]
            assert log.last_stable_offset == first_open_offset(log)


def first_open_offset(log: Log) -> int:
    ongoing = log.producer_state.ongoing_transactions()
    return min(ongoing.values(), default=log.log_end_offset)


CoordinatorMachine.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.slow
class TestCoordinatorModel(CoordinatorMachine.TestCase):  # type: ignore[name-defined]
    pass


def test_a_fixed_run() -> None:
    """A run through every rule, fast, for the default (non-slow) selection."""
    m = CoordinatorMachine()
    try:
        m.init("t0")
        m.add_partition("t0", 0, zombie=False)
        m.write("t0", 0, zombie=False)
        m.init("t1")
        m.add_partition("t1", 1, zombie=False)
        m.write("t1", 1, zombie=False)
        m.committed_readers_see_committed_transactions()
        m.end("t0", commit=True, zombie=False)
        m.init("t1")  # fences t1's open transaction
        m.write("t1", 1, zombie=True)
        m.add_partition("t1", 0, zombie=False)
        m.write("t1", 0, zombie=False)
        m.restart()
        m.ids_match_the_model()
        m.time_passes(11_000)
        m.end("t1", commit=True, zombie=False)
        m.ids_match_the_model()
        m.committed_readers_see_committed_transactions()
        m.time_passes(61_000)  # every id idle: forgotten
        m.ids_match_the_model()
        m.add_partition("t0", 0, zombie=False)  # the old producer id maps to nothing now
        m.init("t0")
        m.add_partition("t0", 0, zombie=True)
        m.write("t0", 0, zombie=True)
        m.ids_match_the_model()
    finally:
        m.teardown()
