"""Schemas for the typed Spark source and sink: the registry's reads (Confluent's REST API
under ``/schema-registry``, through the SDK's ``SchemaRegistryClient``, one per process
and registry) and the mapping of a schema to Spark's types.

Mapping (what Spark's own ``from_avro`` / ``from_protobuf`` do, where they do it):

- AVRO: record → struct; array → array; map → map<string, ...>; a union of ``null`` and
  one type → that type, nullable; other unions → struct<member0, member1, ...> (one
  non-null member per row, picked by the value's Python type: the first branch whose type
  fits); enum → string; bytes and fixed → binary; int → int, long → long, float → float,
  double → double; logical types: date → date, timestamp-millis/micros → timestamp,
  local-timestamp-millis/micros → timestamp_ntz, decimal(p, s) → decimal(p, s) (p ≤ 38),
  uuid → string, time-millis → int and time-micros → long (ms / µs after midnight). A
  recursive schema is refused (as Spark's ``from_avro`` without recursion options).
- JSON Schema: ``type: object`` with ``properties`` → struct of those properties;
  ``type: object`` with only ``additionalProperties`` (a schema) → map<string, ...>;
  ``type: array`` with one ``items`` schema → array; integer → long; number → double;
  string → string (``format`` is not mapped: dates stay text); boolean → boolean;
  ``type: [X, "null"]`` → X. Not mapped, given as their JSON text in a string column:
  ``anyOf`` / ``oneOf`` / ``allOf`` / ``not``, ``$ref``, several non-null types, an object
  without ``properties`` or ``additionalProperties`` schema, tuple ``items``, a schema
  without ``type``.
- PROTOBUF (the file's first message, or ``valueMessage``'s): message → struct; repeated →
  array; map fields → map; enum → string (the value's name); int32/sint32/sfixed32 → int;
  int64/sint64/sfixed64, uint32, fixed32 → long; uint64/fixed64 → decimal(20, 0); float,
  double, bool, string; bytes → binary; ``google.protobuf.Timestamp`` → timestamp.
  Recursive messages are refused.

Every field is nullable in Spark's schema (a record that does not decode is a null
struct, and Avro's non-null fields are non-null in the data all the same).
"""

from __future__ import annotations

import datetime
import decimal
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from pyspark.sql import types as T

from app.client.schema_registry import SchemaReference, SchemaRegistryClient
from app.common.errors import LogbusError
from app.common.schemas import ParsedSchema, ResolvedReference, parse

FORMATS = {"avro": "AVRO", "jsonschema": "JSON", "protobuf": "PROTOBUF"}
REQUEST_TIMEOUT_MS = 30_000
# References nest at most this deep (the registry refuses deeper ones on registration).
MAX_REFERENCE_DEPTH = 16
# Spark's own limit on decimal precision.
MAX_DECIMAL_PRECISION = 38


class SchemaMappingError(ValueError):
    """A schema that has no Spark type (a recursive one, a decimal over 38 digits...)."""


