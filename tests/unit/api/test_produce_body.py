"""The fast produce-body check must never accept what the pydantic model rejects."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.api.codec import BodyInvalid
from app.api.models import Header, ProduceRequest
from app.api.produce_body import _fast, _fast_typed, parse_produce_body

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.text(max_size=3)
    | st.floats(allow_nan=False, allow_infinity=False)
)
anything = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
header_item = st.dictionaries(
    st.sampled_from(["key", "value", "other"]),
    st.none() | st.text(max_size=3) | st.integers(-5, 5),
    max_size=3,
)
headers = (
    st.none()
    | st.dictionaries(
        st.text(max_size=3), st.none() | st.text(max_size=3) | st.integers(-5, 5), max_size=3
    )
    | st.lists(header_item, max_size=3)
    | anything
)
offsets = st.none() | st.integers(-2, 5) | st.booleans() | st.text(max_size=2) | st.floats(0, 3)
record = st.fixed_dictionaries(
    {},
    optional={
        "key": anything,
        "value": anything,
        "headers": headers,
        "partition": offsets,
        "timestamp": offsets,
        "vaule": anything,
    },
)
formats = st.sampled_from(["json", "string", "binary", "avro", 1, None]) | anything
good_offsets = st.none() | st.integers(0, 5)
good_headers = (
    st.none()
    | st.dictionaries(st.text(max_size=3), st.none() | st.text(max_size=3), max_size=3)
    | st.lists(
        st.fixed_dictionaries(
            {"key": st.text(max_size=3)}, optional={"value": st.none() | st.text(max_size=3)}
        ),
        max_size=3,
    )
)
# Mostly valid bodies, one field at a time possibly wrong: where the two checks could differ.
near_valid = st.fixed_dictionaries(
    {
        "records": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "key": anything,
                    "value": anything,
                    "headers": good_headers | headers,
                    "partition": good_offsets | offsets,
                    "timestamp": good_offsets,
                },
            ),
            min_size=1,
            max_size=4,
        )
    },
    optional={"key_format": st.sampled_from(["json", "string", "binary"]) | formats},
)
body = (
    st.fixed_dictionaries(
        {},
        optional={
            "records": st.lists(record, max_size=4) | anything,
            "key_format": formats,
            "value_format": formats,
            "extra": anything,
        },
    )
    | anything
    | near_valid
)


def _normalize_headers(h: Any) -> Any:
    if isinstance(h, list):
        return [
            (x.key, x.value) if isinstance(x, Header) else (x["key"], x.get("value")) for x in h
        ]
    return h


@settings(max_examples=600)
@given(body)
def test_fast_path_agrees_with_model(obj: Any) -> None:
    raw = orjson.dumps(obj)
    fast = _fast(orjson.loads(raw))
    try:
        model = ProduceRequest.model_validate_json(raw)
    except ValidationError:
        assert fast is None, obj
        with pytest.raises(BodyInvalid):
            parse_produce_body(raw)
        return
    parsed = parse_produce_body(raw)
    assert (parsed.key_format, parsed.value_format) == (model.key_format, model.value_format)
    expected = [
        (r.key, r.value, _normalize_headers(r.headers), r.partition, r.timestamp)
        for r in model.records
    ]
    got = [(k, v, _normalize_headers(h), p, t) for k, v, h, p, t in parsed.records]
    assert got == expected
    if fast is not None:
        assert [(k, v, _normalize_headers(h), p, t) for k, v, h, p, t in fast.records] == expected


def test_malformed_json_names_the_body() -> None:
    with pytest.raises(BodyInvalid) as info:
        parse_produce_body(b'{"records": [{"value": NaN}]}')
    assert info.value.message.startswith("malformed JSON body")
    assert info.value.fields() == {"fields": ["body"]}


def test_numbers_beyond_64_bits_are_doubles() -> None:
    # orjson's reading, documented: like JavaScript, not an error.
    parsed = parse_produce_body(b'{"records": [{"value": 123456789012345678901234567890}]}')
    assert parsed.records[0][1] == pytest.approx(1.2345678901234568e29)


schema_field = (
    st.none()
    | st.integers(-1, 3)
    | st.sampled_from([2**31 - 1, 2**31, True, "", "s", "x" * 255, "x" * 256, 1.0])
)
typed_format = st.sampled_from(["json", "binary", "avro", "jsonschema", "protobuf", "xml"])
typed_body = st.fixed_dictionaries(
    {"records": near_valid.map(lambda b: b["records"])},
    optional={
        "key_format": typed_format,
        "value_format": typed_format,
        **{
            f"{side}_{name}": schema_field
            for side in ("key", "value")
            for name in ("schema_id", "subject", "schema_version", "message")
        },
    },
)


@settings(max_examples=600)
@given(typed_body)
def test_typed_fast_path_agrees_with_model(obj: Any) -> None:
    """A body with a typed format skips the model when the hand check knows it valid: the
    hand check must take exactly the model's schema fields, and refuse what it refuses."""
    raw = orjson.dumps(obj)
    fast = _fast_typed(orjson.loads(raw))
    try:
        model = ProduceRequest.model_validate_json(raw)
    except ValidationError:
        assert fast is None, obj
        with pytest.raises(BodyInvalid):
            parse_produce_body(raw)
        return
    parsed = parse_produce_body(raw)
    assert (parsed.key_format, parsed.value_format) == (model.key_format, model.value_format)
    for side in ("key", "value"):
        ref = getattr(parsed, f"{side}_schema")
        if getattr(model, f"{side}_format") in ("avro", "jsonschema", "protobuf"):
            assert ref == (
                getattr(model, f"{side}_schema_id"),
                getattr(model, f"{side}_subject"),
                getattr(model, f"{side}_schema_version"),
                getattr(model, f"{side}_message"),
            )
        else:
            assert ref is None
    if fast is not None:
        assert fast == parsed


@given(body)
def test_the_native_plain_check_agrees_with_the_python_one(obj: Any) -> None:
    """app/common/_jsonrecords.c's plain_tuples, used by _fast where it is built: the same
    ParsedProduce as the Python check for any body, plain records or not."""
    from app.api import produce_body

    native = produce_body.plain_tuples
    if native is None:
        pytest.skip("app.common._jsonrecords is not built")
    parsed = orjson.loads(orjson.dumps(obj))
    with_native = _fast(parsed)
    produce_body.plain_tuples = None
    try:
        without = _fast(parsed)
    finally:
        produce_body.plain_tuples = native
    assert with_native == without
    if type(parsed) is dict and type(parsed.get("records")) is list and parsed["records"]:
        plain = native(parsed["records"])
        if plain is not None:
            assert plain == [
                (r.get("key"), r.get("value"), None, None, None) for r in parsed["records"]
            ]
