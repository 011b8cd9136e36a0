"""Hostile input: limits the registry can set, reference cycles for every type, the
compiler's deadline, and arbitrary bytes given to decode (only RecordInvalid or
NotSchemaFramed ever escape)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.common import schemas
from app.common.schema_errors import InvalidSchema, NotSchemaFramed, RecordInvalid
from app.common.schemas import LIMITS, ResolvedReference, wire


@pytest.fixture
def limits() -> Iterator[None]:
    saved = dict(vars(LIMITS))
    yield
    schemas.set_limits(**saved)


def test_limits_are_settable_and_enforced(limits: None) -> None:
    schemas.set_limits(max_schema_bytes=100, max_depth=3)
    with pytest.raises(InvalidSchema, match="over the limit of 100 bytes"):
        schemas.parse("JSON", json.dumps({"description": "x" * 200}))
    with pytest.raises(InvalidSchema, match="nests deeper than 3"):
        schemas.parse("JSON", '{"items": {"items": {"items": {}}}}')
    with pytest.raises(TypeError, match="unknown schema limit"):
        schemas.set_limits(nope=1)


def test_reference_count_limit(limits: None) -> None:
    schemas.set_limits(max_references=3)
    refs = [ResolvedReference(f"r{i}.json", f"s{i}", 1, "JSON", "{}") for i in range(4)]
    with pytest.raises(InvalidSchema, match="more than 3 references"):
        schemas.parse("JSON", "{}", refs)


def test_json_reference_cycle() -> None:
    a = ResolvedReference("a.json", "a", 1, "JSON", '{"$ref": "b.json"}')
    b = ResolvedReference("b.json", "b", 1, "JSON", '{"$ref": "a.json"}', (a,))
    looped = ResolvedReference("a.json", "a", 1, "JSON", a.schema, (b,))
    with pytest.raises(InvalidSchema, match="reference cycle: a/1 -> b/1 -> a/1"):
        schemas.parse("JSON", '{"$ref": "a.json"}', [looped])


def test_protobuf_reference_cycle_and_a_diamond() -> None:
    base = ResolvedReference(
        "base.proto", "base", 1, "PROTOBUF", 'syntax = "proto3"; message B { int32 x = 1; }'
    )
    left = ResolvedReference(
        "l.proto",
        "l",
        1,
        "PROTOBUF",
        'syntax = "proto3"; import "base.proto"; message L { B b = 1; }',
        (base,),
    )
    right = ResolvedReference(
        "r.proto",
        "r",
        1,
        "PROTOBUF",
        'syntax = "proto3"; import "base.proto"; message R { B b = 1; }',
        (base,),
    )
    main = 'syntax = "proto3"; import "l.proto"; import "r.proto"; message M { L l = 1; R r = 2; }'
    parsed = schemas.parse("PROTOBUF", main, [left, right])  # base reached twice: fine
    value = {"l": {"b": {"x": 1}}, "r": {"b": {"x": 2}}}
    assert wire.decode(parsed, wire.encode(parsed, 1, value)) == value
    looped = ResolvedReference("base.proto", "base", 1, "PROTOBUF", base.schema, (left,))
    left2 = ResolvedReference("l.proto", "l", 1, "PROTOBUF", left.schema, (looped,))
    with pytest.raises(InvalidSchema, match="reference cycle: l/1 -> base/1 -> l/1"):
        schemas.parse("PROTOBUF", main, [left2, right])


def test_protoc_deadline(limits: None) -> None:
    schemas.set_limits(protoc_timeout=0.001)
    with pytest.raises(InvalidSchema, match="took longer than"):
        schemas.parse("PROTOBUF", 'syntax = "proto3"; message Deadline { int32 x = 1; }')


PARSED = {
    "AVRO": lambda: schemas.parse(
        "AVRO",
        json.dumps(
            {
                "type": "record",
                "name": "Node",
                "fields": [
                    {
                        "name": "v",
                        "type": ["null", "string", "bytes", {"type": "array", "items": "long"}],
                    },
                    {"name": "m", "type": {"type": "map", "values": "double"}},
                    {"name": "next", "type": ["null", "Node"]},
                ],
            }
        ),
    ),
    "JSON": lambda: schemas.parse("JSON", '{"type": "object"}'),
    "PROTOBUF": lambda: schemas.parse(
        "PROTOBUF",
        'syntax = "proto3"; message N { string s = 1; repeated int64 v = 2; N next = 3; map<string, bytes> m = 4; }',
    ),
}


@pytest.mark.parametrize("kind", sorted(PARSED))
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_never_escape_as_other_errors(kind: str, data: bytes) -> None:
    parsed = PARSED[kind]()
    for framed in (data, b"\x00\x00\x00\x00\x01" + data):
        with contextlib.suppress(RecordInvalid, NotSchemaFramed):
            wire.decode(parsed, framed)


def test_deep_recursive_avro_values_are_record_invalid_not_a_crash() -> None:
    """fastavro's compiled code recurses on the C stack: 5,000 levels crashed the
    interpreter. A recursive schema runs the pure-Python implementations past the safe
    depth, so depth ends in RecordInvalid."""
    parsed = PARSED["AVRO"]()
    assert parsed.recursive  # type: ignore[attr-defined]
    value: dict[str, object] = {"v": None, "m": {}, "next": None}
    for _ in range(5_000):
        value = {"v": None, "m": {}, "next": value}
    with pytest.raises(RecordInvalid):
        wire.encode(parsed, 1, value)
    # Each level of "next" is one byte (union branch 2... here 1: the index of "Node"),
    # then an empty map; 100,000 levels in 200,000 bytes.
    deep = b"\x00\x00\x00\x00\x01" + b"\x00\x00\x02" * 100_000 + b"\x00\x00\x00"
    with pytest.raises(RecordInvalid):
        wire.decode(parsed, deep)
    shallow = {"v": "x", "m": {"k": 1.0}, "next": {"v": None, "m": {}, "next": None}}
    assert wire.decode(parsed, wire.encode(parsed, 1, shallow)) == shallow


_SELF_CONTAINED = """
import json, sys
from app.common import schemas
from app.common.schema_errors import InvalidSchema, RecordInvalid
from app.common.schemas import ResolvedReference
self_record = {"type": "record", "name": "R", "fields": [{"name": "x", "type": "R"}]}
chain = [{"name": "a", "type": {"type": "record", "name": "A0", "fields": [
    {"name": "u", "type": ["null", "R"]}]}}]
