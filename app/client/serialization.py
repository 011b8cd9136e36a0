"""Serializers and deserializers for schema-typed records, in confluent-kafka's style.

Bytes are Confluent's wire format (magic byte 0, the 4-byte big-endian schema id, for
Protobuf the message indexes, then the payload), encoded and decoded by
:mod:`app.common.schemas` (the code the broker's typed doors use), so confluent-kafka's
deserializers read what these write and the other way round::

    from app.client import Producer
    from app.client.schema_registry import SchemaRegistryClient
    from app.client.serialization import AvroSerializer

    registry = SchemaRegistryClient("http://127.0.0.1:8080/schema-registry")
    with Producer(url, value_serializer=AvroSerializer(registry, schema_str)) as producer:
        producer.send("orders", {"total": 42})

A serializer is called as ``serializer(obj, ctx)`` with a :class:`SerializationContext`
(the topic and whether it is the key or the value), as confluent-kafka's; ``Producer``
and ``Consumer`` take them as ``key_serializer`` / ``value_serializer`` and
``key_deserializer`` / ``value_deserializer`` and call them for each record. With an
:class:`~app.client.schema_registry.AsyncSchemaRegistryClient`, ``await
serializer.aserialize(obj, ctx)`` (what ``AsyncProducer`` and ``AsyncConsumer`` do).

Configuration (``conf``, confluent-kafka's names): ``auto.register.schemas`` (default
True: register the serializer's schema under the subject on first use),
``use.latest.version`` (encode with the subject's latest version instead, looked up again
after ``latest.cache.ttl.secs``, default 300), ``normalize.schemas``,
``subject.name.strategy`` (:func:`topic_subject_name_strategy`, the default,
:func:`record_subject_name_strategy`, :func:`topic_record_subject_name_strategy`).
With ``auto.register.schemas`` False and ``use.latest.version`` False the schema must
already be registered under the subject (looked up once).

Differences from confluent-kafka, on purpose: Protobuf serializers take the ``.proto``
text (and ``message_name``) rather than a generated class, and accept a dict or a
message instance; deserializers give Avro records as dicts, JSON as parsed JSON and
Protobuf as ``MessageToDict`` dicts (the shapes the broker's typed fetch gives).
``AvroDeserializer(client, schema_str)`` resolves each value into the reader's schema
(Avro's rules); the JSON and Protobuf deserializers decode with the writer's schema.

Written once (sans I/O): the decisions are flows (:mod:`app.client._drive`) that yield the
registry calls they need, run by the registry client's driver, blocking or asyncio.
Per (subject) and per id the schema is looked up once and cached in the serializer.
Concurrency: as the registry client (caches are per-entry dict writes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeGuard

import orjson

from app.client.schema_registry import (
    AsyncSchemaRegistryClient,
    RegistryCore,
    Schema,
    SchemaRegistryClient,
)
from app.common.schemas import ParsedSchema, parse, wire

Registry = SchemaRegistryClient | AsyncSchemaRegistryClient
Flow = Generator[Any, Any, Any]


class MessageField(StrEnum):
    """Which part of a record a (de)serializer handles."""

    KEY = "key"
    VALUE = "value"


@dataclass(frozen=True, slots=True)
class SerializationContext:
    """What a (de)serializer is told about a record: its topic, key or value, headers."""

    topic: str
    field: MessageField | str = MessageField.VALUE
    headers: Any = None


def topic_subject_name_strategy(ctx: SerializationContext, record_name: str | None) -> str:
    """Confluent's default: ``<topic>-key`` / ``<topic>-value``."""
    return f"{ctx.topic}-{MessageField(ctx.field).value}"


def record_subject_name_strategy(ctx: SerializationContext, record_name: str | None) -> str:
    """The record's fully qualified name (Avro record, JSON Schema ``title``, Protobuf
    message): one subject per type, shared by every topic."""
    if not record_name:
        raise ValueError("RecordNameStrategy needs a named record type (Avro name, JSON title)")
    return record_name


def topic_record_subject_name_strategy(ctx: SerializationContext, record_name: str | None) -> str:
    """``<topic>-<record name>``."""
    return f"{ctx.topic}-{record_subject_name_strategy(ctx, record_name)}"


SubjectNameStrategy = Callable[[SerializationContext, str | None], str]

