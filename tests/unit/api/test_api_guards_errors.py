"""app.api.guards (media types, repeated parameters) and app.api.errors' last-line mapping:
storage errors, paths kept out of answers, error bodies that cannot fail to render."""

from __future__ import annotations

import errno

import orjson
import pytest

from app.api.errors import (
    _dumps,
    is_storage_error,
    response_for,
    storage_error,
    without_paths,
)
from app.api.guards import duplicate_parameters, media_type, route_table
from app.api.ws.protocol import error_frame, internal_error_frame
from app.common.errors import KafkaStorageError, OffsetOutOfRange


def test_an_error_about_a_huge_integer_still_renders() -> None:
    # orjson refuses integers beyond 64 bits; the body must not turn into a 500.
    exc = OffsetOutOfRange("t", 0, -(2**70), 0, 5)
    body = orjson.loads(response_for(exc).body)
    assert body["offset"] == str(-(2**70))
    assert body["log_end_offset"] == 5
    assert orjson.loads(_dumps({"x": [2**64, 2**64 - 1, True]})) == {
        "x": [str(2**64), 2**64 - 1, True]
    }


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "write to /srv/data/orders-0/00000000000000000000.log failed: [Errno 28] No space",
            "write to 00000000000000000000.log failed: [Errno 28] No space",
        ),
        ("/tmp/x/topics/t.json is damaged", "t.json is damaged"),
        ("log orders-0 is closed", "log orders-0 is closed"),
        ("see http://10.0.0.2:8080/topics/x", "see http://10.0.0.2:8080/topics/x"),
    ],
)
def test_storage_messages_lose_their_paths(message: str, expected: str) -> None:
    assert without_paths(message) == expected


def test_a_storage_error_answers_503_retriable_without_paths() -> None:
    err = OSError(errno.ENOSPC, "No space left on device", "/secret/data/t-0/0.index")
    assert is_storage_error(err)
    answer = response_for(storage_error(err))
    body = orjson.loads(answer.body)
    assert answer.status_code == 503
    assert body["error_code"] == "KAFKA_STORAGE_ERROR"
    assert body["retriable"] is True
    assert "/secret" not in answer.body.decode()
    core = response_for(KafkaStorageError("write to /secret/data/t-0/1.log failed"))
    assert core.status_code == 503
    assert "/secret" not in core.body.decode()


def test_socket_errors_are_not_storage_errors() -> None:
    assert not is_storage_error(ConnectionResetError(errno.ECONNRESET, "reset"))
    assert not is_storage_error(TimeoutError())
    assert not is_storage_error(OSError("no errno"))


def test_repeated_names_are_found() -> None:
    assert duplicate_parameters(b"") == []
    assert duplicate_parameters(b"acks=1") == []
    assert duplicate_parameters(b"acks=all&timeout_ms=5&acks=0") == ["acks"]
    assert duplicate_parameters(b"a=1&b=&b=&a=2") == ["a", "b"]


def test_media_types_are_compared_without_parameters() -> None:
    assert media_type("Application/JSON; charset=utf-8") == "application/json"
    assert media_type("") is None
    assert media_type(None) is None


def test_route_table_takes_what_the_spec_documents() -> None:
    spec = {
        "paths": {
            "/t/{x}/b": {
                "post": {
                    "requestBody": {"content": {"application/octet-stream": {}}},
                    "parameters": [{"in": "query", "name": "acks", "schema": {"type": "string"}}],
                }
            },
            "/t/fixed/b": {"post": {"requestBody": {"content": {"application/json": {}}}}},
            "/g": {
                "get": {
                    "parameters": [
                        {
                            "in": "query",
                            "name": "topic",
                            "schema": {"anyOf": [{"type": "array"}, {"type": "null"}]},
                        }
                    ]
                }
            },
        }
    }
    table = route_table(spec)
    # Literal templates first, as the router matches them.
    assert table[0].pattern.match("/t/fixed/b")
    assert table[0].operations["POST"].media_types == {"application/json"}
    binary = next(p for p in table if p.pattern.match("/t/other/b"))
    assert binary.operations["POST"].media_types == {"application/octet-stream"}
    assert not binary.pattern.match("/t/a/b/c")
    groups = next(p for p in table if p.pattern.match("/g"))
    assert groups.operations["GET"].repeatable == {"topic"}
    assert groups.operations["GET"].media_types is None


def test_websocket_error_frames_map_storage_errors_the_same_way() -> None:
    err = OSError(errno.EIO, "Input/output error", "/secret/data/t-0/0.log")
    frame = orjson.loads(internal_error_frame(err, id=7))
    assert frame["error_code"] == "KAFKA_STORAGE_ERROR"
    assert frame["retriable"] is True
    assert frame["id"] == 7
    text = error_frame(KafkaStorageError("write to /secret/data/t-0/1.log failed"))
    assert "/secret" not in text
    assert orjson.loads(internal_error_frame(ValueError("bug")))["error_code"] == (
        "UNKNOWN_SERVER_ERROR"
    )
