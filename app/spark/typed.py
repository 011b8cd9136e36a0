"""Typed values and keys for the Spark source and sink (issue 18): ``valueFormat`` (and
``keyFormat``) ``avro``, ``jsonschema`` or ``protobuf`` with a subject of the broker's
schema registry.

Options (source and sink; each ``value...`` option has its ``key...`` twin for the
``key`` column: ``keyFormat``, ``keySubject`` (default ``<topic>-key``),
``keySchemaVersion``, ``keySchemaId``, ``keyDecodeMode``):

- ``valueFormat``: ``avro``, ``jsonschema`` or ``protobuf`` (absent: ``value`` stays binary).
- ``valueSubject``: the subject (default ``<topic>-value``, Confluent's TopicNameStrategy,
  when one topic is read or written).
- ``valueSchemaVersion``: a version number or ``latest`` (default), resolved once on the
  driver when the query is planned; or ``valueSchemaId``.
- ``valueMessage`` (protobuf): the message of the schema's file the column holds, by
  full name or relative to the file's package (default: the file's first, Confluent's
  default); the sink writes its message indexes.
- ``schema.registry.url``: default ``<first logbus.url>/schema-registry``.
- ``valueDecodeMode`` (source): ``PERMISSIVE`` (default): a record that does not decode
  (not framed, an unknown id, another schema type, bytes that do not decode or resolve)
  gives a null ``value`` and the reason in ``value_error``; ``FAILFAST``: the task, and so
  the job, fails on the first such record, naming its topic, partition and offset.

The source's ``value`` column becomes the schema's Spark type (a struct for a record or
message; :mod:`app.spark.schemas` says how each type maps), and two columns follow it:
``value_schema_id`` (the id the record carries, null when not framed) and ``value_error``
(then ``key_schema_id`` and ``key_error`` for a typed key, whose ``key`` column is typed
the same way).
Each record is decoded through the schema of the id it carries: Avro records written with
another version of the subject are resolved into the reader's version by Avro's rules
(fields added with defaults filled, removed ones dropped, int promoted to long...); JSON
Schema and Protobuf records are decoded with their own schema, then projected by field
name onto the reader's struct.

Per Arrow batch: each value is decoded in Python (fastavro's compiled reader for Avro,
orjson plus the validator for JSON, upb for Protobuf), then the batch's values become one
Arrow column in a single ``pyarrow.array`` call (no per-record Arrow work).

The sink encodes its ``value`` (and, with ``keyFormat``, ``key``) column (a struct, or the
schema's primitive type) with the subject's schema, validated, in Confluent's wire format; a row that does not match fails
the task with the row's field path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from app.common.schema_errors import NotSchemaFramed, RecordInvalid
from app.common.schemas import ParsedSchema, wire
from app.common.schemas.types import Codec
from app.spark import options as opt
from app.spark.options import OptionError
from app.spark.schemas import (
    FORMATS,
    Convert,
    RegisteredSchema,
    Registry,
    SchemaMappingError,
    registry_url,
    spark_type,
)

DECODE_MODES = ("PERMISSIVE", "FAILFAST")


class DecodeFailed(RuntimeError):
    """FAILFAST: a record that does not decode."""


@dataclass(frozen=True)
class TypedValues:
    """What the driver resolved for a typed column (picklable, sent to the tasks):
    ``field`` is ``value`` (``valueFormat``...) or ``key`` (``keyFormat``...)."""

    fmt: str
    registry_url: str
    reader: RegisteredSchema
    fail_fast: bool
    field: str = "value"
    # PROTOBUF: the message of the file the column holds (None: the file's first).
    message: str | None = None

    @property
    def schema_type(self) -> str:
        return FORMATS[self.fmt]

    @property
    def columns(self) -> tuple[str, str]:
        """The columns that follow a typed source's others: the id, the error."""
        return f"{self.field}_schema_id", f"{self.field}_error"


FIELDS = ("key", "value")


