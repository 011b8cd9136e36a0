"""The walk fastavro's path takes first (``app/common/schemas/_avro_scan.py``): on random
schemas and values it reads exactly the bytes fastavro wrote; arrays of items that read
no bytes are charged per value and per fetch answer, so a block count of 2**40 is
refused at once on every path fastavro would have built it on (a schema with a logical
type, which the compiled decoder leaves to fastavro)."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_schtypes_avro_native import avro_schemas, named_types, value_of

from app.common import schemas
from app.common.schema_errors import RecordInvalid
from app.common.schemas._avro_scan import compile_scan, zero_width_arrays


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            return bytes(out + bytes([byte]))
        out.append(byte | 0x80)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(avro_schemas(), st.data())
def test_the_walk_reads_exactly_what_fastavro_wrote(
    schema: dict[str, Any], data: st.DataObject
) -> None:
    parsed = schemas.parse("AVRO", json.dumps(schema))
    value = value_of(data.draw, schema, named_types(schema, {}), junk=False)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed._parsed, value)
    payload = out.getvalue()
    walk = compile_scan(parsed._parsed, parsed._named)
    assert walk(payload, 0, [1 << 62]) == len(payload)
    if payload:
        with pytest.raises((ValueError, IndexError)):
            walk(payload[:-1], 0, [1 << 62])  # cut short: never read past the end
    assert parsed.zero_width_arrays == zero_width_arrays(parsed._parsed, parsed._named)


def _bomb_schema(logical: bool) -> str:
    ts: Any = {"type": "long", "logicalType": "timestamp-millis"} if logical else "long"
    empty = {"type": "record", "name": "E", "fields": [{"name": "n", "type": "null"}]}
    return json.dumps(
        {
            "type": "record",
            "name": "R",
            "fields": [{"name": "ts", "type": ts}, {"name": "xs", "type": {"type": "array", "items": empty}}],
        }
    )  # fmt: skip


@pytest.mark.parametrize("logical", [False, True])
def test_a_block_of_2_40_items_that_take_no_bytes_is_refused_on_every_path(logical: bool) -> None:
    """With a logical type the compiled decoder declines the schema; fastavro alone would
    build 2**40 records from these four bytes (hours, then out of memory)."""
    parsed = schemas.parse("AVRO", _bomb_schema(logical))
    assert parsed.zero_width_arrays
    payload = _varint(5) + _varint(2**40) + _varint(0)
    started = time.monotonic()
    with pytest.raises(RecordInvalid, match="items that take no bytes"):
        parsed.decode_payload(memoryview(payload))
    framed = parsed.framed_reader()
    with pytest.raises(RecordInvalid, match="items that take no bytes"):
        framed(b"\0\0\0\0\1" + payload)

    class Budget:
        left = limit = 1 << 20

    with pytest.raises(RecordInvalid, match="items that take no bytes"):
        parsed.decode_within(memoryview(payload), Budget())
    assert time.monotonic() - started < 1
    # A block within the bounds decodes, and its items are fastavro's.
    small = _varint(5) + _varint(3) + _varint(0)
    assert parsed.decode_payload(memoryview(small))["xs"] == [{"n": None}] * 3


def test_an_answers_values_share_one_budget_on_fastavros_path() -> None:
    """Each value under the per-value bound, together over it: the answer's budget (a
    FramedDecoder's or typed.Budget's ``left``/``limit``) refuses the value that takes it
    past, as the compiled decoder does; bytes read add one each."""
    parsed = schemas.parse("AVRO", _bomb_schema(True))

    class Budget:
        left = limit = 1000

    budget = Budget()
    payload = memoryview(_varint(5) + _varint(400) + _varint(0))
    for _ in range(2):
        assert len(parsed.decode_within(payload, budget)["xs"]) == 400
    assert budget.left == (1000 - 400) + len(payload) - 400  # the first's bytes past the cap
    with pytest.raises(RecordInvalid, match="items that take no bytes"):
        parsed.decode_within(payload, budget)
    assert budget.left < 400


def test_negative_block_counts_carry_their_size_and_are_read() -> None:
    """Avro lets a writer give a block as -count followed by its size in bytes."""
    parsed = schemas.parse(
        "AVRO",
        json.dumps(
            {
                "type": "record",
                "name": "N",
                "fields": [
                    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                    {"name": "xs", "type": {"type": "array", "items": "null"}},
                    {"name": "s", "type": "string"},
                ],
            }
        ),
    )
    payload = _varint(1) + _varint(-2) + _varint(0) + _varint(0) + _varint(1) + b"z"
    assert parsed.decode_payload(memoryview(payload))["xs"] == [None, None]
    assert parsed.decode_payload(memoryview(payload))["s"] == "z"
