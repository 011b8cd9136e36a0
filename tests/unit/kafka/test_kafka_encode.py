"""Responses to bytes: the zero-copy frame is kio's own encoding, and every error of the
one error tree has its Kafka code."""

from __future__ import annotations

import datetime
import io
import os
import struct
from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import response as fetch
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_writer
from kio.static.primitive import i32

import app.common.errors as errors
import app.common.group_errors  # noqa: F401  (the tree's group branch, walked below)
import app.common.schema_errors as schema_errors
from app.core.log.fileslice import FileSlice, SegmentFile
from app.kafka.encode import SlicedRecords, build, encode_response, error_code


def _response(records: bytes) -> fetch.FetchResponse:
    return build(
        fetch.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(
            build(
                fetch.FetchableTopicResponse,
                topic="t",
                partitions=tuple(
                    build(
                        fetch.PartitionData,
                        partition_index=p,
                        error_code=ErrorCode.none,
                        high_watermark=10,
                        last_stable_offset=10,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=records,
                    )
                    for p in range(2)
                ),
            ),
        ),
    )


def test_a_sliced_fetch_response_is_byte_for_byte_kios_encoding(tmp_path: Path) -> None:
    path = tmp_path / "segment.log"
    path.write_bytes(b"HEAD" + b"r" * 300 + b"TAIL")
    file = SegmentFile(os.open(path, os.O_RDONLY))
    slices = [FileSlice(file, 4, 100), FileSlice(file, 104, 200)]
    parts = encode_response(5, _response(SlicedRecords(slices)))
    # The records stay file slices, between bytes kio wrote.
    assert [p for p in parts if isinstance(p, FileSlice)] == slices * 2
    sent = b"".join(p if isinstance(p, bytes) else p.read() for p in parts)

    expected = io.BytesIO()
    entity_writer(ResponseHeader)(expected, ResponseHeader(correlation_id=i32(5)))
    entity_writer(fetch.FetchResponse)(expected, _response(b"r" * 300))
    body = expected.getvalue()
    assert sent == struct.pack(">i", len(body)) + body


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def test_every_error_of_the_error_tree_has_its_kafka_code() -> None:
    # The broker's errors (app/common/errors.py, group_errors.py and any broker module's
    # subclasses); the
    # SDK's own client-side errors (app.client) subclass it but never reach a Kafka answer,
    # nor do the schema registry's (Confluent's REST codes, served under /schema-registry
    # only: a typed record refused on a produce path is INVALID_RECORD).
    import app.api.memory  # noqa: F401  (MemoryWaitTimeout: a broker error outside the tree)

    tree = [
        c
        for c in _subclasses(errors.LogbusError)
        if not c.__module__.startswith("app.client")
        and not issubclass(c, schema_errors.SchemaRegistryError)
    ]
    assert len(tree) > 20
    for cls in tree:
        code = error_code(cls.__new__(cls))
        assert code.name == cls.error_code.lower(), cls
    assert error_code(RuntimeError("bug")) is ErrorCode.unknown_server_error
