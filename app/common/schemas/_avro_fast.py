"""A per-schema Avro encoder for plain JSON-shaped values, generated from fastavro's parsed
schema: the fast path of :meth:`AvroSchema.framed_encoder` (typed HTTP/WS produce).

Why: fastavro's compiled validator and writer dispatch on the schema's dicts field by field
and each walks the value once; on a 5-field record they took ~2 us each here, more than the
whole untyped produce path per record. The function generated here is straight-line Python
for one schema (fields unrolled, types checked with ``type(v) is ...``), validating and
writing in one pass, ~3x faster than the two fastavro calls.

It is an accelerator, never the reference: it takes only exactly-typed values (``dict``,
``list``, ``str``, ``int``, ``float``, ``bool``, ``None``, ``bytes``) of the constructs below
and raises :class:`Fallback` for anything else (another type, a missing field, an int out of
range, an unknown enum symbol, a surrogate in a string...). The caller then encodes the same
value with fastavro's validator and writer, which accept it or name the field that is wrong:
behaviour and errors are fastavro's, and the bytes of an accepted value are fastavro's
(``tests/unit/common/schemas/test_schtypes_avro_fast.py`` compares them on generated values).

Supported: every primitive; records; enums; arrays; maps; fixed; unions of ``null`` and one
other type; named types used again by name; the logical types carried by an int or long
(``date``, ``time-*``, ``timestamp-*``, ``local-timestamp-*``) with int values. Anything else
(wider unions, other logical types, recursive schemas) gives no generated encoder: fastavro
encodes every value of such a schema, as before.

The generated source is built from the schema's field names and symbols only as string
literals (``repr``), never as code: a schema cannot inject anything.

:func:`native_program` describes the same schemas to the compiled twin of this encoder
(``app.common.schemas._avroenc``, app/common/schemas/_avroenc.c, built by setup.py where a
C compiler is): a flat table of nodes that its ``Encoder`` walks in C, taking the same
values with the same checks and leaving every other value to the same fastavro fallback.
Where it is built, :class:`~app.common.schemas._avro.AvroSchema` encodes with it; the
generated Python encoder is the path without it. ``native_program(..., reading=True)``
is the same table for the compiled decoder (``app.common.schemas._avrodec``,
app/common/schemas/_avrodec.c), without logical types (fastavro's reader converts them).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any


class Fallback(Exception):
    """The value is not one the generated encoder takes: encode it with fastavro."""


class _Unsupported(Exception):
    pass


def _kind_of(schema: Any) -> Any:
    """A schema object's ``type``; ``_Unsupported`` for what neither the generated encoder
    nor the C one handles (a logical type other than those an int or long carries)."""
    if not isinstance(schema, dict):
        raise _Unsupported(repr(schema))
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical is not None and not (logical in _INT_LOGICAL and kind in ("int", "long")):
        raise _Unsupported(f"logical type {logical}")
    return kind


_INT_LOGICAL = frozenset(
    (
        "date",
        "time-millis",
        "time-micros",
        "timestamp-millis",
        "timestamp-micros",
        "timestamp-nanos",
        "local-timestamp-millis",
        "local-timestamp-micros",
        "local-timestamp-nanos",
    )
)
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_MAX_DEPTH = 64


def _write_long(out: bytearray, n: int) -> None:
    """Avro's zig-zag varint (``n`` already checked to be a 64-bit int)."""
    n = (n << 1) ^ (n >> 63)
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


