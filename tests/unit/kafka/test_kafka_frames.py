"""The Kafka door's frame reader and request decoding: good frames, and bad input that must
end in FrameError (the connection closes) and nothing else, fuzzed with hypothesis."""

from __future__ import annotations

import contextlib
import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from app.kafka.frames import FrameError, FrameReader, decode_request

MAX = 1024


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def api_versions_request(version: int = 3, correlation_id: int = 7) -> bytes:
    out = io.BytesIO()
    entity_writer(RequestHeader)(
        out,
        RequestHeader(
            request_api_key=i16(18),
            request_api_version=i16(version),
            correlation_id=i32(correlation_id),
            client_id="test",
        ),
    )
    entity_writer(ApiVersionsRequest)(
        out, ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    return out.getvalue()


def test_frames_split_across_feeds_come_out_whole_and_in_order() -> None:
    reader = FrameReader(MAX)
    data = frame(b"one") + frame(b"two!") + frame(b"3")
    got: list[bytes] = []
    for i in range(len(data)):  # one byte at a time: the worst split
        got += reader.feed(data[i : i + 1])
    assert got == [b"one", b"two!", b"3"]
    assert reader.buffered == 0


@pytest.mark.parametrize("size", [0, -1, MAX + 1, 2**31 - 1])
def test_a_size_prefix_out_of_range_is_refused_before_buffering(size: int) -> None:
    reader = FrameReader(MAX)
    with pytest.raises(FrameError, match=r"socket\.request\.max\.bytes"):
        reader.feed(struct.pack(">i", size))
    assert reader.buffered == 0


def test_a_request_decodes_to_its_header_and_body() -> None:
    request = decode_request(api_versions_request(3, 42))
    assert (request.api_key, request.api_version, request.correlation_id) == (18, 3, 42)
    assert request.client_id == "test"
    assert isinstance(request.body, ApiVersionsRequest)


def test_a_version_not_served_keeps_its_header_without_a_body() -> None:
    request = decode_request(struct.pack(">hhi", 18, 99, 9))
    assert (request.api_key, request.api_version, request.correlation_id, request.body) == (
        18,
        99,
        9,
        None,
    )


def test_truncated_bytes_are_a_frame_error_and_trailing_ones_are_ignored_as_kafka_does() -> None:
    good = api_versions_request()
    with pytest.raises(FrameError):
        decode_request(good[:-1])
    assert decode_request(good + b"\1\0\0") == decode_request(good)
    with pytest.raises(FrameError):
        decode_request(b"\0\x12")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_fuzz_any_bytes_give_frames_or_a_frame_error(chunks: list[bytes]) -> None:
    reader = FrameReader(MAX)
    try:
        for chunk in chunks:
            for f in reader.feed(chunk):
                assert 0 < len(f) <= MAX
                with contextlib.suppress(FrameError):
                    decode_request(f)
    except FrameError:
        pass
    assert reader.buffered <= MAX + 4 + 64


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([0, 1, 2, 3, 18, 22]),
    st.integers(-2, 20),
    st.binary(max_size=200),
)
def test_fuzz_garbage_after_a_real_header_is_a_frame_error_or_a_request(
    api_key: int, version: int, tail: bytes
) -> None:
    data = struct.pack(">hhi", api_key, version, 1) + tail
    try:
        request = decode_request(data)
    except FrameError:
        return
    assert request.api_key == api_key


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_fuzz_a_truncated_real_request_is_a_frame_error(data: st.DataObject) -> None:
    good = api_versions_request()
    cut = data.draw(st.integers(0, len(good) - 1))
    with pytest.raises(FrameError):
        decode_request(good[:cut])
