"""Produce and fetch round trips: formats, placement, offsets, raw batches."""

from __future__ import annotations

import base64
import itertools
import time
from pathlib import Path

import pytest
from api_helpers import create_topic, fetch, make_settings, produce
from kafka.partitioner.default import murmur2 as kafka_murmur2
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from starlette.testclient import TestClient

from app.api import create_app
from app.common.batch import HEADER_SIZE, build_batch, iter_headers, read_header

OCTET = {"Accept": "application/octet-stream"}


def kafka_partition(key: bytes, n: int) -> int:
    return (kafka_murmur2(key) & 0x7FFFFFFF) % n


def test_json_round_trip(client: TestClient) -> None:
    values = [{"a": 1, "b": [1, 2.5, None]}, "text", 42, True, None, [], {"nested": {"x": "y"}}]
    records = [
        {"key": {"id": i}, "value": v, "headers": {"h": str(i)}} for i, v in enumerate(values)
    ]
    offsets = produce(client, "j", records)
    assert [o["offset"] for o in offsets] == list(range(len(values)))
    body = fetch(client, "j", 0, 0)
    assert [r["value"] for r in body["records"]] == values
    assert [r["key"] for r in body["records"]] == [{"id": i} for i in range(len(values))]
    assert [r["headers"] for r in body["records"]] == [
        [{"key": "h", "value": str(i)}] for i in range(len(values))
    ]
    assert body["next_offset"] == len(values)
    assert body["high_watermark"] == len(values)
    assert body["log_start_offset"] == 0
    assert (body["topic"], body["partition"]) == ("j", 0)


def test_string_and_binary_round_trip(client: TestClient) -> None:
    raw = bytes(range(256))
    produce(
        client,
        "s",
        [{"key": "clé", "value": "ünïcode ✓"}, {"key": None, "value": None}],
        key_format="string",
        value_format="string",
    )
    produce(
        client,
        "s",
        [{"key": base64.b64encode(b"\x00\xff").decode(), "value": base64.b64encode(raw).decode()}],
        key_format="binary",
        value_format="binary",
    )
    as_string = fetch(client, "s", 0, 0, key_format="string", value_format="string")["records"]
    assert [(r["key"], r["value"]) for r in as_string[:2]] == [("clé", "ünïcode ✓"), (None, None)]
    as_binary = fetch(client, "s", 0, 0, key_format="binary", value_format="binary")["records"]
    assert base64.b64decode(as_binary[2]["value"]) == raw
    assert base64.b64decode(as_binary[2]["key"]) == b"\x00\xff"
    assert base64.b64decode(as_binary[0]["value"]) == "ünïcode ✓".encode()
    # json rendering of bytes that are not JSON falls back to a string.
    as_json = fetch(client, "s", 0, 0)["records"]
    assert as_json[0]["value"] == "ünïcode ✓"
    assert isinstance(as_json[2]["value"], str)


def test_headers_as_list_keep_order_and_duplicates(client: TestClient) -> None:
    headers = [{"key": "a", "value": "1"}, {"key": "a", "value": "2"}, {"key": "n", "value": None}]
    produce(client, "h", [{"value": 1, "headers": headers}])
    assert fetch(client, "h", 0, 0)["records"][0]["headers"] == headers


def test_offsets_in_request_order_across_partitions(client: TestClient) -> None:
    create_topic(client, "multi", partitions=4)
    keys = [f"key-{i}" for i in range(40)]
    offsets = produce(client, "multi", [{"key": k, "value": i} for i, k in enumerate(keys)])
    assert len(offsets) == 40
    seen: dict[int, int] = {}
    for k, o in zip(keys, offsets, strict=True):
        assert o["partition"] == kafka_partition(f'"{k}"'.encode(), 4)  # json key bytes
        # Offsets within one partition grow in request order, without gaps.
        assert o["offset"] == seen.get(o["partition"], 0)
        seen[o["partition"]] = o["offset"] + 1
    for p, count in seen.items():
        records = fetch(client, "multi", p, 0)["records"]
        assert [r["offset"] for r in records] == list(range(count))
        for r in records:
            assert kafka_partition(f'"{r["key"]}"'.encode(), 4) == p


def test_murmur2_placement_matches_kafka_for_string_keys(client: TestClient) -> None:
    create_topic(client, "m", partitions=7)
    keys = ["21", "foobar", "a-little-bit-long-string", "abc", "user-1", "", "ключ"]
    offsets = produce(client, "m", [{"key": k, "value": k} for k in keys], key_format="string")
    for k, o in zip(keys, offsets, strict=True):
        assert o["partition"] == kafka_partition(k.encode(), 7), k


