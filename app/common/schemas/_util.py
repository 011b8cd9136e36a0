"""Checks shared by the providers: text size, nesting depth (scanned without recursion,
before any recursive parser sees the text), and the reference tree's shape."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from app.common.schema_errors import InvalidSchema
from app.common.schemas.types import LIMITS, ResolvedReference


def check_size(schema_type: str, text: str, what: str = "schema") -> None:
    if len(text) > LIMITS.max_schema_bytes or len(text.encode()) > LIMITS.max_schema_bytes:
        raise InvalidSchema(
            schema_type, f"{what} is over the limit of {LIMITS.max_schema_bytes} bytes"
        )


def check_depth(schema_type: str, text: str, open_: str, close: str, what: str = "schema") -> None:
    """Refuse text whose brackets nest deeper than the limit. Strings (double-quoted, with
    backslash escapes) are skipped; one linear pass, no recursion."""
    depth = 0
    limit = LIMITS.max_depth
    in_string = False
    escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in open_:
            depth += 1
            if depth > limit:
                raise InvalidSchema(schema_type, f"{what} nests deeper than {limit} levels")
        elif ch in close:
            depth -= 1


def load_json(schema_type: str, text: str, what: str = "schema") -> Any:
    """Parse JSON text after the size and depth checks; errors become InvalidSchema."""
    check_size(schema_type, text, what)
    check_depth(schema_type, text, "[{", "]}", what)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise InvalidSchema(schema_type, f"{what} is not valid JSON: {e}") from None


def flatten_references(
    schema_type: str, references: Sequence[ResolvedReference]
) -> list[ResolvedReference]:
    """The reference tree in dependency order (a schema after everything it refers to),
    each (subject, version) once. Refuses a cycle (a subject/version that refers back to
    itself along a path), a tree deeper or larger than the limits, and references of
    another schema type."""
    out: list[ResolvedReference] = []
    seen: set[tuple[str, int]] = set()
    count = 0

    # Iterative post-order walk: (reference, its path of (subject, version), children done?).
    stack: list[tuple[ResolvedReference, tuple[tuple[str, int], ...], bool]] = [
        (ref, (), False) for ref in reversed(references)
    ]
    while stack:
        ref, path, expanded = stack.pop()
        key = (ref.subject, ref.version)
        if expanded:
            if key not in seen:
                seen.add(key)
                out.append(ref)
            continue
        if key in path:
            chain = " -> ".join(f"{s}/{v}" for s, v in (*path, key))
            raise InvalidSchema(schema_type, f"reference cycle: {chain}")
        if len(path) >= LIMITS.max_reference_depth:
            raise InvalidSchema(
                schema_type, f"references nest deeper than {LIMITS.max_reference_depth} levels"
            )
        count += 1
        if count > LIMITS.max_references:
            raise InvalidSchema(
                schema_type, f"more than {LIMITS.max_references} references in the tree"
            )
        if ref.schema_type != schema_type:
            raise InvalidSchema(
                schema_type,
                f"reference {ref.name!r} ({ref.subject} version {ref.version}) is a "
                f"{ref.schema_type} schema; a {schema_type} schema can refer only to "
                f"{schema_type} schemas",
            )
        check_size(schema_type, ref.schema, f"reference {ref.name!r}")
        stack.append((ref, path, True))
        for child in reversed(ref.references):
            stack.append((child, (*path, key), False))
    return out
