"""Group commit under kill -9: many one-record producers on one partition, their requests
joined into shared appends (on the loop with group_commit_inline; on a worker thread for
acks=all), the broker killed mid-stream; nothing acknowledged is lost."""

from __future__ import annotations

import re
import threading
import time

import httpx
import pytest
from conftest import BrokerFactory
from test_e2e_restart import _read_all

PRODUCERS = 16


class OneRecordProducer(threading.Thread):
    """Posts one keyless record per request until the broker goes away."""

    def __init__(self, url: str, name: str, acks: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.name_ = name
        self.acks = acks
        self.acked: list[tuple[int, str]] = []
        self.failure: BaseException | None = None

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as client:
            n = 0
            while True:
                value = f"{self.name_}-{n}"
                try:
                    r = client.post(
                        "/topics/gc/partitions/0/records",
                        params={"acks": self.acks},
                        json={"records": [{"value": value}], "value_format": "string"},
                    )
                except httpx.TransportError:
                    return  # the broker died: this request was never acknowledged
                if r.status_code != 200:
                    self.failure = AssertionError(f"{r.status_code}: {r.text}")
                    return
                self.acked.append((r.json()["offsets"][0]["offset"], value))
                n += 1


def _counter(metrics: str, name: str) -> float:
    found = re.search(rf"^{name}_total (\S+)$", metrics, flags=re.M)
    assert found is not None, name
    return float(found.group(1))


@pytest.mark.parametrize(
    ("acks", "env"),
    [
        # Small acks=1 requests are joined on the loop only with group_commit_inline.
        ("1", {"LOGBUS_GROUP_COMMIT_INLINE": "true"}),
        # acks=all requests are always joined, on a worker thread.
        ("all", {}),
    ],
)
def test_kill_9_mid_group_commit_keeps_every_acknowledged_record(
    new_broker: BrokerFactory, acks: str, env: dict[str, str]
) -> None:
    broker = new_broker(env=env).start()
    with broker.client() as client:
        r = client.post(
            "/topics",
            # Small segments: groups are written across segment rolls too.
            json={"name": "gc", "partitions": 1, "configs": {"segment.bytes": 100_000}},
        )
        assert r.status_code == 201, r.text

    producers = [OneRecordProducer(broker.url, f"p{i}", acks) for i in range(PRODUCERS)]
    for producer in producers:
        producer.start()
    deadline = time.monotonic() + 20
    joined = False
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if sum(len(p.acked) for p in producers) < 2_000:
            continue
        with broker.client() as client:
            metrics = client.get("/metrics").text
        requests = _counter(metrics, "logbus_group_commit_requests")
        appends = _counter(metrics, "logbus_group_commit_appends")
        if appends < requests:
            joined = True
            break
    assert joined, "no two requests ever shared an append: nothing to test"
    # Killed while the producers keep sending: groups are being formed and written.
    broker.kill()
    for producer in producers:
        producer.join(timeout=15)
        assert not producer.is_alive()
        assert producer.failure is None, producer.failure
    assert not broker.clean_shutdown_marker.exists()

    broker.start()
    with broker.client() as client:
        stored = _read_all(client, "gc", 0)
    # Offsets dense from 0, and every acknowledged record at its acknowledged offset.
    assert [offset for offset, _ in stored] == list(range(len(stored)))
    by_offset = dict(stored)
    acked = [record for p in producers for record in p.acked]
    assert len(acked) >= 2_000
    assert len({offset for offset, _ in acked}) == len(acked), "an offset given twice"
    for offset, value in acked:
        assert by_offset.get(offset) == value
    # Each producer's records are in the log in the order it sent them.
    for producer in producers:
        offsets = [offset for offset, _ in producer.acked]
        assert offsets == sorted(offsets)
