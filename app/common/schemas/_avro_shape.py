"""What an Avro schema's values can do, measured once when it is parsed (on fastavro's
parsed schema and its named-type table): whether a named type is used inside its own
definition (:func:`is_recursive`), how deep a value may nest and how many levels it
nests per byte read (:func:`nesting`), and the most values one datum builds from no
bytes (:func:`zero_byte_values`, refused over ``LIMITS.max_zero_byte_values`` by
:func:`checked_zero_byte_values`). Pure functions, iterative, linear in the schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.common.schema_errors import InvalidSchema
from app.common.schemas.types import LIMITS

# The named types (Avro's: they define a name other types may use).
NAMED = frozenset(("record", "error", "enum", "fixed"))


# A schema node's identity while a walk counts it: a named type by its name (counted once
# however often it is used), a primitive by its name, any other node by itself.
Key = tuple[str, Any]


def _key(node: Any, named: dict[str, Any]) -> Key:
    if isinstance(node, str):
        return ("name", node) if node in named else ("leaf", node)
    if isinstance(node, dict) and node.get("name") in named and node.get("type") in NAMED:
        return ("name", node["name"])
    return ("id", id(node))


def is_recursive(schema: Any) -> bool:
    """Whether a named type is used inside its own definition. In Avro a name must be
    defined before use, so every cycle shows as a name referenced within the definition
    of that name; names are compared both full and short (a false positive costs only
    speed). Iterative: the schema's depth is bounded by LIMITS, but no recursion anyway."""
    stack: list[tuple[Any, frozenset[str]]] = [(schema, frozenset())]
    while stack:
        node, defining = stack.pop()
        if isinstance(node, str):
            if node in defining or node.rpartition(".")[2] in defining:
                return True
        elif isinstance(node, list):
            stack.extend((branch, defining) for branch in node)
        elif isinstance(node, dict):
            name = node.get("name")
            if node.get("type") in NAMED and isinstance(name, str):
                ns = node.get("namespace")
                full = f"{ns}.{name}" if ns and "." not in name else name
                defining = defining | {full, full.rpartition(".")[2]}
            for key in ("type", "items", "values"):
                if key in node:
                    stack.append((node[key], defining))
            for field in node.get("fields") or ():
                if isinstance(field, dict) and "type" in field:
                    stack.append((field["type"], defining))
    return False


def nesting(parsed: Any, named: dict[str, Any]) -> tuple[int | None, int | None]:
    """How deep a value of fastavro's parsed schema ``parsed`` (with its named-type table)
    may nest, in schema nodes (fastavro's compiled code recurses once or more per node),
    and the most nodes it may nest through without reading a byte (a record's fields: a
    union, array or map reads its index or count before its value); None for without
    bound (a cycle: a recursive schema; for the second, records that contain themselves
    through records alone, whose values no bytes can end). Iterative: named types may
    chain thousands deep."""

    edges, _ = _graph(parsed, named)

    def every_child(at: Key) -> list[Key]:
        return [c for c, _ in edges[at]]

    def longest(_at: Key, below: list[int]) -> int:
        return 1 + max(below, default=0)

    root, done = _key(parsed, named), dict[Key, int]()
    depth = None if _fold(every_child, root, done, longest) is not None else done[root]
    done_free: dict[Key, int] = {}
    per_byte = 1
    for at in edges:
        if _fold(_free_children(edges), at, done_free, longest) is not None:
            return depth, None
        per_byte = max(per_byte, done_free[at])
    return depth, per_byte


# Where zero_byte_values stops counting (the bound is far below; keeps the sums small).
_COUNT_CAP = 1 << 62


def zero_byte_values(parsed: Any, named: dict[str, Any]) -> tuple[int | None, str]:
    """The most values one datum of any type in fastavro's parsed schema ``parsed`` (with
    its named-type table) builds from no bytes, and the type that builds them (its name,
    or its kind); None for without bound (a record that contains itself through record
    fields alone: no bytes can end its value).

    A decoder reads nothing for a null, a fixed of size 0 and a record (its fields are
    read in turn), and at least a byte for every other type: a boolean, number, string,
    bytes, enum or union index, and an array's or map's block count. So a datum of type T
    builds ``zero(T)`` values from no bytes: 1 for a null or a fixed of size 0, 1 plus its
    fields' for a record, 0 for any other type (its value is paid by the byte it reads). A
    union's branch, an array's item and a map's value each start such a run after their
    byte (a record of two fields of type R_(i-1), R_0 two nulls: zero(R_k) = 2**(k+2) - 1,
    all from one union byte), so the answer is the largest ``zero`` of every type the
    schema uses, not only the root's. (An array's items are another matter: one block
    count declares many; the decoder charges them, ``max_zero_width_items``.)

    Linear in the schema: each named type is counted once however often it is used (by
    name, the records of the example above are k + 1 nodes, not 2**k), iteratively (named
    types may chain thousands deep), the sums capped at _COUNT_CAP."""

    edges, node_of = _graph(parsed, named)

    def count(at: Key, below: list[int]) -> int:
        return min(_COUNT_CAP, _own(node_of[at]) + sum(below))

    counted: dict[Key, int] = {}
    for start in edges:
        cycle = _fold(_free_children(edges), start, counted, count)
        if cycle is not None:
            return None, _type_name(node_of[cycle])
    worst = max(counted, key=counted.__getitem__)
    return counted[worst], _type_name(node_of[worst])


