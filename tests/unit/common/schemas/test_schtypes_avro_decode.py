"""AVRO's compiled decoder (``app.common.schemas._avrodec``, the typed fetch's per-record
decode): on random schemas of the constructs it takes, the value it reads is fastavro's
(the reference); on damaged bytes (truncated, a byte changed, bytes appended, random
bytes) the outcome of a decode (value, or the per-record error's message) is the
fastavro-only path's; huge declared lengths allocate nothing; a block of 2**62 items
that take no bytes is refused, not built."""

from __future__ import annotations

import base64
import gc
import io
import json
import re
import weakref
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_schtypes_avro_native import avro_schemas, named_types, value_of

from app.common import schemas
from app.common.schema_errors import RecordInvalid

_avrodec = pytest.importorskip("app.common.schemas._avrodec")  # CI requires it built


def without_logical(schema: Any) -> Any:
    """``schema`` with each logical type replaced by the type that carries it (the C
    reader leaves logical types to fastavro, which turns them into dates and such)."""
    if isinstance(schema, list):
        return [without_logical(b) for b in schema]
    if isinstance(schema, dict):
        if "logicalType" in schema:
            return schema["type"]
        out = dict(schema)
        if "fields" in out:
            out["fields"] = [{**f, "type": without_logical(f["type"])} for f in out["fields"]]
        for key in ("items", "values"):
            if key in out:
                out[key] = without_logical(out[key])
        return out
    return schema


def _parse(schema: Any) -> Any:
    parsed = schemas.parse("AVRO", json.dumps(schema))
    assert parsed.native_reader(False) is not None  # the construct set is the C reader's
    return parsed


def _fastavro_only(schema: Any) -> Any:
    """The same schema decoded without the C reader: the path where _avrodec is not
    built (and the reference)."""
    parsed = schemas.parse("AVRO", json.dumps(schema))
    parsed._read_program = None
    return parsed


def _reference(parsed: Any, payload: bytes) -> Any:
    return fastavro.schemaless_reader(io.BytesIO(payload), parsed._parsed, None)


def _outcome(parsed: Any, payload: bytes) -> tuple[str, str]:
    """A decode's result, compared by repr: key order, types (True against 1) and NaNs
    count. (fastavro's messages may name its stream object: its address is left out.)"""
    try:
        return "value", repr(parsed.decode_payload(memoryview(payload)))
    except RecordInvalid as exc:
        return "RecordInvalid", re.sub(r" at 0x[0-9a-f]+", "", exc.message)


