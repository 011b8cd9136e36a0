"""Pure pieces of the API: codecs, negotiation, error mapping, query parsing."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.codec import DECODERS, ENCODERS, FormatError, decode_headers, encode_headers
from app.api.errors import STATUS_BY_ERROR, NotAcceptable, status_for
from app.api.models import Header
from app.api.routers.fetch import json_records, negotiate
from app.api.routers.offsets import parse_at
from app.api.routers.records import parse_acks
from app.common import errors as core
from app.common.batch import BatchBuilder


@given(st.binary(max_size=200))
def test_binary_round_trip(data: bytes) -> None:
    encoded = DECODERS["binary"](data)
    assert ENCODERS["binary"](encoded) == data


@given(st.text(max_size=100))
def test_string_round_trip(text: str) -> None:
    try:
        raw = ENCODERS["string"](text)
    except FormatError:
        return  # lone surrogates cannot be UTF-8
    assert DECODERS["string"](raw) == text


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=10,
)


@given(json_values)
def test_json_round_trip(value: object) -> None:
    raw = ENCODERS["json"](value)
    if value is None:
        assert raw is None
    else:
        assert DECODERS["json"](raw) == value


def test_null_means_absent_in_every_format() -> None:
    for fmt in ("json", "string", "binary"):
        assert ENCODERS[fmt](None) is None
        assert DECODERS[fmt](None) is None


def test_json_decode_falls_back_to_string() -> None:
    assert DECODERS["json"](b"not json") == "not json"
    assert DECODERS["json"](b"\xff") == "\ufffd"
    assert DECODERS["json"](b'{"a": 1}') == {"a": 1}


@pytest.mark.parametrize(
    ("fmt", "value"),
    [("string", 5), ("string", {"a": 1}), ("binary", "***"), ("binary", 3), ("binary", "AAE")],
)
def test_encode_rejects(fmt: str, value: object) -> None:
    with pytest.raises(FormatError) as info:
        ENCODERS[fmt](value)
    assert f"format {fmt}" in str(info.value)


def test_headers_both_shapes() -> None:
    assert encode_headers({"a": "1", "b": None}) == [("a", b"1"), ("b", None)]
    assert encode_headers([Header(key="a", value="x"), Header(key="a")]) == [
        ("a", b"x"),
        ("a", None),
    ]
    assert encode_headers([{"key": "a", "value": "x"}, {"key": "b"}]) == [("a", b"x"), ("b", None)]
    assert encode_headers(None) == []
    assert decode_headers([("a", b"\xff"), ("b", None)]) == [
        {"key": "a", "value": "\ufffd"},
        {"key": "b", "value": None},
    ]


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, "application/json"),
        ("", "application/json"),
        ("*/*", "application/json"),
        ("application/octet-stream", "application/octet-stream"),
        ("application/json, application/octet-stream", "application/json"),
        ("application/octet-stream, application/json", "application/octet-stream"),
        ("application/json;q=0.2, application/octet-stream", "application/octet-stream"),
        ("text/html, application/*;q=0.5", "application/json"),
        ("application/octet-stream;q=0, */*", "application/json"),
    ],
)
def test_negotiate(accept: str | None, expected: str) -> None:
    assert negotiate(accept) == expected


@pytest.mark.parametrize("accept", ["text/html", "application/json;q=0", "image/png, text/*"])
def test_negotiate_refuses(accept: str) -> None:
    with pytest.raises(NotAcceptable):
        negotiate(accept)


def test_parse_acks() -> None:
    assert [parse_acks(a) for a in ("0", "1", "all", "ALL", "-1")] == [0, 1, -1, -1, -1]
    for bad in ("2", "", "any", "1.0"):
        with pytest.raises(core.InvalidRequiredAcks):
            parse_acks(bad)


def test_parse_at() -> None:
    assert parse_at("earliest") == "earliest"
    assert parse_at("LATEST") == "latest"
    assert parse_at("1700000000000") == 1700000000000
    for bad in ("-1", "soon", "1.5", str(2**63)):
        with pytest.raises(core.InvalidRequest):
            parse_at(bad)


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (core.InvalidRequest("x"), 400),
        (core.InvalidConfig("a", 1, "bad"), 400),
        (core.InvalidTopic("t", "bad"), 400),
        (core.InvalidPartitions("x"), 400),
        (core.InvalidReplicationFactor("x"), 400),
        (core.InvalidRequiredAcks("x"), 400),
        (core.CorruptRecord("x"), 400),
        (core.InvalidRecord("x"), 400),
        (core.UnsupportedMessageFormat(1), 400),
        (core.UnsupportedCompressionType("x"), 400),
        (core.RecordTooLarge(2, 1), 413),
        (core.PayloadTooLarge(2, 1), 413),
        (core.OffsetOutOfRange("t", 0, 5, 0, 3), 416),
        (core.UnknownTopicOrPartition("t"), 404),
        (core.TopicAlreadyExists("t"), 409),
        (core.RequestTimedOut("x"), 504),
        (core.NotLeaderOrFollower("t", 0), 421),
        (core.NotEnoughReplicas("x"), 503),
        (core.BrokerNotAvailable("x"), 503),
        (core.KafkaStorageError("x"), 503),
        (NotAcceptable("text/html", ["application/json"]), 406),
        (core.LogbusError("x"), 500),
    ],
)
def test_status_for_every_error(error: core.LogbusError, status: int) -> None:
    assert status_for(error) == status


def test_every_core_error_class_is_mapped() -> None:
    def subclasses(cls: type) -> set[type]:
        out = set(cls.__subclasses__())
        for sub in list(out):
            out |= subclasses(sub)
        return out

    for cls in subclasses(core.LogbusError):
        if cls.__module__ != core.__name__:
            continue
        assert any(issubclass(cls, mapped) for mapped, _ in STATUS_BY_ERROR), cls


def test_base64_standard_alphabet() -> None:
    assert ENCODERS["binary"](base64.b64encode(b"\xfb\xff").decode()) == b"\xfb\xff"
    with pytest.raises(FormatError):
        ENCODERS["binary"](base64.urlsafe_b64encode(b"\xfb\xff").decode())


@pytest.mark.parametrize("key_format", ["json", "string", "binary"])
@pytest.mark.parametrize("value_format", ["json", "string", "binary"])
def test_json_records_decode_as_the_codecs_decoders(key_format: str, value_format: str) -> None:
    """The fetch loop decodes json in place (app/api/routers/fetch.py): same answers as
    DECODERS, for JSON, text that is not JSON, bytes that are not UTF-8 and nulls."""
    samples = [b'{"a": 1}', b"plain", b"\xff\xfe", None, b"7", b'"s"']
    builder = BatchBuilder()
    for i, value in enumerate(samples):
        builder.append(value, samples[-1 - i], [], 1000 + i)
    records, next_offset = json_records(builder.build(), 0, key_format, value_format)
    assert next_offset == len(samples)
    assert [(r["key"], r["value"]) for r in records] == [
        (DECODERS[key_format](samples[-1 - i]), DECODERS[value_format](value))
        for i, value in enumerate(samples)
    ]