def _own(node: Any) -> int:
    """The values a node builds itself from no bytes: 1 for a null, a fixed of size 0 and
    a record (its fields count apart), 0 for every other (it reads a byte first)."""
    if isinstance(node, str):
        return 1 if node == "null" else 0
    if not isinstance(node, dict):
        return 0  # a union
    kind = node.get("type")
    if kind in ("record", "error") or kind == "null":  # {"type": "null"}, with properties
        return 1
    return 1 if kind == "fixed" and node.get("size") == 0 else 0


Edges = dict[Key, list[tuple[Key, bool]]]


def _graph(parsed: Any, named: dict[str, Any]) -> tuple[Edges, dict[Key, Any]]:
    """Every node reachable from ``parsed``, once (a named type by its name): its
    children, each with whether it is read without a byte first (a record's fields, the
    type a type object wraps) or after one (a union's branch after its index, an array's
    items and a map's values after their block count); and each key's node."""
    edges: Edges = {}
    node_of: dict[Key, Any] = {}
    pending = [parsed]
    while pending:
        node = pending.pop()
        at = _key(node, named)
        if at in edges:
            continue
        if isinstance(node, str) and node in named:
            node = named[node]
        node_of[at] = node
        children: list[tuple[Any, bool]] = []
        if isinstance(node, list):
            children = [(branch, False) for branch in node]
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in ("record", "error"):
                children = [(f["type"], True) for f in node.get("fields") or ()]
            elif kind == "array":
                children = [(node["items"], False)]
            elif kind == "map":
                children = [(node["values"], False)]
            elif isinstance(kind, dict | list) or (isinstance(kind, str) and kind in named):
                children = [(kind, True)]  # a type object around another type
        edges[at] = [(_key(child, named), free) for child, free in children]
        pending.extend(child for child, _ in children)
    return edges, node_of


def _free_children(edges: Edges) -> Callable[[Key], list[Key]]:
    return lambda at: [c for c, free in edges[at] if free]


def _fold(
    children: Callable[[Key], list[Key]],
    start: Key,
    done: dict[Key, int],
    value: Callable[[Key, list[int]], int],
) -> Key | None:
    """Post-order from ``start``, iteratively: ``done[k] = value(k, [done[c] for each
    child c])`` for every node reached and not in ``done`` yet. The node that closes a
    cycle (``done`` then partial), or None."""
    if start in done:
        return None
    on_path = {start}
    stack = [(start, children(start))]
    while stack:
        at, todo = stack[-1]
        if todo:
            child = todo.pop()
            if child in on_path:
                return child
            if child not in done:
                on_path.add(child)
                stack.append((child, children(child)))
            continue
        stack.pop()
        on_path.discard(at)
        done[at] = value(at, [done[c] for c in children(at)])
    return None


def _type_name(node: Any) -> str:
    """A schema node for a message: a named type's name, else its kind."""
    if isinstance(node, dict):
        name = node.get("name")
        if isinstance(name, str) and node.get("type") in NAMED:
            return f"{node['type']} {name!r}"
        kind = node.get("type")
        return kind if isinstance(kind, str) else "a type"
    if isinstance(node, list):
        return "a union"
    return str(node)


def checked_zero_byte_values(parsed: Any, named: dict[str, Any]) -> int:
    """:func:`zero_byte_values` of the schema, or ``InvalidSchema`` when over
    ``LIMITS.max_zero_byte_values`` (or without bound): a decoder, ours or fastavro's,
    would build that many objects for each such datum from no bytes at all."""
    most, where = zero_byte_values(parsed, named)
    if most is None:
        raise InvalidSchema(
            "AVRO",
            f"{where} contains itself through record fields alone: no bytes can end a value "
            "of it (make the field that closes the cycle optional, a union with null, or an "
            "array)",
        )
    limit = LIMITS.max_zero_byte_values
    if most > limit:
        shown = f"{most:,}" if most < _COUNT_CAP else f"over {_COUNT_CAP:,}"
        raise InvalidSchema(
            "AVRO",
            f"a value of {where} builds {shown} values from no bytes (records nested in "
            "records, each 1 plus its fields; nulls and zero-size fixed 1), over the limit "
            f"of {limit:,} values from no bytes (schema_registry_max_zero_byte_values): "
            "a decoder would build them all for every such value it reads. Give these "
            "records fields that take bytes, or make the repeated record fields optional "
            "(a union with null) or arrays",
        )
    return most
