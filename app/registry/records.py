"""The keys and values of ``_schemas``, laid out as Confluent Schema Registry lays out
its own ``_schemas`` topic, so the registry can be rebuilt from the topic alone (and a
dump of one reads as the other's).

Keys and values are JSON objects (UTF-8). ``keytype`` tells the record apart:

========================  ==================================================  ==========================================
key                       value                                               meaning
========================  ==================================================  ==========================================
``{"keytype":"SCHEMA",    ``{"subject","version","id","schemaType",           version ``version`` of ``subject`` is
"subject","version",      "references":[{"name","subject","version"}],        schema ``id``; ``deleted``: soft-deleted.
"magic":1}``              "schema","deleted"}``                               A tombstone: permanently deleted.
``{"keytype":"CONFIG",    ``{"compatibilityLevel": "BACKWARD"}``              the compatibility level of ``subject``
"subject","magic":0}``                                                        (``null``: the global one); tombstone: unset
``{"keytype":"MODE",      ``{"mode": "READWRITE"}``                           the mode of ``subject`` (``null``: global);
"subject","magic":0}``                                                        tombstone: unset
``{"keytype":            ``{"subject","version"}``                            every version of ``subject`` up to
"DELETE_SUBJECT",                                                             ``version`` is soft-deleted
"subject","magic":0}``
``{"keytype":"NOOP",      ``null`` (Confluent) or ``{"maxId": N}``            nothing; with ``maxId``: ids up to N were
"magic":0}``                                                                  handed out (written with a permanent delete,
                                                                              so compaction of the tombstones cannot
                                                                              make an id reusable)
========================  ==================================================  ==========================================

``schemaType`` is omitted for AVRO (Confluent's default). The topic is compacted: the
latest value of each key wins, tombstones remove. A record that does not parse is
skipped by the replay (anyone with the rights may produce to the topic), never fatal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from app.common.errors import CorruptRecord

SCHEMAS_TOPIC = "_schemas"
SCHEMAS_TOPIC_CONFIGS: dict[str, object] = {"cleanup.policy": "compact"}


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema's reference to another subject's version, named in the schema by ``name``."""

    name: str
    subject: str
    version: int

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class SchemaKey:
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class SchemaValue:
    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class ConfigKey:
    subject: str | None


@dataclass(frozen=True, slots=True)
class ModeKey:
    subject: str | None


@dataclass(frozen=True, slots=True)
class DeleteSubjectKey:
    subject: str


@dataclass(frozen=True, slots=True)
class NoopKey:
    pass


Key = SchemaKey | ConfigKey | ModeKey | DeleteSubjectKey | NoopKey


def encode_key(key: Key) -> bytes:
    """The key's JSON, fields in Confluent's order."""
    body: dict[str, Any]
    if isinstance(key, SchemaKey):
        body = {"keytype": "SCHEMA", "subject": key.subject, "version": key.version, "magic": 1}
    elif isinstance(key, ConfigKey):
        body = {"keytype": "CONFIG", "subject": key.subject, "magic": 0}
    elif isinstance(key, ModeKey):
        body = {"keytype": "MODE", "subject": key.subject, "magic": 0}
    elif isinstance(key, DeleteSubjectKey):
        body = {"keytype": "DELETE_SUBJECT", "subject": key.subject, "magic": 0}
    else:
        body = {"keytype": "NOOP", "magic": 0}
    return orjson.dumps(body)


def encode_schema(value: SchemaValue) -> bytes:
    body: dict[str, Any] = {
        "subject": value.subject,
        "version": value.version,
        "id": value.id,
    }
    if value.schema_type != "AVRO":
        body["schemaType"] = value.schema_type
    if value.references:
        body["references"] = [r.as_json() for r in value.references]
    body["schema"] = value.schema
    body["deleted"] = value.deleted
    return orjson.dumps(body)


def encode_config(level: str) -> bytes:
    return orjson.dumps({"compatibilityLevel": level})


def encode_mode(mode: str) -> bytes:
    return orjson.dumps({"mode": mode})


def encode_delete_subject(subject: str, version: int) -> bytes:
    return orjson.dumps({"subject": subject, "version": version})


def encode_noop(max_id: int) -> bytes:
    return orjson.dumps({"maxId": max_id})


def _obj(raw: bytes | bytearray | memoryview, what: str) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptRecord(f"{what} is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise CorruptRecord(f"{what} is not a JSON object")
    return body


def _str(body: dict[str, Any], name: str, *, optional: bool = False) -> str | None:
    value = body.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise CorruptRecord(f"{name!r} is not a string")
    return value


def _int(body: dict[str, Any], name: str) -> int:
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise CorruptRecord(f"{name!r} is not an integer")
    return value


def decode_key(raw: bytes | bytearray | memoryview) -> Key:
    """A record key; CorruptRecord when it is none of the layouts above."""
    body = _obj(raw, "key")
    keytype = body.get("keytype")
    if keytype == "SCHEMA":
        return SchemaKey(_str(body, "subject") or "", _int(body, "version"))
    if keytype == "CONFIG":
        return ConfigKey(_str(body, "subject", optional=True))
    if keytype == "MODE":
        return ModeKey(_str(body, "subject", optional=True))
    if keytype == "DELETE_SUBJECT":
        return DeleteSubjectKey(_str(body, "subject") or "")
    if keytype == "NOOP":
        return NoopKey()
    raise CorruptRecord(f"unknown keytype {keytype!r}")


def decode_schema(raw: bytes | bytearray | memoryview) -> SchemaValue:
    body = _obj(raw, "schema value")
    refs = body.get("references") or []
    if not isinstance(refs, list):
        raise CorruptRecord("'references' is not a list")
    references = []
    for ref in refs:
        if not isinstance(ref, dict):
            raise CorruptRecord("a reference is not an object")
        references.append(
            Reference(_str(ref, "name") or "", _str(ref, "subject") or "", _int(ref, "version"))
        )
    return SchemaValue(
        subject=_str(body, "subject") or "",
        version=_int(body, "version"),
        id=_int(body, "id"),
        schema_type=_str(body, "schemaType", optional=True) or "AVRO",
        schema=_str(body, "schema") or "",
        references=tuple(references),
        deleted=bool(body.get("deleted", False)),
    )


def decode_config(raw: bytes | bytearray | memoryview) -> str:
    return _str(_obj(raw, "config value"), "compatibilityLevel") or ""


def decode_mode(raw: bytes | bytearray | memoryview) -> str:
    return _str(_obj(raw, "mode value"), "mode") or ""


def decode_delete_subject(raw: bytes | bytearray | memoryview) -> int:
    return _int(_obj(raw, "delete-subject value"), "version")


def decode_noop(raw: bytes | bytearray | memoryview | None) -> int:
    """The ``maxId`` a NOOP value carries; 0 for Confluent's null value."""
    if raw is None:
        return 0
    body = _obj(raw, "noop value")
    value = body.get("maxId", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
