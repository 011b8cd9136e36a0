"""Crashes and restarts: kill -9 under load loses nothing acknowledged; SIGTERM is clean."""

from __future__ import annotations

import threading
import time

import httpx
from conftest import BrokerFactory


def _read_all(
    client: httpx.Client, topic: str, partition: int, isolation_level: str = "read_uncommitted"
) -> list[tuple[int, str]]:
    """(offset, value) of every record in the partition, by JSON fetch (read_committed:
    up to the last stable offset, aborted records left out)."""
    out: list[tuple[int, str]] = []
    offset = 0
    end = "last_stable_offset" if isolation_level == "read_committed" else "high_watermark"
    while True:
        r = client.get(
            f"/topics/{topic}/partitions/{partition}/records",
            params={
                "offset": offset,
                "max_bytes": 4 << 20,
                "max_wait_ms": 0,
                "value_format": "string",
                "isolation_level": isolation_level,
            },
        )
        assert r.status_code == 200, r.text
        body = r.json()
        out += [(rec["offset"], rec["value"]) for rec in body["records"]]
        if body["next_offset"] >= body[end]:
            return out
        offset = body["next_offset"]


class Producer(threading.Thread):
    """Produces acks=1 requests until the broker goes away; keeps what was acknowledged."""

    def __init__(self, url: str, topic: str, partition: int, records_per_request: int) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.topic = topic
        self.partition = partition
        self.size = records_per_request
        self.acked: list[tuple[int, str]] = []
        self.failure: BaseException | None = None

    def run(self) -> None:
        n = 0
        path = f"/topics/{self.topic}/partitions/{self.partition}/records"
        with httpx.Client(base_url=self.url, timeout=10) as client:
            while True:
                values = [f"p{self.partition}-{n + i}" for i in range(self.size)]
                try:
                    r = client.post(
                        path,
                        params={"acks": "1"},
                        json={"records": [{"value": v} for v in values], "value_format": "string"},
                    )
                except httpx.TransportError:
                    return  # the broker died: this request was never acknowledged
                if r.status_code != 200:
                    self.failure = AssertionError(f"{r.status_code}: {r.text}")
                    return
                offsets = [entry["offset"] for entry in r.json()["offsets"]]
                self.acked += zip(offsets, values, strict=True)
                n += self.size


def test_kill_9_under_load_keeps_every_acknowledged_record(new_broker: BrokerFactory) -> None:
    broker = new_broker().start()
    with broker.client() as client:
        r = client.post(
            "/topics",
            # Small segments: the crash lands after several rolls, not only in the first file.
            json={"name": "load", "partitions": 2, "configs": {"segment.bytes": 200_000}},
        )
        assert r.status_code == 201, r.text

    producers = [Producer(broker.url, "load", p, size) for p, size in ((0, 1), (1, 50))]
    for producer in producers:
        producer.start()
    deadline = time.monotonic() + 10
    while min(len(p.acked) for p in producers) < 500 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill()
    for producer in producers:
        producer.join(timeout=15)
        assert not producer.is_alive()
        assert producer.failure is None, producer.failure
        assert len(producer.acked) >= 500, "load too small to mean anything"
    assert not broker.clean_shutdown_marker.exists()

    broker.start()
    with broker.client() as client:
        for producer in producers:
            stored = _read_all(client, "load", producer.partition)
            # Offsets are dense from 0; everything acknowledged is there, in order.
            assert [offset for offset, _ in stored] == list(range(len(stored)))
            acked = producer.acked
            assert [o for o, _ in acked] == list(range(len(acked)))
            assert stored[: len(acked)] == acked
        # The log takes new appends right after the recovered end.
        end = len(_read_all(client, "load", 0))
        r = client.post("/topics/load/partitions/0/records", json={"records": [{"value": "after"}]})
        assert r.json()["offsets"][0]["offset"] == end


def test_sigterm_is_clean_and_restart_serves_the_same_data(new_broker: BrokerFactory) -> None:
    broker = new_broker().start()
    values = [f"v{i}" for i in range(300)]
    with broker.client() as client:
        r = client.post(
            "/topics/keep/partitions/0/records",
            json={"records": [{"value": v} for v in values], "value_format": "string"},
        )
        assert r.status_code == 200, r.text
        raw_before = client.get(
            "/topics/keep/partitions/0/records",
            params={"offset": 0, "max_bytes": 1 << 20},
            headers={"accept": "application/octet-stream"},
        ).content

    assert broker.stop() == 0
    assert broker.clean_shutdown_marker.exists()

    broker.start()
    # A clean start consumes the marker: a crash from here on must recover.
    assert not broker.clean_shutdown_marker.exists()
    with broker.client() as client:
        assert _read_all(client, "keep", 0) == list(enumerate(values))
        raw_after = client.get(
            "/topics/keep/partitions/0/records",
            params={"offset": 0, "max_bytes": 1 << 20},
            headers={"accept": "application/octet-stream"},
        ).content
        assert raw_after == raw_before
        r = client.post("/topics/keep/partitions/0/records", json={"records": [{"value": "next"}]})
        assert r.json()["offsets"][0]["offset"] == len(values)