def _b64(value: Any) -> Any:
    """The typed fetch's ``_jsonable`` for these schemas: bytes as base64 text."""
    if isinstance(value, dict):
        return {k: _b64(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_b64(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def _zero_width(schema: Any, named: dict[str, Any]) -> bool:
    """Whether a value of ``schema`` may take no bytes (an array of them may declare
    2**62 items in three bytes: fastavro, the reference, would build them)."""
    if isinstance(schema, str):
        if schema in named:
            return _zero_width(named[schema], named)
        return schema == "null"
    if isinstance(schema, list):
        return False
    kind = schema["type"]
    if kind == "record":
        return all(_zero_width(f["type"], named) for f in schema["fields"])
    if kind == "fixed":
        return bool(schema["size"] == 0)
    return kind == "null"


def _has_zero_width_items(schema: Any, named: dict[str, Any]) -> bool:
    if isinstance(schema, list):
        return any(_has_zero_width_items(b, named) for b in schema)
    if not isinstance(schema, dict):
        return False
    if schema["type"] == "array" and _zero_width(schema["items"], named):
        return True
    subs = [f["type"] for f in schema.get("fields", [])]
    subs += [schema[k] for k in ("items", "values") if k in schema]
    return any(_has_zero_width_items(s, named) for s in subs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(avro_schemas(), st.data())
def test_c_values_are_fastavros_values(schema: dict[str, Any], data: st.DataObject) -> None:
    schema = without_logical(schema)
    parsed = _parse(schema)
    value = value_of(data.draw, schema, named_types(schema, {}), junk=False)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed._parsed, value)
    payload = out.getvalue()
    expected = _reference(parsed, payload)
    assert repr(parsed.native_reader(False).read(payload, 0)) == repr(expected)
    assert repr(parsed.native_reader(True).read(payload, 0)) == repr(_b64(expected))
    # Framed, through the fetch's per-record call: read in C, the fallback never called.
    framed = b"\0\0\0\1\2" + payload
    decoder = _avrodec.FramedDecoder(lambda data: pytest.fail("fell back"))
    decoder.target(framed[:5], parsed.native_reader(True))
    assert repr(decoder(framed)) == repr(_b64(expected))
    assert decoder(None) is None


@st.composite
def damaged(draw: st.DrawFn, payload: bytes) -> bytes:
    how = draw(st.sampled_from(["truncate", "change", "append", "random", "huge length"]))
    if how == "truncate":
        return payload[: draw(st.integers(0, max(len(payload) - 1, 0)))]
    if how == "change" and payload:
        at = draw(st.integers(0, len(payload) - 1))
        return payload[:at] + bytes([draw(st.integers(0, 255))]) + payload[at + 1 :]
    if how == "append":
        return payload + draw(st.binary(min_size=1, max_size=3))
    if how == "huge length":
        # A varint of ~2**62 (a length or block count) spliced in somewhere.
        at = draw(st.integers(0, len(payload)))
        return payload[:at] + b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f" + payload[at:]
    return draw(st.binary(max_size=24))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(avro_schemas(), st.data())
def test_damaged_bytes_get_the_fastavro_paths_outcome(
    schema: dict[str, Any], data: st.DataObject
) -> None:
    schema = without_logical(schema)
    assume(not _has_zero_width_items(schema, named_types(schema, {})))
    parsed = _parse(schema)
    value = value_of(data.draw, schema, named_types(schema, {}), junk=False)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed._parsed, value)
    payload = data.draw(damaged(out.getvalue()))
    assert _outcome(parsed, payload) == _outcome(_fastavro_only(schema), payload)


def test_huge_declared_lengths_allocate_nothing() -> None:
    """A string, bytes, array or map declaring ~2**62 items in a few bytes: the C reader
    checks each length against the bytes left before allocating, declines, and fastavro
    reports the payload short (also bounded: it reads what is there)."""
    huge = b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f"  # zig-zag 2**62 - 1
    for field in ("string", "bytes", {"type": "array", "items": "long"},
                  {"type": "map", "values": "string"}):  # fmt: skip
        schema = {"type": "record", "name": "R", "fields": [{"name": "f", "type": field}]}
        parsed = _parse(schema)
        assert parsed.native_reader(False).read(huge + b"\x02", 0) is _avrodec.DECLINED
        kind, message = _outcome(parsed, huge + b"\x02")
        assert kind == "RecordInvalid" and "does not decode" in message
        assert (kind, message) == _outcome(_fastavro_only(schema), huge + b"\x02")


@pytest.mark.parametrize("items", ["null", {"type": "fixed", "name": "Z", "size": 0}])
def test_a_bomb_of_zero_width_items_is_refused(items: Any) -> None:
    """Three bytes declaring 2**62 nulls: refused with its own message (fastavro would
    build a list of them, the broker's memory without bound); a block within the bound
    is read as fastavro reads it."""
    schema = {"type": "array", "items": items}
    parsed = _parse(schema)
    bomb = b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f\x00"
    with pytest.raises(RecordInvalid, match="items that take no bytes"):
        parsed.decode_payload(memoryview(bomb))
    fine = b"\x80\x08\x00"  # 512 items
    assert parsed.decode_payload(memoryview(fine)) == _reference(parsed, fine)
    assert len(parsed.decode_payload(memoryview(fine))) == 512


def test_framed_decoder_falls_back_for_other_records_and_follows_retargets() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    reader = _parse(schema).native_reader(False)
    seen: list[bytes] = []

    def fallback(data: bytes) -> Any:
        seen.append(data)
        return "fallback"

    decoder = _avrodec.FramedDecoder(fallback)
    one, two = b"\0\0\0\0\1", b"\0\0\0\0\2"
    assert decoder(one + b"\x02") == "fallback"  # no target yet
    decoder.target(one, reader)
    assert decoder(one + b"\x02") == {"a": 1}
    for other in (two + b"\x02", one, one + b"\x02\x00", b"\x01", one + b"\x80"):
        assert decoder(other) == "fallback"  # another id, short, trailing, truncated
    decoder.target(two, reader)
    assert decoder(two + b"\x04") == {"a": 2} and decoder(one + b"\x02") == "fallback"
    decoder.target(None, None)
    assert decoder(two + b"\x04") == "fallback"
    assert len(seen) == 8
    with pytest.raises(TypeError):
        decoder.target(b"\0", reader)


def test_logical_types_keep_fastavros_reader() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "d", "type": {"type": "int", "logicalType": "date"}}]}  # fmt: skip
    parsed = schemas.parse("AVRO", json.dumps(schema))
    assert parsed.native_reader(False) is None
    assert str(parsed.decode_payload(memoryview(b"\x02"))["d"]) == "1970-01-02"


def test_a_decoder_and_its_fallback_are_collected() -> None:
    """The fetch's fallback closure refers to its decoder: the cycle collector frees both
    (seen through an object only the closure holds)."""

    class Marker:
        pass

    def make() -> weakref.ref[Marker]:
        marker = Marker()
        holder: list[Any] = [marker]
        holder.append(_avrodec.FramedDecoder(lambda data: holder))
        return weakref.ref(marker)

    gone = make()
    gc.collect()
    assert gone() is None


