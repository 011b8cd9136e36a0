"""Schema-typed records on the HTTP JSON doors (issue 18): ``key_format`` / ``value_format``
``avro``, ``jsonschema`` and ``protobuf``.

Produce (:func:`encode_request`): each key or value (a JSON value in the body) is validated
against the schema the request names (``*_schema_id``, or ``*_subject`` and an optional
``*_schema_version``, default the latest) and framed in Confluent's wire format by
:func:`app.common.schemas.wire.encode` (magic byte 0, the 4-byte schema id, the payload).
A json key or value beside a typed one is encoded there too, so the request leaves with
bytes on both sides and its batches are built like an untyped json produce's (one C call
where built). Every record is encoded before any batch is built, so one bad record refuses
the request whole (422 INVALID_RECORD naming ``body.records.<index>.<key|value>`` and the field path)
and nothing of it is written. A subject's version is resolved once per request.

Fetch (:meth:`SchemaCache.walk_decoders` for the HTTP JSON fetch, called per record as the
walk builds its dicts; :meth:`SchemaCache.decode_records` for the WebSocket frames): each
framed key or value is decoded through the id it carries. A record that is not in the asked format (not framed, an unknown id, a
schema of another type, bytes that do not decode) keeps ``null`` and gets a per-record
``key_error`` / ``value_error`` (``{"error_code": "INVALID_RECORD", "message": ...}``):
a fetch never fails for what a producer wrote.

Schemas come from this broker's registry (:class:`~app.registry.service.SchemaRegistry`),
parsed once per id in a :class:`SchemaCache` (an id's schema never changes: ids are never
reused). The untyped formats never come here: the branch is taken only when a typed
format is asked.
"""

from __future__ import annotations

import asyncio
import base64
import decimal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import orjson
from starlette.requests import HTTPConnection

from app.api.codec import FRAMED, BodyInvalid
from app.api.deps import serving_coordinator
from app.api.errors import RecordRefused
from app.api.models import TYPED_FORMATS
from app.api.produce_body import ParsedProduce, ParsedRecord, SchemaRef
from app.common.errors import InvalidRecord, InvalidRequest
from app.common.schema_errors import InvalidSchema, SchemaNotFound, SchemaRegistryError
from app.common.schemas import wire
from app.common.schemas.types import LIMITS, Codec, ParsedSchema

if TYPE_CHECKING:
    from app.common.schemas import _avroenc
    from app.registry.service import SchemaRegistry

try:  # the typed fetch's C decoder (setup.py builds it where a C compiler is)
    from app.common.schemas import _avrodec
except ImportError:  # pragma: no cover - where no C compiler built it
    _avrodec = None  # type: ignore[assignment]

# Request format -> the registry's schema type.
SCHEMA_TYPE_OF = {"avro": "AVRO", "jsonschema": "JSON", "protobuf": "PROTOBUF"}
assert set(SCHEMA_TYPE_OF) == set(TYPED_FORMATS)

Resolved = tuple[int, ParsedSchema]


def is_typed(key_format: str, value_format: str) -> bool:
    return key_format in SCHEMA_TYPE_OF or value_format in SCHEMA_TYPE_OF


def walk_format(fmt: str) -> str:
    """The format the JSON fetch walk renders with: a typed one's raw bytes (decoded after
    the walk by :meth:`SchemaCache.decode_records`), any other unchanged."""
    return FRAMED if fmt in SCHEMA_TYPE_OF else fmt