_CONF_KEYS = frozenset(
    (
        "auto.register.schemas",
        "use.latest.version",
        "normalize.schemas",
        "subject.name.strategy",
        "latest.cache.ttl.secs",
    )
)


_UNSET: Any = object()


def _driven(registry: Registry, flow: Flow) -> Any:
    """Run ``flow`` through ``registry``'s driver (blocking, or a coroutine for asyncio)."""
    return registry._run(flow)


async def _adriven(registry: Registry, flow: Flow) -> Any:
    """``flow``'s result from either client: awaited from an asyncio one, run to the end
    by a blocking one (what the ``a*`` methods accept)."""
    pending = _driven(registry, flow)
    if isinstance(registry, AsyncSchemaRegistryClient):
        pending = await pending
    assert pending is not None
    return pending


class _Serializer:
    """A serializer's whole work; its constructor takes AvroSerializer's arguments
    (confluent-kafka's order), the other types' constructors reorder them."""

    schema_type = "AVRO"

    def __init__(
        self,
        schema_registry_client: Registry,
        schema_str: str,
        to_dict: Callable[[Any, SerializationContext], Any] | None = None,
        conf: dict[str, Any] | None = None,
        *,
        message_name: str | None = None,
    ) -> None:
        conf = dict(conf or {})
        unknown = set(conf) - _CONF_KEYS
        if unknown:
            raise ValueError(f"unknown serializer config: {', '.join(sorted(unknown))}")
        self.registry = schema_registry_client
        self.schema = Schema(schema_str, self.schema_type)
        # Parsed here, so a bad schema fails at construction (InvalidSchema), not per record.
        # (A schema that refers to other subjects: use.latest.version, which resolves them.)
        self._parsed: ParsedSchema | None = None
        if not conf.get("use.latest.version", False):
            self._parsed = self._parse(())
        self.auto_register = bool(conf.get("auto.register.schemas", True))
        self.use_latest = bool(conf.get("use.latest.version", False))
        self.normalize = bool(conf.get("normalize.schemas", False))
        self.strategy: SubjectNameStrategy = conf.get(
            "subject.name.strategy", topic_subject_name_strategy
        )
        self.latest_ttl_s = float(conf.get("latest.cache.ttl.secs", 300))
        self.to_dict = to_dict
        self.message_name = message_name
        self._record_name: Any = _UNSET  # record_name(), computed on first use
        # subject -> (schema id, parsed schema, when looked up)
        self._by_subject: dict[str, tuple[int, ParsedSchema, float]] = {}

    def _parse(self, references: tuple[Any, ...]) -> ParsedSchema:
        return parse(self.schema_type, self.schema.schema_str, references)

    def record_name(self) -> str | None:
        """The name RecordNameStrategy uses (Avro full name; JSON title; Protobuf message)."""
        return None

    def _resolve_flow(self, subject: str) -> Flow:
        """The (id, parsed schema) the subject's records are written with: the subject's
        latest version (``use.latest.version``), the serializer's schema registered
        (``auto.register.schemas``) or looked up; cached per subject by the caller's
        :meth:`_cached` check."""
        core: RegistryCore = self.registry
        if self.use_latest:
            latest = yield from core.get_version_flow(subject, "latest")
            refs = yield from core.resolve_references_flow(latest.schema)
            schema_id = latest.schema_id
            parsed = parse(latest.schema.schema_type, latest.schema.schema_str, refs)
        else:
            if self.auto_register:
                schema_id = yield from core.register_schema_flow(
                    subject, self.schema, self.normalize
                )
            else:
                registered = yield from core.lookup_schema_flow(
                    subject, self.schema, self.normalize
                )
                schema_id = registered.schema_id
            parsed = self._parsed if self._parsed is not None else self._parse(())
        self._by_subject[subject] = (schema_id, parsed, time.monotonic())
        return schema_id, parsed

    def _subject(self, ctx: SerializationContext | None) -> str:
        if ctx is None:
            raise ValueError("a SerializationContext(topic, MessageField.KEY|VALUE) is required")
        if self.strategy is topic_subject_name_strategy:  # the default needs no record name
            return topic_subject_name_strategy(ctx, None)
        if self._record_name is _UNSET:
            self._record_name = self.record_name()
        return self.strategy(ctx, self._record_name)

    def _cached(self, subject: str) -> tuple[int, ParsedSchema] | None:
        """The subject's (id, schema) when looked up already (and, with
        ``use.latest.version``, within ``latest.cache.ttl.secs``)."""
        found = self._by_subject.get(subject)
        if found is None or (self.use_latest and time.monotonic() - found[2] >= self.latest_ttl_s):
            return None
        return found[0], found[1]

    def _encode(self, resolved: tuple[int, ParsedSchema], obj: Any, ctx: Any) -> bytes:
        value = self.to_dict(obj, ctx) if self.to_dict is not None else obj
        return wire.encode(resolved[1], resolved[0], value, message_name=self.message_name)

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        """``obj`` validated and framed; blocking (a :class:`SchemaRegistryClient`).
        Raises ``RecordInvalid`` (INVALID_RECORD, naming the field path) for a value that
        does not match, the registry's errors (e.g. ``IncompatibleSchema``) on register.
        ``None`` stays ``None`` (a tombstone), as confluent-kafka's."""
        if obj is None:
            return None
        subject = self._subject(ctx)
        resolved = self._cached(subject)
        if resolved is None:  # a subject's first record: the registry's flow, once
            if not isinstance(self.registry, SchemaRegistryClient):
                raise TypeError("with an AsyncSchemaRegistryClient, await serializer.aserialize()")
            resolved = _driven(self.registry, self._resolve_flow(subject))
            assert resolved is not None
        return self._encode(resolved, obj, ctx)

    async def aserialize(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        """As ``__call__``, for an :class:`AsyncSchemaRegistryClient` (or, blocking, a
        :class:`SchemaRegistryClient`)."""
        if obj is None:
            return None
        subject = self._subject(ctx)
        resolved = self._cached(subject)
        if resolved is None:
            resolved = await _adriven(self.registry, self._resolve_flow(subject))
        return self._encode(resolved, obj, ctx)


class AvroSerializer(_Serializer):
    """Avro (fastavro), each value checked first: a wrong type names its field path."""

    schema_type = "AVRO"

    def record_name(self) -> str | None:
        doc = orjson.loads(self.schema.schema_str)
        if not isinstance(doc, dict) or "name" not in doc:
            return None
        name = str(doc["name"])
        namespace = doc.get("namespace")
        return name if "." in name or not namespace else f"{namespace}.{name}"


class JSONSerializer(_Serializer):
    """JSON Schema (jsonschema-rs), the value as JSON text (UTF-8) after the header."""

    schema_type = "JSON"

    def __init__(
        self,
        schema_str: str,
        schema_registry_client: Registry,
        to_dict: Callable[[Any, SerializationContext], Any] | None = None,
        conf: dict[str, Any] | None = None,
    ) -> None:
        # confluent-kafka's argument order (schema first) for this one.
        super().__init__(schema_registry_client, schema_str, to_dict, conf)

    def record_name(self) -> str | None:
        doc = orjson.loads(self.schema.schema_str)
        title = doc.get("title") if isinstance(doc, dict) else None
        return str(title) if title else None


class ProtobufSerializer(_Serializer):
    """Protobuf, in either of two forms:

    - ``ProtobufSerializer(client, proto_text, message_name=None, conf=None)``: the
      ``.proto`` text (compiled by protoc), ``message_name`` picking the message (default:
      the file's first); values are dicts or message instances;
    - confluent-kafka's ``ProtobufSerializer(msg_type, client, conf=None)``: a generated
      message class, whose file descriptor is registered (Confluent's base64 form, as
      confluent-kafka does); ``use.deprecated.format`` may be given, False only.
    """

    schema_type = "PROTOBUF"

    def __init__(
        self,
        schema_registry_client: Registry | type[Any],
        schema_str: str | Registry,
        message_name: str | dict[str, Any] | None = None,
        conf: dict[str, Any] | None = None,
    ) -> None:
        if _is_message_class(schema_registry_client):
            if not isinstance(schema_str, SchemaRegistryClient | AsyncSchemaRegistryClient):
                raise TypeError(
                    "ProtobufSerializer(msg_type, schema_registry_client, conf=None): the "
                    "second argument must be a schema registry client"
                )
            if isinstance(message_name, dict):  # confluent-kafka's third argument is conf
                conf, message_name = message_name, None
            if message_name is not None:
                raise TypeError("with a message class, the message is that class: no message_name")
            descriptor = schema_registry_client.DESCRIPTOR
            registry: Registry = schema_str
            text = _descriptor_text(descriptor.file)
            message_name = str(descriptor.full_name)
            conf = _without_deprecated_format(conf)
        elif isinstance(schema_registry_client, SchemaRegistryClient | AsyncSchemaRegistryClient):
            if not isinstance(schema_str, str) or isinstance(message_name, dict):
                raise TypeError(
                    "ProtobufSerializer(schema_registry_client, proto_text, message_name=None, "
                    "conf=None) or ProtobufSerializer(msg_type, schema_registry_client, conf)"
                )
            registry, text = schema_registry_client, schema_str
        else:
            raise TypeError(
                "ProtobufSerializer takes a schema registry client or a generated message class "
                f"first, not {type(schema_registry_client).__name__}"
            )
        super().__init__(registry, text, conf=conf, message_name=message_name)

    def record_name(self) -> str | None:
        parsed = self._parsed if self._parsed is not None else self._parse(())
        cls = parsed.message_class(self.message_name)  # type: ignore[attr-defined]
        return str(cls.DESCRIPTOR.full_name)


class _Deserializer:
    """Decodes any id the bytes carry (schemas by id cached); ``schema_type`` checked.
    With ``_fixed`` (a reader's schema given without a registry, or in place of it) every
    id decodes with that schema and the registry is not asked."""

    schema_type = "AVRO"

    def __init__(
        self,
        schema_registry_client: Registry | None,
        from_dict: Callable[[Any, SerializationContext], Any] | None = None,
    ) -> None:
        if from_dict is not None and not callable(from_dict):
            raise TypeError("from_dict must be callable (obj, ctx) -> value")
        self.registry: Any = schema_registry_client
        self.from_dict = from_dict
        self._by_id: dict[int, ParsedSchema] = {}
        self._fixed: ParsedSchema | None = None

    def _load_flow(self, schema_id: int) -> Flow:
        """The parsed schema of ``schema_id``, from the registry (then cached)."""
        core: RegistryCore = self.registry
        schema = yield from core.get_schema_flow(schema_id)
        if schema.schema_type.upper() != self.schema_type:
            from app.common.schema_errors import NotSchemaFramed

            raise NotSchemaFramed(
                f"schema id {schema_id} is a {schema.schema_type} schema, not {self.schema_type}"
            )
        refs = yield from core.resolve_references_flow(schema)
        parsed = parse(schema.schema_type, schema.schema_str, refs)
        self._by_id[schema_id] = parsed
        return parsed

    def _decode(self, parsed: ParsedSchema, data: bytes, ctx: Any) -> Any:
        value = wire.decode(parsed, data)
        return self.from_dict(value, ctx) if self.from_dict is not None else value

    def __call__(self, data: bytes | None, ctx: SerializationContext | None = None) -> Any:
        """The value of framed ``data``; raises ``NotSchemaFramed`` / ``RecordInvalid``
        (INVALID_RECORD) for bytes not in the wire format or not decodable, 40403
        ``SchemaNotFound`` for an unknown id. ``None`` stays ``None``."""
        if data is None:
            return None
        schema_id = wire.schema_id_of(data)
        parsed = self._by_id.get(schema_id) or self._fixed
        if parsed is None:  # a new id: the registry's flow, once
            if not isinstance(self.registry, SchemaRegistryClient):
                raise TypeError(
                    "with an AsyncSchemaRegistryClient, await deserializer.adeserialize()"
                )
            parsed = _driven(self.registry, self._load_flow(schema_id))
            assert parsed is not None
        return self._decode(parsed, data, ctx)

    async def adeserialize(
        self, data: bytes | None, ctx: SerializationContext | None = None
    ) -> Any:
        """As ``__call__``, for an :class:`AsyncSchemaRegistryClient`."""
        if data is None:
            return None
        schema_id = wire.schema_id_of(data)
        parsed = self._by_id.get(schema_id) or self._fixed
        if parsed is None:
            parsed = await _adriven(self.registry, self._load_flow(schema_id))
        return self._decode(parsed, data, ctx)


class AvroDeserializer(_Deserializer):
    """Avro, confluent-kafka's signature: ``AvroDeserializer(client, schema_str=None,
    from_dict=None)``. Without ``schema_str`` a value decodes with its writer's schema (the
    id it carries). With one (the reader's schema: Avro text, or a :class:`Schema` whose
    references the registry resolves on first use) each value is resolved from its
    writer's schema into the reader's by Avro's rules (fastavro's resolution, through
    :meth:`AvroSchema.decode_as`): fields the reader adds take their defaults, fields it
    drops are skipped, int/long/float promote, enum symbols and union branches map by
    name; bytes that do not resolve raise ``RecordInvalid``. A writer whose schema is the
    reader's (same canonical form) takes the plain fast path."""

    schema_type = "AVRO"

    def __init__(
        self,
        schema_registry_client: Registry,
        schema_str: str | Schema | None = None,
        from_dict: Callable[[Any, SerializationContext], Any] | None = None,
        return_record_name: bool = False,
        conf: dict[str, Any] | None = None,
    ) -> None:
        if schema_str is not None and not isinstance(schema_str, str | Schema):
            raise TypeError(
                "schema_str must be the reader's Avro schema (text or a Schema); pass "
                "from_dict= by name"
            )
        if return_record_name:
            raise ValueError("return_record_name is not supported: records decode as dicts")
        if conf:
            raise ValueError(f"unknown deserializer config: {', '.join(sorted(conf))}")
        super().__init__(schema_registry_client, from_dict)
        reader = Schema(schema_str, "AVRO") if isinstance(schema_str, str) else schema_str
        if reader is not None and reader.schema_type.upper() != "AVRO":
            raise ValueError(f"the reader's schema is {reader.schema_type}, not AVRO")
        self._reader_schema = reader
        # Parsed now when it has no references, so a bad reader fails at construction
        # (InvalidSchema); with references, on first use (the registry resolves them).
        self._reader: ParsedSchema | None = (
            parse("AVRO", reader.schema_str, ()) if reader and not reader.references else None
        )
        # writer id -> the reader to resolve into (None: the writer's schema is the reader's)
        self._resolve_into: dict[int, ParsedSchema | None] = {}

    def _load_flow(self, schema_id: int) -> Flow:
        writer = yield from super()._load_flow(schema_id)
        if self._reader_schema is not None:
            try:
                if self._reader is None:
                    core: RegistryCore = self.registry
                    refs = yield from core.resolve_references_flow(self._reader_schema)
                    self._reader = parse("AVRO", self._reader_schema.schema_str, refs)
            except BaseException:
                # Not cached without its reader: the next record asks again.
                self._by_id.pop(schema_id, None)
                raise
            same = writer.canonical() == self._reader.canonical()
            self._resolve_into[schema_id] = None if same else self._reader
        return writer

    def _decode(self, parsed: ParsedSchema, data: bytes, ctx: Any) -> Any:
        if self._reader_schema is None:
            return super()._decode(parsed, data, ctx)
        reader = self._resolve_into.get(wire.schema_id_of(data))
        value = parsed.decode_as(  # type: ignore[attr-defined]
            memoryview(data)[wire.HEADER_SIZE :], reader
        )
        return self.from_dict(value, ctx) if self.from_dict is not None else value


class JSONDeserializer(_Deserializer):
    """JSON Schema, in confluent-kafka's form ``JSONDeserializer(schema_str,
    from_dict=None, schema_registry_client=None)``: given ``schema_str`` (the reader's),
    each value is validated against it and the registry is not asked; without it, against
    the schema its id names (the registry's). ``JSONDeserializer(client, from_dict=None)``
    (a registry first) is the second form."""

    schema_type = "JSON"

    def __init__(
        self,
        schema_str: str | Schema | Registry | None = None,
        from_dict: Callable[[Any, SerializationContext], Any] | None = None,
        schema_registry_client: Registry | None = None,
        conf: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(schema_str, SchemaRegistryClient | AsyncSchemaRegistryClient):
            schema_str, schema_registry_client = None, schema_str
        if conf:
            raise ValueError(f"unknown deserializer config: {', '.join(sorted(conf))}")
        if schema_str is None and schema_registry_client is None:
            raise ValueError("JSONDeserializer needs schema_str, a schema registry client, or both")
        super().__init__(schema_registry_client, from_dict)
        if schema_str is not None:
            reader = Schema(schema_str, "JSON") if isinstance(schema_str, str) else schema_str
            if reader.schema_type.upper() != "JSON" or reader.references:
                raise ValueError(
                    "schema_str must be a JSON Schema without references (or leave it out: "
                    "values are then validated against the schema they were written with)"
                )
            self._fixed = parse("JSON", reader.schema_str, ())


class ProtobufDeserializer(_Deserializer):
    """Protobuf, in either of two forms:

    - ``ProtobufDeserializer(client, from_dict=None)``: the writer's schema by the id the
      bytes carry (the registry's); values are ``MessageToDict`` dicts (.proto field
      names), as the typed HTTP fetch gives;
    - confluent-kafka's ``ProtobufDeserializer(message_type, conf=None,
      schema_registry_client=None)``: values are instances of the generated
      ``message_type``, parsed from the bytes after the header and message indexes (the
      registry is not needed); ``use.deprecated.format`` may be given, False only.
    """

    schema_type = "PROTOBUF"

    def __init__(
        self,
        message_type: type[Any] | Registry | None = None,
        conf: dict[str, Any] | Callable[[Any, SerializationContext], Any] | None = None,
        schema_registry_client: Registry | None = None,
        *,
        from_dict: Callable[[Any, SerializationContext], Any] | None = None,
    ) -> None:
        self._message_type: Any = None
        if callable(conf) and not isinstance(conf, dict):  # (client, from_dict): the 2nd form
            from_dict, conf = conf, None
        if _is_message_class(message_type):
            if from_dict is not None:
                raise TypeError("from_dict goes with a registry client, not a message class")
            _without_deprecated_format(conf, deserializer=True)
            super().__init__(schema_registry_client, None)
            self._message_type = message_type
            return
        if isinstance(message_type, SchemaRegistryClient | AsyncSchemaRegistryClient):
            schema_registry_client = message_type
        elif message_type is not None:
            raise TypeError(
                "ProtobufDeserializer takes a generated message class or a schema registry "
                f"client first, not {type(message_type).__name__}"
            )
        if schema_registry_client is None:
            raise ValueError("ProtobufDeserializer needs a message class or a registry client")
        if conf:
            raise ValueError(f"unknown deserializer config: {', '.join(sorted(conf))}")
        super().__init__(schema_registry_client, from_dict)

    def _as_message(self, data: bytes) -> Any:
        from google.protobuf.message import DecodeError

        body = wire.protobuf_body(data)
        try:
            return self._message_type.FromString(body)
        except DecodeError as e:
            from app.common.schema_errors import RecordInvalid

            raise RecordInvalid("", f"Protobuf payload does not decode: {e}") from None

    def __call__(self, data: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if self._message_type is not None and data is not None:
            return self._as_message(data)
        return super().__call__(data, ctx)

    async def adeserialize(
        self, data: bytes | None, ctx: SerializationContext | None = None
    ) -> Any:
        if self._message_type is not None and data is not None:
            return self._as_message(data)
        return await super().adeserialize(data, ctx)


def _is_message_class(obj: object) -> TypeGuard[type[Any]]:
    """A generated Protobuf message class (what confluent-kafka's Protobuf classes take)."""
    return isinstance(obj, type) and hasattr(obj, "DESCRIPTOR") and hasattr(obj, "FromString")


def _descriptor_text(file_descriptor: Any) -> str:
    """A .proto file's descriptor in Confluent's serialized form (base64 of its
    FileDescriptorProto), as confluent-kafka's ProtobufSerializer registers it."""
    import base64

    return base64.b64encode(file_descriptor.serialized_pb).decode("ascii")


def _without_deprecated_format(
    conf: dict[str, Any] | None, *, deserializer: bool = False
) -> dict[str, Any] | None:
    """confluent-kafka's Protobuf ``use.deprecated.format``: False (today's message
    indexes) is what Logbus writes and reads; True (the pre-1.8 format) is refused."""
    if not conf or "use.deprecated.format" not in conf:
        return conf
    conf = dict(conf)
    if conf.pop("use.deprecated.format"):
        raise ValueError(
            "use.deprecated.format=True (the pre-1.8 message indexes) is not supported"
        )
    if deserializer and conf:
        raise ValueError(f"unknown deserializer config: {', '.join(sorted(conf))}")
    return conf
