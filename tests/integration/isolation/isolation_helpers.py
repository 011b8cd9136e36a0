"""Helpers for the isolation tests: a real broker in-process (uvicorn on a thread, so the
tests reach its partition logs) and transactions written on a partition with the storage
layer's own calls (transactional batches, ``Log.append_control``), the coordinator's job
once it exists. A unique module name: test dirs are not packages."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from app.api import create_app
from app.api.server import ws_keepalive
from app.common.batch import BatchBuilder
from app.config import Settings
from app.core.log import Log

TS = 1_700_000_000_000


class Broker:
    """The real app served by uvicorn on a thread."""

    def __init__(self, settings: Settings) -> None:
        self.app = create_app(settings)
        ping_interval, ping_timeout = ws_keepalive(settings)
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=0,
            loop="asyncio",
            http="httptools",
            lifespan="on",
            log_level="warning",
            ws_ping_interval=ping_interval,
            ws_ping_timeout=ping_timeout,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.port = 0

    def start(self) -> Broker:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive(), "the broker thread died"
            assert time.monotonic() < deadline, "the broker did not start"
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ws_url(self, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)

    def create_topic(self, name: str, partitions: int = 1) -> None:
        with self.http() as c:
            r = c.post("/topics", json={"name": name, "partitions": partitions})
            assert r.status_code == 201, r.text

    def log(self, topic: str, partition: int = 0) -> Log:
        log: Log = self.app.state.logbus.manager.get_log(topic, partition)
        return log


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
