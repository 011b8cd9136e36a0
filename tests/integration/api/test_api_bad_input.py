"""Bad input gets the exact status and Kafka error name, never a 5xx, and changes nothing."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from api_helpers import MAX_REQUEST_BYTES, create_topic, make_settings, produce
from starlette.testclient import TestClient
from starlette.types import Message, Receive

from app.api import create_app
from app.api.util import JSON, OCTET_STREAM
from app.common.batch import build_batch, compute_crc

GOOD_BATCH = build_batch([(b"k", b"v"), (b"k2", b"v2")])


def _corrupt_crc(batch: bytes) -> bytes:
    data = bytearray(batch)
    data[-1] ^= 0xFF  # a payload byte under the CRC
    return bytes(data)


def _magic(batch: bytes, magic: int) -> bytes:
    data = bytearray(batch)
    data[16] = magic
    return bytes(data)


def _transactional(batch: bytes) -> bytes:
    """The batch with attribute bit 4 (transactional) and a producer id: no coordinator
    could ever end that transaction yet."""
    data = bytearray(batch)
    attributes = struct.unpack_from(">h", data, 21)[0] | 0x10
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">qhi", data, 43, 7, 0, 0)  # producer id, epoch, base sequence
    struct.pack_into(">I", data, 17, compute_crc(data, 0, len(data)))
    return bytes(data)


def _delete_horizon(batch: bytes) -> bytes:
    """The batch with attribute bit 6 (KIP-534's delete horizon, the cleaner's alone) set."""
    data = bytearray(batch)
    attributes = struct.unpack_from(">h", data, 21)[0] | 0x40
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">I", data, 17, compute_crc(data, 0, len(data)))
    return bytes(data)


def _lying_length(batch: bytes) -> bytes:
    data = bytearray(batch)
    struct.pack_into(">i", data, 8, len(batch) * 4)
    return bytes(data)


@dataclass
class Case:
    id: str
    method: str
    url: str
    status: int
    error: str
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    # A list of pairs to repeat a name.
    params: dict[str, Any] | list[tuple[str, str]] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)


def R(*records: dict[str, Any], **body: Any) -> dict[str, Any]:
    return {"records": list(records), **body}


# One row per bad input; ruff would put every field on its own line.
# fmt: off
CASES = [
    # --- JSON produce ---
    Case("malformed-json", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         content=b'{"records": [', headers={"content-type": "application/json"}),
    Case("not-json-at-all", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         content=b"hello"),
    Case("empty-body", "POST", "/topics/t/records", 400, "INVALID_REQUEST", content=b""),
    Case("invalid-utf8-body", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         content=b'{"records": [{"value": "\xff"}]}'),
    Case("records-not-a-list", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json={"records": {"value": 1}}),
    Case("records-empty", "POST", "/topics/t/records", 400, "INVALID_REQUEST", json=R()),
    Case("records-missing", "POST", "/topics/t/records", 400, "INVALID_REQUEST", json={}),
    Case("body-is-a-list", "POST", "/topics/t/records", 400, "INVALID_REQUEST", json=[1]),
    Case("partition-wrong-type", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": 1, "partition": "0"}), check={"fields": ["body.records.0.partition"]}),
    Case("partition-negative", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": 1, "partition": -1})),
    Case("unknown-record-field", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"vaule": 1})),
    Case("bad-format-name", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": 1}, value_format="avro")),
    Case("string-format-non-string", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": "ok"}, {"value": 5}, value_format="string"),
         check={"fields": ["body.records.1.value"]}),
    Case("bad-base64", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": "AAEC"}, {"key": "%%%not base64", "value": "AA=="},
                key_format="binary", value_format="binary"),
         check={"fields": ["body.records.1.key"]}),
    Case("base64-bad-padding", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": "AAE"}, value_format="binary")),
    Case("negative-timestamp", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": 1, "timestamp": -5})),
    Case("timestamp-float", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": 1, "timestamp": 1.5})),
    Case("headers-non-string", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": 1, "headers": {"h": 5}})),
    Case("json-nan", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         content=b'{"records": [{"value": NaN}]}'),
    Case("json-trailing-garbage", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         content=b'{"records": [{"value": 1}]} x'),
    Case("bool-partition", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": 1, "partition": True})),
    Case("header-item-missing-key", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": 1, "headers": [{"value": "v"}]})),
    Case("record-partition-unknown", "POST", "/topics/t/records", 404,
         "UNKNOWN_TOPIC_OR_PARTITION", json=R({"value": 1}, {"value": 2, "partition": 9}),
         check={"topic": "t", "partition": 9}),
    Case("path-partition-unknown", "POST", "/topics/t/partitions/9/records", 404,
         "UNKNOWN_TOPIC_OR_PARTITION", json=R({"value": 1})),
    Case("path-partition-negative", "POST", "/topics/t/partitions/-1/records", 404,
         "UNKNOWN_TOPIC_OR_PARTITION", json=R({"value": 1})),
    Case("path-partition-not-int", "POST", "/topics/t/partitions/abc/records", 400,
         "INVALID_REQUEST", json=R({"value": 1})),
    Case("path-partition-huge", "POST", "/topics/t/partitions/99999999999/records", 400,
         "INVALID_REQUEST", json=R({"value": 1})),
    Case("partition-disagrees-with-path", "POST", "/topics/t/partitions/0/records", 400,
         "INVALID_REQUEST", json=R({"value": 1, "partition": 1})),
    Case("bad-acks", "POST", "/topics/t/records", 400, "INVALID_REQUIRED_ACKS",
         json=R({"value": 1}), params={"acks": "2"}),
    Case("bad-timeout", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": 1}), params={"timeout_ms": 0}),
    Case("oversize-body", "POST", "/topics/t/records", 413, "MESSAGE_TOO_LARGE",
         json=R({"value": "x" * MAX_REQUEST_BYTES}), check={"limit": MAX_REQUEST_BYTES}),
    Case("batch-over-max-message-bytes", "POST", "/topics/small/records", 413,
         "MESSAGE_TOO_LARGE", json=R(*({"value": "y" * 100} for _ in range(20)))),
    Case("bad-topic-name-auto-create", "POST", "/topics/bad%20name/records", 400,
         "INVALID_TOPIC_EXCEPTION", json=R({"value": 1})),
    # A bad request to a topic that does not exist yet must not auto-create it.
    Case("new-topic-bad-base64", "POST", "/topics/fresh/records", 400, "INVALID_REQUEST",
         json=R({"value": "***"}, value_format="binary")),
    Case("new-topic-partition-out-of-range", "POST", "/topics/fresh/partitions/1/records", 404,
         "UNKNOWN_TOPIC_OR_PARTITION", json=R({"value": 1})),
    Case("new-topic-corrupt-batch", "POST", "/topics/fresh/partitions/0/batches", 400,
         "CORRUPT_MESSAGE", content=_corrupt_crc(GOOD_BATCH)),
    Case("new-topic-batch-partition-out-of-range", "POST", "/topics/fresh/partitions/3/batches",
         404, "UNKNOWN_TOPIC_OR_PARTITION", content=GOOD_BATCH),
    # --- binary produce ---
    Case("batch-wrong-crc", "POST", "/topics/t/partitions/0/batches", 400, "CORRUPT_MESSAGE",
         content=GOOD_BATCH + _corrupt_crc(GOOD_BATCH)),
    Case("batch-truncated", "POST", "/topics/t/partitions/0/batches", 400, "CORRUPT_MESSAGE",
         content=GOOD_BATCH + GOOD_BATCH[:-3]),
    Case("batch-short-header", "POST", "/topics/t/partitions/0/batches", 400, "CORRUPT_MESSAGE",
         content=GOOD_BATCH[:40]),
    Case("batch-length-lies", "POST", "/topics/t/partitions/0/batches", 400, "CORRUPT_MESSAGE",
         content=_lying_length(GOOD_BATCH)),
    Case("batch-empty-body", "POST", "/topics/t/partitions/0/batches", 400, "INVALID_RECORD",
         content=b""),
    Case("batch-magic-1", "POST", "/topics/t/partitions/0/batches", 400,
         "UNSUPPORTED_FOR_MESSAGE_FORMAT", content=_magic(GOOD_BATCH, 1)),
    # A delete horizon from a client would let the cleaner drop its tombstones at once.
    Case("batch-delete-horizon", "POST", "/topics/t/partitions/0/batches", 400,
         "INVALID_RECORD", content=GOOD_BATCH + _delete_horizon(GOOD_BATCH)),
    # Nothing could end a client's transaction yet (issue #16): it would pin the LSO.
    Case("batch-transactional", "POST", "/topics/t/partitions/0/batches", 400,
         "INVALID_TXN_STATE", content=GOOD_BATCH + _transactional(GOOD_BATCH)),
    Case("new-topic-batch-transactional", "POST", "/topics/fresh/partitions/0/batches", 400,
         "INVALID_TXN_STATE", content=_transactional(GOOD_BATCH)),
    Case("batch-json-body", "POST", "/topics/t/partitions/0/batches", 400, "CORRUPT_MESSAGE",
         content=b'{"records": [{"value": 1}]}'),
    Case("batch-unknown-partition", "POST", "/topics/t/partitions/5/batches", 404,
         "UNKNOWN_TOPIC_OR_PARTITION", content=GOOD_BATCH),
    Case("batch-oversize-body", "POST", "/topics/t/partitions/0/batches", 413,
         "MESSAGE_TOO_LARGE", content=GOOD_BATCH * (MAX_REQUEST_BYTES // len(GOOD_BATCH) + 1)),
    Case("batch-over-max-message-bytes", "POST", "/topics/small/partitions/0/batches", 413,
         "MESSAGE_TOO_LARGE", content=build_batch([(None, b"z" * 2000)])),
    # --- fetch ---
    Case("fetch-negative-offset", "GET", "/topics/t/partitions/0/records", 416,
         "OFFSET_OUT_OF_RANGE", params={"offset": -1},
         check={"log_start_offset": 0, "log_end_offset": 3, "offset": -1}),
    Case("fetch-offset-past-end", "GET", "/topics/t/partitions/0/records", 416,
         "OFFSET_OUT_OF_RANGE", params={"offset": 4},
         check={"log_start_offset": 0, "log_end_offset": 3}),
    Case("fetch-offset-huge", "GET", "/topics/t/partitions/0/records", 400, "INVALID_REQUEST",
         params={"offset": 2**63}),
    Case("fetch-offset-not-int", "GET", "/topics/t/partitions/0/records", 400,
         "INVALID_REQUEST", params={"offset": "abc"}, check={"fields": ["query.offset"]}),
    Case("fetch-offset-missing", "GET", "/topics/t/partitions/0/records", 400,
         "INVALID_REQUEST"),
    Case("fetch-unknown-topic", "GET", "/topics/nope/partitions/0/records", 404,
         "UNKNOWN_TOPIC_OR_PARTITION", params={"offset": 0}),
    Case("fetch-unknown-partition", "GET", "/topics/t/partitions/2/records", 404,
         "UNKNOWN_TOPIC_OR_PARTITION", params={"offset": 0}),
    Case("fetch-max-bytes-zero", "GET", "/topics/t/partitions/0/records", 400,
         "INVALID_REQUEST", params={"offset": 0, "max_bytes": 0}),
    Case("fetch-negative-wait", "GET", "/topics/t/partitions/0/records", 400,
         "INVALID_REQUEST", params={"offset": 0, "max_wait_ms": -1}),
    Case("fetch-bad-format", "GET", "/topics/t/partitions/0/records", 400, "INVALID_REQUEST",
         params={"offset": 0, "value_format": "xml"}),
    Case("fetch-not-acceptable", "GET", "/topics/t/partitions/0/records", 406,
         "INVALID_REQUEST", params={"offset": 0}, headers={"accept": "text/html"}),
    # --- offsets ---
    Case("offsets-bad-at", "GET", "/topics/t/partitions/0/offsets", 400, "INVALID_REQUEST",
         params={"at": "yesterday"}),
    Case("offsets-negative-at", "GET", "/topics/t/partitions/0/offsets", 400,
         "INVALID_REQUEST", params={"at": "-5"}),
    Case("offsets-unknown-partition", "GET", "/topics/t/partitions/7/offsets", 404,
         "UNKNOWN_TOPIC_OR_PARTITION", params={"at": "latest"}),
    # --- topics ---
    Case("create-malformed-json", "POST", "/topics", 400, "INVALID_REQUEST",
         content=b'{"name": '),
    Case("create-name-missing", "POST", "/topics", 400, "INVALID_REQUEST",
         json={"partitions": 1}),
    Case("create-bad-name", "POST", "/topics", 400, "INVALID_TOPIC_EXCEPTION",
         json={"name": "bad name!"}),
    Case("create-empty-name", "POST", "/topics", 400, "INVALID_TOPIC_EXCEPTION",
         json={"name": ""}),
    Case("create-dotdot", "POST", "/topics", 400, "INVALID_TOPIC_EXCEPTION",
         json={"name": ".."}),
    Case("create-long-name", "POST", "/topics", 400, "INVALID_TOPIC_EXCEPTION",
         json={"name": "x" * 250}),
    Case("create-zero-partitions", "POST", "/topics", 400, "INVALID_PARTITIONS",
         json={"name": "z", "partitions": 0}),
    Case("create-negative-partitions", "POST", "/topics", 400, "INVALID_PARTITIONS",
         json={"name": "z", "partitions": -5}),
    Case("create-partitions-string", "POST", "/topics", 400, "INVALID_REQUEST",
         json={"name": "z", "partitions": "3"}),
    Case("create-replication-3", "POST", "/topics", 400, "INVALID_REPLICATION_FACTOR",
         json={"name": "z", "replication_factor": 3}),
    Case("create-replication-0", "POST", "/topics", 400, "INVALID_REPLICATION_FACTOR",
         json={"name": "z", "replication_factor": 0}),
    Case("create-unknown-config", "POST", "/topics", 400, "INVALID_CONFIG",
         json={"name": "z", "configs": {"retention.msec": 5}}, check={"config": "retention.msec"}),
    Case("create-bad-config-value", "POST", "/topics", 400, "INVALID_CONFIG",
         json={"name": "z", "configs": {"retention.ms": "soon"}}, check={"config": "retention.ms"}),
    Case("create-config-null", "POST", "/topics", 400, "INVALID_REQUEST",
         json={"name": "z", "configs": {"retention.ms": None}}),
    Case("create-exists", "POST", "/topics", 409, "TOPIC_ALREADY_EXISTS",
         json={"name": "t", "partitions": 2}, check={"topic": "t"}),
    Case("describe-unknown", "GET", "/topics/nope", 404, "UNKNOWN_TOPIC_OR_PARTITION"),
    Case("delete-unknown", "DELETE", "/topics/nope", 404, "UNKNOWN_TOPIC_OR_PARTITION"),
    # --- integers outside Kafka's wire types: 400 naming the field, never a 500 ---
    Case("fetch-offset-below-long", "GET", "/topics/t/partitions/0/records", 400,
         "INVALID_REQUEST", params={"offset": "-9223372036854775809"},
         check={"fields": ["query.offset"]}),
    Case("fetch-partition-below-int", "GET", "/topics/t/partitions/-47892589513138356879360/records",
         400, "INVALID_REQUEST", params={"offset": 0}, check={"fields": ["path.partition"]}),
    Case("batch-partition-below-int", "POST",
         "/topics/t/partitions/-3912932587805666738962432/batches", 400, "INVALID_REQUEST",
         content=GOOD_BATCH, check={"fields": ["path.partition"]}),
    Case("offsets-partition-below-int", "GET", "/topics/t/partitions/-2147483649/offsets", 400,
         "INVALID_REQUEST", check={"fields": ["path.partition"]}),
    Case("record-partition-huge", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         content=b'{"records": [{"value": 1, "partition": 99999999999999999999999}]}',
         check={"fields": ["body.records.0.partition"]}),
    Case("record-partition-over-int", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": 1, "partition": 2**31}), check={"fields": ["body.records.0.partition"]}),
    Case("record-timestamp-huge", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         content=b'{"records": [{"value": 1, "timestamp": 99999999999999999999999}]}',
         check={"fields": ["body.records.0.timestamp"]}),
    Case("record-timestamp-over-long", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": 1, "timestamp": 2**63}), check={"fields": ["body.records.0.timestamp"]}),
    Case("producer-id-huge", "POST", "/producers", 400, "INVALID_REQUEST",
         content=b'{"producer_id": 99999999999999999999999, "producer_epoch": 0}',
         check={"fields": ["body.producer_id"]}),
    Case("producer-epoch-over-short", "POST", "/producers", 400, "INVALID_REQUEST",
         json={"producer_id": 0, "producer_epoch": 2**15}, check={"fields": ["body.producer_epoch"]}),
    # --- topic names longer than the file-name limit allows (246) ---
    Case("create-name-247", "POST", "/topics", 400, "INVALID_TOPIC_EXCEPTION",
         json={"name": "x" * 247}),
    Case("auto-create-name-247", "POST", "/topics/" + "y" * 247 + "/records", 400,
         "INVALID_TOPIC_EXCEPTION", json=R({"value": 1})),
    Case("metadata-auto-create-name-248", "GET", "/metadata", 400, "INVALID_TOPIC_EXCEPTION",
         params={"topics": "z" * 248, "allow_auto_topic_creation": "true"}),
    Case("delete-name-247", "DELETE", "/topics/" + "x" * 247, 400, "INVALID_TOPIC_EXCEPTION"),
    # --- media types: JSON endpoints take application/json, binary produce octet-stream ---
    Case("produce-text-plain", "POST", "/topics/t/records", 415, "INVALID_REQUEST",
         content=b'{"records": [{"value": 1}]}', headers={"content-type": "text/plain"},
         check={"content_type": "text/plain", "acceptable": ["application/json"]}),
    Case("produce-form", "POST", "/topics/t/records", 415, "INVALID_REQUEST",
         content=b'{"records": [{"value": 1}]}',
         headers={"content-type": "application/x-www-form-urlencoded"}),
    Case("produce-no-content-type", "POST", "/topics/t/records", 415, "INVALID_REQUEST",
         content=b'{"records": [{"value": 1}]}', headers={"content-type": ""},
         check={"content_type": None}),
    Case("create-text-plain", "POST", "/topics", 415, "INVALID_REQUEST",
         content=b'{"name": "new"}', headers={"content-type": "text/plain"}),
    Case("producers-form", "POST", "/producers", 415, "INVALID_REQUEST",
         content=b"{}", headers={"content-type": "multipart/form-data; boundary=x"}),
    Case("batches-json", "POST", "/topics/t/partitions/0/batches", 415, "INVALID_REQUEST",
         content=GOOD_BATCH, headers={"content-type": "application/json"},
         check={"acceptable": ["application/octet-stream"]}),
    Case("group-heartbeat-text-plain", "POST", "/groups/g/heartbeat", 415, "INVALID_REQUEST",
         content=b'{"subscribed_topics": ["t"]}', headers={"content-type": "text/plain"}),
    # --- a query parameter given twice (Starlette would keep the last one) ---
    Case("duplicate-acks", "POST", "/topics/t/records", 400, "INVALID_REQUEST",
         json=R({"value": 1}), params=[("acks", "all"), ("acks", "0")],
         check={"fields": ["query.acks"]}),
    Case("duplicate-offset", "GET", "/topics/t/partitions/0/records", 400, "INVALID_REQUEST",
         params=[("offset", "0"), ("max_bytes", "9"), ("offset", "1")],
         check={"fields": ["query.offset"]}),
    # --- routing ---
    Case("unknown-route", "GET", "/nowhere", 404, "INVALID_REQUEST"),
    Case("wrong-method", "PUT", "/topics", 405, "INVALID_REQUEST"),
]
# fmt: on


def _log_bytes(data_dir: Path) -> dict[str, int]:
    return {str(p.relative_to(data_dir)): p.stat().st_size for p in data_dir.rglob("*.log")}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Path]]:
    tmp = tmp_path_factory.mktemp("bad-input")
    settings = make_settings(tmp)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        create_topic(client, "t", partitions=2)
        create_topic(client, "small", **{"max.message.bytes": 1000})
        produce(client, "t", [{"value": i, "partition": 0} for i in range(3)])
        yield client, settings.data_dir


def _state(client: TestClient, data_dir: Path) -> Any:
    topics = client.get("/topics").json()
    described = {t["name"]: client.get(f"/topics/{t['name']}").json() for t in topics["topics"]}
    return topics, described, _log_bytes(data_dir)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(seeded: tuple[TestClient, Path], case: Case) -> None:
    client, data_dir = seeded
    before = _state(client, data_dir)
    kwargs: dict[str, Any] = {"params": case.params, "headers": case.headers}
    if case.json is not None:
        kwargs["json"] = case.json
    if case.content is not None:
        kwargs["content"] = case.content
        # Raw bodies are sent as their endpoint's media type unless the case says otherwise.
        media = OCTET_STREAM if case.url.endswith("/batches") else JSON
        kwargs["headers"] = {"content-type": media, **case.headers}
    r = client.request(case.method, case.url, **kwargs)
    assert r.status_code == case.status, r.text
    body = r.json()
    assert body["error_code"] == case.error, body
    assert isinstance(body["message"], str) and body["message"]
    assert body["retriable"] is False
    for name, value in case.check.items():
        assert body[name] == value, (name, body)
    assert _state(client, data_dir) == before


def _call_asgi(app: Any, path: str, receive: Receive) -> tuple[int, dict[str, Any]]:
    """Drive the app with our own ``receive`` (TestClient sends a body in one piece)."""
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        # No Content-Length: only the checks while streaming apply.
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }
    anyio.run(app, scope, receive, send)
    body = orjson.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    return sent[0]["status"], body


def test_streamed_oversize_body_is_cut_while_reading(seeded: tuple[TestClient, Path]) -> None:
    client, data_dir = seeded
    before = _state(client, data_dir)
    chunk = 64 * 1024
    pulled = 0

    async def receive() -> Message:
        nonlocal pulled
        if pulled == 0:
            pulled += 1
            return {"type": "http.request", "body": b'{"records": [{"value": "', "more_body": True}
        pulled += chunk
        # 64 MB in total if the app kept reading.
        return {"type": "http.request", "body": b"x" * chunk, "more_body": pulled < 64 << 20}

    status, body = _call_asgi(client.app, "/topics/t/records", receive)
    assert status == 413
    assert body["error_code"] == "MESSAGE_TOO_LARGE"
    assert body["limit"] == MAX_REQUEST_BYTES
    assert pulled <= MAX_REQUEST_BYTES + 2 * chunk
    assert _state(client, data_dir) == before


def test_client_disconnect_mid_body_is_not_a_server_error(seeded: tuple[TestClient, Path]) -> None:
    client, data_dir = seeded
    before = _state(client, data_dir)
    messages: list[Message] = [
        {"type": "http.request", "body": b'{"records": [{"val', "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> Message:
        return messages.pop(0)

    status, body = _call_asgi(client.app, "/topics/t/records", receive)
    assert status == 400
    assert body["error_code"] == "INVALID_REQUEST"
    assert _state(client, data_dir) == before


def test_declared_content_length_is_checked_up_front(seeded: tuple[TestClient, Path]) -> None:
    client, _ = seeded
    r = client.post(
        "/topics/t/partitions/0/batches",
        content=GOOD_BATCH,
        headers={"content-length": str(MAX_REQUEST_BYTES + 1), "content-type": OCTET_STREAM},
    )
    assert r.status_code == 413
    assert r.json()["size"] == MAX_REQUEST_BYTES + 1


def test_every_error_body_is_documented_shape(seeded: tuple[TestClient, Path]) -> None:
    client, _ = seeded
    r = client.get("/topics/t/partitions/0/records", params={"offset": 99})
    assert set(r.json()) >= {"error_code", "message", "retriable"}
    assert r.headers["content-type"] == "application/json"


def test_streamed_oversize_batches_are_cut_while_reading(seeded: tuple[TestClient, Path]) -> None:
    client, data_dir = seeded
    before = _state(client, data_dir)
    chunk = GOOD_BATCH * 800
    pulled = 0

    async def receive() -> Message:
        nonlocal pulled
        pulled += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": pulled < 64 << 20}

    status, body = _call_asgi(client.app, "/topics/t/partitions/0/batches", receive)
    assert (status, body["error_code"]) == (413, "MESSAGE_TOO_LARGE")
    assert pulled <= MAX_REQUEST_BYTES + 2 * len(chunk)
    assert _state(client, data_dir) == before


def test_several_bad_parameters_are_listed_path_then_query_then_body(client: TestClient) -> None:
    """However a route declares its parameters (its own signature, or a dependency it
    shares with other routes), an answer lists their errors path first, then query, then
    body."""
    create_topic(client, "bad-params")
    r = client.post(
        "/topics/bad-params/partitions/abc/records?timeout_ms=0",
        content=b"{}",
        headers={"content-type": JSON},
    )
    assert r.status_code == 400
    assert r.json()["fields"] == ["path.partition", "query.timeout_ms"]
    r = client.post(
        "/schema-registry/compatibility/subjects/" + "s" * 1025 + "/versions?normalize=maybe",
        content=b"{}",
        headers={"content-type": JSON},
    )
    assert r.status_code == 422
    where = [part.split(":")[0] for part in r.json()["message"].split("; ")]
    assert where == ["path.subject", "query.normalize", "body.schema"]