class _Gen:
    def __init__(self, named: dict[str, Any]) -> None:
        self.named = named
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.funcs: dict[str, str] = {}  # named type -> function name
        self.counter = 0

    def const(self, value: Any) -> str:
        name = f"_c{len(self.consts)}"
        self.consts[name] = value
        return name

    def var(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def node(self, schema: Any, value: str, depth: int, nesting: int) -> None:
        """Code that checks ``value`` (a variable name) against ``schema`` and appends it."""
        if nesting > _MAX_DEPTH:
            raise _Unsupported("too deep")
        if isinstance(schema, str):
            if schema in self.named:
                fn = self.named_function(schema, nesting)
                self.emit(depth, f"{fn}(out, {value})")
                return
            schema = {"type": schema}
        if isinstance(schema, list):
            self.union(schema, value, depth, nesting)
            return
        kind = _kind_of(schema)
        e = self.emit
        if kind == "null":
            e(depth, f"if {value} is not None: raise Fallback")
        elif kind == "boolean":
            e(depth, f"if {value} is True: out.append(1)")
            e(depth, f"elif {value} is False: out.append(0)")
            e(depth, "else: raise Fallback")
        elif kind in ("int", "long"):
            lo, hi = (_INT_MIN, _INT_MAX) if kind == "int" else (_LONG_MIN, _LONG_MAX)
            e(depth, f"if type({value}) is not int or not {lo} <= {value} <= {hi}: raise Fallback")
            e(depth, f"write_long(out, {value})")
        elif kind in ("float", "double"):
            pack = "pack_f" if kind == "float" else "pack_d"
            # fastavro writes ints to float/double too (its validator accepts them).
            e(depth, f"if type({value}) is float or type({value}) is int: out += {pack}({value})")
            e(depth, "else: raise Fallback")
        elif kind == "string":
            b = self.var()
            e(depth, f"if type({value}) is not str: raise Fallback")
            e(depth, f"{b} = {value}.encode()")
            e(depth, f"write_long(out, len({b}))")
            e(depth, f"out += {b}")
        elif kind == "bytes":
            e(depth, f"if type({value}) is not bytes: raise Fallback")
            e(depth, f"write_long(out, len({value}))")
            e(depth, f"out += {value}")
        elif kind in ("record", "error", "enum", "fixed"):
            name = schema.get("name")
            if not isinstance(name, str):
                raise _Unsupported("a named type without a name")
            if name not in self.named:
                self.named[name] = schema
            fn = self.named_function(name, nesting)
            e(depth, f"{fn}(out, {value})")
        elif kind == "array":
            item = self.var()
            e(depth, f"if type({value}) is not list: raise Fallback")
            e(depth, f"if {value}:")
            e(depth + 1, f"write_long(out, len({value}))")
            e(depth + 1, f"for {item} in {value}:")
            self.node(schema["items"], item, depth + 2, nesting + 1)
            e(depth, "out.append(0)")
        elif kind == "map":
            k, item, kb = self.var(), self.var(), self.var()
            e(depth, f"if type({value}) is not dict: raise Fallback")
            e(depth, f"if {value}:")
            e(depth + 1, f"write_long(out, len({value}))")
            e(depth + 1, f"for {k}, {item} in {value}.items():")
            e(depth + 2, f"if type({k}) is not str: raise Fallback")
            e(depth + 2, f"{kb} = {k}.encode()")
            e(depth + 2, f"write_long(out, len({kb}))")
            e(depth + 2, f"out += {kb}")
            self.node(schema["values"], item, depth + 2, nesting + 1)
            e(depth, "out.append(0)")
        else:
            raise _Unsupported(f"type {kind!r}")

    def union(self, branches: list[Any], value: str, depth: int, nesting: int) -> None:
        nulls = [i for i, b in enumerate(branches) if b == "null" or b == {"type": "null"}]
        if len(branches) != 2 or len(nulls) != 1:
            raise _Unsupported("a union other than null and one type")
        null_at = nulls[0]
        other = branches[1 - null_at]
        self.emit(depth, f"if {value} is None: out.append({2 * null_at})")  # zig-zag index
        self.emit(depth, "else:")
        self.emit(depth + 1, f"out.append({2 * (1 - null_at)})")
        self.node(other, value, depth + 1, nesting + 1)

    def named_function(self, name: str, nesting: int) -> str:
        """The function encoding named type ``name`` (generated once, on first use)."""
        fn = self.funcs.get(name)
        if fn is not None:
            return fn
        fn = self.funcs[name] = f"_t{len(self.funcs)}"
        schema = self.named[name]
        if isinstance(schema, str | list):
            raise _Unsupported("a name for a non-named type")
        saved, self.lines = self.lines, []
        self.emit(0, f"def {fn}(out, v0):")
        kind = schema.get("type")
        e = self.emit
        if kind in ("record", "error"):
            e(1, "if type(v0) is not dict: raise Fallback")
            for field in schema.get("fields", []):
                key = self.const(field["name"])
                var = self.var()
                # A missing field: fastavro's rules for defaults decide, in the fallback.
                e(1, f"{var} = v0.get({key}, _MISSING)")
                e(1, f"if {var} is _MISSING: raise Fallback")
                self.node(field["type"], var, 1, nesting + 1)
        elif kind == "enum":
            index = self.const({s: i for i, s in enumerate(schema["symbols"])})
            var = self.var()
            e(1, f"{var} = {index}.get(v0) if type(v0) is str else None")
            e(1, f"if {var} is None: raise Fallback")
            e(1, f"write_long(out, {var})")
        elif kind == "fixed":
            e(1, f"if type(v0) is not bytes or len(v0) != {int(schema['size'])}: raise Fallback")
            e(1, "out += v0")
        else:
            raise _Unsupported(f"named {kind!r}")
        e(1, "return None")
        self.lines = self.lines + saved
        return fn


def compile_encoder(schema: Any, named: dict[str, Any]) -> Callable[[bytearray, Any], None] | None:
    """``encode(out, value)`` appending ``value``'s Avro binary to ``out`` or raising
    :class:`Fallback`, for fastavro's parsed ``schema`` and its named-type table; None when
    the schema has a construct this generator leaves to fastavro."""
    gen = _Gen(dict(named))
    gen.lines = []
    body: list[str]
    try:
        saved: list[str] = []
        gen.lines = saved
        gen.emit(0, "def encode(out, v0):")
        gen.node(schema, "v0", 1, 0)
        body = gen.lines
    except (_Unsupported, KeyError, TypeError, ValueError):
        return None
    source = "\n".join(body) + "\n"
    env: dict[str, Any] = {
        "Fallback": Fallback,
        "write_long": _write_long,
        "pack_f": struct.Struct("<f").pack,
        "pack_d": struct.Struct("<d").pack,
        "_MISSING": _MISSING,
        **gen.consts,
    }
    exec(compile(source, "<avro encoder>", "exec"), env)  # the source is built from literals only
    encode: Callable[[bytearray, Any], None] = env["encode"]
    return encode


_MISSING = object()

# A node of native_program's table: (kind, ...), children by their index in the table.
ProgramNode = tuple[Any, ...]
_NATIVE_PRIMITIVES = frozenset(
    ("null", "boolean", "int", "long", "float", "double", "string", "bytes")
)


def native_program(
    schema: Any, named: dict[str, Any], *, reading: bool = False
) -> list[ProgramNode] | None:
    """fastavro's parsed ``schema`` (with its named-type table) as the program of
    ``app.common.schemas._avroenc.Encoder`` (the node layout is in _avroprogram.h), node 0
    the root; None for a schema with a construct that :func:`compile_encoder` leaves to
    fastavro (the same constructs: both encoders take the same schemas). A named type is
    one node however often it is used.

    ``reading``: the program of ``app.common.schemas._avrodec.Reader`` instead, the same
    constructs less every logical type (fastavro's reader turns a ``date`` into a
    ``datetime.date``, a decimal into a ``Decimal``...: such schemas keep fastavro's
    reader, so a decoded value is always fastavro's)."""
    named = dict(named)
    nodes: list[ProgramNode] = []
    by_name: dict[str, int] = {}

    def reserve() -> int:
        nodes.append(())
        return len(nodes) - 1

    def named_node(name: str, nesting: int) -> int:
        found = by_name.get(name)
        if found is not None:
            return found
        schema = named[name]
        if isinstance(schema, str | list):
            raise _Unsupported("a name for a non-named type")
        if reading and schema.get("logicalType") is not None:
            raise _Unsupported("a logical type, read by fastavro")
        at = by_name[name] = reserve()
        kind = schema.get("type")
        if kind in ("record", "error"):
            fields = tuple(
                (str(f["name"]), node(f["type"], nesting + 1)) for f in schema.get("fields", [])
            )
            nodes[at] = ("record", fields)
        elif kind == "enum":
            nodes[at] = ("enum", {s: i for i, s in enumerate(schema["symbols"])})
        elif kind == "fixed":
            nodes[at] = ("fixed", int(schema["size"]))
        else:
            raise _Unsupported(f"named {kind!r}")
        return at

    def node(schema: Any, nesting: int) -> int:
        if nesting > _MAX_DEPTH:
            raise _Unsupported("too deep")
        if isinstance(schema, str):
            if schema in named:
                return named_node(schema, nesting)
            schema = {"type": schema}
        if isinstance(schema, list):
            nulls = [i for i, b in enumerate(schema) if b == "null" or b == {"type": "null"}]
            if len(schema) != 2 or len(nulls) != 1:
                raise _Unsupported("a union other than null and one type")
            at = reserve()
            nodes[at] = ("union", nulls[0], node(schema[1 - nulls[0]], nesting + 1))
            return at
        kind = _kind_of(schema)
        if reading and schema.get("logicalType") is not None:
            raise _Unsupported("a logical type, read by fastavro")
        if kind in _NATIVE_PRIMITIVES:
            nodes.append((kind,))
            return len(nodes) - 1
        if kind in ("record", "error", "enum", "fixed"):
            name = schema.get("name")
            if not isinstance(name, str):
                raise _Unsupported("a named type without a name")
            if name not in named:
                named[name] = schema
            return named_node(name, nesting)
        if kind in ("array", "map"):
            at = reserve()
            nodes[at] = (kind, node(schema["items" if kind == "array" else "values"], nesting + 1))
            return at
        raise _Unsupported(f"type {kind!r}")

    try:
        node(schema, 0)
    except (_Unsupported, KeyError, TypeError, ValueError):
        return None
    return nodes
