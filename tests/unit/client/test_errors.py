"""Broker error bodies become the core's error classes."""

from __future__ import annotations

import orjson
import pytest

from app.client.errors import BrokerUnavailable, ServerError, error_from_body, is_retriable
from app.common import errors as core


def body(code: str, retriable: bool = False, **extra: object) -> bytes:
    return orjson.dumps(
        {"error_code": code, "message": f"msg {code}", "retriable": retriable, **extra}
    )


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("OFFSET_OUT_OF_RANGE", core.OffsetOutOfRange),
        ("UNKNOWN_TOPIC_OR_PARTITION", core.UnknownTopicOrPartition),
        ("TOPIC_ALREADY_EXISTS", core.TopicAlreadyExists),
        ("MESSAGE_TOO_LARGE", core.RecordTooLarge),
        ("REQUEST_TIMED_OUT", core.RequestTimedOut),
        ("NOT_LEADER_OR_FOLLOWER", core.NotLeaderOrFollower),
        ("BROKER_NOT_AVAILABLE", core.BrokerNotAvailable),
        ("CORRUPT_MESSAGE", core.CorruptRecord),
        ("INVALID_CONFIG", core.InvalidConfig),
        ("INVALID_TOPIC_EXCEPTION", core.InvalidTopic),
        ("INVALID_REQUEST", core.InvalidRequest),
        ("UNSUPPORTED_COMPRESSION_TYPE", core.UnsupportedCompressionType),
        ("KAFKA_STORAGE_ERROR", core.KafkaStorageError),
    ],
)
def test_known_codes_map_to_the_core_class(code: str, cls: type[core.LogbusError]) -> None:
    exc = error_from_body(400, body(code))
    assert type(exc) is cls
    assert exc.error_code == code
    assert exc.message == str(exc) == f"msg {code}"


def test_fields_become_attributes_without_shadowing_methods() -> None:
    exc = error_from_body(
        416,
        body(
            "OFFSET_OUT_OF_RANGE",
            topic="t",
            partition=2,
            offset=9,
            log_start_offset=3,
            log_end_offset=7,
        ),
    )
    assert isinstance(exc, core.OffsetOutOfRange)
    assert (exc.topic, exc.partition, exc.log_start_offset, exc.log_end_offset) == ("t", 2, 3, 7)
    assert exc.status == 416  # type: ignore[attr-defined]
    bad = error_from_body(400, body("INVALID_REQUEST", fields=["query.offset"]))
    assert callable(bad.fields)
    assert bad.details["fields"] == ["query.offset"]  # type: ignore[attr-defined]


def test_retriable_follows_the_class_and_unknown_codes_follow_the_body() -> None:
    assert is_retriable(error_from_body(503, body("BROKER_NOT_AVAILABLE", True)))
    assert not is_retriable(error_from_body(404, body("UNKNOWN_TOPIC_OR_PARTITION")))
    odd = error_from_body(409, body("PREFERRED_LEADER_NOT_AVAILABLE", True))
    assert isinstance(odd, ServerError) and odd.error_code == "PREFERRED_LEADER_NOT_AVAILABLE"
    assert is_retriable(odd) and odd.status == 409


def test_answers_without_the_error_shape() -> None:
    proxy = error_from_body(502, b"<html>Bad Gateway</html>")
    assert isinstance(proxy, ServerError) and is_retriable(proxy)
    assert "502" in proxy.message
    assert not is_retriable(error_from_body(400, b"{}"))


def test_connection_failures_are_retriable_broker_errors() -> None:
    exc = BrokerUnavailable("down")
    assert isinstance(exc, core.BrokerNotAvailable) and is_retriable(exc)
    assert not is_retriable(ValueError("x"))