# ---- the registry -----------------------------------------------------------------------


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry has it, references resolved (picklable: carried from the
    driver to the tasks)."""

    schema_id: int
    schema_type: str
    schema: str
    references: tuple[ResolvedReference, ...] = ()
    subject: str | None = None
    version: int | None = None

    def parse(self) -> ParsedSchema:
        return parse(self.schema_type, self.schema, self.references)


class Registry:
    """Reads of Confluent's registry API at ``url`` (``http://host:port/schema-registry``)
    through the SDK's :class:`~app.client.schema_registry.SchemaRegistryClient`.

    One client per registry URL per Python process (:func:`_shared`): Spark runs task
    after task in a reused Python worker, so every task of the worker (and the driver's
    planning) shares the client's connections and caches (schemas by id, forever: ids are
    never reused; versions by number), and the parsed schemas by id kept here. Errors
    (unknown subject, version or id; an unreachable registry) are ``LookupError``.
    Thread-safe: the client is; parsing happens under the URL's lock."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _call(self, what: str, fn: Callable[[SchemaRegistryClient], Any]) -> Any:
        try:
            return fn(_shared(self.url).client)
        except LogbusError as exc:
            code = getattr(exc, "confluent_code", None)
            said = f"{exc} (error code {code})" if code else str(exc)
            raise LookupError(f"schema registry {self.url}: {what}: {said}") from None

    def _references(
        self, refs: tuple[SchemaReference, ...], depth: int = 0
    ) -> tuple[ResolvedReference, ...]:
        if depth > MAX_REFERENCE_DEPTH:
            raise LookupError(f"schema references nest deeper than {MAX_REFERENCE_DEPTH} levels")
        out = []
        for ref in refs:
            found = self._call(
                f"reference {ref.subject} version {ref.version}",
                functools.partial(_get_version, subject=ref.subject, version=int(ref.version)),
            )
            out.append(
                ResolvedReference(
                    name=ref.name,
                    subject=ref.subject,
                    version=int(ref.version),
                    schema_type=found.schema.schema_type.upper(),
                    schema=found.schema.schema_str,
                    references=self._references(found.schema.references, depth + 1),
                )
            )
        return tuple(out)

    def version(self, subject: str, version: str | int = "latest") -> RegisteredSchema:
        """A subject's version (a number or ``latest``)."""
        wanted: str | int = int(version) if str(version).isdigit() else version
        found = self._call(
            f"subject {subject} version {version}", lambda c: c.get_version(subject, wanted)
        )
        return RegisteredSchema(
            found.schema_id,
            found.schema.schema_type.upper(),
            found.schema.schema_str,
            self._references(found.schema.references),
            subject,
            found.version,
        )

    def by_id(self, schema_id: int) -> RegisteredSchema:
        found = self._call(f"schema id {schema_id}", lambda c: c.get_schema(schema_id))
        return RegisteredSchema(
            schema_id,
            found.schema_type.upper(),
            found.schema_str,
            self._references(found.references),
        )

    def parsed(self, schema_id: int) -> ParsedSchema:
        """The parsed schema of ``schema_id`` (cached per process). Raises LookupError when
        the registry does not have it."""
        shared = _shared(self.url)
        found = shared.parsed.get(schema_id)
        if found is None:
            with shared.lock:
                found = shared.parsed.get(schema_id)
                if found is None:
                    found = shared.parsed[schema_id] = self.by_id(schema_id).parse()
        return found


def _get_version(client: SchemaRegistryClient, subject: str, version: int) -> Any:
    return client.get_version(subject, version)


@dataclass
class _Shared:
    client: SchemaRegistryClient
    parsed: dict[int, ParsedSchema] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_SHARED: dict[str, _Shared] = {}
_SHARED_LOCK = threading.Lock()


def _shared(url: str) -> _Shared:
    """The process's client (and parsed-schema cache) of the registry at ``url``, made on
    first use; lives as long as the process (a Python worker serves many tasks)."""
    found = _SHARED.get(url)
    if found is None:
        with _SHARED_LOCK:
            found = _SHARED.get(url)
            if found is None:
                client = SchemaRegistryClient({"url": url, "timeout.ms": REQUEST_TIMEOUT_MS})
                found = _SHARED[url] = _Shared(client)
    return found


def registry_url(logbus_url: str, given: str | None) -> str:
    """The registry's URL: the option, else the first broker's ``/schema-registry``."""
    if given:
        return given.rstrip("/")
    return logbus_url.split(",")[0].rstrip("/") + "/schema-registry"


# ---- schema → Spark type -----------------------------------------------------------------

# Turns a decoded value (fastavro's, the parsed JSON, a Protobuf message) into what pyarrow
# takes for the column's type; None where the value is taken as it is.
Convert = Callable[[Any], Any] | None