for i in range(1, 19):  # three levels of JSON each: 19 within the nesting limit
    chain = [{"name": "a", "type": {"type": "record", "name": f"A{i}", "fields": chain}}]
cycle = {"type": "record", "name": "R", "fields": chain}
cases = [
    (lambda: schemas.parse("AVRO", json.dumps(self_record)), b""),
    (lambda: schemas.parse("AVRO", json.dumps(cycle)), b"\\x02" * 500),  # 10,500 levels
    (lambda: schemas.parse("AVRO", json.dumps({"type": "record", "name": "M", "fields": [
        {"name": "r", "type": "R"}]}), (ResolvedReference(
        "R", "r", 1, "AVRO", json.dumps(self_record)),)), b""),  # R from a reference
]
for parse, payload in cases:
    try:
        parse().decode_payload(memoryview(payload))
    except RecordInvalid:
        print("RecordInvalid")
    except InvalidSchema as exc:
        assert "no bytes can end a value" in exc.message, exc.message
        print("InvalidSchema")
"""


def test_records_nesting_without_reading_a_byte_are_record_invalid_not_a_crash() -> None:
    """A record that holds itself through records alone (R with a field of type R) nests
    without bound on no bytes at all; one whose cycle runs through 20 records and a union
    nests 21 levels a byte. fastavro's compiled reader took payloads shorter than the
    safe depth (one level a byte was assumed): on the first it crashed the interpreter (a
    remote crash: any record framed with such a schema's id, fetched typed), on the
    second it recursed 10,500 levels deep, 20 times the safe depth; a recursive type from
    a reference crashed it too (the recursion check read only the schema's own text).
    The first and the third are refused when parsed (InvalidSchema: no value of R can
    end, see _avro_shape.zero_byte_values); the second takes the pure-Python reader:
    RecordInvalid. In a child process, which the old code crashed."""
    done = subprocess.run(
        [sys.executable, "-c", _SELF_CONTAINED], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["InvalidSchema", "RecordInvalid", "InvalidSchema"]


def test_named_records_chained_deeper_than_the_safe_depth_count_as_recursive() -> None:
    """No cycle, but each record's field is the previous record (by name): values nest
    600 levels deep from a schema of 600 short definitions (10,000 fit in a schema's
    1 MiB, which crashed fastavro's compiled reader). Such a schema takes the recursive
    schemas' pure-Python paths. (Each definition is an array's items: as D's fields
    themselves, one D would build 180,000 records from one byte, over
    max_zero_byte_values.)"""
    fields = [{"name": "f0", "type": {"type": "record", "name": "C0", "fields": [
        {"name": "b", "type": "boolean"}]}}]  # fmt: skip
    for i in range(1, 600):
        fields.append({"name": f"f{i}", "type": {"type": "array", "items": {
            "type": "record", "name": f"C{i}",
            "fields": [{"name": "x", "type": f"C{i - 1}"}]}}})  # fmt: skip
    parsed = schemas.parse("AVRO", json.dumps({"type": "record", "name": "D", "fields": fields}))
    assert parsed.recursive  # type: ignore[attr-defined]
    with contextlib.suppress(RecordInvalid):
        wire.decode(parsed, b"\x00\x00\x00\x00\x01" + b"\x01" * 600)


def test_non_recursive_schemas_keep_the_compiled_path() -> None:
    flat = schemas.parse(
        "AVRO",
        '{"type":"record","name":"A","fields":[{"name":"b","type":{"type":"record","name":"B","fields":[]}}]}',
    )
    assert not flat.recursive  # type: ignore[attr-defined]
