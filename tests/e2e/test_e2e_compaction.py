"""Compaction against a real broker: a model of every write, kill -9 between rounds, and
readers racing the cleaner.

The model test writes keyed records (plain batches, idempotent producers' batches,
tombstones, headers) to a compacted topic round after round, kills the broker (-9, or
SIGTERM now and then) between rounds, and after every round reads the whole log and
checks it against the model:

* every record read is one that was written at that offset (key, value, headers);
* nothing superseded comes back: below the cleaner's checkpoint (everything under it was
  compacted, read from ``cleaner-offset-checkpoint`` before the read), no key shows a
  value that a later write below the checkpoint replaced or deleted;
* the latest value of every key is there, and so is a latest tombstone until
  ``delete.retention.ms`` has passed since it was written;
* idempotent producers go on after cleaning and restarts: their next batch is in
  sequence, and a retry of their last batch is answered as a duplicate.

At the end tombstones older than ``delete.retention.ms`` must go. A fixed seed and a
fresh one (printed) run each time.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from conftest import Broker, BrokerFactory

from app.common.batch import BatchBuilder, compute_crc, decode_records, iter_headers

OCTET = {"content-type": "application/octet-stream"}
ACCEPT_OCTET = {"accept": "application/octet-stream"}
TOPIC = "model"
DELETE_RETENTION_MS = 1500
# Room for the clocks of the test and of the cleaner's pass (taken just before its snapshot).
CLOCK_SLACK_MS = 300
ENV = {"LOGBUS_LOG_CLEANER_BACKOFF_MS": "50"}
ROUNDS = 4


@dataclass(frozen=True)
class Write:
    offset: int
    key: bytes
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    sent_ms: int  # taken before the request: no later than the broker's append time


@dataclass
class Producer:
    pid: int
    seq: int = 0
    last: tuple[bytes, int, int] | None = None  # the last batch sent and its offsets


@dataclass
class Model:
    writes: dict[int, Write] = field(default_factory=dict)
    by_key: dict[bytes, list[Write]] = field(default_factory=dict)

    def add(self, write: Write) -> None:
        assert write.offset not in self.writes
        self.writes[write.offset] = write
        self.by_key.setdefault(write.key, []).append(write)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def first_dirty(broker: Broker) -> int:
    """Everything below this offset was compacted (the cleaner's checkpoint), 0 if none."""
    path = broker.data_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return 0
    for line in path.read_text().splitlines()[2:]:
        topic, partition, offset = line.split()
        if (topic, partition) == (TOPIC, "0"):
            return int(offset)
    return 0


def read_all(client: httpx.Client) -> Iterator[tuple[int, bytes | None, bytes | None, tuple]]:
    """Every record of the partition, through binary fetches; CRCs checked."""
    offset = 0
    while True:
        r = client.get(
            f"/topics/{TOPIC}/partitions/0/records",
            params={"offset": offset, "max_bytes": 256 << 10, "max_wait_ms": 0},
            headers=ACCEPT_OCTET,
        )
        if r.status_code == 416:
            offset = r.json()["log_start_offset"]
            continue
        assert r.status_code == 200, r.text
        data = r.content
        end = int(r.headers["Logbus-High-Watermark"])
        next_offset = offset
        for pos, header in iter_headers(data):
            assert compute_crc(data, pos, header.size) == header.crc, "a damaged batch was served"
            next_offset = max(next_offset, header.next_offset)
        for rec in decode_records(data, min_offset=offset):
            yield rec.offset, rec.key, rec.value, tuple(rec.headers)
        if next_offset >= end or next_offset == offset:
            return
        offset = next_offset


class Writer:
    """Writes random keyed batches and records them in the model."""

    def __init__(self, rng: random.Random, model: Model, client: httpx.Client) -> None:
        self.rng = rng
        self.model = model
        self.client = client
        self.n = 0
        self.producers = [
            Producer(client.post("/producers", json={}).json()["producer_id"]) for _ in range(3)
        ]

    def batch(self, producer: Producer | None, keys: list[bytes], tombstone_rate: float) -> None:
        pairs: list[tuple[bytes, bytes | None, tuple[tuple[str, bytes | None], ...]]] = []
        for key in keys:
            self.n += 1
            value = None if self.rng.random() < tombstone_rate else b"%s=%d" % (key, self.n)
            pairs.append((key, value, (("w", b"%d" % self.n),)))
        if producer is None:
            builder = BatchBuilder()
        else:
            builder = BatchBuilder(
                producer_id=producer.pid, producer_epoch=0, base_sequence=producer.seq
            )
        for key, value, headers in pairs:
            builder.append(value, key, headers=list(headers))
        body = builder.build()
        sent = now_ms()
        r = self.client.post(f"/topics/{TOPIC}/partitions/0/batches", content=body, headers=OCTET)
        assert r.status_code == 200, r.text
        (answer,) = r.json()["batches"]
        assert not answer["duplicate"]
        base = answer["base_offset"]
        for i, (key, value, headers) in enumerate(pairs):
            self.model.add(Write(base + i, key, value, headers, sent))
        if producer is not None:
            producer.seq += len(pairs)
            producer.last = (body, base, answer["last_offset"])

    def round(self, keys: list[bytes], batches: int) -> None:
        active = self.rng.sample(self.producers, self.rng.randint(1, len(self.producers)))
        for _ in range(batches):
            chosen = [self.rng.choice(keys) for _ in range(self.rng.randint(1, 4))]
            producer = self.rng.choice([None, *active])
            self.batch(producer, chosen, tombstone_rate=0.2)

    def fillers(self) -> None:
        """Records of keys of their own, enough to roll the active segment twice."""
        for _ in range(12):
            self.batch(None, [b"filler:%d" % self.rng.randrange(3)] * 4, tombstone_rate=0)

    def retry_last(self) -> None:
        """A retry of each producer's last batch gets the original offsets, nothing written."""
        for producer in self.producers:
            if producer.last is None:
                continue
            body, base, last = producer.last
            r = self.client.post(
                f"/topics/{TOPIC}/partitions/0/batches", content=body, headers=OCTET
            )
            assert r.status_code == 200, r.text
            (answer,) = r.json()["batches"]
            assert answer["duplicate"], f"producer {producer.pid}'s retry was written again"
            assert (answer["base_offset"], answer["last_offset"]) == (base, last)


def check(model: Model, client: httpx.Client, broker: Broker, where: str) -> tuple[int, int]:
    """The invariants of the module docstring; returns (checkpoint, tombstones seen)."""
    clean_below = first_dirty(broker)
    started = now_ms()
    seen = list(read_all(client))
    offsets = [o for o, *_ in seen]
    assert offsets == sorted(set(offsets)), f"{where}: offsets repeat or go back"
    got = {o: (k, v, h) for o, k, v, h in seen}
    for offset, (key, value, headers) in got.items():
        write = model.writes.get(offset)
        assert write is not None, f"{where}: offset {offset} holds a record never written"
        assert (key, value, headers) == (write.key, write.value, write.headers), (
            f"{where}: offset {offset} holds {key!r}={value!r}, written {write}"
        )
    tombstones = 0
    for key, history in model.by_key.items():
        latest = history[-1]
        below = [w for w in history if w.offset < clean_below]
        # Superseded below the checkpoint: only the last write below it may be left.
        for w in below[:-1]:
            assert w.offset not in got, (
                f"{where}: {key!r}={w.value!r} at {w.offset} is back although "
                f"{below[-1].value!r} at {below[-1].offset} replaced it (clean below {clean_below})"
            )
        if latest.value is not None:
            assert latest.offset in got, f"{where}: the latest value of {key!r} is lost: {latest}"
        elif started < latest.sent_ms + DELETE_RETENTION_MS - CLOCK_SLACK_MS:
            assert latest.offset in got, f"{where}: {key!r}'s tombstone went too early: {latest}"
        tombstones += latest.value is None and latest.offset in got
    return clean_below, tombstones


def wait_for_cleaning(broker: Broker, target: int, timeout_s: float = 15.0) -> int:
    deadline = time.monotonic() + timeout_s
    while (reached := first_dirty(broker)) < target and time.monotonic() < deadline:
        time.sleep(0.05)
    return reached


@pytest.mark.slow
@pytest.mark.parametrize("seed", [20, secrets.randbelow(1 << 30)], ids=["fixed", "fresh"])
def test_compaction_against_a_model_with_kills_between_rounds(
    new_broker: BrokerFactory, seed: int
) -> None:
    print(f"seed={seed}")
    rng = random.Random(seed)
    broker = new_broker(env=ENV).start()
    model = Model()
    keys = [b"user:%d" % i for i in range(30)]
    with broker.client() as client:
        r = client.post(
            "/topics",
            json={
                "name": TOPIC,
                "partitions": 1,
                "configs": {
                    "cleanup.policy": "compact",
                    "segment.bytes": 1024,
                    "delete.retention.ms": DELETE_RETENTION_MS,
                    "min.cleanable.dirty.ratio": 0.01,
                    "file.delete.delay.ms": 0,
                },
            },
        )
        assert r.status_code == 201, r.text
        writer = Writer(rng, model, client)
    for round_ in range(ROUNDS):
        with broker.client() as client:
            writer.client = client
            writer.round(keys, batches=30)
            # Fillers of keys of their own roll the segments over the round's writes.
            written = max(model.writes)
            writer.fillers()
            t0 = time.monotonic()
            reached = wait_for_cleaning(broker, written + 1)
            print(
                f"round {round_}: cleaned below {reached} of {written} in {time.monotonic() - t0:.1f}s"
            )
            check(model, client, broker, f"round {round_} of seed {seed}")
            writer.retry_last()
        t0 = time.monotonic()
        if rng.random() < 0.75:
            broker.kill()
        else:
            assert broker.stop() == 0
        broker.start()
        print(f"restart in {time.monotonic() - t0:.1f}s")
        with broker.client() as client:
            check(model, client, broker, f"after the restart of round {round_} of seed {seed}")
            writer.client = client
            writer.retry_last()
    # Tombstones go delete.retention.ms after they were first cleaned: no later than a
    # few passes after that.
    with broker.client() as client:
        writer.client = client
        written = max(model.writes)
        writer.fillers()
        deadline = time.monotonic() + 20
        t0 = time.monotonic()
        while True:
            clean_below, tombstones = check(model, client, broker, f"at the end of seed {seed}")
            if clean_below > written and tombstones == 0:
                break
            assert time.monotonic() < deadline, (
                f"{tombstones} expired tombstone(s) stay; cleaned below {clean_below} of {written}"
            )
            time.sleep(0.2)
        print(f"tombstones gone in {time.monotonic() - t0:.1f}s")


@pytest.mark.slow
def test_http_readers_racing_the_cleaner_with_no_delete_delay(new_broker: BrokerFactory) -> None:
    """Issue 20.2 through the server's sendfile path: 0 server errors, 0 broken answers."""
    broker = new_broker(env={"LOGBUS_LOG_CLEANER_BACKOFF_MS": "10"}).start()
    with broker.client() as client:
        r = client.post(
            "/topics",
            json={
                "name": "race",
                "partitions": 1,
                "configs": {
                    "cleanup.policy": "compact",
                    "segment.bytes": 4096,
                    "min.cleanable.dirty.ratio": 0.01,
                    "file.delete.delay.ms": 0,
                },
            },
        )
        assert r.status_code == 201, r.text
    stop = threading.Event()
    errors: list[str] = []
    fetches = [0]
    lock = threading.Lock()
    end = [0]

    def write() -> None:
        rng = random.Random(7)
        n = 0
        with broker.client() as client:
            while not stop.is_set():
                builder = BatchBuilder()
                for _ in range(4):
                    n += 1
                    key = b"key-%03d" % rng.randrange(100)
                    builder.append(key + b"=%d" % n + b"." * 60, key)
                r = client.post(
                    "/topics/race/partitions/0/batches", content=builder.build(), headers=OCTET
                )
                if r.status_code != 200:
                    errors.append(f"produce: {r.status_code} {r.text}")
                    stop.set()
                    return
                end[0] = r.json()["batches"][0]["last_offset"] + 1

    def read(index: int) -> None:
        rng = random.Random(index)
        with broker.client() as client:
            while not stop.is_set():
                if end[0] == 0:
                    time.sleep(0.01)
                    continue
                offset = rng.randrange(end[0])
                try:
                    r = client.get(
                        "/topics/race/partitions/0/records",
                        params={
                            "offset": offset,
                            "max_bytes": rng.choice((512, 8192, 65536)),
                            "max_wait_ms": 0,
                        },
                        headers=ACCEPT_OCTET,
                    )
                except httpx.TransportError as e:
                    errors.append(f"reader {index} at {offset}: {e!r}")
                    stop.set()
                    return
                if r.status_code == 416:
                    continue
                data = r.content
                problem = None if r.status_code == 200 else f"{r.status_code} {r.text[:200]}"
                for pos, header in iter_headers(data):
                    if problem is None and compute_crc(data, pos, header.size) != header.crc:
                        problem = "CRC mismatch: another file's bytes"
                for rec in decode_records(data, min_offset=offset) if problem is None else ():
                    if not (rec.value or b"").startswith((rec.key or b"") + b"="):
                        problem = f"a record never written: {rec}"
                if problem is not None:
                    errors.append(f"reader {index} at {offset}: {problem}")
                    stop.set()
                    return
                with lock:
                    fetches[0] += 1
                    # Enough once the cleaner has completed a pass under the readers too.
                    if fetches[0] >= 10_000 and (
                        first_dirty_of(broker, "race") > 0 or fetches[0] >= 50_000
                    ):
                        stop.set()

    threads = [
        threading.Thread(target=write),
        *(threading.Thread(target=read, args=(i,)) for i in range(8)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert fetches[0] >= 10_000
    assert "Traceback" not in broker.log()
    assert first_dirty_of(broker, "race") > 0, "the cleaner never ran"


def first_dirty_of(broker: Broker, topic: str) -> int:
    path: Path = broker.data_dir / "cleaner-offset-checkpoint"
    for line in path.read_text().splitlines()[2:] if path.exists() else []:
        name, partition, offset = line.split()
        if (name, partition) == (topic, "0"):
            return int(offset)
    return 0