def test_the_zero_width_bound_is_the_setting() -> None:
    """``LOGBUS_TYPED_RECORDS_MAX_ZERO_WIDTH_ITEMS`` reaches the decoder through
    ``set_limits`` (the registry sets it at start); a value's bytes add one each."""
    from app.common.schemas.types import LIMITS, set_limits

    parsed = _parse({"type": "array", "items": "null"})
    saved = LIMITS.max_zero_width_items
    try:
        set_limits(max_zero_width_items=10)
        assert parsed.decode_payload(memoryview(b"\x14\x00")) == [None] * 10
        assert parsed.decode_payload(memoryview(b"\x0a\x10\x00")) == [None] * 13  # 10 + 3
        with pytest.raises(RecordInvalid, match="at most 10 such items"):
            parsed.decode_payload(memoryview(b"\x0a\x12\x00"))  # 5 + 9 in two blocks
    finally:
        set_limits(max_zero_width_items=saved)
    assert parsed.decode_payload(memoryview(b"\x0a\x12\x00")) == [None] * 14


def test_fastavros_leniencies_are_read_in_c_so_no_bomb_reaches_fastavro() -> None:
    """fastavro reads a boolean byte 2 as true, an int past 32 bits as it is, an enum or
    union index of -1 as the last: the C reader does the same (it declines only where
    fastavro raises), so a zero-width bomb after such a byte, or inside the first item of
    a block declaring 2**62 items, is refused in C instead of handed to fastavro."""
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "u", "type": ["null", "string"]},
        {"name": "n", "type": {"type": "array", "items": {"type": "record", "name": "I",
            "fields": [{"name": "z", "type": {"type": "array", "items": "null"}}]}}}]}  # fmt: skip
    parsed = _parse(schema)
    lenient = b"\x04" + b"\x80\x80\x80\x80\x80\x40" + b"\x01" + b"\x01\x02x" + b"\x00"
    value = parsed.native_reader(False).read(lenient, 0)
    assert value == _reference(parsed, lenient) == {
        "b": True, "i": 1 << 40, "e": "B", "u": "x", "n": []}  # fmt: skip
    bomb = b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f"
    for payload in (
        lenient[:-1] + b"\x02" + bomb + b"\x00\x00",  # one item: its array a bomb
        lenient[:-1] + bomb + bomb + b"\x00\x00",  # 2**62 items, the first one's a bomb
    ):
        with pytest.raises(RecordInvalid, match="items that take no bytes"):
            parsed.decode_payload(memoryview(payload))


def test_an_overlong_varint_or_a_count_of_minus_2_63_leaves_no_bomb_to_fastavro() -> None:
    """fastavro reads a varint of more than 64 bits (each shift taken modulo 64) and a
    block count of -2**63 (negated to itself: a block of no items, and the array goes on)
    without an error. The C reader declined both, so fastavro read the bytes after them
    unchecked, and built the zero-width bomb there. It reads them as fastavro does now:
    the values are fastavro's, and a bomb after them is refused."""
    from app.common.schemas.types import LIMITS, set_limits

    nulls = {"type": "array", "items": "null"}
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "long"}, {"name": "n", "type": nulls},
        {"name": "m", "type": {"type": "map", "values": nulls}}]}  # fmt: skip
    parsed = _parse(schema)
    overlong = b"\x80" * 10 + b"\x02"  # fastavro: 2 << (70 % 64), zig-zag 64
    minimal = b"\xff" * 9 + b"\x01"  # zig-zag -2**63, then the block's byte size
    for payload in (
        overlong + b"\x04\x00" + b"\x00",
        b"\xff" * 12 + b"\x7f" + b"\x00" + b"\x00",
        b"\x02" + minimal + b"\x00" + b"\x04\x00" + minimal + overlong + b"\x02\x02k\x00\x00",
    ):
        value = parsed.native_reader(False).read(payload, 0)
        assert value is not _avrodec.DECLINED
        assert repr(value) == repr(_reference(parsed, payload))
        assert _outcome(parsed, payload) == _outcome(_fastavro_only(schema), payload)
    saved = LIMITS.max_zero_width_items
    try:
        set_limits(max_zero_width_items=10)
        for payload in (
            overlong + b"\xc8\x01\x00" + b"\x00",  # 100 nulls after an over-long varint
            b"\x02" + minimal + b"\x00" + b"\xc8\x01\x00" + b"\x00",  # after a block of -2**63
            b"\x02\x00" + minimal + b"\x00" + b"\x02\x02k\xc8\x01\x00\x00",  # in a map
        ):
            with pytest.raises(RecordInvalid, match="items that take no bytes"):
                parsed.decode_payload(memoryview(payload))
    finally:
        set_limits(max_zero_width_items=saved)