def test_one_batch_per_partition_per_request(client: TestClient) -> None:
    create_topic(client, "b", partitions=3)
    produce(client, "b", [{"key": f"k{i}", "value": i} for i in range(30)], key_format="string")
    for p in range(3):
        r = client.get(f"/topics/b/partitions/{p}/records", params={"offset": 0}, headers=OCTET)
        batches = list(iter_headers(r.content))
        assert len(batches) <= 1


def test_sticky_partitioner_for_null_keys(client: TestClient) -> None:
    create_topic(client, "sticky", partitions=5)
    chosen = []
    for _ in range(12):
        offsets = produce(client, "sticky", [{"value": i} for i in range(10)])
        partitions = {o["partition"] for o in offsets}
        assert len(partitions) == 1  # the whole request sticks to one partition
        chosen.append(partitions.pop())
    assert all(a != b for a, b in itertools.pairwise(chosen))
    assert len(set(chosen)) >= 2


def test_explicit_partition_and_partition_endpoint(client: TestClient) -> None:
    create_topic(client, "e", partitions=3)
    offsets = produce(client, "e", [{"key": "x", "value": 1, "partition": 2}])
    assert offsets == [{"partition": 2, "offset": 0, "timestamp": offsets[0]["timestamp"]}]
    r = client.post(
        "/topics/e/partitions/1/records",
        json={"records": [{"key": "x", "value": 1}, {"value": 2, "partition": 1}]},
    )
    assert r.status_code == 200, r.text
    assert [(o["partition"], o["offset"]) for o in r.json()["offsets"]] == [(1, 0), (1, 1)]


def test_timestamps(client: TestClient) -> None:
    before = int(time.time() * 1000)
    offsets = produce(client, "ts", [{"value": 1}, {"value": 2, "timestamp": 1_600_000_000_000}])
    after = int(time.time() * 1000)
    assert before <= offsets[0]["timestamp"] <= after
    assert offsets[1]["timestamp"] == 1_600_000_000_000
    records = fetch(client, "ts", 0, 0)["records"]
    assert [r["timestamp"] for r in records] == [o["timestamp"] for o in offsets]