class SchemaCache:
    """Parsed schemas by id, for one registry.

    Bounded (``typed_records_schema_cache``; cleared when full: a working set of ids is
    small). Concurrency: entries are added on the event loop only. A fetch rendered on a
    worker thread that meets a new id asks the loop for it and waits
    (``run_coroutine_threadsafe``): the registry's store is the loop's alone.
    """

    def __init__(self, registry: SchemaRegistry, max_entries: int) -> None:
        self.registry = registry
        self.max_entries = max_entries
        self._by_id: dict[int, tuple[str, ParsedSchema, bool]] = {}
        # Ids whose stored schema this broker refuses to parse (stored before a check it
        # fails, such as schema_registry_max_zero_byte_values): refused once, not parsed
        # again for every record that carries them.
        self._refused: dict[int, InvalidSchema] = {}
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def by_id(self, schema_id: int) -> tuple[str, ParsedSchema, bool]:
        """(schema type, parsed schema, whether decoded values may hold bytes or decimals
        that JSON cannot carry). Raises ``SchemaNotFound`` (Confluent 40403)."""
        found = self._by_id.get(schema_id)
        if found is not None:
            return found
        if threading.get_ident() != self._loop_thread:
            return asyncio.run_coroutine_threadsafe(
                self._load_async(schema_id), self._loop
            ).result()
        return self._load(schema_id)

    async def _load_async(self, schema_id: int) -> tuple[str, ParsedSchema, bool]:
        return self.by_id(schema_id)

    def _load(self, schema_id: int) -> tuple[str, ParsedSchema, bool]:
        refused = self._refused.get(schema_id)
        if refused is not None:
            raise refused
        stored = self.registry.schema_by_id(schema_id)
        try:
            parsed = self.registry.parsed(stored)
        except InvalidSchema as exc:
            if len(self._refused) >= self.max_entries:
                self._refused.clear()
            self._refused[schema_id] = exc
            raise
        found = (stored.schema_type, parsed, _may_hold_bytes(parsed))
        if len(self._by_id) >= self.max_entries:
            self._by_id.clear()
        self._by_id[schema_id] = found
        return found

    # -- produce ---------------------------------------------------------------------------

    def resolve(self, side: str, fmt: str, ref: SchemaRef) -> Resolved:
        """The (id, schema) a request's ``side`` ("key", "value") encodes with; 404
        SCHEMA_NOT_FOUND for an unknown id, subject or version (with Confluent's code), 400
        when the schema is not of the format's type."""
        try:
            if ref.schema_id is not None:
                schema_id = ref.schema_id
                named = f"{side}_schema_id {schema_id}"
            else:
                assert ref.subject is not None
                version = self.registry.version_of_records(ref.subject, ref.version)
                schema_id = version.id
                named = f"{side}_subject {ref.subject!r} version {version.version}"
                if ref.version is None:
                    named = f"{side}_subject {ref.subject!r} (latest: version {version.version})"
            schema_type, parsed, _ = self.by_id(schema_id)
        except SchemaRegistryError as exc:
            code = getattr(exc, "confluent_code", 50001)
            if code // 100 != 404:
                raise
            where = (
                f"{side}_schema_id {ref.schema_id}"
                if ref.schema_id is not None
                else f"{side}_subject {ref.subject!r}"
            )
            raise SchemaNotFound(
                f"{where}: {exc.message} (Confluent error {code})",
                field=f"{side}_schema_id" if ref.schema_id is not None else f"{side}_subject",
            ) from None
        wanted = SCHEMA_TYPE_OF[fmt]
        if schema_type != wanted:
            raise InvalidRequest(
                f"{named} is a {schema_type} schema; {side}_format {fmt} needs {wanted}"
            )
        return schema_id, parsed

    # -- fetch -----------------------------------------------------------------------------

    def decode_records(
        self, records: list[dict[str, Any]], key_format: str, value_format: str
    ) -> list[dict[str, Any]]:
        """Decode in place the raw keys / values of a JSON fetch's records (rendered with
        :func:`walk_format`) that a typed format asks for; see the module docstring. (The
        HTTP fetch decodes during its walk instead: :meth:`walk_decoders`.)"""
        for field, fmt in (("key", key_format), ("value", value_format)):
            if fmt in SCHEMA_TYPE_OF:
                decode = self.record_decoder(fmt)
                for record in records:
                    record[field] = decode(record[field])
        self.finish_failed(records, key_format, value_format)
        return records

    def walk_decoders(
        self, key_format: str, value_format: str
    ) -> tuple[Callable[[bytes | None], Any] | None, Callable[[bytes | None], Any] | None]:
        """The key and value decoders a JSON fetch's walk calls per record in place of
        its format's (None: the format's own), so each record is decoded as its dict is
        built, with no second pass; :meth:`finish` the records afterwards."""
        return (
            self.record_decoder(key_format) if key_format in SCHEMA_TYPE_OF else None,
            self.record_decoder(value_format) if value_format in SCHEMA_TYPE_OF else None,
        )

    def record_decoder(self, fmt: str) -> Callable[[bytes | None], Any]:
        """A decoder of one answer's framed keys or values in typed format ``fmt``: the
        value, or a :class:`Failed` holding the per-record error (:meth:`finish` moves it
        to ``<field>_error``). Not shared between answers (it keeps the last id's reader).

        Records of one partition mostly carry one id: the last id that decoded cleanly is
        remembered with its reader of whole framed records, so such a record costs a
        5-byte comparison and the read. Avro, where the C decoder is built
        (app/common/schemas/_avrodec.c): the returned decoder is its ``FramedDecoder``,
        which compares the header and decodes the record straight into the answer's
        Python objects in one C call, and hands every other record (another id, a bad
        header, bytes it declines) to the Python decoder below, which retargets it.
        Without it (and for the other formats): fastavro's compiled reader called on the
        record's bytes, no slice. Anything else takes :meth:`_decode`, which says why."""
        wanted = SCHEMA_TYPE_OF[fmt]
        last: bytes | None = None
        fast: Callable[[bytes], Any] | None = None
        native: _avrodec.FramedDecoder | None = None
        # The answer's budget of Avro values built from no bytes (records, nulls, items
        # that take no bytes; its records' bytes add one each), shared by all its records:
        # the C decoder's own where built (it charges there), else this one.
        budget: Budget | _avrodec.FramedDecoder = Budget(LIMITS.max_zero_width_items)

        def decode(data: bytes | None) -> Any:
            nonlocal last, fast
            if data is None:
                return None
            if fast is not None and data[:5] == last:
                try:
                    return fast(data)
                except Exception:  # _decode says why, as for any other record
                    pass
            try:
                value = self._decode(data, wanted, fmt, budget)
            except InvalidRecord as exc:
                return Failed({"error_code": exc.error_code, "message": exc.message})
            _, parsed, may_hold_bytes = self.by_id(wire.schema_id_of(data))
            reader = None
            native_reader = getattr(parsed, "native_reader", None)  # Avro's
            if native is not None and native_reader is not None:
                # Bytes and fixed as their base64 text: what _decode's _jsonable makes.
                reader = native_reader(may_hold_bytes)
            if reader is not None:
                assert native is not None
                native.target(bytes(data[:5]), reader)
            elif not may_hold_bytes and not getattr(parsed, "zero_width_arrays", False):
                # (Arrays of items that read no bytes: every record through _decode, so
                # the answer's budget is charged.)
                last, fast = bytes(data[:5]), _framed_reader(parsed)
            return value

        if _avrodec is None or wanted != "AVRO":
            return decode
        native = budget = _avrodec.FramedDecoder(decode, LIMITS.max_zero_width_items)
        return native

    @staticmethod
    def finish(
        records: list[dict[str, Any]], key_format: str, value_format: str
    ) -> list[dict[str, Any]]:
        """:meth:`finish_failed`, returning the records."""
        SchemaCache.finish_failed(records, key_format, value_format)
        return records

    @staticmethod
    def finish_failed(records: list[dict[str, Any]], key_format: str, value_format: str) -> int:
        """Records decoded by :meth:`record_decoder`: each :class:`Failed` key or value
        becomes ``null`` and its error goes to ``key_error`` / ``value_error`` (after the
        record's other fields, keys' errors first): one type check per record and typed
        field. How many keys and values failed."""
        failed = 0
        for field, fmt in (("key", key_format), ("value", value_format)):
            if fmt not in SCHEMA_TYPE_OF:
                continue
            error_field = f"{field}_error"
            for record in records:
                got = record[field]
                if type(got) is Failed:
                    record[field] = None
                    record[error_field] = got.error
                    failed += 1
        return failed

    def _decode(
        self, data: bytes, wanted: str, fmt: str, budget: Budget | _avrodec.FramedDecoder
    ) -> Any:
        schema_id = wire.schema_id_of(data)  # NotSchemaFramed
        try:
            schema_type, parsed, may_hold_bytes = self.by_id(schema_id)
        except SchemaNotFound:
            raise InvalidRecord(
                f"framed with schema id {schema_id}, which the registry does not have "
                "(Confluent error 40403)"
            ) from None
        except InvalidSchema as exc:
            # Stored before a check it fails (an older broker's registry): never decoded.
            raise InvalidRecord(
                f"framed with schema id {schema_id}, whose stored schema this broker "
                f"refuses to decode with (Confluent error 42201): {exc.message}"
            ) from None
        if schema_type != wanted:
            raise InvalidRecord(
                f"framed with schema id {schema_id}, a {schema_type} schema, not {fmt}"
            )
        try:
            # schema_id_of checked the header: the codec decodes the rest directly.
            payload = memoryview(data)[wire.HEADER_SIZE :]
            within = getattr(parsed, "decode_within", None)  # Avro's
            if within is not None:
                value = within(payload, budget)
            else:
                value = cast(Codec, parsed).decode_payload(payload)
        except InvalidRecord:
            raise
        except Exception as exc:  # a library's own error for bytes it cannot read
            raise InvalidRecord(
                f"does not decode with schema id {schema_id}: {type(exc).__name__}: {exc}"
            ) from None
        return _jsonable(value) if may_hold_bytes else value