def spark_type(parsed: ParsedSchema, message_name: str | None = None) -> tuple[T.DataType, Convert]:
    """Spark's type for values of ``parsed`` (see the module docstring), and the
    conversion of a decoded value for pyarrow (None: none needed). ``message_name``:
    PROTOBUF's message (default: the file's first)."""
    if parsed.schema_type == "AVRO":
        named: dict[str, Any] = {}
        for ref in _flat(parsed.references):
            _avro_names(orjson.loads(ref.schema), None, named)
        doc = parsed._json  # type: ignore[attr-defined]
        _avro_names(doc, None, named)
        return _avro(doc, None, named, ())
    if parsed.schema_type == "JSON":
        return _json(parsed.doc)  # type: ignore[attr-defined]
    descriptor = parsed.message_class(message_name).DESCRIPTOR  # type: ignore[attr-defined]
    dtype, convert = _proto(descriptor, ())
    return dtype, convert


def _flat(refs: tuple[ResolvedReference, ...]) -> list[ResolvedReference]:
    out: list[ResolvedReference] = []
    for ref in refs:
        out.extend(_flat(ref.references))
        out.append(ref)
    return out


def _full(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _avro_names(node: Any, namespace: str | None, named: dict[str, Any]) -> None:
    """Collect the named types (full name, and short name → definition)."""
    if isinstance(node, list):
        for branch in node:
            _avro_names(branch, namespace, named)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind in ("record", "error", "enum", "fixed") and isinstance(node.get("name"), str):
        full = _full(node["name"], node.get("namespace", namespace))
        named[full] = node
        named.setdefault(full.rpartition(".")[2], node)
        namespace = full.rpartition(".")[0] or None
        for f in node.get("fields") or ():
            _avro_names(f.get("type"), namespace, named)
        return
    for key in ("type", "items", "values"):
        if key in node and not isinstance(node[key], str):
            _avro_names(node[key], namespace, named)


_AVRO_PRIMITIVES: dict[str, T.DataType] = {
    "boolean": T.BooleanType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "bytes": T.BinaryType(),
    "string": T.StringType(),
}


def _record(fields: list[tuple[str, Convert]]) -> Convert:
    todo = [(name, c) for name, c in fields if c is not None]
    if not todo:
        return None

    def convert(value: Any) -> Any:
        if value is None:
            return None
        out = dict(value)
        for name, c in todo:
            v = out.get(name)
            if v is not None:
                out[name] = c(v)
        return out

    return convert


def _items(c: Convert) -> Convert:
    if c is None:
        return None
    return lambda value: None if value is None else [None if v is None else c(v) for v in value]


def _values(c: Convert) -> Convert:
    if c is None:
        return None
    return lambda value: (
        None if value is None else {k: None if v is None else c(v) for k, v in value.items()}
    )


def _time_units(per_second: int) -> Convert:
    def convert(value: Any) -> Any:
        if isinstance(value, int):
            return value
        seconds = value.hour * 3600 + value.minute * 60 + value.second
        return seconds * per_second + value.microsecond * per_second // 1_000_000

    return convert


def _avro(
    node: Any, namespace: str | None, named: dict[str, Any], seen: tuple[str, ...]
) -> tuple[T.DataType, Convert]:
    if isinstance(node, str):
        if node in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[node], None
        if node == "null":
            return T.NullType(), None
        definition = named.get(_full(node, namespace)) or named.get(node)
        if definition is None:
            raise SchemaMappingError(f"unknown Avro type {node!r}")
        return _avro(definition, namespace, named, seen)
    if isinstance(node, list):
        branches = [b for b in node if b != "null" and b != {"type": "null"}]
        if len(branches) == 1:
            return _avro(branches[0], namespace, named, seen)
        mapped = [_avro(b, namespace, named, seen) for b in branches]
        return T.StructType(
            [T.StructField(f"member{i}", t, True) for i, (t, _) in enumerate(mapped)]
        ), _union(mapped)
    kind = node.get("type")
    logical = node.get("logicalType")
    if logical == "date" and kind == "int":
        return T.DateType(), None
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return T.TimestampType(), None
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return T.TimestampNTZType(), None
    if logical == "time-millis" and kind == "int":
        return T.IntegerType(), _time_units(1000)
    if logical == "time-micros" and kind == "long":
        return T.LongType(), _time_units(1_000_000)
    if logical == "uuid" and kind == "string":
        return T.StringType(), str
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(node.get("precision", 0)), int(node.get("scale", 0))
        if not 0 < precision <= MAX_DECIMAL_PRECISION:
            raise SchemaMappingError(f"decimal precision {precision} is not in 1..38 (Spark's)")
        return T.DecimalType(precision, scale), None
    if kind in ("record", "error"):
        full = _full(node["name"], node.get("namespace", namespace))
        if full in seen:
            raise SchemaMappingError(f"Avro type {full} is recursive: Spark has no type for it")
        inner = full.rpartition(".")[0] or None
        by_name = [
            (f["name"], _avro(f["type"], inner, named, (*seen, full))) for f in node["fields"]
        ]
        return T.StructType([T.StructField(n, t, True) for n, (t, _) in by_name]), _record(
            [(n, c) for n, (_, c) in by_name]
        )
    if kind == "enum":
        return T.StringType(), None
    if kind == "fixed":
        return T.BinaryType(), None
    if kind == "array":
        t, c = _avro(node["items"], namespace, named, seen)
        return T.ArrayType(t, True), _items(c)
    if kind == "map":
        t, c = _avro(node["values"], namespace, named, seen)
        return T.MapType(T.StringType(), t, True), _values(c)
    if isinstance(kind, str | list | dict):
        return _avro(kind, namespace, named, seen)
    raise SchemaMappingError(f"no Spark type for Avro {node!r}")


_PY_TYPES: dict[str, tuple[type, ...]] = {
    "BooleanType": (bool,),
    "IntegerType": (int,),
    "LongType": (int,),
    "FloatType": (float, int),
    "DoubleType": (float, int),
    "BinaryType": (bytes,),
    "StringType": (str,),
    "StructType": (dict,),
    "MapType": (dict,),
    "ArrayType": (list,),
    "DateType": (datetime.date,),
    "TimestampType": (datetime.datetime,),
    "TimestampNTZType": (datetime.datetime,),
    "DecimalType": (decimal.Decimal,),
}


def _union(mapped: list[tuple[T.DataType, Convert]]) -> Convert:
    """A value of a union of several non-null types as ``{"member<i>": value}``: the first
    branch whose Python type fits (bool is not taken for int)."""
    branches = [
        (f"member{i}", _PY_TYPES.get(type(t).__name__, ()), c) for i, (t, c) in enumerate(mapped)
    ]

    def convert(value: Any) -> Any:
        for name, types, c in branches:
            if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
                return {name: value if c is None else c(value)}
        raise ValueError(f"{type(value).__name__} value fits no branch of the union")

    return convert


_JSON_TYPES: dict[str, T.DataType] = {
    "integer": T.LongType(),
    "number": T.DoubleType(),
    "string": T.StringType(),
    "boolean": T.BooleanType(),
}


def _json_text(value: Any) -> Any:
    return orjson.dumps(value).decode()


def _json(node: Any, depth: int = 0) -> tuple[T.DataType, Convert]:
    """A JSON Schema node's Spark type; unmapped nodes are strings of their JSON text."""
    unmapped: tuple[T.DataType, Convert] = (T.StringType(), _json_text)
    if depth > 64 or not isinstance(node, dict):
        return unmapped
    if any(k in node for k in ("anyOf", "oneOf", "allOf", "not", "$ref")):
        return unmapped
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            return unmapped
        kind = kinds[0]
    if kind in _JSON_TYPES:
        # A JSON number may be an integer, and 1.0 is an integer to JSON Schema.
        return _JSON_TYPES[kind], (
            float if kind == "number" else int if kind == "integer" else None
        )
    if kind == "array" and isinstance(node.get("items"), dict):
        t, c = _json(node["items"], depth + 1)
        return T.ArrayType(t, True), _items(c)
    if kind == "object" and isinstance(node.get("properties"), dict):
        mapped = [(n, _json(sub, depth + 1)) for n, sub in node["properties"].items()]
        return T.StructType([T.StructField(n, t, True) for n, (t, _) in mapped]), _record(
            [(n, c) for n, (_, c) in mapped]
        )
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        t, c = _json(node["additionalProperties"], depth + 1)
        return T.MapType(T.StringType(), t, True), _values(c)
    return unmapped


TIMESTAMP = "google.protobuf.Timestamp"


def _proto(descriptor: Any, seen: tuple[str, ...]) -> tuple[T.DataType, Callable[[Any], Any]]:
    """A message's struct, and the conversion of a message object to a dict for it."""
    if descriptor.full_name == TIMESTAMP:
        return T.TimestampType(), lambda m: m.ToDatetime(tzinfo=datetime.UTC)
    if descriptor.full_name in seen:
        raise SchemaMappingError(
            f"Protobuf message {descriptor.full_name} is recursive: Spark has no type for it"
        )
    inner = (*seen, descriptor.full_name)
    fields = [(f, *_proto_field(f, inner)) for f in descriptor.fields]
    dtype = T.StructType([T.StructField(f.name, t, True) for f, t, _ in fields])
    getters = [
        (f.name, c, _is_message(f) and not _repeated(f), f.containing_oneof) for f, _, c in fields
    ]

    def convert(message: Any) -> Any:
        out: dict[str, Any] = {}
        for name, c, singular_message, oneof in getters:
            if (singular_message or oneof is not None) and not message.HasField(name):
                out[name] = None
            else:
                out[name] = c(getattr(message, name))
        return out

    return dtype, convert


def _is_message(f: Any) -> bool:
    from google.protobuf.descriptor import FieldDescriptor as F

    return bool(f.type in (F.TYPE_MESSAGE, F.TYPE_GROUP))


def _repeated(f: Any) -> bool:

    return bool(f.is_repeated)


def _proto_field(f: Any, seen: tuple[str, ...]) -> tuple[T.DataType, Callable[[Any], Any]]:
    if _is_message(f) and f.message_type.GetOptions().map_entry:
        key_f, value_f = (
            f.message_type.fields_by_name["key"],
            f.message_type.fields_by_name["value"],
        )
        kt, kc = _proto_single(key_f, seen)
        vt, vc = _proto_single(value_f, seen)
        return T.MapType(kt, vt, True), lambda m: {kc(k): vc(v) for k, v in m.items()}
    single, c = _proto_single(f, seen)
    if _repeated(f):
        return T.ArrayType(single, True), lambda values: [c(v) for v in values]
    return single, c


def _same(value: Any) -> Any:
    return value


def _proto_single(f: Any, seen: tuple[str, ...]) -> tuple[T.DataType, Callable[[Any], Any]]:
    from google.protobuf.descriptor import FieldDescriptor as F

    if _is_message(f):
        return _proto(f.message_type, seen)
    if f.type == F.TYPE_ENUM:
        names = {v.number: v.name for v in f.enum_type.values}
        return T.StringType(), lambda n: names.get(n, str(n))
    if f.type in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return T.DecimalType(20, 0), decimal.Decimal
    scalars = {
        F.TYPE_DOUBLE: T.DoubleType(),
        F.TYPE_FLOAT: T.FloatType(),
        F.TYPE_INT32: T.IntegerType(),
        F.TYPE_SINT32: T.IntegerType(),
        F.TYPE_SFIXED32: T.IntegerType(),
        F.TYPE_INT64: T.LongType(),
        F.TYPE_SINT64: T.LongType(),
        F.TYPE_SFIXED64: T.LongType(),
        F.TYPE_UINT32: T.LongType(),
        F.TYPE_FIXED32: T.LongType(),
        F.TYPE_BOOL: T.BooleanType(),
        F.TYPE_STRING: T.StringType(),
        F.TYPE_BYTES: T.BinaryType(),
    }
    return scalars[f.type], _same
