"""AVRO compatibility table, written from the Avro specification's "Schema Resolution"
rules (a reader schema reading data written with a writer schema). BACKWARD: the new
schema reads the old one's data; FORWARD: the old reads the new's; FULL: both.
Each row: (old, new, level, compatible?) with the rule it exercises."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.common import schemas

B, F, FULL = "BACKWARD", "FORWARD", "FULL"


def rec(*fields: Any, name: str = "R", **extra: Any) -> str:
    out = []
    for f in fields:
        if isinstance(f, tuple):
            fname, ftype, *default = f
            field: dict[str, Any] = {"name": fname, "type": ftype}
            if default:
                field["default"] = default[0]
            out.append(field)
        else:
            out.append(f)
    return json.dumps({"type": "record", "name": name, "fields": out, **extra})


def enum(*symbols: str, **extra: Any) -> str:
    return json.dumps({"type": "enum", "name": "E", "symbols": list(symbols), **extra})


def fixed(size: int, name: str = "F") -> str:
    return json.dumps({"type": "fixed", "name": name, "size": size})


def p(t: Any) -> str:
    return json.dumps(t)


ROWS: list[tuple[str, str, str, bool, str]] = [
    # --- record fields ---
    (
        rec(("a", "int")),
        rec(("a", "int"), ("b", "int", 0)),
        B,
        True,
        "field added with a default: the reader fills it",
    ),
    (
        rec(("a", "int")),
        rec(("a", "int"), ("b", "int")),
        B,
        False,
        "field added without a default: old data lacks it",
    ),
    (
        rec(("a", "int")),
        rec(("a", "int"), ("b", "int")),
        F,
        True,
        "field added: the old reader ignores the writer's extra field",
    ),
    (
        rec(("a", "int")),
        rec(("a", "int"), ("b", "int")),
        FULL,
        False,
        "field added without a default fails the backward half",
    ),
    (
        rec(("a", "int")),
        rec(("a", "int"), ("b", "int", 0)),
        FULL,
        True,
        "field added with a default: both ways",
    ),
    (
        rec(("a", "int"), ("b", "int")),
        rec(("a", "int")),
        B,
        True,
        "field removed: the new reader ignores it",
    ),
    (
        rec(("a", "int"), ("b", "int")),
        rec(("a", "int")),
        F,
        False,
        "field removed without a default: the old reader misses it",
    ),
    (
        rec(("a", "int"), ("b", "int", 1)),
        rec(("a", "int")),
        F,
        True,
        "field removed that had a default: the old reader fills it",
    ),
    (
        rec(("a", "int"), ("b", "int", 1)),
        rec(("a", "int")),
        FULL,
        True,
        "field with default removed: both ways",
    ),
    (
        rec(("a", "int")),
        rec(("c", "int")),
        B,
        False,
        "field renamed: new name has no default, no alias",
    ),
    (
        rec(("a", "int")),
        rec({"name": "c", "type": "int", "aliases": ["a"]}),
        B,
        True,
        "field renamed with an alias of the old name",
    ),
    (
        rec(("a", "int")),
        rec(("c", "int", 0)),
        B,
        True,
        "field renamed with a default: filled, the old field ignored",
    ),
    (
        rec(("a", "int"), ("b", "string")),
        rec(("b", "string"), ("a", "int")),
        FULL,
        True,
        "fields reordered: matched by name",
    ),
    (rec(), rec(("a", ["null", "int"], None)), FULL, True, "optional field (null default) added"),
    (
        rec(("a", "int", 1)),
        rec(("a", "int", 2)),
        FULL,
        True,
        "default value changed: not part of resolution of present fields",
    ),
    # --- promotions ---
    (rec(("a", "int")), rec(("a", "long")), B, True, "int promoted to long"),
    (rec(("a", "int")), rec(("a", "long")), F, False, "long cannot be read as int"),
    (rec(("a", "int")), rec(("a", "long")), FULL, False, "promotion is one-way"),
    (rec(("a", "int")), rec(("a", "float")), B, True, "int promoted to float"),
    (rec(("a", "int")), rec(("a", "double")), B, True, "int promoted to double"),
    (rec(("a", "long")), rec(("a", "float")), B, True, "long promoted to float"),
    (rec(("a", "long")), rec(("a", "double")), B, True, "long promoted to double"),
    (rec(("a", "float")), rec(("a", "double")), B, True, "float promoted to double"),
    (rec(("a", "double")), rec(("a", "float")), B, False, "double is not demoted to float"),
    (rec(("a", "long")), rec(("a", "int")), B, False, "long is not demoted to int"),
    (rec(("a", "string")), rec(("a", "bytes")), B, True, "string promoted to bytes"),
    (rec(("a", "bytes")), rec(("a", "string")), B, True, "bytes promoted to string"),
    (rec(("a", "string")), rec(("a", "bytes")), FULL, True, "string/bytes both ways"),
    (rec(("a", "int")), rec(("a", "string")), B, False, "int and string do not match"),
    (rec(("a", "boolean")), rec(("a", "int")), B, False, "boolean is not promoted"),
    (rec(("a", "null")), rec(("a", "int")), B, False, "null does not match int"),
    # --- enums ---
    (
        enum("A", "B"),
        enum("A", "B", "C"),
        B,
        True,
        "enum symbol added: the reader knows all written ones",
    ),
    (
        enum("A", "B"),
        enum("A", "B", "C"),
        F,
        False,
        "enum symbol added: the old reader lacks C (no default)",
    ),
    (enum("A", "B", "C"), enum("A", "B"), B, False, "enum symbol removed: old data may hold it"),
    (
        enum("A", "B", "C"),
        enum("A", "B", default="A"),
        B,
        True,
        "enum symbol removed, reader has a default",
    ),
    (
        enum("A", "B", default="A"),
        enum("A", "B", "C", default="A"),
        F,
        True,
        "enum symbol added, old reader has a default",
    ),
    (enum("A", "B"), enum("B", "A"), FULL, True, "enum symbols reordered: resolved by name"),
    (
        enum("A"),
        json.dumps({"type": "enum", "name": "Other", "symbols": ["A"]}),
        B,
        False,
        "enum renamed: names must match",
    ),
    (
        enum("A"),
        json.dumps({"type": "enum", "name": "Other", "symbols": ["A"], "aliases": ["E"]}),
        B,
        True,
        "enum renamed with an alias",
    ),
    # --- unions ---
    (
        rec(("a", "int")),
        rec(("a", ["null", "int"], None)),
        B,
        True,
        "union widened from a branch type: writer's int is a branch",
    ),
    (
        rec(("a", "int")),
        rec(("a", ["null", "int"], None)),
        F,
        False,
        "reader int cannot read a null written by the union",
    ),
    (
        rec(("a", ["null", "int"])),
        rec(("a", ["null", "int", "string"])),
        B,
        True,
        "union widened: every written branch readable",
    ),
    (
        rec(("a", ["null", "int", "string"])),
        rec(("a", ["null", "int"])),
        B,
        False,
        "union narrowed: string no longer readable",
    ),
    (
        rec(("a", ["null", "int", "string"])),
        rec(("a", ["null", "int"])),
        F,
        True,
        "union narrowed: the old reader reads the subset",
    ),
    (
        rec(("a", ["null", "int"])),
        rec(("a", ["int", "null"])),
        FULL,
        True,
        "union branches reordered",
    ),
    (
        rec(("a", ["null", "int"])),
        rec(("a", ["null", "long"])),
        B,
        True,
        "union branch promoted int to long",
    ),
    (
        rec(("a", ["null", "int"])),
        rec(("a", "int")),
        B,
        False,
        "union to a single type: null not readable",
    ),
    (
        rec(("a", ["int", "long"])),
        rec(("a", "long")),
        B,
        True,
        "union to a type every branch promotes to",
    ),
    # --- arrays and maps ---
    (
        rec(("a", {"type": "array", "items": "int"})),
        rec(("a", {"type": "array", "items": "long"})),
        B,
        True,
        "array items promoted",
    ),
    (
        rec(("a", {"type": "array", "items": "long"})),
        rec(("a", {"type": "array", "items": "int"})),
        B,
        False,
        "array items narrowed",
    ),
    (
        rec(("a", {"type": "map", "values": "int"})),
        rec(("a", {"type": "map", "values": "double"})),
        B,
        True,
        "map values promoted",
    ),
    (
        rec(("a", {"type": "map", "values": "string"})),
        rec(("a", {"type": "map", "values": "int"})),
        B,
        False,
        "map values changed type",
    ),
    (
        rec(("a", {"type": "array", "items": "int"})),
        rec(("a", {"type": "map", "values": "int"})),
        B,
        False,
        "array to map",
    ),
    # --- fixed ---
    (fixed(4), fixed(4), FULL, True, "same fixed"),
    (fixed(4), fixed(8), B, False, "fixed size changed"),
    (fixed(4), fixed(4, name="G"), B, False, "fixed renamed without alias"),
    # --- named records ---
    (
        rec(("a", "int")),
        rec(("a", "int"), name="Other"),
        B,
        False,
        "record renamed: names must match",
    ),
    (
        rec(("a", "int")),
        rec(("a", "int"), name="Other", aliases=["R"]),
        B,
        True,
        "record renamed with an alias of the old name",
    ),
    (
        rec(("a", "int"), name="n1.R"),
        rec(("a", "int"), name="n2.R"),
        B,
        True,
        "namespace changed: resolution compares unqualified names",
    ),
    (
        rec(("a", "int")),
        rec(("a", "int"), doc="documented"),
        FULL,
        True,
        "doc added: ignored by resolution",
    ),
    (
        rec(("n", json.loads(rec(("x", "int"), name="Inner")))),
        rec(("n", json.loads(rec(("x", "int"), ("y", "int", 0), name="Inner")))),
        FULL,
        True,
        "nested record: field with default added",
    ),
    (
        rec(("n", json.loads(rec(("x", "int"), name="Inner")))),
        rec(("n", json.loads(rec(("x", "string"), name="Inner")))),
        B,
        False,
        "nested record: field type changed",
    ),
    # --- primitives at the top ---
    (p("string"), p("string"), FULL, True, "identical"),
    (p("int"), p("long"), B, True, "top-level int to long"),
    (p("string"), p(["null", "string"]), B, True, "top-level type made nullable"),
    (p("string"), p("int"), B, False, "top-level type changed"),
    (p("string"), p("int"), "NONE", True, "NONE accepts anything"),
]


@pytest.mark.parametrize(
    ("old", "new", "level", "compatible", "rule"), ROWS, ids=[r[4] for r in ROWS]
)
def test_avro_compatibility(old: str, new: str, level: str, compatible: bool, rule: str) -> None:
    reasons = schemas.check_compatibility(
        schemas.parse("AVRO", new), [schemas.parse("AVRO", old)], level
    )
    assert (reasons == []) is compatible, reasons


def test_table_size() -> None:
    assert len(ROWS) >= 60
