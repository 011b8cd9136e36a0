"""Protobuf compatibility table, written from Confluent's Protobuf compatibility rules
(the differences from the writer's file to the reader's, each compatible or not) and the
Protobuf language guide's "Updating a message type" (wire-compatible scalar groups,
field numbers are the identity). Each row: (old, new, level, compatible?, rule).

Each distinct schema costs one protoc run (~0.1 s here, cached by text): ~5 s in all."""

from __future__ import annotations

import pytest

from app.common import schemas

B, F, FULL = "BACKWARD", "FORWARD", "FULL"


def m(body: str, extra: str = "", *, syntax: str = "proto3", package: str = "") -> str:
    pkg = f"package {package};\n" if package else ""
    return f'syntax = "{syntax}";\n{pkg}message M {{\n{body}\n}}\n{extra}'


def p2(body: str, extra: str = "") -> str:
    return m(body, extra, syntax="proto2")


S1 = "string a = 1;"
ROWS: list[tuple[str, str, str, bool, str]] = [
    # --- fields added / removed / renumbered ---
    (m(S1), m(S1 + " string b = 2;"), B, True, "FIELD_ADDED"),
    (m(S1), m(S1 + " string b = 2;"), F, True, "FIELD_ADDED, forward: unknown fields are skipped"),
    (m(S1), m(S1 + " string b = 2;"), FULL, True, "FIELD_ADDED, both ways"),
    (m(S1 + " string b = 2;"), m(S1), B, True, "FIELD_REMOVED"),
    (m(S1 + " string b = 2;"), m(S1), FULL, True, "FIELD_REMOVED, both ways"),
    (m(S1), m("string a = 2;"), B, True, "field number changed: a removal plus an addition"),
    (m(S1), m("string renamed = 1;"), FULL, True, "FIELD_NAME_CHANGED: the number is the identity"),
    (
        m(S1 + " reserved 2;"),
        m(S1),
        FULL,
        True,
        "reserved range dropped: not checked, no bytes change",
    ),
    # --- proto2 required ---
    (
        p2("optional string a = 1;"),
        p2("optional string a = 1; required string b = 2;"),
        B,
        False,
        "REQUIRED_FIELD_ADDED",
    ),
    (
        p2("optional string a = 1; required string b = 2;"),
        p2("optional string a = 1;"),
        B,
        False,
        "REQUIRED_FIELD_REMOVED",
    ),
    (
        p2("optional string a = 1;"),
        p2("required string a = 1;"),
        B,
        False,
        "optional made required",
    ),
    (
        p2("required string a = 1;"),
        p2("optional string a = 1;"),
        B,
        False,
        "required made optional (Confluent: REQUIRED_FIELD_REMOVED)",
    ),
    (
        p2("optional string a = 1;"),
        p2("optional string a = 1; optional int32 b = 2;"),
        FULL,
        True,
        "proto2 optional field added",
    ),
    # --- scalar kinds: wire-compatible groups ---
    (m("int32 x = 1;"), m("int64 x = 1;"), B, True, "int32 -> int64 (varint group)"),
    (
        m("int64 x = 1;"),
        m("int32 x = 1;"),
        B,
        True,
        "int64 -> int32 (varint group; truncation, as Confluent allows)",
    ),
    (m("int32 x = 1;"), m("uint32 x = 1;"), B, True, "int32 -> uint32 (varint group)"),
    (m("uint64 x = 1;"), m("bool x = 1;"), B, True, "uint64 -> bool (varint group)"),
    (m("sint32 x = 1;"), m("sint64 x = 1;"), B, True, "sint32 -> sint64 (zig-zag group)"),
    (
        m("int32 x = 1;"),
        m("sint32 x = 1;"),
        B,
        False,
        "int32 -> sint32: zig-zag is another encoding",
    ),
    (m("fixed32 x = 1;"), m("sfixed32 x = 1;"), B, True, "fixed32 -> sfixed32 (32-bit group)"),
    (m("fixed64 x = 1;"), m("sfixed64 x = 1;"), B, True, "fixed64 -> sfixed64 (64-bit group)"),
    (m("fixed32 x = 1;"), m("fixed64 x = 1;"), B, False, "fixed32 -> fixed64: another wire type"),
    (m("float x = 1;"), m("double x = 1;"), B, False, "float -> double: another wire type"),
    (m("string x = 1;"), m("bytes x = 1;"), FULL, True, "string <-> bytes"),
    (m("string x = 1;"), m("int32 x = 1;"), B, False, "FIELD_SCALAR_KIND_CHANGED string -> int32"),
    (m("bool x = 1;"), m("string x = 1;"), B, False, "FIELD_SCALAR_KIND_CHANGED bool -> string"),
    (m("double x = 1;"), m("int64 x = 1;"), B, False, "FIELD_SCALAR_KIND_CHANGED double -> int64"),
    # --- enums ---
    (
        m("int32 s = 1;"),
        m("S s = 1;", "enum S { A = 0; B = 1; }"),
        B,
        True,
        "int32 -> enum (ENUM_ADDED)",
    ),
    (
        m("S s = 1;", "enum S { A = 0; B = 1; }"),
        m("int32 s = 1;"),
        B,
        True,
        "enum -> int32 (ENUM_REMOVED)",
    ),
    (
        m("S s = 1;", "enum S { A = 0; }"),
        m("S s = 1;", "enum S { A = 0; B = 1; }"),
        FULL,
        True,
        "ENUM_CONST_ADDED",
    ),
    (
        m("S s = 1;", "enum S { A = 0; B = 1; }"),
        m("S s = 1;", "enum S { A = 0; }"),
        FULL,
        True,
        "ENUM_CONST_REMOVED",
    ),
    (
        m("S s = 1;", "enum S { A = 0; B = 1; }"),
        m("S s = 1;", "enum S { A = 0; C = 1; }"),
        FULL,
        True,
        "ENUM_CONST_CHANGED",
    ),
    (m("S s = 1;", "enum S { A = 0; }"), m("string s = 1;"), B, False, "enum -> string"),
    # --- message-typed fields ---
    (
        m("N n = 1;", "message N { string s = 1; }"),
        m("N n = 1;", "message N { string s = 1; int32 t = 2; }"),
        FULL,
        True,
        "field added inside the referenced message",
    ),
    (
        m("N n = 1;", "message N { string s = 1; }"),
        m("N n = 1;", "message N { int32 s = 1; }"),
        B,
        False,
        "FIELD_SCALAR_KIND_CHANGED inside the referenced message",
    ),
    (
        m("N n = 1;", "message N { string s = 1; }"),
        m("O n = 1;", "message O { string s = 1; }"),
        B,
        False,
        "FIELD_NAMED_TYPE_CHANGED (N -> O)",
    ),
    (
        m("int32 n = 1;"),
        m("N n = 1;", "message N { string s = 1; }"),
        B,
        False,
        "FIELD_KIND_CHANGED scalar -> message",
    ),
    (
        m("N n = 1;", "message N { string s = 1; }"),
        m("string n = 1;"),
        B,
        False,
        "FIELD_KIND_CHANGED message -> scalar (and MESSAGE_REMOVED)",
    ),
    (
        m("N n = 1; message N { string s = 1; }"),
        m(".M.N n = 1; message N { string s = 1; }"),
        FULL,
        True,
        "name qualification changed only",
    ),
    (
        m("M n = 1;"),
        m("M n = 1; string x = 2;"),
        FULL,
        True,
        "recursive message: field added (comparison ends)",
    ),
    # --- labels ---
    (
        m("string a = 1;"),
        m("repeated string a = 1;"),
        B,
        True,
        "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
    ),
    (
        m("bytes a = 1;"),
        m("repeated bytes a = 1;"),
        B,
        True,
        "FIELD_STRING_OR_BYTES_LABEL_CHANGED (bytes)",
    ),
    (
        m("int32 a = 1;"),
        m("repeated int32 a = 1;"),
        B,
        False,
        "FIELD_NUMERIC_LABEL_CHANGED (packed encoding)",
    ),
    (
        m("repeated int64 a = 1;"),
        m("int64 a = 1;"),
        B,
        False,
        "FIELD_NUMERIC_LABEL_CHANGED back to singular",
    ),
    (
        m("N a = 1;", "message N { string s = 1; }"),
        m("repeated N a = 1;", "message N { string s = 1; }"),
        B,
        True,
        "message field made repeated",
    ),
    (
        m("optional string a = 1;"),
        m("string a = 1;"),
        FULL,
        True,
        "proto3 optional removed (synthetic oneof, not a real one)",
    ),
    (m("string a = 1;"), m("optional string a = 1;"), FULL, True, "proto3 optional added"),
    # --- maps ---
    (
        m("map<string, int32> c = 1;"),
        m("map<string, int64> c = 1;"),
        B,
        True,
        "map value int32 -> int64",
    ),
    (
        m("map<string, int32> c = 1;"),
        m("map<string, string> c = 1;"),
        B,
        False,
        "map value FIELD_SCALAR_KIND_CHANGED",
    ),
    (
        m("map<string, int32> c = 1;"),
        m("map<int32, int32> c = 1;"),
        B,
        False,
        "map key FIELD_SCALAR_KIND_CHANGED",
    ),
    (
        m("map<string, int32> c = 1;"),
        m("int32 c = 1;"),
        B,
        False,
        "map -> scalar: FIELD_KIND_CHANGED",
    ),
    # --- oneofs ---
    (
        m("string a = 1; string b = 2;"),
        m("string a = 1; oneof o { string b = 2; int32 c = 3; }"),
        B,
        True,
        "ONEOF_ADDED: one existing field moved into a new oneof",
    ),
    (
        m("string a = 1; string b = 2;"),
        m("oneof o { string a = 1; string b = 2; }"),
        B,
        False,
        "MULTIPLE_FIELDS_MOVED_TO_ONEOF",
    ),
    (
        m("oneof o { string a = 1; string b = 2; }"),
        m("oneof o { string a = 1; string b = 2; int32 c = 3; }"),
        B,
        True,
        "ONEOF_FIELD_ADDED",
    ),
    (
        m("oneof o { string a = 1; string b = 2; int32 c = 3; }"),
        m("oneof o { string a = 1; string b = 2; }"),
        B,
        False,
        "ONEOF_FIELD_REMOVED",
    ),
    (
        m("oneof o { string a = 1; } string b = 2;"),
        m("oneof o { string a = 1; string b = 2; }"),
        B,
        False,
        "FIELD_MOVED_TO_EXISTING_ONEOF",
    ),
    (
        m("oneof o { string a = 1; }"),
        m("oneof p { string a = 1; }"),
        B,
        True,
        "oneof renamed: numbers unchanged",
    ),
    # --- messages, enums, package ---
    (m(S1), m(S1, "message Other { string s = 1; }"), B, True, "MESSAGE_ADDED"),
    (m(S1, "message Other { string s = 1; }"), m(S1), B, False, "MESSAGE_REMOVED"),
    (
        m(S1, "message Other { string s = 1; }"),
        m(S1),
        F,
        True,
        "MESSAGE_REMOVED, forward: the old file had more",
    ),
    (
        m(S1),
        m(S1, "message Other { string s = 1; }"),
        F,
        False,
        "MESSAGE_ADDED, forward: seen from the old file, removed",
    ),
    (
        'syntax = "proto3";\nmessage Z { string s = 1; }\nmessage M { string a = 1; }',
        m(S1, "message Z { string s = 1; }"),
        FULL,
        True,
        "MESSAGE_MOVED (index changed)",
    ),
    (m(S1, "enum E { A = 0; }"), m(S1), FULL, True, "ENUM_REMOVED (unused)"),
    (m(S1, package="a.v1"), m(S1, package="a.v2"), FULL, True, "PACKAGE_CHANGED"),
    (
        m("M.N n = 1; message N { int32 x = 1; }", package="p"),
        m("M.N n = 1; message N { int32 x = 1; }", package="q"),
        FULL,
        True,
        "package changed, nested type's local name the same",
    ),
    (m(S1), m("int32 a = 1;"), "NONE", True, "NONE accepts anything"),
]


@pytest.mark.parametrize(
    ("old", "new", "level", "compatible", "rule"), ROWS, ids=[r[4] for r in ROWS]
)
def test_protobuf_compatibility(
    old: str, new: str, level: str, compatible: bool, rule: str
) -> None:
    reasons = schemas.check_compatibility(
        schemas.parse("PROTOBUF", new), [schemas.parse("PROTOBUF", old)], level
    )
    assert (reasons == []) is compatible, reasons


def test_table_size() -> None:
    assert len(ROWS) >= 60
