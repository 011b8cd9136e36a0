"""A produce request whose deadline passed never appends afterwards.

The append runs on a worker thread; the request stops waiting at its timeout_ms.
Here the worker is held back (as a busy thread pool or a slow GIL hand-off would)
until the request has answered 504, then let go: it must write nothing.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from api_helpers import create_topic, end_offsets
from starlette.testclient import TestClient

from app.api.routers import records


def test_an_append_that_starts_after_the_deadline_writes_nothing(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_topic(client, "late")
    release, done = threading.Event(), threading.Event()
    real_append_all = records._append_all

    def held_back(*args: Any) -> Any:
        release.wait(30)
        try:
            return real_append_all(*args)
        finally:
            done.set()

    monkeypatch.setattr(records, "_append_all", held_back)
    answer = client.post(
        "/topics/late/partitions/0/records",
        params={"timeout_ms": 50},
        json={"records": [{"value": "too late"}]},
    )
    assert answer.status_code == 504, answer.text
    assert "nothing was written" in answer.json()["message"]
    release.set()
    assert done.wait(30)
    monkeypatch.setattr(records, "_append_all", real_append_all)
    assert end_offsets(client, "late") == [(0, 0, 0)]
    # The broker goes on: the next request appends.
    again = client.post("/topics/late/partitions/0/records", json={"records": [{"value": "v"}]})
    assert again.status_code == 200, again.text
    assert end_offsets(client, "late") == [(0, 1, 1)]
