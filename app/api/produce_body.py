"""Parsing a JSON produce body fast, with the pydantic model as the judge of what is valid.

The model (:class:`~app.api.models.ProduceRequest`) defines the body and its
error messages, but validating every record through it costs ~2.8 us per
record against ~0.6 us for ``orjson.loads``, which made it the largest cost
of a JSON produce. So a body is parsed with orjson and checked by hand; the
hand check accepts only bodies the model accepts, and anything it does not
recognise goes to the model, which then produces the exact error (or, if the
model accepts it, its result is used). Bad input is the slow path, good
input the fast one.

The JSON grammar is orjson's (RFC 8259): ``NaN`` and ``Infinity`` are
malformed, and integers beyond 64 bits are read as floats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import orjson
from pydantic import ValidationError

from app.api.codec import BodyInvalid
from app.api.models import INT_MAX, LONG_MAX, TYPED_FORMATS, Header, ProduceRequest
from app.common.native import optional

if TYPE_CHECKING:
    from app.common import _jsonrecords


# The broker's C helper (app/common/_jsonrecords.c): without it, Python alone.
plain_tuples: _jsonrecords.PlainTuples | None = optional("app.common._jsonrecords", "plain_tuples")

FORMATS = frozenset(("json", "string", "binary"))
_BODY_FIELDS = frozenset(("records", "key_format", "value_format"))
_RECORD_FIELDS = frozenset(("key", "value", "headers", "partition", "timestamp"))
_HEADER_FIELDS = frozenset(("key", "value"))
_PLAIN_FIELDS = frozenset(("key", "value"))
_ALL_FORMATS = FORMATS | frozenset(TYPED_FORMATS)
_TYPED_BODY_FIELDS = _BODY_FIELDS | frozenset(
    f"{side}_{name}"
    for side in ("key", "value")
    for name in ("schema_id", "subject", "schema_version", "message")
)
_MAX_SUBJECT = 255  # ProduceRequest's *_subject max_length

# Headers stay in their JSON shape (a dict, or a list of {"key", "value"} dicts)
# and are turned into bytes by the produce loop.
Headers = dict[str, str | None] | list[dict[str, Any]] | list[Header] | None


# (key, value, headers, partition, timestamp): a plain tuple, because building a
# NamedTuple per record costs more than the rest of the check.
ParsedRecord = tuple[Any, Any, Headers, int | None, int | None]


class SchemaRef(NamedTuple):
    """Which registered schema a typed format encodes with: an id, or a subject and its
    version (None: the latest)."""

    schema_id: int | None
    subject: str | None
    version: int | None
    # PROTOBUF: the message of the file (full name or relative to its package; None: the
    # file's first).
    message: str | None = None


class ParsedProduce(NamedTuple):
    records: list[ParsedRecord]
    key_format: str
    value_format: str
    # Typed formats only (avro, jsonschema, protobuf: app/api/typed.py); such a body always
    # comes through the model (the fast check knows only the untyped formats).
    key_schema: SchemaRef | None = None
    value_schema: SchemaRef | None = None

    @property
    def typed(self) -> bool:
        return self.key_schema is not None or self.value_schema is not None


def _headers_ok(headers: Any) -> bool:
    if headers is None:
        return True
    if type(headers) is dict:
        return all(v is None or type(v) is str for v in headers.values())
    if type(headers) is list:
        for h in headers:
            if type(h) is not dict or not h.keys() <= _HEADER_FIELDS:
                return False
            if type(h.get("key")) is not str:
                return False
            v = h.get("value")
            if v is not None and type(v) is not str:
                return False
        return True
    return False


def _fast(obj: Any, formats: frozenset[str] = FORMATS) -> ParsedProduce | None:
    """The parsed body, or None when the model must judge it."""
    if type(obj) is not dict or not obj.keys() <= _BODY_FIELDS:
        return None
    key_format = obj.get("key_format", "json")
    value_format = obj.get("value_format", "json")
    # type() first: a list or dict here is unhashable and would raise on `in`.
    if type(key_format) is not str or type(value_format) is not str:
        return None
    if key_format not in formats or value_format not in formats:
        return None
    raw = obj.get("records")
    if type(raw) is not list or not raw:
        return None
    if plain_tuples is not None:
        # Every record a key and a value at most (the usual body): the loop below in C.
        plain_records = plain_tuples(raw)
        if plain_records is not None:
            return ParsedProduce(plain_records, key_format, value_format)
    records: list[ParsedRecord] = []
    append = records.append
    fields = _RECORD_FIELDS
    plain = _PLAIN_FIELDS
    for rec in raw:
        if type(rec) is not dict:
            return None
        if rec.keys() <= plain:
            # The usual record, a key and a value (or fewer): nothing else to check.
            append((rec.get("key"), rec.get("value"), None, None, None))
            continue
        if not fields.issuperset(rec):
            return None
        get = rec.get
        partition = get("partition")
        timestamp = get("timestamp")
        headers = get("headers")
        # None or an int in the model's range; bool is not an int here, as in the
        # strict model. Out of range goes to the model, which names the field.
        if partition is not None and (type(partition) is not int or not 0 <= partition <= INT_MAX):
            return None
        if timestamp is not None and (type(timestamp) is not int or not 0 <= timestamp <= LONG_MAX):
            return None
        if headers is not None and not _headers_ok(headers):
            return None
        append((get("key"), get("value"), headers, partition, timestamp))
    return ParsedProduce(records, key_format, value_format)


def _schema_ref(obj: dict[str, Any], side: str) -> SchemaRef | bool | None:
    """A typed side's schema fields as the model would take them: the ref, None for an
    untyped side without schema fields, False for anything the model must judge."""
    schema_id = obj.get(f"{side}_schema_id")
    subject = obj.get(f"{side}_subject")
    version = obj.get(f"{side}_schema_version")
    message = obj.get(f"{side}_message")
    fmt = obj.get(f"{side}_format", "json")
    if fmt not in TYPED_FORMATS:
        untyped = schema_id is None and subject is None and version is None and message is None
        return None if untyped else False
    if message is not None and (
        fmt != "protobuf" or type(message) is not str or not 1 <= len(message) <= _MAX_SUBJECT
    ):
        return False
    if schema_id is not None:
        if subject is not None or version is not None:
            return False
        if type(schema_id) is not int or not 0 <= schema_id <= INT_MAX:
            return False
        return SchemaRef(schema_id, None, None, message)
    if type(subject) is not str or not 1 <= len(subject) <= _MAX_SUBJECT:
        return False
    if version is not None and (type(version) is not int or not 1 <= version <= INT_MAX):
        return False
    return SchemaRef(None, subject, version, message)


def _fast_typed(obj: Any) -> ParsedProduce | None:
    """:func:`_fast` for a body with a typed format (avro, jsonschema, protobuf) and its
    schema fields; None when the model must judge it. Only bad input and typed bodies
    come here, never the untyped fast path."""
    if type(obj) is not dict or not obj.keys() <= _TYPED_BODY_FIELDS:
        return None
    key = _schema_ref(obj, "key")
    value = _schema_ref(obj, "value")
    if key is False or value is False or (key is None and value is None):
        return None
    parsed = _fast({k: v for k, v in obj.items() if k in _BODY_FIELDS}, _ALL_FORMATS)
    if parsed is None:
        return None
    return parsed._replace(
        key_schema=key if isinstance(key, SchemaRef) else None,
        value_schema=value if isinstance(value, SchemaRef) else None,
    )


def _from_model(req: ProduceRequest) -> ParsedProduce:
    key_schema = value_schema = None
    if req.key_format in TYPED_FORMATS:
        key_schema = SchemaRef(
            req.key_schema_id, req.key_subject, req.key_schema_version, req.key_message
        )
    if req.value_format in TYPED_FORMATS:
        value_schema = SchemaRef(
            req.value_schema_id, req.value_subject, req.value_schema_version, req.value_message
        )
    return ParsedProduce(
        [(r.key, r.value, r.headers, r.partition, r.timestamp) for r in req.records],
        req.key_format,
        req.value_format,
        key_schema,
        value_schema,
    )


def parse_produce_body(body: bytes) -> ParsedProduce:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BodyInvalid(f"malformed JSON body: {exc}", ["body"]) from None
    parsed = _fast(obj)
    if parsed is not None:
        return parsed
    parsed = _fast_typed(obj)
    if parsed is not None:
        return parsed
    try:
        return _from_model(ProduceRequest.model_validate_json(body))
    except ValidationError as exc:
        raise BodyInvalid.from_validation(exc) from None


def parse_produce_object(obj: Any, where: str = "body") -> ParsedProduce:
    """Like :func:`parse_produce_body` for a body already parsed (a WebSocket message)."""
    parsed = _fast(obj) or _fast_typed(obj)
    if parsed is not None:
        return parsed
    # Bad input only: judged by the model in JSON mode, exactly as an HTTP body would be.
    try:
        return _from_model(ProduceRequest.model_validate_json(orjson.dumps(obj)))
    except ValidationError as exc:
        raise BodyInvalid.from_validation(exc, where) from None