def test_a_zero_width_item_counts_what_it_builds() -> None:
    """A record of nulls takes no bytes but builds a dict of its fields: each array item of
    it counts 1 plus its fields against the bound (a record of 100 nulls is 101). Counted
    as one item, three bytes built ~3.4 GB (1,048,576 dicts of 100 entries) in one value."""
    from app.common.schemas.types import LIMITS, set_limits

    inner = {"type": "record", "name": "I", "fields": [{"name": "n", "type": "null"}]}
    fields = [{"name": f"f{i}", "type": "null"} for i in range(8)] + [{"name": "i", "type": inner}]
    parsed = _parse({"type": "array", "items": {"type": "record", "name": "Z", "fields": fields}})
    saved = LIMITS.max_zero_width_items
    try:
        set_limits(max_zero_width_items=1200)  # an item weighs 1 + 8 + (1 + 1) = 11
        fine = b"\xc8\x01\x00"  # 100 items: 1,100
        assert parsed.decode_payload(memoryview(fine)) == _reference(parsed, fine)
        assert len(parsed.decode_payload(memoryview(fine))) == 100
        with pytest.raises(RecordInvalid, match="items that take no bytes"):
            parsed.decode_payload(memoryview(b"\xc8\x01\x14\x00"))  # 100 + 10 items: 1,210
    finally:
        set_limits(max_zero_width_items=saved)


def test_a_fixed_of_the_largest_size_is_declined_without_overflow() -> None:
    """A fixed of size 2**63 - 1 (a schema may say so): the fewest bytes a map entry of it
    takes was that size plus one, a signed overflow (undefined behaviour: UBSan stops the
    old code here). It is capped now; the payload is short, declined, fastavro's verdict."""
    big = {"type": "fixed", "name": "F", "size": (1 << 63) - 1}
    for schema in ({"type": "map", "values": big}, {"type": "array", "items": big}):
        parsed = _parse(schema)
        assert parsed.native_reader(False).read(b"\x00", 0) == _reference(parsed, b"\x00")
        for payload in (b"\x02\x02k\x00", b"\x02\x00\x00"):
            assert parsed.native_reader(False).read(payload, 0) is _avrodec.DECLINED
            assert _outcome(parsed, payload) == _outcome(_fastavro_only(schema), payload)


def test_an_answers_records_share_one_budget_of_values_built_from_no_bytes() -> None:
    """Each record alone is under a value's bound; together they are not: a FramedDecoder
    (one answer) charges every record's values built from no bytes (array items that take
    none, records, nulls behind a union's byte) against its one budget, each byte adding
    one, and hands the records over it to the fallback (which says why); read() of one
    value alone still takes each."""
    nulls = _parse({"type": "array", "items": "null"})
    reader = nulls.native_reader(False)
    six_hundred = b"\xb0\x09\x00"  # one block of 600 nulls, then the end
    assert len(reader.read(six_hundred, 0)) == 600
    fell_back: list[bytes] = []
    decoder = _avrodec.FramedDecoder(lambda data: fell_back.append(data), 1000)
    decoder.target(b"\0\0\0\0\1", reader)
    framed = b"\0\0\0\0\1" + six_hundred
    assert len(decoder(framed)) == 600 and decoder.left == 1000 + 3 - 600
    assert decoder(framed) is None and fell_back == [framed]  # over: the fallback's
    # Records of 30 nulls behind a union: 31 values from one byte each, plus the root's 1.
    wide = {"type": "record", "name": "W", "fields": [{"name": f"n{i}", "type": "null"}
                                                      for i in range(30)]}  # fmt: skip
    schema = {"type": "record", "name": "Top", "fields": [{"name": "u", "type": ["null", wide]}]}
    parsed = _parse(schema)
    decoder = _avrodec.FramedDecoder(lambda data: "fallback", 100)
    decoder.target(b"\0\0\0\0\2", parsed.native_reader(False))
    answers = [decoder(b"\0\0\0\0\2\x02") for _ in range(5)]
    assert [type(a).__name__ for a in answers] == ["dict"] * 3 + ["str"] * 2
    # decode_within: the same budget from Python (what the fallback uses).
    budget = type("B", (), {"left": 100, "limit": 100})()
    for _ in range(3):
        assert parsed.decode_within(b"\x02", budget)["u"]["n0"] is None
    with pytest.raises(RecordInvalid, match=r"more values from no bytes .* than the 100"):
        parsed.decode_within(b"\x02", budget)
    assert budget.left == 0
    assert parsed.decode_payload(memoryview(b"\x02"))["u"]["n29"] is None  # alone: fine