def typed_values(
    options: Mapping[str, str], topic: str | None, *, sink: bool = False, field: str = "value"
) -> TypedValues | None:
    """The typed options of ``field`` (``value``: ``valueFormat``, ``valueSubject``...;
    ``key``: ``keyFormat``, ``keySubject``...), resolved against the registry (on the
    driver); None when ``<field>Format`` is not given. Raises OptionError for bad options,
    an unknown subject, version or id, or a schema of another type."""
    assert field in FIELDS
    name = f"{field}Format"
    raw = opt.get(options, name)
    if raw is None:
        return None
    fmt = raw.strip().lower()
    if fmt not in FORMATS:
        raise OptionError(f"option {name!r} must be one of {', '.join(FORMATS)}, got {raw!r}")
    mode = (opt.get(options, f"{field}DecodeMode") or "PERMISSIVE").strip().upper()
    if mode not in DECODE_MODES:
        raise OptionError(
            f"option '{field}DecodeMode' must be PERMISSIVE or FAILFAST, got {mode!r}"
        )
    message = opt.get(options, f"{field}Message")
    if message is not None and fmt != "protobuf":
        raise OptionError(f"option '{field}Message' goes with {name} protobuf")
    url = registry_url(opt.url_of(options), opt.get(options, "schema.registry.url"))
    registry = Registry(url)
    try:
        schema_id = opt.integer(options, f"{field}SchemaId")
        if schema_id is not None:
            reader = registry.by_id(schema_id)
        else:
            subject = opt.get(options, f"{field}Subject")
            if subject is None:
                if topic is None:
                    raise OptionError(
                        f"option '{field}Subject' (or '{field}SchemaId') is needed with "
                        f"{name} when "
                        f"{'no single topic is written' if sink else 'several topics are read'}"
                    )
                subject = f"{topic}-{field}"
            version = (opt.get(options, f"{field}SchemaVersion") or "latest").strip()
            if version != "latest" and not (version.isascii() and version.isdigit()):
                raise OptionError(
                    f"option '{field}SchemaVersion' must be a version number or latest, "
                    f"got {version!r}"
                )
            reader = registry.version(subject, version)
    except LookupError as exc:
        raise OptionError(f"{name} {fmt}: {exc}") from None
    if reader.schema_type != FORMATS[fmt]:
        raise OptionError(
            f"schema id {reader.schema_id} is a {reader.schema_type} schema; "
            f"{name} {fmt} needs {FORMATS[fmt]}"
        )
    if message is not None:
        try:
            reader.parse().message_class(message)  # type: ignore[attr-defined]
        except RecordInvalid as exc:
            raise OptionError(
                f"option '{field}Message': {exc.message} (schema id {reader.schema_id})"
            ) from None
    typed = TypedValues(fmt, url, reader, mode == "FAILFAST", field, message)
    value_type(typed)  # refuse now a schema Spark has no type for
    return typed


def typed_columns(
    options: Mapping[str, str], topic: str | None, *, sink: bool = False
) -> dict[str, TypedValues]:
    """The typed columns the options ask for, by column (``key``, ``value``)."""
    out = {}
    for field in FIELDS:
        typed = typed_values(options, topic, sink=sink, field=field)
        if typed is not None:
            out[field] = typed
    return out


def value_type(typed: TypedValues) -> T.DataType:
    """The Spark type of ``typed``'s column."""
    try:
        return spark_type(typed.reader.parse(), typed.message)[0]
    except SchemaMappingError as exc:
        raise OptionError(f"{typed.field}Format {typed.fmt}: {exc}") from None


def single_topic(options: Mapping[str, str]) -> str | None:
    """The one topic a source reads (``subscribe`` with one name), else None."""
    subscribe = opt.get(options, "subscribe")
    if subscribe and "," not in subscribe:
        return subscribe.strip()
    return None


