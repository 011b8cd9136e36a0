"""Compatibility of two JSON Schemas, after Confluent's JSON Schema rules: the reader
schema must accept every document the writer schema accepts.

Implemented (each finding names its rule, Confluent's difference names in spirit):
- type: narrowed (``number`` -> ``integer``, a type dropped from a list, a type set where
  there was none) is incompatible; widened (``integer`` -> ``number``, a type added) is not;
- content model: a property added to the reader is incompatible when the writer is open
  (its documents may carry that name with any value), compatible when the writer is closed
  (``additionalProperties: false``) or its ``additionalProperties`` schema is readable by
  the new property's; a property removed from the reader is incompatible when the reader
  is closed; closing an open content model is incompatible, opening one is not;
- ``required``: a property newly required by the reader (without a default) is
  incompatible, one no longer required is compatible;
- ``enum``/``const``: the reader's values must include all the writer's;
- numeric bounds (minimum, maximum, exclusive forms, ``multipleOf``), string lengths,
  ``pattern``, ``format`` changed, array ``items`` (and tuple ``items``/``prefixItems``),
  ``minItems``/``maxItems``/``uniqueItems``, ``minProperties``/``maxProperties``:
  tightening in the reader is incompatible, loosening compatible;
- combined schemas: ``anyOf``/``oneOf`` branches — every writer branch must be read by some
  reader branch (adding branches widens; a plain schema turned into a sum type with it as
  a branch is compatible); ``allOf`` — the writer must satisfy every reader branch;
- ``$ref``: local (``#/definitions/...``, ``#/$defs/...``) and to references, followed
  (a pair already under comparison is assumed compatible, so recursive schemas end).

Not implemented (reported as incompatible when they differ, never silently accepted):
``not``, ``if``/``then``/``else``, ``dependencies``/``dependentSchemas``/
``dependentRequired``, ``patternProperties``, ``propertyNames``, ``contains``,
``unevaluated*``.
"""

from __future__ import annotations

from typing import Any

_STRICT_EQUAL = (
    "not",
    "if",
    "then",
    "else",
    "dependencies",
    "dependentSchemas",
    "dependentRequired",
    "patternProperties",
    "propertyNames",
    "contains",
    "unevaluatedProperties",
    "unevaluatedItems",
)
_ALL_TYPES = frozenset(("null", "boolean", "object", "array", "number", "string", "integer"))
# Keys that say nothing about which documents are valid.
_ANNOTATIONS = frozenset(
    ("title", "description", "default", "examples", "$comment", "$id", "$schema", "id")
)


