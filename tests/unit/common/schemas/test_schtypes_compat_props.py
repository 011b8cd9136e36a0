"""Properties every compatibility checker must have: a schema is FULL-compatible with
itself (every schema of the three tables), and the JSON Schema checker returns reasons,
never raises, on arbitrary valid schemas."""

from __future__ import annotations

from typing import Any

import pytest
import test_schtypes_compat_avro as avro_table
import test_schtypes_compat_json as json_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.common import schemas
from app.common.schema_errors import InvalidSchema


def _distinct(rows: list[tuple[str, str, str, bool, str]]) -> list[str]:
    return sorted({text for row in rows for text in row[:2]})


@pytest.mark.parametrize(
    ("kind", "text"),
    [("AVRO", t) for t in _distinct(avro_table.ROWS)]
    + [("JSON", t) for t in _distinct(json_table.ROWS)],
)
def test_every_schema_is_fully_compatible_with_itself(kind: str, text: str) -> None:
    a, b = schemas.parse(kind, text), schemas.parse(kind, text)
    assert schemas.check_compatibility(a, [b], "FULL_TRANSITIVE") == []


def test_every_protobuf_schema_is_fully_compatible_with_itself() -> None:
    import test_schtypes_compat_protobuf as proto_table

    for text in _distinct(proto_table.ROWS):
        parsed = schemas.parse("PROTOBUF", text)
        assert schemas.check_compatibility(parsed, [parsed], "FULL") == [], text


leaf = st.sampled_from(
    [
        {"type": "string"},
        {"type": "integer", "minimum": 0},
        {"type": "number", "maximum": 10, "exclusiveMinimum": 1},
        {"type": ["string", "null"]},
        {"enum": ["a", 1, None]},
        {"const": "x"},
        {"type": "string", "maxLength": 3, "pattern": "^a"},
        {"multipleOf": 2},
        {},
        True,
        False,
    ]
)


def _extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    names = st.sampled_from(["a", "b", "c"])
    return st.one_of(
        st.builds(
            lambda props, req, extra: {
                "type": "object",
                "properties": props,
                "required": sorted(req),
                **({} if extra is None else {"additionalProperties": extra}),
            },
            st.dictionaries(names, inner, max_size=3),
            st.sets(names, max_size=2),
            st.one_of(st.none(), st.booleans(), inner),
        ),
        st.builds(lambda i: {"type": "array", "items": i, "maxItems": 4}, inner),
        st.builds(lambda bs: {"anyOf": bs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda bs: {"oneOf": bs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda bs: {"allOf": bs}, st.lists(inner, min_size=1, max_size=2)),
        st.builds(lambda n: {"not": n}, inner),
    )


json_schemas = st.recursive(leaf, _extend, max_leaves=12)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_schemas, json_schemas)
def test_json_checker_never_raises_and_is_reflexive(a: Any, b: Any) -> None:
    import json

    try:
        pa = schemas.parse("JSON", json.dumps(a))
        pb = schemas.parse("JSON", json.dumps(b))
    except InvalidSchema:
        return
    for level in ("BACKWARD", "FORWARD", "FULL"):
        assert isinstance(schemas.check_compatibility(pa, [pb], level), list)
    assert schemas.check_compatibility(pa, [pa], "FULL") == []


@pytest.mark.parametrize("text", _distinct(avro_table.ROWS))
def test_avro_canonical_form_means_the_same_schema(text: str) -> None:
    """The canonical text (Avro Java's Schema.toString() order, what Confluent stores) is
    the same schema: it parses to the same normalized form, and is its own canonical."""
    parsed = schemas.parse("AVRO", text)
    again = schemas.parse("AVRO", parsed.canonical())
    assert again.normalized() == parsed.normalized()
    assert again.canonical() == parsed.canonical()


def test_avro_canonical_key_order_is_javas() -> None:
    text = (
        '{"fields":[{"default":1,"type":{"type":"int"},"doc":"d","name":"age"}],'
        '"aliases":["U"],"namespace":"com.acme","name":"User","type":"record",'
        '"x-prop":"kept"}'
    )
    assert schemas.parse("AVRO", text).canonical() == (
        '{"type":"record","name":"User","namespace":"com.acme","fields":'
        '[{"name":"age","type":"int","doc":"d","default":1}],"x-prop":"kept","aliases":["U"]}'
    )