def schema_cache(conn: HTTPConnection) -> SchemaCache:
    """This app's :class:`SchemaCache` (made on first use, on the event loop). 503 when the
    registry is not serving (the broker starting or stopping)."""
    registry: SchemaRegistry = serving_coordinator(conn, "schema_registry", "schema registry")
    cache: SchemaCache | None = getattr(conn.app.state, "typed_schemas", None)
    if cache is None or cache.registry is not registry:
        size = conn.app.state.logbus.settings.typed_records_schema_cache
        cache = conn.app.state.typed_schemas = SchemaCache(registry, size)
    return cache


def encode_request(cache: SchemaCache, req: ParsedProduce) -> ParsedProduce:
    """``req`` with its typed keys / values framed (their format becomes the internal
    ``framed``); raises :class:`RecordRefused` (422) for the first record that does not
    match, before anything is written."""
    key = _encoder(cache, "key", req.key_format, req.key_schema)
    value = _encoder(cache, "value", req.value_format, req.value_schema)
    # The other side in json (the default) is encoded here too (orjson.dumps: the bytes
    # the json format writes), so both sides leave as bytes in the internal ``framed``
    # format and the request takes the plain records' one-call batch building
    # (app/api/routers/records.py: build_batches) like an untyped json produce.
    if key is None and req.key_format == "json":
        key = _json_bytes
    if value is None and req.value_format == "json":
        value = _json_bytes
    if encode_records is not None:
        try:
            encoded = encode_records(req.records, key, value)
        except Exception:  # the loop below says which record and why
            pass
        else:
            return ParsedProduce(
                encoded,
                FRAMED if key is not None else req.key_format,
                FRAMED if value is not None else req.value_format,
            )
    # The same loop in Python: where the C helper is not built, and for a request that
    # it refused (a record an encoder raised for), to name the record and field.
    records: list[ParsedRecord] = []
    append = records.append
    index = 0
    field = "key"
    try:
        for raw_key, raw_value, headers, partition, timestamp in req.records:
            field = "key"
            if key is not None and raw_key is not None:
                raw_key = key(raw_key)
            field = "value"
            if value is not None and raw_value is not None:
                raw_value = value(raw_value)
            append((raw_key, raw_value, headers, partition, timestamp))
            index += 1
    except InvalidRecord as exc:
        raise RecordRefused(index, field, getattr(exc, "path", ""), exc.message) from None
    except orjson.JSONEncodeError as exc:  # the json side: codec's json encoder's words
        raise BodyInvalid.at(f"body.records.{index}.{field}", f"{exc} (format json)") from None
    except (TypeError, ValueError, OverflowError) as exc:
        # A library's own words for a value it cannot take (wire.encode validates first;
        # this keeps a gap there a 422, never a 500).
        raise RecordRefused(index, field, "", f"{type(exc).__name__}: {exc}") from None
    return ParsedProduce(
        records,
        FRAMED if key is not None else req.key_format,
        FRAMED if value is not None else req.value_format,
    )