class Compare:
    """One reader/writer comparison. ``run`` returns the reasons (empty: compatible)."""

    def __init__(self, reader: Any, writer: Any) -> None:
        self.reader = reader
        self.writer = writer
        self.reasons: list[str] = []
        self._busy: set[tuple[int, int]] = set()
        self._steps = 0

    def run(self) -> list[str]:
        self.compare(self.reader.doc, self.writer.doc, "#")
        return self.reasons

    def _fail(self, path: str, rule: str, detail: str) -> None:
        self.reasons.append(f"{rule} at {path}: {detail}")

    def _deref(self, node: Any, side: Any) -> Any:
        """Follow ``$ref`` chains (local pointers and references). Unknown: left as is."""
        for _ in range(32):
            if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
                return node
            ref: str = node["$ref"]
            target = _resolve(ref, side)
            if target is None:
                return node
            # Sibling keywords beside $ref (2019-09+) are kept.
            rest = {k: v for k, v in node.items() if k != "$ref"}
            node = {**target, **rest} if rest and isinstance(target, dict) else target
        return node

    def compare(self, r: Any, w: Any, path: str) -> None:
        self._steps += 1
        if self._steps > 100_000:
            self._fail(path, "TOO_COMPLEX", "the schemas are too large to compare")
            return
        r = self._deref(r, self.reader)
        w = self._deref(w, self.writer)
        key = (id(r), id(w))
        if key in self._busy:
            return  # a recursive schema: this pair is already being compared above
        self._busy.add(key)
        try:
            self._compare(r, w, path)
        finally:
            self._busy.discard(key)

    def _compare(self, r: Any, w: Any, path: str) -> None:
        if r is True or r == {} or w is False:
            return
        if r is False:
            self._fail(path, "SCHEMA_NARROWED", "the reader accepts nothing")
            return
        if w is True or w == {}:
            w = {}
        if not isinstance(r, dict) or not isinstance(w, dict):
            return

        # Combined schemas first: they decide which parts are compared with which.
        r_sum = r.get("anyOf") or r.get("oneOf")
        w_sum = w.get("anyOf") or w.get("oneOf")
        if w_sum and isinstance(w_sum, list):
            plain_w = {k: v for k, v in w.items() if k not in ("anyOf", "oneOf")}
            for i, branch in enumerate(w_sum):
                merged = _merge(plain_w, branch)
                if not self._readable(r, merged, f"{path}/anyOf/{i}"):
                    self._fail(
                        path,
                        "COMBINED_TYPE_SUBSCHEMAS_CHANGED",
                        f"the writer's branch {i} is read by no reader branch",
                    )
            return
        if r_sum and isinstance(r_sum, list):
            plain_r = {k: v for k, v in r.items() if k not in ("anyOf", "oneOf")}
            if not any(
                self._readable(_merge(plain_r, b), w, f"{path}/anyOf/{i}")
                for i, b in enumerate(r_sum)
            ):
                self._fail(path, "COMBINED_TYPE_CHANGED", "no reader branch reads the writer")
            return
        if isinstance(r.get("allOf"), list):
            rest = {k: v for k, v in r.items() if k != "allOf"}
            # The writer's documents satisfy every writer branch: a reader branch reads
            # them if it reads one of those branches (with the writer's other keywords),
            # or the writer's branches folded together.
            candidates = [_without_allof(w)]
            if isinstance(w.get("allOf"), list):
                w_rest = {k: v for k, v in w.items() if k != "allOf"}
                candidates += [_merge(w_rest, wb) for wb in w["allOf"]]
            for i, branch in enumerate(r["allOf"]):
                where = f"{path}/allOf/{i}"
                if not any(self._readable(branch, c, where) for c in candidates):
                    self.compare(branch, candidates[0], where)
            if rest:
                self._compare(rest, w, path)
            return
        if isinstance(w.get("allOf"), list):
            w = _without_allof(w)

        for key in _STRICT_EQUAL:
            if r.get(key) != w.get(key) and key in r:
                self._fail(path, "UNSUPPORTED_KEYWORD_CHANGED", f"{key!r} differs (not analysed)")

        self._types(r, w, path)
        self._values(r, w, path)
        self._numbers(r, w, path)
        self._strings(r, w, path)
        self._objects(r, w, path)
        self._arrays(r, w, path)

    def _readable(self, r: Any, w: Any, path: str) -> bool:
        probe = Compare(self.reader, self.writer)
        probe._busy = set(self._busy)
        probe._steps = self._steps
        probe.compare(r, w, path)
        self._steps = probe._steps
        return not probe.reasons

    def _types(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        rt = _types(r)
        if rt is None:
            return
        wt = _types(w)
        if wt is None:
            wt = _inferred(w)
        missing = {t for t in wt if t not in rt and not (t == "integer" and "number" in rt)}
        if missing:
            self._fail(
                path,
                "TYPE_NARROWED",
                f"the writer allows {sorted(missing)}, the reader only {sorted(rt)}",
            )

    def _values(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        r_vals = _allowed(r)
        if r_vals is None:
            return
        w_vals = _allowed(w)
        if w_vals is None:
            self._fail(path, "ENUM_ARRAY_NARROWED", "the reader restricts values to an enum")
            return
        gone = [v for v in w_vals if v not in r_vals]
        if gone:
            self._fail(path, "ENUM_ARRAY_NARROWED", f"values {gone!r} are no longer allowed")

    def _numbers(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        lo_r, lo_w = _lower(r), _lower(w)
        if lo_r is not None and (lo_w is None or lo_w < lo_r):
            self._fail(path, "MINIMUM_INCREASED", f"minimum {lo_w} -> {lo_r}")
        hi_r, hi_w = _upper(r), _upper(w)
        if hi_r is not None and (hi_w is None or hi_w > hi_r):
            self._fail(path, "MAXIMUM_DECREASED", f"maximum {hi_w} -> {hi_r}")
        m_r, m_w = r.get("multipleOf"), w.get("multipleOf")
        if (
            isinstance(m_r, int | float)
            and m_r != 0
            and (not isinstance(m_w, int | float) or (m_w / m_r) != int(m_w / m_r))
        ):
            self._fail(path, "MULTIPLE_OF_CHANGED", f"multipleOf {m_w} -> {m_r}")

    def _strings(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        self._bounds(r, w, path, "minLength", "maxLength", "STRING_LENGTH")
        if "pattern" in r and r.get("pattern") != w.get("pattern"):
            self._fail(path, "PATTERN_CHANGED", f"pattern {w.get('pattern')!r} -> {r['pattern']!r}")
        if "format" in r and r.get("format") != w.get("format"):
            self._fail(path, "FORMAT_CHANGED", f"format {w.get('format')!r} -> {r['format']!r}")

    def _bounds(
        self, r: dict[str, Any], w: dict[str, Any], path: str, lo: str, hi: str, rule: str
    ) -> None:
        if lo in r and r[lo] > w.get(lo, 0):
            self._fail(path, f"{rule}_INCREASED", f"{lo} {w.get(lo, 0)} -> {r[lo]}")
        if hi in r and (hi not in w or w[hi] > r[hi]):
            self._fail(path, f"{rule}_DECREASED", f"{hi} {w.get(hi)} -> {r[hi]}")

    def _objects(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        r_props: dict[str, Any] = r.get("properties") or {}
        w_props: dict[str, Any] = w.get("properties") or {}
        r_extra = r.get("additionalProperties", True)
        w_extra = w.get("additionalProperties", True)
        for name, sub in r_props.items():
            where = f"{path}/properties/{name}"
            if name in w_props:
                self.compare(sub, w_props[name], where)
            elif w_extra is False:
                pass  # the writer's documents never carry it
            elif w_extra is True or w_extra == {}:
                if not _accepts_all(self._deref(sub, self.reader)):
                    self._fail(
                        where,
                        "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
                        f"{name!r} is new and the writer's content model is open: its "
                        "documents may carry it with any value",
                    )
            else:
                self.compare(sub, w_extra, where)
        for name, sub in w_props.items():
            if name in r_props:
                continue
            where = f"{path}/properties/{name}"
            if r_extra is False:
                self._fail(
                    where,
                    "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                    f"{name!r} is gone and the reader refuses unknown properties",
                )
            elif r_extra is not True and r_extra != {}:
                self.compare(r_extra, sub, where)
        if r_extra is not True and r_extra != {} and w_extra is not False:
            if r_extra is False:
                self._fail(
                    path,
                    "ADDITIONAL_PROPERTIES_REMOVED",
                    "the reader closed the content model (additionalProperties: false)",
                )
            else:
                self.compare(r_extra, w_extra, f"{path}/additionalProperties")
        r_req = set(r.get("required") or ())
        w_req = set(w.get("required") or ())
        for name in sorted(r_req - w_req):
            prop = self._deref(r_props.get(name), self.reader)
            if not (isinstance(prop, dict) and "default" in prop):
                self._fail(
                    f"{path}/required",
                    "REQUIRED_PROPERTY_ADDED",
                    f"{name!r} is required now; the writer's documents may lack it",
                )
        self._bounds(r, w, path, "minProperties", "maxProperties", "PROPERTIES_COUNT")

    def _arrays(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        r_items, w_items = r.get("prefixItems"), w.get("prefixItems")
        r_rest, w_rest = r.get("items", True), w.get("items", True)
        if r_items is None and isinstance(r_rest, list):  # draft-04..07 tuple form
            r_items, r_rest = r_rest, r.get("additionalItems", True)
        if w_items is None and isinstance(w_rest, list):
            w_items, w_rest = w_rest, w.get("additionalItems", True)
        r_items, w_items = r_items or [], w_items or []
        for i in range(max(len(r_items), len(w_items))):
            rs = r_items[i] if i < len(r_items) else r_rest
            ws = w_items[i] if i < len(w_items) else w_rest
            self.compare(rs, ws, f"{path}/items/{i}")
        self.compare(r_rest, w_rest, f"{path}/items")
        self._bounds(r, w, path, "minItems", "maxItems", "ITEMS_COUNT")
        if r.get("uniqueItems") and not w.get("uniqueItems"):
            self._fail(path, "UNIQUE_ITEMS_ADDED", "the reader requires unique items")


def _resolve(ref: str, side: Any) -> Any:
    doc, _, pointer = ref.partition("#")
    if doc:
        root = side.documents.get(doc)
        if root is None:
            return None
    else:
        root = side.doc
    node = root
    for part in [p for p in pointer.split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isascii() and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _types(s: dict[str, Any]) -> set[str] | None:
    t = s.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def _inferred(s: dict[str, Any]) -> set[str]:
    vals = _allowed(s)
    if vals is not None:
        return {_type_of(v) for v in vals}
    return set(_ALL_TYPES - {"integer"})


def _type_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _allowed(s: dict[str, Any]) -> list[Any] | None:
    if "const" in s:
        return [s["const"]]
    e = s.get("enum")
    return list(e) if isinstance(e, list) else None


def _lower(s: dict[str, Any]) -> float | None:
    lo = s.get("minimum")
    ex = s.get("exclusiveMinimum")
    if isinstance(ex, bool):  # draft-04: a flag on minimum
        return None if lo is None else lo + (1e-12 if ex else 0)
    if isinstance(ex, int | float) and (lo is None or ex >= lo):
        return ex + 1e-12
    return lo if isinstance(lo, int | float) else None


def _upper(s: dict[str, Any]) -> float | None:
    hi = s.get("maximum")
    ex = s.get("exclusiveMaximum")
    if isinstance(ex, bool):
        return None if hi is None else hi - (1e-12 if ex else 0)
    if isinstance(ex, int | float) and (hi is None or ex <= hi):
        return ex - 1e-12
    return hi if isinstance(hi, int | float) else None


def _accepts_all(s: Any) -> bool:
    if s is True:
        return True
    return isinstance(s, dict) and not (set(s) - _ANNOTATIONS)


def _merge(base: dict[str, Any], branch: Any) -> Any:
    if not base:
        return branch
    if isinstance(branch, dict):
        return {**base, **branch}
    return branch


def _without_allof(w: dict[str, Any]) -> dict[str, Any]:
    """The writer's ``allOf`` folded into one schema (later branches win on a conflict: an
    approximation; ``properties`` and ``required`` are united)."""
    if not isinstance(w.get("allOf"), list):
        return w
    out = {k: v for k, v in w.items() if k != "allOf"}
    for branch in w["allOf"]:
        if not isinstance(branch, dict):
            continue
        branch = _without_allof(branch)
        for k, v in branch.items():
            if k == "properties":
                out["properties"] = {**out.get("properties", {}), **v}
            elif k == "required":
                out["required"] = sorted({*out.get("required", ()), *v})
            else:
                out.setdefault(k, v)
    return out
