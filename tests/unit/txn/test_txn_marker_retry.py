"""Markers that cannot be written at once (leadership moving, a full disk): the decision
stays PrepareCommit, the id answers CONCURRENT_TRANSACTIONS, and the coordinator's timer
writes them later; the group's offsets committed in the transaction count only then."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.common.batch import BatchBuilder
from app.common.errors import ConcurrentTransactions, NotLeaderOrFollower
from app.core.local_topology import LocalTopology
from app.core.log import LogManager
from app.groups.coordinator import GroupConfig, GroupCoordinator, OffsetCommit
from app.txn import TransactionCoordinator, TxnConfig


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
