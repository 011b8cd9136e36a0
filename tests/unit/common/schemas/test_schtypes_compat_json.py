"""JSON Schema compatibility table, written from Confluent's JSON Schema compatibility
rules: the reader (the new schema under BACKWARD, the old under FORWARD) must accept every
document the writer accepts. Open content model = ``additionalProperties`` absent/true;
closed = ``additionalProperties: false``. Each row: (old, new, level, compatible?, rule)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.common import schemas

B, F, FULL = "BACKWARD", "FORWARD", "FULL"


def obj(
    props: dict[str, Any] | None = None,
    *,
    req: list[str] | None = None,
    extra: Any = None,
    **kw: Any,
) -> str:
    s: dict[str, Any] = {"type": "object", "properties": props or {}}
    if req:
        s["required"] = req
    if extra is not None:
        s["additionalProperties"] = extra
    s.update(kw)
    return json.dumps(s)


def j(s: Any) -> str:
    return json.dumps(s)


INT, NUM, STR = {"type": "integer"}, {"type": "number"}, {"type": "string"}

ROWS: list[tuple[str, str, str, bool, str]] = [
    # --- content model: properties added / removed ---
    (
        obj({"a": INT}, extra=False),
        obj({"a": INT, "b": STR}, extra=False),
        B,
        True,
        "property added; the writer was closed: its data never has b",
    ),
    (
        obj({"a": INT}),
        obj({"a": INT, "b": STR}),
        B,
        False,
        "property added to an open content model: old data may carry b with any value",
    ),
    (
        obj({"a": INT}),
        obj({"a": INT, "b": {}}),
        B,
        True,
        "property added that accepts anything: compatible even when open",
    ),
    (
        obj({"a": INT}, extra=STR),
        obj({"a": INT, "b": STR}, extra=STR),
        B,
        True,
        "property added whose schema reads the writer's additionalProperties schema",
    ),
    (
        obj({"a": INT}, extra=STR),
        obj({"a": INT, "b": INT}, extra=STR),
        B,
        False,
        "property added narrower than the writer's additionalProperties",
    ),
    (
        obj({"a": INT, "b": STR}),
        obj({"a": INT}),
        B,
        True,
        "property removed; the reader is open: b is just extra",
    ),
    (
        obj({"a": INT, "b": STR}, extra=False),
        obj({"a": INT}, extra=False),
        B,
        False,
        "property removed from a closed reader: old data with b is refused",
    ),
    (
        obj({"a": INT, "b": STR}, extra=False),
        obj({"a": INT}, extra=STR),
        B,
        True,
        "property removed; reader's additionalProperties reads it (writer closed)",
    ),
    (
        obj({"a": INT, "b": STR}),
        obj({"a": INT}, extra=STR),
        B,
        False,
        "property removed; reader's additionalProperties reads it, but the open writer's other extras need not be strings",
    ),
    (
        obj({"a": INT, "b": STR}),
        obj({"a": INT}, extra=INT),
        B,
        False,
        "property removed; reader's additionalProperties does not read it",
    ),
    (
        obj({"a": INT}, extra=False),
        obj({"a": INT, "b": STR}, extra=False),
        F,
        False,
        "FORWARD of adding to closed: the old closed reader refuses b",
    ),
    (
        obj({"a": INT}),
        obj({"a": INT, "b": STR}),
        F,
        True,
        "FORWARD of adding to open: the old open reader ignores b",
    ),
    (
        obj({"a": INT}, extra=False),
        obj({"a": INT, "b": STR}, extra=False),
        FULL,
        False,
        "closed model: adding is backward only",
    ),
    (obj({"a": INT}), obj({"a": INT, "b": STR}), FULL, False, "open model: adding is forward only"),
    (
        obj({"a": INT}),
        obj({"a": INT}, extra=False),
        B,
        False,
        "content model closed: old open data may carry anything",
    ),
    (obj({"a": INT}, extra=False), obj({"a": INT}), B, True, "content model opened"),
    (
        obj({"a": INT}, extra=False),
        obj({"a": INT}),
        F,
        False,
        "content model opened: the old closed reader refuses extras",
    ),
    (
        obj({"a": INT}, extra=STR),
        obj({"a": INT}, extra=INT),
        B,
        False,
        "additionalProperties narrowed",
    ),
    (
        obj({"a": INT}, extra=INT),
        obj({"a": INT}, extra=NUM),
        B,
        True,
        "additionalProperties widened",
    ),
    # --- required ---
    (
        obj({"a": INT}),
        obj({"a": INT}, req=["a"]),
        B,
        False,
        "property made required: old data may lack it",
    ),
    (obj({"a": INT}, req=["a"]), obj({"a": INT}), B, True, "property no longer required"),
    (
        obj({"a": INT}, req=["a"]),
        obj({"a": INT}),
        F,
        False,
        "FORWARD: the old reader requires what new data may lack",
    ),
    (
        obj({"a": INT}),
        obj({"a": {"type": "integer", "default": 0}}, req=["a"]),
        B,
        True,
        "newly required with a default",
    ),
    (obj({"a": INT}, req=["a"]), obj({"a": INT}, req=["a"]), FULL, True, "required unchanged"),
    # --- type narrowing / widening ---
    (j(INT), j(NUM), B, True, "integer widened to number"),
    (j(NUM), j(INT), B, False, "number narrowed to integer"),
    (j(INT), j(NUM), F, False, "FORWARD of widening: the old integer reader refuses 1.5"),
    (j(STR), j({"type": ["string", "null"]}), B, True, "type union widened with null"),
    (j({"type": ["string", "null"]}), j(STR), B, False, "type union narrowed"),
    (j(STR), j(INT), B, False, "type changed"),
    (j({}), j(STR), B, False, "a type set where there was none"),
    (j(STR), j({}), B, True, "a type removed: anything is accepted"),
    (j(True), j(STR), B, False, "true (anything) narrowed to string"),
    (j(STR), j(True), B, True, "string widened to true"),
    (j(STR), j(False), B, False, "false accepts nothing"),
    (obj({"a": INT}), obj({"a": NUM}), B, True, "property type widened"),
    (obj({"a": NUM}), obj({"a": INT}), B, False, "property type narrowed"),
    # --- enums and const ---
    (j({"enum": ["a", "b"]}), j({"enum": ["a", "b", "c"]}), B, True, "enum value added"),
    (j({"enum": ["a", "b", "c"]}), j({"enum": ["a", "b"]}), B, False, "enum value removed"),
    (
        j({"enum": ["a", "b"]}),
        j({"enum": ["a", "b", "c"]}),
        F,
        False,
        "FORWARD of an enum value added",
    ),
    (
        j(STR),
        j({"type": "string", "enum": ["a"]}),
        B,
        False,
        "enum added to an unrestricted string",
    ),
    (j({"type": "string", "enum": ["a"]}), j(STR), B, True, "enum removed"),
    (j({"const": "x"}), j({"enum": ["x", "y"]}), B, True, "const widened to an enum containing it"),
    (j({"enum": ["x", "y"]}), j({"const": "x"}), B, False, "enum narrowed to a const"),
    # --- numeric bounds ---
    (
        j({"type": "integer", "minimum": 0}),
        j({"type": "integer", "minimum": 5}),
        B,
        False,
        "minimum increased",
    ),
    (
        j({"type": "integer", "minimum": 5}),
        j({"type": "integer", "minimum": 0}),
        B,
        True,
        "minimum decreased",
    ),
    (
        j({"type": "integer", "maximum": 10}),
        j({"type": "integer", "maximum": 5}),
        B,
        False,
        "maximum decreased",
    ),
    (
        j({"type": "integer", "maximum": 5}),
        j({"type": "integer", "maximum": 10}),
        B,
        True,
        "maximum increased",
    ),
    (j(INT), j({"type": "integer", "minimum": 0}), B, False, "minimum added"),
    (j({"type": "integer", "minimum": 0}), j(INT), B, True, "minimum removed"),
    (
        j({"type": "number", "exclusiveMinimum": 0}),
        j({"type": "number", "minimum": 0}),
        B,
        True,
        "exclusive minimum relaxed to inclusive",
    ),
    (
        j({"type": "number", "minimum": 0}),
        j({"type": "number", "exclusiveMinimum": 0}),
        B,
        False,
        "inclusive minimum made exclusive",
    ),
    (
        j({"type": "integer", "multipleOf": 4}),
        j({"type": "integer", "multipleOf": 2}),
        B,
        True,
        "multipleOf relaxed to a divisor",
    ),
    (
        j({"type": "integer", "multipleOf": 2}),
        j({"type": "integer", "multipleOf": 4}),
        B,
        False,
        "multipleOf tightened",
    ),
    # --- strings ---
    (
        j({"type": "string", "maxLength": 10}),
        j({"type": "string", "maxLength": 5}),
        B,
        False,
        "maxLength decreased",
    ),
    (
        j({"type": "string", "maxLength": 5}),
        j({"type": "string", "maxLength": 10}),
        B,
        True,
        "maxLength increased",
    ),
    (
        j({"type": "string", "minLength": 1}),
        j({"type": "string", "minLength": 3}),
        B,
        False,
        "minLength increased",
    ),
    (
        j({"type": "string", "minLength": 3}),
        j({"type": "string", "minLength": 1}),
        B,
        True,
        "minLength decreased",
    ),
    (j(STR), j({"type": "string", "pattern": "^a"}), B, False, "pattern added"),
    (j({"type": "string", "pattern": "^a"}), j(STR), B, True, "pattern removed"),
    (j(STR), j({"type": "string", "format": "email"}), B, False, "format added"),
    # --- arrays ---
    (
        j({"type": "array", "items": INT}),
        j({"type": "array", "items": NUM}),
        B,
        True,
        "items widened",
    ),
    (
        j({"type": "array", "items": NUM}),
        j({"type": "array", "items": INT}),
        B,
        False,
        "items narrowed",
    ),
    (
        j({"type": "array", "items": INT, "maxItems": 5}),
        j({"type": "array", "items": INT, "maxItems": 3}),
        B,
        False,
        "maxItems decreased",
    ),
    (
        j({"type": "array", "items": INT, "minItems": 2}),
        j({"type": "array", "items": INT}),
        B,
        True,
        "minItems removed",
    ),
    (
        j({"type": "array"}),
        j({"type": "array", "uniqueItems": True}),
        B,
        False,
        "uniqueItems added",
    ),
    (
        j({"type": "array", "items": [INT, STR]}),
        j({"type": "array", "items": [NUM, STR]}),
        B,
        True,
        "tuple item widened",
    ),
    (
        j({"type": "array", "items": [INT, STR]}),
        j({"type": "array", "items": [INT, INT]}),
        B,
        False,
        "tuple item changed",
    ),
    # --- combined schemas ---
    (j(STR), j({"oneOf": [STR, INT]}), B, True, "sum type extended: the old schema is a branch"),
    (j({"oneOf": [STR, INT]}), j(STR), B, False, "sum type narrowed to one branch"),
    (
        j({"anyOf": [STR, INT]}),
        j({"anyOf": [STR, INT, {"type": "null"}]}),
        B,
        True,
        "anyOf branch added",
    ),
    (
        j({"anyOf": [STR, INT, {"type": "null"}]}),
        j({"anyOf": [STR, INT]}),
        B,
        False,
        "anyOf branch removed",
    ),
    (j({"oneOf": [INT, STR]}), j({"oneOf": [NUM, STR]}), B, True, "oneOf branch widened"),
    (
        j({"allOf": [json.loads(obj({"a": INT})), json.loads(obj({"b": STR}))]}),
        j({"allOf": [json.loads(obj({"a": INT}))]}),
        B,
        True,
        "allOf branch removed: fewer constraints",
    ),
    (
        j({"allOf": [json.loads(obj({"a": INT}))]}),
        j({"allOf": [json.loads(obj({"a": INT})), json.loads(obj({"b": STR}, req=["b"]))]}),
        B,
        False,
        "allOf branch added that requires more",
    ),
    # --- references and nesting ---
    (
        j(
            {
                "definitions": {"A": INT},
                "type": "object",
                "properties": {"x": {"$ref": "#/definitions/A"}},
            }
        ),
        j(
            {
                "definitions": {"A": NUM},
                "type": "object",
                "properties": {"x": {"$ref": "#/definitions/A"}},
            }
        ),
        B,
        True,
        "local $ref followed: its target widened",
    ),
    (
        j(
            {
                "definitions": {"A": NUM},
                "type": "object",
                "properties": {"x": {"$ref": "#/definitions/A"}},
            }
        ),
        j(
            {
                "definitions": {"A": INT},
                "type": "object",
                "properties": {"x": {"$ref": "#/definitions/A"}},
            }
        ),
        B,
        False,
        "local $ref followed: its target narrowed",
    ),
    (
        obj({"n": json.loads(obj({"a": INT}))}),
        obj({"n": json.loads(obj({"a": STR}))}),
        B,
        False,
        "nested property type changed",
    ),
    (obj({"a": INT}), obj({"a": STR}), "NONE", True, "NONE accepts anything"),
]


@pytest.mark.parametrize(
    ("old", "new", "level", "compatible", "rule"), ROWS, ids=[r[4] for r in ROWS]
)
def test_json_compatibility(old: str, new: str, level: str, compatible: bool, rule: str) -> None:
    reasons = schemas.check_compatibility(
        schemas.parse("JSON", new), [schemas.parse("JSON", old)], level
    )
    assert (reasons == []) is compatible, reasons


def test_recursive_schema_comparison_ends() -> None:
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    a = schemas.parse("JSON", json.dumps(tree))
    assert schemas.check_compatibility(a, [a], "FULL") == []


def test_table_size() -> None:
    assert len(ROWS) >= 60