class Decoder:
    """Decodes a task's value columns (one per Arrow batch). Not thread-safe: one per task."""

    def __init__(self, typed: TypedValues) -> None:
        self.typed = typed
        self.registry = Registry(typed.registry_url)
        self.reader = typed.reader.parse()
        self.reader_id = typed.reader.schema_id
        dtype, convert = spark_type(self.reader, typed.message)
        self.convert: Convert = convert
        self.arrow_type = to_arrow_type(dtype, timezone="UTC")
        self.wanted = typed.schema_type

    def writer(self, schema_id: int) -> ParsedSchema:
        if schema_id == self.reader_id:
            return self.reader
        return self.registry.parsed(schema_id)

    def decode_one(self, data: bytes) -> tuple[Any, int | None]:
        """(the value, converted for Arrow; the schema id). Raises RecordInvalid."""
        schema_id = wire.schema_id_of(data)
        try:
            writer = self.writer(schema_id)
        except LookupError:
            raise RecordInvalid(
                "", f"framed with schema id {schema_id}, which the registry does not have"
            ) from None
        if writer.schema_type != self.wanted:
            raise RecordInvalid(
                "",
                f"framed with schema id {schema_id}, a {writer.schema_type} schema, "
                f"not {self.typed.fmt}",
            )
        payload = memoryview(data)[wire.HEADER_SIZE :]
        if self.wanted == "AVRO":
            reader = None if writer is self.reader else self.reader
            value = writer.decode_as(payload, reader)  # type: ignore[attr-defined]
        elif self.wanted == "JSON":
            value = writer.decode_payload(payload)  # type: ignore[attr-defined]
        else:
            value = _proto_message(writer, payload)
        return (value if self.convert is None else self.convert(value)), schema_id

    def column(
        self, values: pa.Array, where: tuple[str, int], offsets: pa.Array
    ) -> tuple[pa.Array, pa.Array, pa.Array]:
        """The decoded ``value`` column, ``value_schema_id`` and ``value_error`` of a batch's
        raw values."""
        raw = values.to_pylist()
        decoded: list[Any] = []
        ids: list[int | None] = []
        errors: list[str | None] = []
        for i, data in enumerate(raw):
            if data is None:
                decoded.append(None)
                ids.append(None)
                errors.append(None)
                continue
            try:
                value, schema_id = self.decode_one(data)
            except (
                RecordInvalid,
                NotSchemaFramed,
                ValueError,
                TypeError,
                KeyError,
                AttributeError,  # a Protobuf writer without a field of the reader
            ) as exc:
                message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                if self.typed.fail_fast:
                    raise DecodeFailed(
                        f"{where[0]}-{where[1]} offset {offsets[i].as_py()}: {message} "
                        f"({self.typed.field}DecodeMode=FAILFAST)"
                    ) from None
                decoded.append(None)
                ids.append(_id_or_none(data))
                errors.append(message)
                continue
            decoded.append(value)
            ids.append(schema_id)
            errors.append(None)
        try:
            column = pa.array(decoded, type=self.arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
            # A value pyarrow cannot take (e.g. a JSON number past a long): find which, one
            # by one (only on this path), and make them errors too.
            column = self._one_by_one(decoded, ids, errors, where, offsets)
        return column, pa.array(ids, type=pa.int32()), pa.array(errors, type=pa.string())

    def _one_by_one(
        self,
        decoded: list[Any],
        ids: list[int | None],
        errors: list[str | None],
        where: tuple[str, int],
        offsets: pa.Array,
    ) -> pa.Array:
        for i, value in enumerate(decoded):
            if value is None:
                continue
            try:
                pa.array([value], type=self.arrow_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError) as e:
                message = f"the value does not fit the column's Spark type: {e}"
                if self.typed.fail_fast:
                    raise DecodeFailed(
                        f"{where[0]}-{where[1]} offset {offsets[i].as_py()}: {message}"
                    ) from None
                decoded[i] = None
                errors[i] = message
        return pa.array(decoded, type=self.arrow_type)


def _id_or_none(data: bytes) -> int | None:
    try:
        return wire.schema_id_of(data)
    except NotSchemaFramed:
        return None


def _proto_message(writer: ParsedSchema, payload: memoryview) -> Any:
    """The Protobuf message of a payload (message indexes, then the message)."""
    from google.protobuf.message import DecodeError

    from app.common.schemas._protobuf import read_message_indexes

    pos, indexes = read_message_indexes(payload)
    descriptor = writer._by_indexes(indexes)  # type: ignore[attr-defined]
    message = writer._class(descriptor)()  # type: ignore[attr-defined]
    try:
        message.ParseFromString(bytes(payload[pos:]))
    except DecodeError as e:
        raise RecordInvalid("", f"Protobuf payload does not decode: {e}") from None
    return message


class Encoder:
    """Encodes a sink task's ``value`` (or ``key``) column with the subject's schema."""

    def __init__(self, typed: TypedValues) -> None:
        self.parsed = typed.reader.parse()
        self.schema_id = typed.reader.schema_id
        self.field = typed.field
        self.message = typed.message
        self.codec: Codec = self.parsed  # type: ignore[assignment]
        framed = getattr(self.parsed, "framed_encoder", None)
        self.encode = framed(self.schema_id) if framed is not None else self._encode

    def _encode(self, value: Any) -> bytes:
        return wire.encode(self.parsed, self.schema_id, value, message_name=self.message)

    def column(self, values: pa.Array | pa.ChunkedArray) -> list[bytes | None]:
        out: list[bytes | None] = []
        for i, value in enumerate(values.to_pylist(maps_as_pydicts="strict")):
            if value is None:
                out.append(None)
                continue
            try:
                out.append(self.encode(value))
            except RecordInvalid as exc:
                where = f" at {exc.path}" if getattr(exc, "path", "") else ""
                raise RecordInvalid(
                    getattr(exc, "path", ""),
                    f"row {i} of the batch's {self.field} does not match schema id "
                    f"{self.schema_id}{where}: "
                    f"{exc.message}",
                ) from None
        return out
