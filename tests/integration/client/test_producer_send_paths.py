"""Producer.send through the compiled path and the pure-Python one, against a real broker.

Both paths must deliver every record once, in send order per partition (per
key), with its delivery callback called exactly once with the record's
metadata; idempotent sequence numbers are checked by the broker on every batch.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from client_helpers import raw_batches

from app.client import Consumer, Producer, RecordMetadata, TopicPartition
from app.client.producer import _speedups
from app.common.partitioner import partition_for_key

MakeTopic = Callable[..., str]


@pytest.fixture(params=["compiled", "pure"])
def send_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Which path producers made in the test use: the C extension, or the pure-Python one
    (what a machine without the extension runs)."""
    if request.param == "compiled":
        if not _speedups.COMPILED:
            pytest.skip("the C extension is not built here")
    else:
        monkeypatch.setattr(_speedups, "FastSend", None)
        monkeypatch.setattr(_speedups, "RecordBuffer", _speedups.PyRecordBuffer)
        monkeypatch.setattr(_speedups, "Lock", threading.Lock)
    yield request.param


def consume(url: str, topic: str, partitions: int) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {p: [] for p in range(partitions)}
    with Consumer(url, auto_offset_reset="earliest", fetch_max_wait_ms=0) as c:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        total = sum(c.end_offsets(tps).values())
        seen = 0
        while seen < total:
            records = c.poll(timeout_ms=5000)
            assert records, f"stalled at {seen} of {total}"
            for r in records:
                out[r.partition].append(r)
            seen += len(records)
    return out


def test_keyed_sends_with_callbacks_from_threads_arrive_once_in_order(
    broker_url: str, make_topic: MakeTopic, send_path: str
) -> None:
    partitions, threads, per_thread = 4, 3, 6000
    topic = make_topic(partitions)
    calls: dict[bytes, list[RecordMetadata]] = {}
    errors: list[BaseException | None] = []
    lock = threading.Lock()

    def on_delivery(value: bytes) -> Callable[[RecordMetadata | None, BaseException | None], None]:
        def done(meta: RecordMetadata | None, exc: BaseException | None) -> None:
            with lock:
                if meta is None:
                    errors.append(exc)
                else:
                    calls.setdefault(value, []).append(meta)

        return done

    # Small batches, so records cross many batches, requests and (with idempotence)
    # sequence numbers; linger 0 so requests go out while records are still being sent.
    with Producer(broker_url, batch_size=4096, linger_ms=0) as p:
        assert ("send" in vars(p)) == (send_path == "compiled")  # the C send, or the method

        def run(t: int) -> None:
            for i in range(per_thread):
                value = b"t%d-%06d" % (t, i)
                key = b"key-%d-%d" % (t, i % 50)
                p.send(topic, value, key=key, on_delivery=on_delivery(value))

        workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        # Null keys and explicit partitions mixed in: the Python send's cases.
        tail = [p.send(topic, b"tail-%d" % i, partition=i % partitions) for i in range(20)]
        p.flush()
        assert [f.result(timeout=10).partition for f in tail] == [i % 4 for i in range(20)]
    total = threads * per_thread
    assert errors == []
    # Each callback exactly once, with its own record's metadata.
    assert len(calls) == total and all(len(m) == 1 for m in calls.values())
    got = consume(broker_url, topic, partitions)
    assert sum(len(v) for v in got.values()) == total + 20
    by_value = {r.value: r for rs in got.values() for r in rs}
    for value, (meta,) in calls.items():
        r = by_value[value]
        assert (meta.topic, meta.partition, meta.offset) == (topic, r.partition, r.offset)
        assert meta.timestamp == r.timestamp
        assert r.partition == partition_for_key(r.key, partitions)
    # Per key (so per partition and per sending thread): in send order.
    for records in got.values():
        last: dict[bytes, bytes] = {}
        for r in records:
            if r.key is None:
                continue
            assert r.value > last.get(r.key, b""), (r.key, r.value)
            last[r.key] = r.value
    # Idempotence: every batch carries the producer id and gapless sequences per partition.
    for part in range(partitions):
        headers = raw_batches(broker_url, topic, part)
        assert headers and all(h.producer_id >= 0 for h in headers)
        seqs = [(h.base_sequence, h.record_count) for h in headers]
        for (seq, count), (nxt, _) in itertools.pairwise(seqs):
            assert nxt == seq + count


def test_null_key_sends_fill_sticky_batches(
    broker_url: str, make_topic: MakeTopic, send_path: str
) -> None:
    topic = make_topic(3)
    seen: list[int] = []
    with Producer(broker_url, batch_size=2048, linger_ms=1) as p:
        futures = [
            p.send(topic, b"%05d" % i, on_delivery=lambda m, e: seen.append(1)) for i in range(3000)
        ]
        p.flush()
        metas = [f.result(timeout=10) for f in futures]
    assert len(seen) == 3000
    got = consume(broker_url, topic, 3)
    by_value = {r.value: r for rs in got.values() for r in rs}
    assert len(by_value) == 3000
    for i, meta in enumerate(metas):
        r = by_value[b"%05d" % i]
        assert (meta.partition, meta.offset) == (r.partition, r.offset)
    for records in got.values():
        values = [r.value for r in records]
        assert values == sorted(values)  # one sending thread: in order on each partition
