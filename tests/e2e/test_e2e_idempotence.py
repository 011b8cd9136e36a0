"""Idempotent producers against a real broker process: kill -9 or SIGTERM in the middle of
producing, restart, retry what may or may not have been written, and find every record
exactly once (the producer state came back from snapshots and the log)."""

from __future__ import annotations

import threading

import httpx
import pytest
from conftest import Broker, BrokerFactory

from app.common.batch import BatchBuilder, decode_records

RECORDS_PER_BATCH = 5
OCTET = {"content-type": "application/octet-stream"}


def batch(pid: int, seq: int) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq)
    for i in range(RECORDS_PER_BATCH):
        b.append(f"r{seq + i}".encode(), timestamp=1_700_000_000_000)
    return b.build()


def stored(client: httpx.Client, topic: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    offset = 0
    while True:
        r = client.get(
            f"/topics/{topic}/partitions/0/records",
            params={"offset": offset, "max_bytes": 4 << 20, "max_wait_ms": 0},
            headers={"accept": "application/octet-stream"},
        )
        assert r.status_code == 200, r.text
        got = [(rec.offset, (rec.value or b"").decode()) for rec in decode_records(r.content)]
        got = [g for g in got if g[0] >= offset]
        if not got:
            return out
        out += got
        offset = got[-1][0] + 1


class IdempotentProducer(threading.Thread):
    """Sends batch after batch until the broker goes away; keeps what was acknowledged."""

    def __init__(self, url: str, topic: str, pid: int) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.topic = topic
        self.pid = pid
        self.acked: dict[int, tuple[int, int]] = {}  # sequence -> (base offset, last offset)
        self.next_seq = 0
        self.failure: str | None = None

    def run(self) -> None:
        path = f"/topics/{self.topic}/partitions/0/batches"
        with httpx.Client(base_url=self.url, timeout=10) as client:
            while True:
                try:
                    r = client.post(path, content=batch(self.pid, self.next_seq), headers=OCTET)
                except httpx.TransportError:
                    return  # this batch may or may not have been written: retried later
                if r.status_code != 200:
                    self.failure = f"{r.status_code}: {r.text}"
                    return
                (b,) = r.json()["batches"]
                self.acked[self.next_seq] = (b["base_offset"], b["last_offset"])
                self.next_seq += RECORDS_PER_BATCH


def produce_until_stopped(broker: Broker, stop: str) -> None:
    with broker.client() as client:
        r = client.post("/topics", json={"name": "idem", "partitions": 1})
        assert r.status_code == 201, r.text
        pid = client.post("/producers", json={}).json()["producer_id"]
    producer = IdempotentProducer(broker.url, "idem", pid)
    producer.start()
    while len(producer.acked) < 200 and producer.is_alive():
        threading.Event().wait(0.01)
    if stop == "kill":
        broker.kill()
    else:
        assert broker.stop() == 0
    producer.join(timeout=30)
    assert producer.failure is None, producer.failure
    assert len(producer.acked) >= 200

    broker.start()
    with broker.client() as client:
        # The batch whose answer never came: written or not, sending it again is safe.
        pending = producer.next_seq
        r = client.post(
            "/topics/idem/partitions/0/batches", content=batch(pid, pending), headers=OCTET
        )
        assert r.status_code == 200, r.text
        # Acknowledged batches still in the window answer their original offsets again.
        last_acked = sorted(producer.acked)[-4:]
        window = [s for s in last_acked if s >= pending - 4 * RECORDS_PER_BATCH]
        for seq in window:
            r = client.post(
                "/topics/idem/partitions/0/batches", content=batch(pid, seq), headers=OCTET
            )
            assert r.status_code == 200, r.text
            (b,) = r.json()["batches"]
            assert b["duplicate"] is True
            assert (b["base_offset"], b["last_offset"]) == producer.acked[seq]
        # A gap is still refused, and the producer goes on where it left off.
        gap = pending + 3 * RECORDS_PER_BATCH
        r = client.post("/topics/idem/partitions/0/batches", content=batch(pid, gap), headers=OCTET)
        assert r.status_code == 409 and r.json()["error_code"] == "OUT_OF_ORDER_SEQUENCE_NUMBER"
        for seq in range(pending + RECORDS_PER_BATCH, gap + 1, RECORDS_PER_BATCH):
            r = client.post(
                "/topics/idem/partitions/0/batches", content=batch(pid, seq), headers=OCTET
            )
            assert r.status_code == 200 and r.json()["batches"][0]["duplicate"] is False, r.text
        # Producer ids are never handed out twice, even across a kill.
        assert client.post("/producers", json={}).json()["producer_id"] > pid

        records = stored(client, "idem")
        last = gap + RECORDS_PER_BATCH
        assert [v for _, v in records] == [f"r{i}" for i in range(last)]
        assert [o for o, _ in records] == list(range(last))
        for seq, (first, _) in producer.acked.items():
            assert records[first] == (first, f"r{seq}")


@pytest.mark.parametrize("stop", ["kill", "sigterm"])
def test_every_record_exactly_once_across_a_restart(new_broker: BrokerFactory, stop: str) -> None:
    # Small segments: the state also has to come back across rolls and roll snapshots.
    broker = new_broker(env={"LOGBUS_LOG_DEFAULTS": '{"segment.bytes": 4096}'}).start()
    produce_until_stopped(broker, stop)
    segments = sorted(p.name for p in (broker.data_dir / "idem-0").glob("*.log"))
    snapshots = sorted(p.name for p in (broker.data_dir / "idem-0").glob("*.snapshot"))
    assert len(segments) >= 3 and snapshots
