"""Helpers for the isolation tests: the shared in-process broker (uvicorn on a thread, so the
tests reach its partition logs) and transactions written on a partition with the storage
layer's own calls (transactional batches, ``Log.append_control``), the coordinator's job
once it exists. A unique module name: test dirs are not packages."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from live_broker import LiveBroker

from app.common.batch import BatchBuilder
from app.config import Settings
from app.core.log import Log

TS = 1_700_000_000_000


# The isolation tests' broker is the shared in-process one.
Broker = LiveBroker


@contextmanager
def broker_at(tmp_path: Path, **overrides: Any) -> Iterator[Broker]:
    values: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "num_partitions": 1,
        "offsets_topic_num_partitions": 1,
    }
    values.update(overrides)
    broker = Broker(Settings(**values)).start()
    try:
        yield broker
    finally:
        broker.stop()


class Writer:
    """Writes to one partition as transactional producers and plain clients would.

    ``txn(pid, values)`` appends one transactional batch of producer ``pid`` (opening its
    transaction), ``commit``/``abort`` write its marker, ``plain(values)`` appends a batch
    without a producer id. Each returns the offsets written.

    It also keeps the model of what a read_committed reader must see: ``expected()``.
    """

    def __init__(self, log: Log) -> None:
        self.log = log
        self.seq: dict[int, int] = {}
        self.values: dict[int, bytes] = {}
        self.visible: set[int] = set()  # plain and committed offsets
        self.open: dict[int, list[int]] = {}  # pid -> offsets of its open transaction

    def lso(self) -> int:
        return min((o[0] for o in self.open.values()), default=self.log.log_end_offset)

    def expected(self, start: int = 0) -> list[bytes]:
        """What read_committed returns from ``start``: visible records below the LSO."""
        lso = self.lso()
        return [self.values[o] for o in sorted(self.visible) if start <= o < lso]

    def _wrote(self, first: int, last: int, values: list[bytes]) -> list[int]:
        offsets = list(range(first, last + 1))
        self.values.update(zip(offsets, values, strict=True))
        return offsets

    def txn(self, pid: int, values: list[bytes]) -> list[int]:
        seq = self.seq.get(pid, 0)
        b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)
        for v in values:
            b.append(v, timestamp=TS)
        info = self.log.append(b.build())
        self.seq[pid] = seq + len(values)
        offsets = self._wrote(info.first_offset, info.last_offset, values)
        self.open.setdefault(pid, []).extend(offsets)
        return offsets

    def plain(self, values: list[bytes]) -> list[int]:
        b = BatchBuilder()
        for v in values:
            b.append(v, timestamp=TS)
        info = self.log.append(b.build())
        offsets = self._wrote(info.first_offset, info.last_offset, values)
        self.visible.update(offsets)
        return offsets

    def commit(self, pid: int) -> int:
        self.visible.update(self.open.pop(pid, []))
        return self.log.append_control(pid, 0, commit=True, coordinator_epoch=0).first_offset

    def abort(self, pid: int) -> int:
        self.open.pop(pid, None)
        return self.log.append_control(pid, 0, commit=False, coordinator_epoch=0).first_offset


def scenario(w: Writer) -> dict[str, Any]:
    """The standard mix every path is checked on, leaving one transaction open:

    offsets 0-1 plain, 2-3 pid 1 (aborted), 4-5 pid 2 (committed), 6 plain, 7 ABORT(1),
    8 COMMIT(2), 9-10 pid 3 (open), 11 plain. Committed view: plain 0-1, pid 2's 4-5,
    plain 6; the LSO is 9.
    """
    w.plain([b"p0", b"p1"])
    w.txn(1, [b"a2", b"a3"])
    w.txn(2, [b"c4", b"c5"])
    w.plain([b"p6"])
    w.abort(1)
    w.commit(2)
    w.txn(3, [b"o9", b"o10"])
    w.plain([b"p11"])
    return {
        "committed": [b"p0", b"p1", b"c4", b"c5", b"p6"],
        "uncommitted": [b"p0", b"p1", b"a2", b"a3", b"c4", b"c5", b"p6", b"o9", b"o10", b"p11"],
        "lso": 9,
        "end": 12,
        "after_commit": [b"p0", b"p1", b"c4", b"c5", b"p6", b"o9", b"o10", b"p11"],
    }
