"""The exactly-once sink's transactions (app.spark.txn) against a real broker, without
Spark: what a task writes is read only once the driver commits it, a retried attempt
fences what its predecessor left open, and the batch marker tells a replay to skip."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_broker import LiveBroker, live_broker

from app.client import Admin, Consumer, TopicPartition
from app.common.errors import ProducerFenced
from app.spark.txn import Marker, TaskTransaction, end_transactions


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LiveBroker]:
    with live_broker(tmp_path) as b:
        b.create_topic("out", partitions=2)
        yield b


def _committed(url: str) -> list[bytes]:
    """Every value a read_committed reader gets from out-0 and out-1, up to their LSO."""
    tps = [TopicPartition("out", p) for p in (0, 1)]
    with Admin(url) as admin:
        ends = admin.list_offsets(tps, "latest", isolation_level="read_committed")
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    with Consumer(url, isolation_level="read_committed", auto_offset_reset="earliest") as c:
        c.assign(tps)
        while any(c.position(tp) < (ends[tp].offset if ends[tp] else 0) for tp in tps):
            assert time.monotonic() < deadline, "the reader never reached the LSO"
            values += [r.value for r in c.poll(timeout_ms=500) if r.value is not None]
    return sorted(values)


def _write(url: str, attempt: int, values: list[bytes]) -> TaskTransaction:
    txn = TaskTransaction(url, "job", 0, attempt, 60_000)
    txn.init()
    txn.fence_earlier_attempts()
    for i, v in enumerate(values):
        txn.append("out", i % 2, None, v, [("h", b"1")], 0)
    txn.flush()
    return txn


def test_a_task_transaction_is_read_only_once_the_driver_commits(broker: LiveBroker) -> None:
    txn = _write(broker.url, 0, [b"a", b"b", b"c"])
    assert txn.committed("q") == -1
    txn.commit_marker(Marker("q", 3))
    assert _committed(broker.url) == []  # open: read_committed stops at the LSO
    assert txn.committed("q") == -1  # the marker counts only once committed
    end_transactions(broker.url, [txn.pending()], commit=True)
    end_transactions(broker.url, [txn.pending()], commit=True)  # a retried commit: no-op
    assert _committed(broker.url) == [b"a", b"b", b"c"]
    assert txn.committed("q") == 3
    assert txn.committed("another query") == -1
    txn.close()


def test_a_retried_attempt_fences_and_aborts_what_its_predecessor_wrote(
    broker: LiveBroker,
) -> None:
    first = _write(broker.url, 0, [b"old-1", b"old-2"])
    first.commit_marker(Marker("q", 0))
    retry = _write(broker.url, 1, [b"new-1", b"new-2"])
    with pytest.raises(ProducerFenced):
        end_transactions(broker.url, [first.pending()], commit=True)
    retry.commit_marker(Marker("q", 0))
    end_transactions(broker.url, [retry.pending()], commit=True)
    assert _committed(broker.url) == [b"new-1", b"new-2"]
    assert retry.committed("q") == 0
    for txn in (first, retry):
        txn.close()
