"""Markers that cannot be written at once (leadership moving, a full disk): the decision
stays PrepareCommit, the id answers CONCURRENT_TRANSACTIONS, and the coordinator's timer
writes them later; the group's offsets committed in the transaction count only then."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.common.batch import BatchBuilder, read_control_marker
from app.common.errors import ConcurrentTransactions, InvalidTxnState, NotLeaderOrFollower
from app.core.local_topology import LocalReplica, LocalTopology
from app.core.log import LogManager
from app.groups.coordinator import GroupConfig, GroupCoordinator, OffsetCommit
from app.txn import TransactionCoordinator, TxnConfig
from app.txn.model import TXN_TOPIC


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    m = LogManager(tmp_path / "data")
    m.start()
    m.create_topic("d", 1, {})
    try:
        yield m
    finally:
        m.shutdown()


def test_failed_markers_are_written_by_the_timer(manager: LogManager) -> None:
    async def scenario() -> None:
        topology = LocalTopology(manager, 0, "http://b0")
        groups = GroupCoordinator(manager, GroupConfig(), cluster=topology)
        await groups.start()
        tc = TransactionCoordinator(
            topology, manager.producer_ids, TxnConfig(abort_check_interval_ms=10**8), groups=groups
        )
        await tc.start()
        real = tc.placement.append_marker
        failures = {"left": 3}

        async def flaky(topic: str, partition: int, *args: Any, **kwargs: Any) -> None:
            if topic == "d" and failures["left"] > 0:
                failures["left"] -= 1
                raise NotLeaderOrFollower(topic, partition, message="moving")
            await real(topic, partition, *args, **kwargs)

        tc.placement.append_marker = flaky  # type: ignore[method-assign]
        pid, epoch = await tc.init_producer_id("t", 60_000)
        await tc.add_partitions("t", pid, epoch, [("d", 0)])
        b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
        b.append(b"v")
        tc.check_produce("d", 0, pid, epoch)
        manager.get_log("d", 0).append(b.build())
        await tc.add_offsets("t", pid, epoch, "g")
        await groups.txn_commit_offsets("g", pid, epoch, [OffsetCommit("d", 0, 1)])

        assert await tc.end_txn("t", pid, epoch, True) == "PrepareCommit"
        assert tc.describe("t")["topics"] == [{"topic": "d", "partitions": [0]}]
        # The offsets partition took its marker: the offsets count already.
        assert [o.offset for o in groups.fetch_offsets("g", ["d"])] == [1]
        log = manager.get_log("d", 0)
        assert log.last_stable_offset == 0  # the data partition is still held
        with pytest.raises(ConcurrentTransactions):  # it tries the marker again: fails
            await tc.init_producer_id("t", 60_000)
        await tc.abort_timed_out()  # the timer tries again: the third failure
        assert tc.describe("t")["transaction_state"] == "PrepareCommit"
        await tc.abort_timed_out()
        assert tc.describe("t")["transaction_state"] == "CompleteCommit"
        assert log.last_stable_offset == log.log_end_offset
        assert await tc.init_producer_id("t", 60_000) == (pid, epoch + 1)
        await tc.stop()
        await groups.stop()

    asyncio.run(scenario())


def test_the_decision_waits_for_appends_checked_before_it(manager: LogManager) -> None:
    """A produce request that passed the check and appends on a worker thread finishes
    before EndTxn writes the marker: its batch is in the transaction, never after it."""

    async def scenario() -> None:
        topology = LocalTopology(manager, 0, "http://b0")
        tc = TransactionCoordinator(topology, manager.producer_ids, TxnConfig())
        await tc.start()
        pid, epoch = await tc.init_producer_id("t", 60_000)
        await tc.add_partitions("t", pid, epoch, [("d", 0)])
        log = manager.get_log("d", 0)

        async def slow_produce() -> None:
            b = BatchBuilder(
                producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True
            )
            b.append(b"late")
            with tc.append_permit(pid):  # as the produce paths hold it, check to append
                tc.check_produce("d", 0, pid, epoch)
                await asyncio.sleep(0.2)  # the worker-thread hop of a large append
                log.append(b.build())

        producing = asyncio.create_task(slow_produce())
        await asyncio.sleep(0)  # the request has passed its check
        assert await tc.end_txn("t", pid, epoch, True) == "CompleteCommit"
        assert producing.done()
        assert log.producer_state.ongoing_transactions() == {}
        assert log.last_stable_offset == log.log_end_offset == 2  # the batch, then the marker
        await tc.stop()

    asyncio.run(scenario())


def _batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
    b.append(value)
    return b.build()


async def _started(manager: LogManager, **config: int) -> tuple[TransactionCoordinator, int, int]:
    tc = TransactionCoordinator(
        LocalTopology(manager, 0, "http://b0"), manager.producer_ids, TxnConfig(**config)
    )  # type: ignore[arg-type]
    await tc.start()
    pid, epoch = await tc.init_producer_id("t", 60_000)
    await tc.add_partitions("t", pid, epoch, [("d", 0)])
    return tc, pid, epoch


async def _turns(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_the_decision_waits_for_an_append_that_outlives_its_request_task(
    manager: LogManager,
) -> None:
    """The request task checked, handed its append (and permit) to a worker thread and
    ended: the decision still waits for the append. (Tracking request tasks, as before,
    let EndTxn go on once the task ended: the marker first, then the batch, a
    transaction nobody ends.)"""

    async def scenario() -> None:
        tc, pid, epoch = await _started(manager)
        log = manager.get_log("d", 0)
        go = threading.Event()
        appended: list[Any] = []

        def append_later(permit: Any) -> None:
            with permit:
                go.wait(10)
                appended.append(log.append(_batch(pid, epoch, 0, b"late")))

        async def request() -> threading.Thread:
            permit = tc.append_permit(pid)
            tc.check_produce("d", 0, pid, epoch)
            worker = threading.Thread(target=append_later, args=(permit,))
            worker.start()
            return worker

        worker = await asyncio.create_task(request())  # the task is done now
        ending = asyncio.create_task(tc.end_txn("t", pid, epoch, True))
        await _turns()
        assert not ending.done() and tc.describe("t")["transaction_state"] == "Ongoing"
        go.set()
        assert await ending == "CompleteCommit"
        worker.join(10)
        assert appended and log.producer_state.ongoing_transactions() == {}
        assert log.last_stable_offset == log.log_end_offset == 2  # the batch, then the marker
        await tc.stop()

    asyncio.run(scenario())


def test_the_decision_waits_for_every_overlapping_append_of_the_producer(
    manager: LogManager,
) -> None:
    """Two requests of one producer append at once (and one task holds permits for two
    producers' batches): the decision waits until the last permit of its producer is back."""

    async def scenario() -> None:
        tc, pid, epoch = await _started(manager)
        first, second = tc.append_permit(pid), tc.append_permit(pid)
        other = tc.append_permit(pid + 1)  # another producer's: not waited for
        assert tc.permits.out(pid) == 2
        ending = asyncio.create_task(tc.end_txn("t", pid, epoch, True))
        await _turns()
        first.release()
        first.release()  # once only
        await _turns()
        assert not ending.done() and tc.permits.out(pid) == 1
        second.release()
        assert await ending == "CompleteCommit"
        assert tc.permits.out(pid) == 0 and tc.permits.out(pid + 1) == 1
        other.release()
        await tc.stop()

    asyncio.run(scenario())


def test_a_batch_checked_while_the_decision_is_written_is_refused(manager: LogManager) -> None:
    """While PrepareCommit is being written the transaction is still Ongoing in memory; a
    batch checked then would be appended after the wait and race the marker. It gets no
    permit (CONCURRENT_TRANSACTIONS, retriable); once decided, the check refuses it."""

    async def scenario() -> None:
        tc, pid, epoch = await _started(manager)
        real = tc.state.write
        gate, writing = asyncio.Event(), asyncio.Event()

        async def gated(meta: Any) -> None:
            writing.set()
            await gate.wait()
            await real(meta)

        tc.state.write = gated  # type: ignore[method-assign]
        ending = asyncio.create_task(tc.end_txn("t", pid, epoch, True))
        await writing.wait()
        tc.check_produce("d", 0, pid, epoch)  # what the check alone would let through
        with pytest.raises(ConcurrentTransactions) as refused:
            tc.append_permit(pid)
        assert refused.value.retriable and refused.value.transactional_id == "t"
        tc.state.write = real  # type: ignore[method-assign]
        gate.set()
        assert await ending == "CompleteCommit"
        with tc.append_permit(pid), pytest.raises(InvalidTxnState):
            tc.check_produce("d", 0, pid, epoch)
        await tc.stop()

    asyncio.run(scenario())


def test_an_append_stuck_past_the_write_timeout_does_not_hold_the_decision(
    manager: LogManager,
) -> None:
    async def scenario() -> None:
        tc, pid, epoch = await _started(manager, write_timeout_ms=200)
        stuck = tc.append_permit(pid)
        began = time.monotonic()
        assert await tc.end_txn("t", pid, epoch, False) == "CompleteAbort"
        assert time.monotonic() - began >= 0.15
        stuck.release()
        assert tc.permits.out(pid) == 0
        await tc.stop()

    asyncio.run(scenario())


class _ReelectedTopology(LocalTopology):
    """A lone broker whose ``__transaction_state`` partition is led in epoch 4, as a cluster
    broker's is after four elections."""

    def leader_partition(self, topic: str, partition: int) -> LocalReplica:
        replica = super().leader_partition(topic, partition)
        if topic != TXN_TOPIC:
            return replica
        return _EpochFour(replica.log)


class _EpochFour(LocalReplica):
    __slots__ = ()
    leader_epoch = 4


def test_a_fresh_transactional_id_gets_the_partitions_coordinator_epoch(
    manager: LogManager,
) -> None:
    """Kafka's rule: an id's coordinator epoch is the leader epoch of its
    ``__transaction_state`` partition, for an id created now as for one loaded; its markers
    carry it (an id created at 0 beside ids loaded at 4 would have markers a partition
    fences as older than the coordinator's)."""

    async def scenario() -> None:
        topology = _ReelectedTopology(manager, 0, "http://b0")
        tc = TransactionCoordinator(
            topology, manager.producer_ids, TxnConfig(abort_check_interval_ms=10**8)
        )
        await tc.start()
        pid, epoch = await tc.init_producer_id("fresh", 60_000)
        await tc.add_partitions("fresh", pid, epoch, [("d", 0)])
        assert await tc.end_txn("fresh", pid, epoch, True) == "CompleteCommit"
        marker = manager.get_log("d", 0).read(0, 1 << 20).read_bytes()
        assert read_control_marker(memoryview(marker)).coordinator_epoch == 4
        await tc.stop()

    asyncio.run(scenario())
