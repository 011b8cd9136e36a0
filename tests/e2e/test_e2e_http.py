"""Produce and fetch over real HTTP; binary fetches leave through os.sendfile.

The tests on a default broker share one (``shared_broker``), each on topics of its own
names; the zero-copy counters are compared within one test, before and after."""

from __future__ import annotations

from pathlib import Path

import httpx
from conftest import Broker, BrokerFactory
from kafka.record import MemoryRecords

from app.common.batch import build_batch

OCTET = {"accept": "application/octet-stream"}
ZEROCOPY = "logbus_zerocopy_bytes_total"
COPIED = "logbus_fetch_copy_bytes_total"


def _segment_bytes(broker: Broker, topic: str, partition: int) -> bytes:
    """Every byte of the partition's segment files, in offset order."""
    [directory] = [p for p in broker.data_dir.rglob(f"{topic}-{partition}") if p.is_dir()]
    return b"".join(path.read_bytes() for path in sorted(Path(directory).glob("*.log")))


def _decode(raw: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record, by kafka-python's codec: an independent check."""
    records = MemoryRecords(raw)  # type: ignore[no-untyped-call]
    out = []
    while records.has_next():  # type: ignore[no-untyped-call]
        batch = records.next_batch()  # type: ignore[no-untyped-call]
        for record in batch:
            out.append((record.offset, record.key, record.value))
    return out


def _fill(client: httpx.Client, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """JSON and binary produce into partition 0; what was sent, with the offsets given."""
    sent: list[tuple[int, bytes | None, bytes | None]] = []
    for round_ in range(3):
        records = [
            {"key": f"k{round_}-{i}", "value": f"v{round_}-{i}-" + "x" * i} for i in range(400)
        ]
        r = client.post(
            f"/topics/{topic}/partitions/0/records",
            json={"records": records, "key_format": "string", "value_format": "string"},
        )
        assert r.status_code == 200, r.text
        for entry, record in zip(r.json()["offsets"], records, strict=True):
            sent.append((entry["offset"], record["key"].encode(), record["value"].encode()))
        pairs = [(None, f"bin{round_}-{i}".encode() * 30) for i in range(300)]
        r = client.post(
            f"/topics/{topic}/partitions/0/batches",
            content=build_batch(pairs),
            headers={"content-type": "application/octet-stream"},
        )
        assert r.status_code == 200, r.text
        base = r.json()["batches"][0]["base_offset"]
        sent += [(base + i, key, value) for i, (key, value) in enumerate(pairs)]
    return sent


def test_binary_fetch_is_zero_copy_exact_and_keeps_the_connection(shared_broker: Broker) -> None:
    broker = shared_broker
    with broker.client() as client:
        assert client.post("/topics", json={"name": "zc", "partitions": 1}).status_code == 201
        sent = _fill(client, "zc")
        on_disk = _segment_bytes(broker, "zc", 0)

        before = broker.metric(ZEROCOPY)
        copied = broker.metric(COPIED)
        peers = set()
        fetched = 0
        body = b""
        offset = 0
        # Small max_bytes: many zero-copy responses back to back on one connection.
        while offset < len(sent):
            r = client.get(
                "/topics/zc/partitions/0/records",
                params={"offset": offset, "max_bytes": 20_000},
                headers=OCTET,
            )
            assert r.status_code == 200, r.text
            assert r.headers["content-type"] == "application/octet-stream"
            assert int(r.headers["content-length"]) == len(r.content) > 0
            peers.add(r.extensions["network_stream"].get_extra_info("client_addr"))
            fetched += len(r.content)
            body += r.content
            offset = _decode(r.content)[-1][0] + 1
            # An ordinary JSON answer on the same connection between zero-copy ones.
            assert client.get("/topics/zc").status_code == 200

        assert broker.metric(ZEROCOPY) - before == fetched
        assert broker.metric(COPIED) == copied
        assert len(peers) == 1, f"keep-alive broken: {peers}"

    # The fetched bytes are the segment file, byte for byte, and decode to what was sent.
    assert body == on_disk
    assert _decode(body) == sent
    assert [o for o, _, _ in sent] == list(range(len(sent)))


def test_json_fetch_over_http(shared_broker: Broker) -> None:
    broker = shared_broker
    with broker.client() as client:
        r = client.post(
            "/topics/j/records",
            json={"records": [{"value": {"n": i}} for i in range(5)]},
        )
        assert r.status_code == 200, r.text
        r = client.get("/topics/j/partitions/0/records", params={"offset": 2})
        assert [rec["value"] for rec in r.json()["records"]] == [{"n": 2}, {"n": 3}, {"n": 4}]
        assert r.json()["next_offset"] == 5


def test_fallback_without_zerocopy_sends_the_same_bytes(new_broker: BrokerFactory) -> None:
    broker = new_broker(env={"LOGBUS_ZEROCOPY": "0"}).start()
    with broker.client() as client:
        sent = _fill(client, "fb")
        r = client.get(
            "/topics/fb/partitions/0/records",
            params={"offset": 0, "max_bytes": 10_000_000},
            headers=OCTET,
        )
        assert r.status_code == 200
        assert r.content == _segment_bytes(broker, "fb", 0)
        assert _decode(r.content) == sent
    assert broker.metric(ZEROCOPY) == 0
    assert broker.metric(COPIED) == len(r.content)


def test_empty_and_out_of_range_binary_fetches(shared_broker: Broker) -> None:
    broker = shared_broker
    with broker.client() as client:
        client.post("/topics", json={"name": "e", "partitions": 1})
        r = client.get(
            "/topics/e/partitions/0/records",
            params={"offset": 0, "max_wait_ms": 0},
            headers=OCTET,
        )
        assert r.status_code == 200
        assert r.content == b""
        r = client.get("/topics/e/partitions/0/records", params={"offset": 5}, headers=OCTET)
        assert r.status_code == 416
        assert r.json()["error_code"] == "OFFSET_OUT_OF_RANGE"