_json_bytes: Callable[[Any], bytes] = orjson.dumps


def _load_encode_records() -> _avroenc.EncodeRecords | None:
    """The C loop of :func:`encode_request` (app/common/schemas/_avroenc.c, built by
    setup.py where a C compiler is): each record's key and value through its encoder, the
    Avro ones called without Python frames. Without it, the Python loop."""
    try:
        from app.common.schemas._avroenc import encode_records as native
    except ImportError:  # pragma: no cover - where no C compiler built it
        return None
    return native


encode_records = _load_encode_records()


def _encoder(
    cache: SchemaCache, side: str, fmt: str, ref: SchemaRef | None
) -> Callable[[Any], bytes] | None:
    if ref is None:
        return None
    schema_id, parsed = cache.resolve(side, fmt, ref)
    # Avro's own framed encoder (one buffer per record, fastavro's compiled validator and
    # writer called directly): the per-call checks of wire.encode cost more than the
    # encode itself on small records.
    framed = getattr(parsed, "framed_encoder", None)
    if framed is not None:
        fast: Callable[[Any], bytes] = framed(schema_id)
        return fast
    encode = wire.encode
    message = ref.message
    if message is not None:
        # Checked once here, so a name the file does not define is the request's error
        # (400 naming the field), not every record's.
        try:
            parsed.message_class(message)  # type: ignore[attr-defined]
        except InvalidRecord as exc:
            raise InvalidRequest(
                f"{side}_message {message!r}: {exc.message} (schema id {schema_id})",
                field=f"{side}_message",
            ) from None

    def encoder(obj: Any) -> bytes:
        return encode(parsed, schema_id, obj, message_name=message)

    return encoder