def test_log_append_time_topic(client: TestClient) -> None:
    create_topic(client, "lat", **{"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    offsets = produce(client, "lat", [{"value": 1, "timestamp": 5}])
    assert offsets[0]["timestamp"] >= before


def test_acks_zero_answers_204_after_append(client: TestClient) -> None:
    r = client.post("/topics/a0/records?acks=0", json={"records": [{"value": 1}]})
    assert r.status_code == 204
    assert r.content == b""
    assert fetch(client, "a0", 0, 0)["records"][0]["value"] == 1
    for acks in ("1", "all", "-1"):
        r = client.post(f"/topics/a0/records?acks={acks}", json={"records": [{"value": 1}]})
        assert r.status_code == 200


def test_fetch_from_the_middle_of_a_batch(client: TestClient) -> None:
    produce(client, "mid", [{"value": i} for i in range(10)])
    body = fetch(client, "mid", 0, 4)
    assert [r["offset"] for r in body["records"]] == list(range(4, 10))
    assert body["next_offset"] == 10
    empty = fetch(client, "mid", 0, 10)
    assert empty["records"] == []
    assert empty["next_offset"] == 10


def test_fetch_max_bytes_returns_whole_batches(client: TestClient) -> None:
    for i in range(5):
        produce(client, "mb", [{"value": "x" * 1000, "key": i}])
    body = fetch(client, "mb", 0, 0, max_bytes=1)
    # At least one whole batch even when it is larger than max_bytes.
    assert [r["offset"] for r in body["records"]] == [0]
    assert body["next_offset"] == 1
    body = fetch(client, "mb", 0, 0, max_bytes=2500)
    assert 1 <= len(body["records"]) <= 3


def _kafka_python_batch(n: int, compression: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(n):
        builder.append(
            i, 1_700_000_000_000 + i, f"k{i}".encode(), f"value-{i}".encode(), [("h", b"v")]
        )
    return bytes(builder.build())


def _strip_stamps(batch: bytes) -> bytes:
    # baseOffset (0..8) and partitionLeaderEpoch (12..16) are stamped by the broker.
    return batch[8:12] + batch[16:]


@pytest.mark.parametrize("compression", [0, 1])  # none, gzip
def test_binary_produce_and_raw_fetch_are_byte_identical(
    client: TestClient, compression: int
) -> None:
    create_topic(client, "raw")
    produce(client, "raw", [{"value": "before"}])  # so the batches get non-zero offsets
    first = _kafka_python_batch(3, compression)
    second = _kafka_python_batch(2, compression)
    r = client.post(
        "/topics/raw/partitions/0/batches",
        content=first + second,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["batches"] == [
        {"base_offset": 1, "last_offset": 3, "record_count": 3, "duplicate": False},
        {"base_offset": 4, "last_offset": 5, "record_count": 2, "duplicate": False},
    ]
    assert body["log_append_time"] == -1
    assert (body["topic"], body["partition"]) == ("raw", 0)

    r = client.get("/topics/raw/partitions/0/records", params={"offset": 1}, headers=OCTET)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["logbus-high-watermark"] == "6"
    assert r.headers["logbus-log-start-offset"] == "0"
    assert r.headers["logbus-log-end-offset"] == "6"
    batches = [r.content[pos : pos + h.size] for pos, h in iter_headers(r.content)]
    assert len(batches) == 2
    assert _strip_stamps(batches[0]) == _strip_stamps(first)
    assert _strip_stamps(batches[1]) == _strip_stamps(second)
    assert read_header(batches[0]).base_offset == 1
    assert read_header(batches[1]).base_offset == 4
    # kafka-python reads what we stored, offsets included.
    decoded = [(rec.offset, rec.key, rec.value) for rec in DefaultRecordBatch(batches[0])]
    assert decoded == [(1, b"k0", b"value-0"), (2, b"k1", b"value-1"), (3, b"k2", b"value-2")]
    # And the JSON fetch decodes the same records (decompressing when needed).
    records = fetch(client, "raw", 0, 2, key_format="string", value_format="string")["records"]
    assert [(r["offset"], r["key"], r["value"]) for r in records] == [
        (2, "k1", "value-1"),
        (3, "k2", "value-2"),
        (4, "k0", "value-0"),
        (5, "k1", "value-1"),
    ]
    assert records[0]["headers"] == [{"key": "h", "value": "v"}]
    assert records[0]["timestamp"] == 1_700_000_000_001


def test_json_produce_is_readable_by_kafka_python(client: TestClient) -> None:
    produce(client, "kp", [{"key": "a", "value": "b"}], key_format="string", value_format="string")
    r = client.get("/topics/kp/partitions/0/records", params={"offset": 0}, headers=OCTET)
    (rec,) = list(DefaultRecordBatch(r.content))
    assert (rec.offset, rec.key, rec.value) == (0, b"a", b"b")


def test_binary_produce_acks_zero(client: TestClient) -> None:
    r = client.post(
        "/topics/raw0/partitions/0/batches?acks=0",
        content=build_batch([(b"k", b"v")]),
        headers={"content-type": "application/octet-stream"},
    )
    assert r.status_code == 204
    assert fetch(client, "raw0", 0, 0)["records"][0]["value"] == "v"


def test_empty_raw_fetch_at_end(client: TestClient) -> None:
    produce(client, "end", [{"value": 1}])
    r = client.get(
        "/topics/end/partitions/0/records", params={"offset": 1, "max_wait_ms": 0}, headers=OCTET
    )
    assert r.status_code == 200
    assert r.content == b""
    assert len(r.content) < HEADER_SIZE


def test_accept_negotiation(client: TestClient) -> None:
    produce(client, "acc", [{"value": 1}])
    url = "/topics/acc/partitions/0/records?offset=0"
    r = client.get(url, headers={"Accept": "application/octet-stream;q=0.5, application/json"})
    assert r.headers["content-type"] == "application/json"
    r = client.get(url, headers={"Accept": "text/html, */*;q=0.1"})
    assert r.headers["content-type"] == "application/json"
    r = client.get(url, headers={"Accept": "text/html"})
    assert r.status_code == 406
    assert r.json()["error_code"] == "INVALID_REQUEST"


def test_large_json_fetch_is_decoded_off_loop(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, max_request_bytes=4 * 1024 * 1024)
    with TestClient(create_app(settings)) as client:
        value = "v" * 1000
        for _ in range(4):
            produce(client, "big", [{"value": value} for _ in range(200)])
        body = fetch(client, "big", 0, 0, max_bytes=4 * 1024 * 1024)
        assert len(body["records"]) == 800
        assert body["next_offset"] == 800
