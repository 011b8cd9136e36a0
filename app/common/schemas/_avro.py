"""AVRO: parsed and encoded by fastavro, checked for compatibility by the Apache ``avro``
package's ``ReaderWriterCompatibilityChecker`` (the reference implementation of Avro's
schema-resolution rules). Both are imported here, on the first Avro schema.

Named types from references: each referenced schema is parsed first (dependencies first)
into the same named-type table, so ``"type": "com.acme.Address"`` resolves to it, as in
Confluent's Avro provider.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

from app.common.schema_errors import InvalidSchema, RecordInvalid
from app.common.schemas._avro_shape import (
    NAMED,
    checked_zero_byte_values,
    is_recursive,
    nesting,
)
from app.common.schemas._util import flatten_references, load_json
from app.common.schemas.types import LIMITS, Codec, ResolvedReference

_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
# Keys of a named type or field whose value names a type (made full in the normalized form).
_NAMED = NAMED
_COMPLEX = _NAMED | {"array", "map"}
# Nesting fastavro's compiled code may recurse through safely (see AvroSchema.recursive).
SAFE_NATIVE_DEPTH = 512


class AvroSchema(Codec):
    """An Avro schema (with its named-type references) ready to encode and decode."""

    schema_type = "AVRO"

    def __init__(self, raw: str, references: tuple[ResolvedReference, ...]) -> None:
        import avro.errors
        import avro.name
        import avro.schema
        import fastavro
        from fastavro.schema import SchemaParseException, UnknownType

        self.raw = raw
        self.references = references
        self._json = load_json("AVRO", raw)
        refs = flatten_references("AVRO", references)
        named: dict[str, Any] = {}
        self._named = named
        names = avro.name.Names()
        current = ""
        try:
            for ref in refs:
                what = f"reference {ref.name!r} ({ref.subject} version {ref.version})"
                current = what + ": "
                ref_json = load_json("AVRO", ref.schema, what)
                fastavro.parse_schema(ref_json, named_schemas=named)
                avro.schema.make_avsc_object(ref_json, names)
            current = ""
            # fastavro checks defaults against their types (Confluent validates defaults too).
            self._parsed = fastavro.parse_schema(self._json, named_schemas=named)
            self._avro = avro.schema.make_avsc_object(self._json, names)
        except UnknownType as e:
            raise InvalidSchema(
                "AVRO",
                f"{current}unknown type {e.name!r} (not a primitive, not defined "
                "before its use, not in the references)",
            ) from None
        except SchemaParseException as e:
            raise InvalidSchema("AVRO", f"{current}{e}") from None
        except (avro.errors.AvroException, ValueError, TypeError, KeyError, AttributeError) as e:
            raise InvalidSchema("AVRO", f"{current}{e}") from None
        except RecursionError:
            raise InvalidSchema("AVRO", f"{current}nests too deeply") from None
        self.zero_byte_values = checked_zero_byte_values(self._parsed, named)
        # Arrays whose items read no bytes: fastavro builds whatever count a block
        # declares, so on its path the payload is walked first and the count charged
        # (app/common/schemas/_avro_scan.py); None where the schema has none.
        from app.common.schemas import _avro_scan

        self.zero_width_arrays = _avro_scan.zero_width_arrays(self._parsed, named)
        self._scan = (
            _avro_scan.compile_scan(self._parsed, named) if self.zero_width_arrays else None
        )
        # Bound once: the per-record path does no imports or attribute look-ups.
        from fastavro import schemaless_reader, schemaless_writer
        from fastavro._read_common import SchemaResolutionError
        from fastavro.validation import validate

        self._resolution_error: type[Exception] = SchemaResolutionError
        self._write = schemaless_writer
        self._read = schemaless_reader
        self._validate = validate
        # A recursive schema (a named type used inside its own definition) lets a value
        # nest without bound, and fastavro's compiled reader, writer and validator recurse
        # on the C stack: ~5,000 levels crashed the interpreter here. For such schemas, and
        # for those whose values nest deeper than SAFE_NATIVE_DEPTH without a cycle (named
        # records chained through their names: 10,000 levels fit in a schema's 1 MiB), the
        # pure-Python implementations run instead (Python's recursion limit turns depth
        # into RecursionError, reported as RecordInvalid) wherever depth can exceed
        # SAFE_NATIVE_DEPTH: always on encode, and on decode for payloads longer than
        # _native_read_bytes. A level that reads no byte (a record's field) does not need
        # one: a value nests at most levels_per_byte levels per byte read (and without
        # bound on no bytes where records contain themselves through records alone).
        depth, levels_per_byte = nesting(self._parsed, named)
        self.recursive = is_recursive(self._json) or depth is None or depth > SAFE_NATIVE_DEPTH
        self._native_read_bytes = (
            -1 if levels_per_byte is None else SAFE_NATIVE_DEPTH // levels_per_byte - 1
        )
        if self.recursive:
            from fastavro import _validation_py, _write_py

            self._write = _write_py.schemaless_writer
            self._validate = _validation_py.validate
        # The compiled functions under fastavro's public ones, called with this schema's
        # named-type table (None for recursive schemas, see above, or a fastavro without
        # them): the public ones re-check the schema, build a named-type table and wrap
        # the stream on every call, which was ~2/3 of a record's encode and decode time.
        self._fast = None if self.recursive else _compiled()
        # The generated encoder (app.common.schemas._avro_fast) for exactly-typed values;
        # anything it does not take goes through fastavro as above.
        self._gen = None
        # Its compiled twin (app/common/schemas/_avroenc.c, where setup.py built it): the
        # program its Encoder walks, for the same schemas; None without it.
        self._program: list[tuple[Any, ...]] | None = None
        self._native: dict[bytes, Callable[[Any], bytes]] = {}  # header -> Encoder
        # The compiled decoder (app/common/schemas/_avrodec.c, where setup.py built it):
        # its Reader per bytes_as_text flag, made on first use from the program for
        # reading; fastavro's compiled reader reads whatever it declines.
        self._read_program: list[tuple[Any, ...]] | None = None
        self._native_readers: dict[tuple[bool, int], Any] = {}
        if self._fast is not None:
            from app.common.schemas._avro_fast import compile_encoder, native_program

            self._gen = compile_encoder(self._parsed, named)
            if self._gen is not None and _native_encoder() is not None:
                self._program = native_program(self._parsed, named)
            if _native_decoder() is not None:
                self._read_program = native_program(self._parsed, named, reading=True)
        self._read_named: dict[str, Any] = {"writer": named, "reader": {}}
        self._canonical = orjson.dumps(_canonical(self._json, None)).decode()
        self._normalized = orjson.dumps(
            _normalize(self._json, None), option=orjson.OPT_SORT_KEYS
        ).decode()

    def canonical(self) -> str:
        return self._canonical

    def normalized(self) -> str:
        return self._normalized

    # --- codec ------------------------------------------------------------------------------

    def encode_payload(self, obj: Any, message_name: str | None) -> bytes:
        native = self._native_encoder(b"")
        if native is not None:
            return native(obj)
        if self._fast is not None:
            gen = self._gen
            if gen is not None:
                out = bytearray()
                try:
                    gen(out, obj)
                    return bytes(out)
                except Exception:  # Fallback, or a value fastavro has the last word on
                    pass
            out = bytearray()
            self._encode_into(out, obj)
            return bytes(out)
        # fastavro's writer does not check values (1.5 is written to an int as 1, 2**40
        # overflows it silently): validate first, then write.
        try:
            valid = self._validate(obj, self._parsed, raise_errors=False)
        except RecursionError:
            raise RecordInvalid("", "the value nests too deeply") from None
        if not valid:
            self._invalid(obj)
        out_io = io.BytesIO()
        try:
            self._write(out_io, self._parsed, obj)
        except (TypeError, ValueError, OverflowError, RecursionError) as e:
            raise RecordInvalid("", str(e) or type(e).__name__) from None
        return out_io.getvalue()

    def framed_encoder(self, schema_id: int) -> Callable[[Any], bytes]:
        """``encode`` for one schema id: a value validated and written after the 5-byte
        header, into one buffer (``wire.encode``'s bytes, without its per-call checks)."""
        header = b"\x00" + schema_id.to_bytes(4, "big")
        native = self._native_encoder(header)
        if native is not None:
            return native
        if self._fast is None:
            encode_payload = self.encode_payload

            def slow(obj: Any) -> bytes:
                return header + encode_payload(obj, None)

            return slow
        encode_into = self._encode_into
        gen = self._gen

        def fast(obj: Any) -> bytes:
            if gen is not None:
                out = bytearray(header)
                try:
                    gen(out, obj)
                    return bytes(out)
                except Exception:  # Fallback, or a value fastavro has the last word on
                    pass
            out = bytearray(header)
            encode_into(out, obj)
            return bytes(out)

        return fast

    def _native_encoder(self, header: bytes) -> Callable[[Any], bytes] | None:
        """The compiled encoder (``_avroenc.Encoder``) writing ``header`` and a value, with
        fastavro's compiled validator and writer (:meth:`_encode_into`) as its fallback for
        every value it does not take; None where it is not built or the schema has a
        construct it leaves to fastavro. One per header (a schema has one id, or a few)."""
        program = self._program
        if program is None:
            return None
        found = self._native.get(header)
        if found is not None:
            return found
        encoder_type = _native_encoder()
        assert encoder_type is not None
        encode_into = self._encode_into

        def fallback(obj: Any) -> bytes:
            out = bytearray(header)
            encode_into(out, obj)
            return bytes(out)

        try:
            encoder: Callable[[Any], bytes] = encoder_type(program, header, fallback)
        except ValueError:  # pragma: no cover - a program _avroenc refuses (a bug)
            self._program = None
            return None
        if len(self._native) >= 8:
            self._native.clear()
        self._native[header] = encoder
        return encoder

    def _encode_into(self, out: bytearray, obj: Any) -> None:
        """Append ``obj``'s Avro binary to ``out``; the compiled path (``self._fast``).
        Validation and writing are fastavro's compiled functions called directly: the
        writer alone does not check values (1.5 goes into an int as 1, "x" into a float),
        so the validator runs first, and only a value it refuses pays for the field path."""
        fast = self._fast
        assert fast is not None
        if not fast.validate(obj, self._parsed, self._named, "", False, _VALIDATE_OPTIONS):
            self._invalid(obj)
        try:
            fast.write(out, obj, self._parsed, self._named, "", _WRITE_OPTIONS)
        except (TypeError, ValueError, OverflowError, AttributeError, KeyError) as e:
            raise RecordInvalid("", str(e) or type(e).__name__) from None

    def _invalid(self, obj: Any) -> None:
        try:
            path, message = _find_invalid(obj, self._parsed, self._named, self._validate)
        except RecursionError:
            path, message = "", "the value nests too deeply"
        raise RecordInvalid(path, message)

    def decode_payload(self, payload: memoryview) -> Any:
        return self.decode_as(payload, None)

    def framed_reader(self) -> Callable[[bytes], Any]:
        """A decoder of whole framed records of this schema (header included, not
        checked: the caller matched it), for a fetch's hot loop: fastavro's compiled
        reader called directly on the record's bytes, read from just past the header, no
        slice or copy. Raises (any exception) on bytes that do not decode or that have
        bytes after the value; the caller then takes :meth:`decode_payload` for the
        reason. Without the compiled reader (or for a recursive schema, or one with arrays
        of items that read no bytes), decode_payload."""
        fast = self._fast
        if fast is None or self._scan is not None:  # (the walk first: decode_payload)
            decode_payload = self.decode_payload

            def slow(data: bytes) -> Any:
                return decode_payload(memoryview(data)[5:])

            return slow
        read, parsed, named = fast.read, self._parsed, self._read_named
        new_stream = io.BytesIO

        def reader(data: bytes) -> Any:
            stream = new_stream(data)
            stream.seek(5)
            value = read(stream, parsed, named, None, _READ_OPTIONS)
            if stream.tell() != len(data):
                raise ValueError("bytes after the value")
            return value

        return reader

    def native_reader(self, bytes_as_text: bool) -> Any:
        """This schema's compiled decoder (``app.common.schemas._avrodec.Reader``), or None
        where it is not built or the schema has a construct it leaves to fastavro (see
        ``_avro_fast.native_program``). ``bytes_as_text``: bytes and fixed values come out
        as their base64 text (what a JSON answer carries) instead of bytes. Made once per
        flag (and ``LIMITS.max_zero_width_items``, the most array items of a type that
        takes no bytes it builds in one value); a Reader holds no Python state between
        calls, so threads may share it."""
        program = self._read_program
        if program is None:
            return None
        key = (bytes_as_text, LIMITS.max_zero_width_items)
        found = self._native_readers.get(key)
        if found is None:
            reader_type = _native_decoder()
            assert reader_type is not None
            try:
                found = reader_type.Reader(program, bytes_as_text, key[1])
            except ValueError:  # pragma: no cover - a program _avrodec refuses (a bug)
                self._read_program = None
                return None
            self._native_readers[key] = found
        return found

    def decode_within(self, payload: memoryview | bytes, budget: Any) -> Any:
        """:meth:`decode_payload` charging an answer's budget of values built from no
        bytes (``budget.left`` of ``budget.limit``; its values' bytes add one each, see
        _avrodec.c) instead of the value's own, so that many values of one answer cannot
        together build without bound what each may alone: the compiled decoder's
        ``read_within`` where it takes the schema. A value refused spends what is left.
        (Schemas it leaves to fastavro are bounded per value by max_zero_byte_values, at
        parse, and by their bytes; their array items that take no bytes are not.)"""
        native = self.native_reader(False)
        if native is not None:
            try:
                value, budget.left = native.read_within(payload, 0, budget.left, budget.limit)
            except ValueError as e:  # refused for good (over the budget)
                budget.left = 0
                raise RecordInvalid("", str(e)) from None
            if value is not _native_decoder().DECLINED:
                return value
        if self._scan is not None:
            # As the compiled decoder counts: the value's bytes add one each (to the
            # limit), its array items that read no bytes take one each.
            left = [min(budget.limit, budget.left + len(payload))]
            try:
                self._walk(payload, left)
            finally:
                budget.left = max(left[0], 0)
        return self._read_fastavro(payload, None)

    def decode_as(self, payload: memoryview | bytes, reader: AvroSchema | None) -> Any:
        """The value of Avro binary written with this schema, resolved into ``reader``'s
        shape by Avro's rules when given (fields added with defaults filled, removed ones
        dropped, promotions); raises ``RecordInvalid`` for bytes that do not decode or do
        not resolve. Without a reader schema, the compiled decoder reads first where it is
        built (its values are fastavro's); what it declines, fastavro reads."""
        if reader is None or reader._parsed is self._parsed:
            native = self.native_reader(False)
            if native is not None:
                try:
                    value = native.read(payload, 0)
                except ValueError as e:  # refused for good (a zero-width item bomb)
                    raise RecordInvalid("", str(e)) from None
                if value is not _native_decoder().DECLINED:
                    return value
        if self._scan is not None:
            self._walk(payload, [LIMITS.max_zero_width_items])
        return self._read_fastavro(payload, reader)

    def _walk(self, payload: memoryview | bytes, left: list[int]) -> None:
        """The payload walked before fastavro reads it (its zero-width array items
        charged to ``left``): RecordInvalid for one over it or that does not decode."""
        assert self._scan is not None
        try:
            self._scan(bytes(payload), 0, left)
        except (ValueError, IndexError, RecursionError) as e:
            raise RecordInvalid(
                "", f"Avro payload does not decode: {e or type(e).__name__}"
            ) from None

    def _read_fastavro(self, payload: memoryview | bytes, reader: AvroSchema | None) -> Any:
        stream = io.BytesIO(payload)
        fast = self._fast
        try:
            if reader is not None and reader._parsed is not self._parsed:
                from fastavro import schemaless_reader

                read_py = schemaless_reader
                if self.recursive and len(payload) > self._native_read_bytes:
                    from fastavro import _read_py

                    read_py = _read_py.schemaless_reader
                value = read_py(stream, self._parsed, reader._parsed)
            elif fast is not None:
                value = fast.read(stream, self._parsed, self._read_named, None, _READ_OPTIONS)
            else:
                read = self._read
                if self.recursive and len(payload) > self._native_read_bytes:
                    from fastavro import _read_py

                    read = _read_py.schemaless_reader
                value = read(stream, self._parsed, None)
        except (
            EOFError,
            ValueError,
            TypeError,
            IndexError,
            KeyError,
            UnicodeDecodeError,
            OverflowError,
            RecursionError,
            MemoryError,
            self._resolution_error,
        ) as e:
            raise RecordInvalid(
                "", f"Avro payload does not decode: {e or type(e).__name__}"
            ) from None
        if stream.tell() != len(payload):
            raise RecordInvalid(
                "", f"Avro payload has {len(payload) - stream.tell()} bytes after the value"
            )
        return value

    # --- compatibility ----------------------------------------------------------------------

    def reader_incompatibilities(self, writer: Any) -> list[str]:
        from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

        # The avro package ships no type hints for the checker's constructor.
        checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
        result = checker.get_compatibility(self._avro, writer._avro)
        if result.compatibility is SchemaCompatibilityType.compatible:
            return []
        kinds = ", ".join(sorted({k.value for k in result.incompatibilities}))
        where = ", ".join(sorted(result.locations - {"/"}) or ["/"])
        return [
            f"{kinds} at {where}: {message}" for message in sorted(map(str, result.messages))
        ] or [f"{kinds} at {where}"]


class _Compiled(NamedTuple):
    validate: Callable[..., bool]
    write: Callable[..., None]
    read: Callable[..., Any]


# The options fastavro's public functions pass down, at their defaults.
_VALIDATE_OPTIONS = {"strict": False, "disable_tuple_notation": False}
_WRITE_OPTIONS = {"strict": False, "strict_allow_default": False, "disable_tuple_notation": False}
_READ_OPTIONS = {
    "return_record_name": False,
    "return_record_name_override": False,
    "handle_unicode_errors": "strict",
    "return_named_type": False,
    "return_named_type_override": False,
}


@functools.cache
def _native_encoder() -> Callable[..., Callable[[Any], bytes]] | None:
    """``app.common.schemas._avroenc.Encoder`` (setup.py builds it, optionally), or None."""
    try:
        from app.common.schemas._avroenc import Encoder
    except ImportError:  # pragma: no cover - where no C compiler built it
        return None
    return Encoder


@functools.cache
def _native_decoder() -> Any:
    """The module ``app.common.schemas._avrodec`` (setup.py builds it, optionally), or
    None."""
    try:
        from app.common.schemas import _avrodec
    except ImportError:  # pragma: no cover - where no C compiler built it
        return None
    return _avrodec


@functools.cache
def _compiled() -> _Compiled | None:
    """fastavro's compiled validator, writer and reader entry points (module functions of
    its Cython modules, the ones its public functions call), or None without them."""
    try:
        from fastavro import _read, _validation, _write

        # Not in fastavro's stubs (they are its Cython modules' functions).
        found = _Compiled(
            getattr(_validation, "_validate"),  # noqa: B009
            getattr(_write, "write_data"),  # noqa: B009
            getattr(_read, "_read_data"),  # noqa: B009
        )
    except (ImportError, AttributeError):  # pragma: no cover - a pure-Python fastavro
        return None
    # They are not fastavro's public API: probe them once with the arguments used here, so
    # a fastavro whose internals changed gets the public path, not failing records.
    try:
        import fastavro

        probe = fastavro.parse_schema({"type": "record", "name": "P", "fields": [
            {"name": "a", "type": "long"}]})  # fmt: skip
        out = bytearray()
        ok = found.validate({"a": 1}, probe, {}, "", False, _VALIDATE_OPTIONS)
        found.write(out, {"a": 1}, probe, {}, "", _WRITE_OPTIONS)
        back = found.read(io.BytesIO(out), probe, {"writer": {}, "reader": {}}, None, _READ_OPTIONS)
    except Exception:  # pragma: no cover - another fastavro
        return None
    return found if ok is True and bytes(out) == b"\x02" and back == {"a": 1} else None


# The key order of Avro Java's Schema.toString(), which Confluent's registry returns and
# compares (its "canonical string"): the type's own keys first, then other properties,
# then aliases.
_FIRST = {
    "record": ("type", "name", "namespace", "doc", "fields"),
    "error": ("type", "name", "namespace", "doc", "fields"),
    "enum": ("type", "name", "namespace", "doc", "symbols", "default"),
    "fixed": ("type", "name", "namespace", "doc", "size"),
    "array": ("type", "items"),
    "map": ("type", "values"),
}
_FIELD_FIRST = ("name", "type", "doc", "default", "order")


def _canonical(node: Any, namespace: str | None) -> Any:
    """The schema as Avro Java's ``Schema.toString()`` writes it: compact, keys in its
    order, a primitive without properties as a bare name, ``namespace`` only where it
    differs from the enclosing one. Names are kept as written (short or full)."""
    if isinstance(node, list):
        return [_canonical(branch, namespace) for branch in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if isinstance(kind, str) and kind in _PRIMITIVES and set(node) <= {"type"}:
        return kind
    if not isinstance(kind, str) or kind not in _FIRST:
        # A primitive with properties (e.g. a logical type), or a nested type object.
        out = {"type": _canonical(kind, namespace)} if "type" in node else {}
        out.update((k, v) for k, v in node.items() if k != "type")
        return out
    inner = namespace
    ns_out: str | None = None
    if kind in _NAMED and isinstance(node.get("name"), str):
        name = node["name"]
        ns = name.rpartition(".")[0] if "." in name else node.get("namespace", namespace)
        inner = ns or None
        if "." not in name and node.get("namespace") is not None and ns != namespace:
            ns_out = ns
    out = {}
    for key in _FIRST[kind]:
        if key not in node:
            continue
        if key == "namespace":
            if ns_out is not None:
                out["namespace"] = ns_out
        elif key == "fields" and isinstance(node[key], list):
            out[key] = [_canonical_field(f, inner) for f in node[key]]
        elif key in ("items", "values"):
            out[key] = _canonical(node[key], inner)
        else:
            out[key] = node[key]
    for key, value in node.items():
        if key not in out and key not in _FIRST[kind] and key != "aliases":
            out[key] = value
    if "aliases" in node:
        out["aliases"] = node["aliases"]
    return out


def _canonical_field(field: Any, namespace: str | None) -> Any:
    if not isinstance(field, dict):
        return field
    out = {}
    for key in _FIELD_FIRST:
        if key in field:
            out[key] = _canonical(field[key], namespace) if key == "type" else field[key]
    for key, value in field.items():
        if key not in out and key != "aliases":
            out[key] = value
    if "aliases" in field:
        out["aliases"] = field["aliases"]
    return out


def _normalize(node: Any, namespace: str | None) -> Any:
    """The normalized form: named types by their full name (no ``namespace`` key), a
    primitive written as ``{"type": "int"}`` reduced to ``"int"``, everything else kept
    (``doc`` too: the registry may store this form when asked to normalize, and a schema's
    documentation must survive that); keys are sorted on output."""
    if isinstance(node, str):
        if node in _PRIMITIVES or "." in node or namespace is None:
            return node
        return f"{namespace}.{node}"
    if isinstance(node, list):
        return [_normalize(branch, namespace) for branch in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if isinstance(kind, str) and kind in _PRIMITIVES and set(node) <= {"type"}:
        return kind
    out: dict[str, Any] = {}
    if kind in _NAMED and isinstance(node.get("name"), str):
        name = node["name"]
        if "." not in name:
            ns = node.get("namespace", namespace)
            name = f"{ns}.{name}" if ns else name
        namespace = name.rpartition(".")[0] or None
        out["name"] = name
    for key, value in node.items():
        if key in ("name", "namespace") and kind in _NAMED:
            continue
        if key == "fields" and isinstance(value, list):
            out[key] = [
                {k: (_normalize(v, namespace) if k == "type" else v) for k, v in field.items()}
                if isinstance(field, dict)
                else field
                for field in value
            ]
        elif key == "type" and isinstance(value, str) and value in _COMPLEX:
            out[key] = value
        elif key in ("type", "items", "values"):
            out[key] = _normalize(value, namespace)
        else:
            out[key] = value
    return out


def _find_invalid(obj: Any, schema: Any, named: dict[str, Any], validate: Any) -> tuple[str, str]:
    """The deepest field path at which ``obj`` does not match ``schema`` (a fastavro parsed
    schema), and why. Walks records, arrays and maps; stops at unions and leaves. Runs only
    after validation failed, so its cost is on the error path alone. ``validate`` is the
    schema's validator (the pure-Python one for recursive schemas)."""

    def valid(value: Any, sub: Any) -> bool:
        # A sub-schema may name types defined elsewhere: validate it as the one field of a
        # wrapper record marked parsed, carrying the named-type table.
        wrapper = {
            "type": "record",
            "name": "logbus.schemas.Wrapper",
            "fields": [{"name": "v", "type": sub}],
            "__fastavro_parsed": True,
            "__named_schemas": named,
        }
        return bool(validate({"v": value}, wrapper, raise_errors=False))

    path = ""
    while True:
        if isinstance(schema, str) and schema in named:
            schema = named[schema]
        if isinstance(schema, dict) and schema.get("type") in ("record", "error"):
            if not isinstance(obj, dict):
                return path, f"expected a record ({schema.get('name')}), got {type(obj).__name__}"
            for field in schema["fields"]:
                name = field["name"]
                sub = f"{path}.{name}" if path else name
                if name not in obj and "default" not in field:
                    if not valid(None, field["type"]):
                        return sub, "missing (the field has no default)"
                    continue
                value = obj.get(name, field.get("default"))
                if not valid(value, field["type"]):
                    obj, schema, path = value, field["type"], sub
                    break
            else:
                return path, "does not match the record"
            continue
        if isinstance(schema, dict) and schema.get("type") == "array" and isinstance(obj, list):
            for i, item in enumerate(obj):
                if not valid(item, schema["items"]):
                    obj, schema, path = item, schema["items"], f"{path}[{i}]"
                    break
            else:
                return path, "does not match the array"
            continue
        if isinstance(schema, dict) and schema.get("type") == "map" and isinstance(obj, dict):
            for key, item in obj.items():
                if not isinstance(key, str):
                    return path, f"map key {key!r} is not a string"
                if not valid(item, schema["values"]):
                    obj, schema, path = item, schema["values"], f"{path}[{key!r}]"
                    break
            else:
                return path, "does not match the map"
            continue
        expected = _describe(schema)
        return path, f"{_short(obj)} ({type(obj).__name__}) is not a valid {expected}"


def _describe(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union of " + ", ".join(_describe(s) for s in schema)
    if isinstance(schema, dict):
        name = schema.get("name")
        kind = schema.get("logicalType") or schema.get("type")
        return f"{kind} {name}" if name else str(kind)
    return repr(schema)


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."