class Budget:
    """An answer's budget of values built from no bytes where the C decoder is not built
    (``_avrodec.FramedDecoder`` has the same two attributes)."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.left = self.limit = limit


class Failed:
    """A key or value that did not decode, in place until :meth:`SchemaCache.finish`."""

    __slots__ = ("error",)

    def __init__(self, error: dict[str, str]) -> None:
        self.error = error


def _framed_reader(parsed: ParsedSchema) -> Callable[[bytes], Any]:
    """``parsed``'s decoder of whole framed records (header not checked)."""
    reader = getattr(parsed, "framed_reader", None)
    if reader is not None:
        fast: Callable[[bytes], Any] = reader()
        return fast
    decode_payload = cast(Codec, parsed).decode_payload

    def decode(data: bytes) -> Any:
        return decode_payload(memoryview(data)[wire.HEADER_SIZE :])

    return decode


def _may_hold_bytes(parsed: ParsedSchema) -> bool:
    """Whether an Avro schema (or its references) has ``bytes`` or ``fixed`` (decimals are
    one of them): fastavro then decodes to bytes / Decimal, which the JSON answer cannot
    carry as they are. A textual test, so it may say yes needlessly, never no wrongly."""
    if parsed.schema_type != "AVRO":
        return False
    texts = [parsed.raw]
    pending = list(parsed.references)
    while pending:
        ref = pending.pop()
        texts.append(ref.schema)
        pending.extend(ref.references)
    return any('"bytes"' in t or '"fixed"' in t for t in texts)


def _jsonable(value: Any) -> Any:
    """A decoded Avro value with bytes as base64 text and decimals as their exact text."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value
