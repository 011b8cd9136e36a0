"""A byte walk of Avro binary that counts array items taking no bytes, for fastavro's path.

An array's block count declares its items up front; items of a type that reads no bytes
(a null, a fixed of size 0, a record of only those) then cost nothing to declare, so
three bytes may ask a decoder to build 2**62 of them. The compiled decoder
(``_avrodec.c``) charges such items against a budget; the values it leaves to fastavro
(schemas with logical types, recursive ones, a build without the extension) have no such
check in fastavro. For the schemas that have such arrays (:func:`zero_width_arrays`),
:func:`compile_scan` makes a walk over the payload that reads every length, count and
branch index as a decoder would, builds nothing, and charges each such block's count
before fastavro is given the bytes: over the budget, ``ValueError`` and nothing is built.

Format: Avro's binary encoding (zig-zag varints for int, long, lengths, counts, enum and
union indexes; a negative block count is followed by the block's byte size). Cost: a
Python step per field, paid only by schemas with such arrays on fastavro's path. No
state between calls (threads may share a walk).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# (payload, position, budget: [items left]) -> the position after the value.
Walk = Callable[[bytes, int, list[int]], int]

_FIXED_WIDTH = {"boolean": 1, "float": 4, "double": 8}
_VARINT = frozenset(("int", "long", "enum"))


_MASK64 = (1 << 64) - 1


def _long(data: bytes, i: int) -> tuple[int, int]:
    """A zig-zag varint at ``i``, read as fastavro reads it (a 64-bit value: a varint
    of more than ten bytes goes on, each shift taken modulo 64): (its value, the position
    after it), so the walk sees the counts and lengths fastavro will act on."""
    shift = n = 0
    while True:
        b = data[i]  # IndexError past the end: the caller's "does not decode"
        i += 1
        n = (n | ((b & 0x7F) << (shift % 64))) & _MASK64
        if b < 0x80:
            return (n >> 1) ^ -(n & 1), i
        shift += 7


def _resolve(node: Any, named: dict[str, Any]) -> Any:
    """``node`` with named-type references and type objects around a type taken off."""
    while True:
        if isinstance(node, str) and node in named:
            node = named[node]
        elif isinstance(node, dict) and (
            isinstance(node.get("type"), dict | list) or node.get("type") in named
        ):
            node = node["type"]
        else:
            return node


def _kind(node: Any) -> str:
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return "union"
    kind = node.get("type")
    return kind if isinstance(kind, str) else "union"


def _key(node: Any) -> tuple[str, Any]:
    if isinstance(node, dict) and isinstance(node.get("name"), str):
        return ("name", node["name"])
    return ("id", id(node))


def _fields(node: Any) -> list[Any]:
    return [f["type"] for f in node.get("fields") or ()]


def free_of(named: dict[str, Any]) -> Callable[[Any], bool]:
    """Whether a value of a node reads no bytes: a null, a fixed of size 0, a record of
    only such fields. Iterative (named records may chain thousands deep) and remembered
    per named type; a record met again on its own path counts as reading bytes (the
    parser refuses records that contain themselves through records alone)."""
    memo: dict[tuple[str, Any], bool] = {}

    def leaf(node: Any) -> bool | None:
        kind = _kind(node)
        if kind == "null":
            return True
        if kind == "fixed":
            return int(node.get("size", 1)) == 0
        return None if kind in ("record", "error") else False

    def free(start: Any) -> bool:
        start = _resolve(start, named)
        stack: list[tuple[Any, bool]] = [(start, False)]
        on_path: set[tuple[str, Any]] = set()
        while stack:
            node, expanded = stack.pop()
            k = _key(node)
            if k in memo:
                continue
            simple = leaf(node)
            if simple is not None:
                memo[k] = simple
                continue
            children = [_resolve(c, named) for c in _fields(node)]
            if expanded:
                on_path.discard(k)
                memo[k] = all(memo.get(_key(c), False) for c in children)
                continue
            if k in on_path:
                memo[k] = False
                continue
            on_path.add(k)
            stack.append((node, True))
            stack.extend((c, False) for c in children if _key(c) not in memo)
        return memo[_key(start)]

    return free


def zero_width_arrays(parsed: Any, named: dict[str, Any]) -> bool:
    """Whether some array of the schema has items that read no bytes."""
    free = free_of(named)
    pending, seen = [parsed], set()
    while pending:
        node = _resolve(pending.pop(), named)
        if id(node) in seen:
            continue
        seen.add(id(node))
        kind = _kind(node)
        if kind == "union":
            pending.extend(node if isinstance(node, list) else node["type"])
        elif kind == "array":
            if free(node["items"]):
                return True
            pending.append(node["items"])
        elif kind == "map":
            pending.append(node["values"])
        elif kind in ("record", "error"):
            pending.extend(_fields(node))
    return False


def compile_scan(parsed: Any, named: dict[str, Any]) -> Walk:
    """The walk of a value of ``parsed`` (fastavro's parsed schema, its named types)."""
    walks: dict[str, Walk] = {}
    free = free_of(named)

    def lazy(node: Any) -> Walk:
        """``node``'s walk, built on its first call: building never recurses (a schema
        may nest thousands deep), and a value's walk recurses only as deep as its bytes
        (RecursionError, the caller's "does not decode", past Python's limit)."""
        cell: list[Walk] = []

        def call(d: bytes, i: int, b: list[int]) -> int:
            if not cell:
                cell.append(build(node))
            return cell[0](d, i, b)

        return call

    def build(node: Any) -> Walk:
        if isinstance(node, str) and node in named:
            name = node
            if name not in walks:
                walks[name] = lazy(named[name])
            return walks[name]
        node = _resolve(node, named)
        kind = _kind(node)
        if kind == "null":
            return lambda d, i, b: i
        if kind in _FIXED_WIDTH:
            width = _FIXED_WIDTH[kind]

            def fixed_width(d: bytes, i: int, b: list[int]) -> int:
                if i + width > len(d):
                    raise ValueError("the payload ends inside a value")
                return i + width

            return fixed_width
        if kind in _VARINT:
            return lambda d, i, b: _long(d, i)[1]
        if kind in ("bytes", "string"):

            def sized(d: bytes, i: int, b: list[int]) -> int:
                n, i = _long(d, i)
                if n < 0 or i + n > len(d):
                    raise ValueError("a length past the payload's end")
                return i + n

            return sized
        if kind == "fixed":
            size = int(node.get("size", 0))

            def fixed(d: bytes, i: int, b: list[int]) -> int:
                if i + size > len(d):
                    raise ValueError("the payload ends inside a fixed")
                return i + size

            return fixed
        if kind == "union":
            branches = [lazy(t) for t in (node if isinstance(node, list) else node["type"])]

            def union(d: bytes, i: int, b: list[int]) -> int:
                k, i = _long(d, i)
                if not 0 <= k < len(branches):
                    raise ValueError(f"union index {k} out of range")
                return branches[k](d, i, b)

            return union
        if kind in ("array", "map"):
            item_node = node["items"] if kind == "array" else node["values"]
            no_bytes = kind == "array" and free(item_node)
            item = lazy(item_node)
            key = build("string")

            def blocks(d: bytes, i: int, b: list[int]) -> int:
                while True:
                    count, i = _long(d, i)
                    if count == 0:
                        return i
                    if count < 0:
                        # Negated in 64 bits, as fastavro: -2**63 stays itself, a block
                        # of no items, and the array goes on.
                        count = -count if count != -(1 << 63) else 0
                        _, i = _long(d, i)  # the block's size in bytes
                    if no_bytes:
                        b[0] -= count
                        if b[0] < 0:
                            raise ValueError(
                                f"an array block of {count} items that take no bytes, over "
                                "the items left for values built from no bytes "
                                "(typed_records_max_zero_width_items)"
                            )
                        continue  # they take no bytes: the position stays
                    for _ in range(count):  # each reads a byte at least: bounded by d
                        if kind == "map":
                            i = key(d, i, b)
                        i = item(d, i, b)

            return blocks
        if kind in ("record", "error"):
            fields = [lazy(t) for t in _fields(node)]

            def record(d: bytes, i: int, b: list[int]) -> int:
                for walk in fields:
                    i = walk(d, i, b)
                return i

            return record
        if isinstance(node, dict) and isinstance(node.get("type"), str):
            return lazy(node["type"])  # a primitive with properties (logical types)
        raise ValueError(f"an Avro type the walk does not know: {kind!r}")

    return build(parsed)
