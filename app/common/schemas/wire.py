"""Confluent's wire format for schema-typed records.

Layout: magic byte ``0``; the schema id as 4 bytes big-endian; for PROTOBUF, the message
indexes (which message of the .proto file: a zig-zag varint count, then each index as a
zig-zag varint; the common ``[0]`` — the file's first message — is the single byte ``0``);
then the payload (Avro binary, JSON text in UTF-8, or the Protobuf message).

Pure functions of their arguments; safe from any thread.
"""

from __future__ import annotations

from typing import Any

from app.common.schema_errors import NotSchemaFramed
from app.common.schemas.types import Codec, ParsedSchema

MAGIC = 0
HEADER_SIZE = 5


def schema_id_of(data: bytes | bytearray | memoryview) -> int:
    """The schema id of a framed record. Raises ``NotSchemaFramed`` if ``data`` is shorter
    than the 5-byte header or does not start with magic byte 0."""
    if len(data) < HEADER_SIZE:
        raise NotSchemaFramed(f"{len(data)} bytes, shorter than the 5-byte header")
    if data[0] != MAGIC:
        raise NotSchemaFramed(f"first byte is {data[0]}, not the magic byte 0")
    return int.from_bytes(data[1:HEADER_SIZE], "big")


def encode(
    parsed: ParsedSchema, schema_id: int, obj: Any, *, message_name: str | None = None
) -> bytes:
    """``obj`` validated against ``parsed`` and framed with ``schema_id``. ``message_name``
    picks a Protobuf message (full name, or relative to the file's package; default: the
    file's first message). Raises ``RecordInvalid`` naming the field path."""
    if not 0 <= schema_id < 1 << 31:
        raise ValueError(f"schema id {schema_id} is outside 0..2**31-1")
    payload = _codec(parsed).encode_payload(obj, message_name)
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def decode(parsed: ParsedSchema, data: bytes | bytearray | memoryview) -> Any:
    """The value of a framed record written with ``parsed`` (the caller looked the schema up
    by ``schema_id_of(data)``). Avro: fastavro's value (records as dicts); JSON: the parsed
    JSON, validated; Protobuf: ``MessageToDict`` with the .proto field names. Raises
    ``NotSchemaFramed`` or ``RecordInvalid``."""
    schema_id_of(data)
    return _codec(parsed).decode_payload(memoryview(data)[HEADER_SIZE:])


def protobuf_body(data: bytes | bytearray | memoryview) -> bytes:
    """The Protobuf message bytes of a framed record (after the header and the message
    indexes), for a reader that brings its own message class. Raises ``NotSchemaFramed``
    or ``RecordInvalid`` (a bad index array)."""
    from app.common.schemas._protobuf import read_message_indexes

    schema_id_of(data)
    payload = memoryview(data)[HEADER_SIZE:]
    pos, _ = read_message_indexes(payload)
    return bytes(payload[pos:])


def _codec(parsed: Any) -> Codec:
    if not isinstance(parsed, Codec):
        raise TypeError(f"{type(parsed).__name__} was not made by app.common.schemas.parse")
    return parsed
