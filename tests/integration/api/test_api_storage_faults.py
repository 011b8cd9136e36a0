"""A failing disk on every write path: a retriable 503 KAFKA_STORAGE_ERROR without paths,
nothing half-written, reads served meanwhile, and everything acknowledged intact after.

The disk is made to fail by refusing, with ENOSPC as a full disk does, every write the
broker makes through ``os`` (segment appends, new files, fsyncs of new files); memory-mapped
index entries are left alone (a full disk fails the file write first).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from api_helpers import create_topic, make_settings, produce
from starlette.testclient import TestClient

from app.api import create_app
from app.common.batch import build_batch
from app.core.log.log import Log


class FullDisk:
    """While ``on``: os.write/pwrite/ftruncate and creating files fail with ENOSPC."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = False
        for name in ("write", "pwrite", "ftruncate", "posix_fallocate"):
            if hasattr(os, name):
                monkeypatch.setattr(os, name, self._failing(getattr(os, name)))
        real_open = os.open

        def failing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if self.on and flags & os.O_CREAT and not os.path.exists(path):
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", failing_open)

    def _failing(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.on:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(*args, **kwargs)

        return call


@pytest.fixture
def broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TestClient, FullDisk]]:
    disk = FullDisk(monkeypatch)
    settings = make_settings(tmp_path, offsets_topic_num_partitions=1)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client, disk


def _storage_error(r: Any, data_dir: str) -> None:
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["error_code"] == "KAFKA_STORAGE_ERROR"
    assert body["retriable"] is True
    assert data_dir not in r.text and "/tmp" not in r.text


def test_every_write_path_answers_a_retriable_storage_error(
    broker: tuple[TestClient, FullDisk], tmp_path: Path
) -> None:
    client, disk = broker
    create_topic(client, "t", partitions=2)
    acked = produce(client, "t", [{"value": i, "partition": 0} for i in range(5)])
    member = client.post("/groups/g/heartbeat", json={"subscribed_topics": ["t"]}).json()
    topics_before = client.get("/topics").json()

    disk.on = True
    _storage_error(
        client.post("/topics/t/records", json={"records": [{"value": 9}]}), str(tmp_path)
    )
    _storage_error(
        client.post("/topics/t/partitions/1/records", json={"records": [{"value": 9}]}),
        str(tmp_path),
    )
    _storage_error(
        client.post("/groups/g/heartbeat", json={"subscribed_topics": ["t"]}), str(tmp_path)
    )
    _storage_error(
        client.post(
            "/groups/g/offsets",
            json={
                "member_id": member["member_id"],
                "member_epoch": member["member_epoch"],
                "offsets": [{"topic": "t", "partition": 0, "offset": 3}],
            },
        ),
        str(tmp_path),
    )
    _storage_error(client.post("/topics", json={"name": "new", "partitions": 3}), str(tmp_path))
    _storage_error(
        client.post("/topics/auto/records", json={"records": [{"value": 1}]}), str(tmp_path)
    )
    # Reads go on meanwhile.
    r = client.get("/topics/t/partitions/0/records", params={"offset": 0})
    assert r.status_code == 200
    assert [rec["value"] for rec in r.json()["records"]] == list(range(5))
    assert client.get("/topics").json() == topics_before  # no half-created topic

    disk.on = False
    produce(client, "t", [{"value": 5, "partition": 0}])
    create_topic(client, "new", partitions=3)
    r = client.get("/topics/t/partitions/0/records", params={"offset": 0})
    assert [rec["value"] for rec in r.json()["records"]] == list(range(6))
    assert [o["offset"] for o in acked] == list(range(5))


def test_timeout_ms_does_not_bound_the_leaders_own_append(
    broker: tuple[TestClient, FullDisk], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow disk (each append takes longer than timeout_ms). As in Kafka, timeout_ms
    bounds only the wait for in-sync replicas (acks=all in a cluster): acks=0 (which waits
    for nothing) and acks=1 never answer 504 (they did, and the write went on anyway)."""
    client, _ = broker
    create_topic(client, "slow")
    real_append = Log.append

    def slow_append(self: Log, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)  # the slow disk, not a measurement
        return real_append(self, *args, **kwargs)

    monkeypatch.setattr(Log, "append", slow_append)
    one = {"records": [{"value": "one"}]}
    r = client.post("/topics/slow/records", params={"acks": "1", "timeout_ms": 1}, json=one)
    assert r.status_code == 200, r.text
    assert [(o["partition"], o["offset"]) for o in r.json()["offsets"]] == [(0, 0)]
    r = client.post("/topics/slow/records", params={"acks": "0", "timeout_ms": 1}, json=one)
    assert r.status_code == 204, r.text
    r = client.post(
        "/topics/slow/partitions/0/batches",
        params={"acks": "0", "timeout_ms": 1},
        content=build_batch([(None, b"raw")] * 2000),  # past the inline size: a thread hop
        headers={"content-type": "application/octet-stream"},
    )
    assert r.status_code == 204, r.text
    monkeypatch.setattr(Log, "append", real_append)
    r = client.get("/topics/slow/partitions/0/records", params={"offset": 0, "max_wait_ms": 0})
    values = [rec["value"] for rec in r.json()["records"]]
    assert values[:2] == ["one", "one"] and values[2:] == ["raw"] * 2000
