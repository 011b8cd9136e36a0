"""Keys, values and headers between JSON bodies and record bytes, per format.

Formats (the same names for produce and fetch):

* ``json``: produce stores the JSON text of the value (orjson); fetch parses
  the bytes as JSON and, when they are not JSON (a record written by another
  client), answers them as a string (UTF-8, invalid sequences replaced by
  U+FFFD) rather than failing the whole fetch.
* ``string``: UTF-8 text.
* ``binary``: base64 with the standard alphabet; the only exact format for
  arbitrary bytes.

JSON ``null`` is an absent key or value (a tombstone) in every format.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from pydantic import ValidationError

from app.api.models import Header
from app.core.errors import InvalidRequest

Encoder = Callable[[Any, str], bytes | None]
Decoder = Callable[[bytes | None], Any]


class BodyInvalid(InvalidRequest):
    """A request body that is not what the endpoint expects; names every bad field."""

    def __init__(self, message: str, fields: Sequence[str]) -> None:
        super().__init__(message)
        self.bad_fields = list(fields)

    def fields(self) -> dict[str, Any]:
        return {"fields": self.bad_fields}

    @classmethod
    def from_validation(cls, exc: ValidationError, where: str = "body") -> BodyInvalid:
        parts: list[str] = []
        locs: list[str] = []
        malformed = False
        for err in exc.errors(include_url=False):
            loc = ".".join(str(p) for p in (where, *err["loc"]))
            malformed = malformed or err["type"] == "json_invalid"
            locs.append(loc)
            parts.append(f"{loc}: {err['msg']}")
        message = "; ".join(parts)
        if malformed:
            message = f"malformed JSON body: {message}"
        return cls(message, locs)


def _bad(where: str, fmt: str, reason: str) -> BodyInvalid:
    return BodyInvalid(f"{where}: {reason} (format {fmt})", [where])


def _encode_json(value: Any, where: str) -> bytes | None:
    if value is None:
        return None
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise _bad(where, "json", str(exc)) from None


def _encode_string(value: Any, where: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(where, "string", f"expected a string, got {type(value).__name__}")
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise _bad(where, "string", "not encodable as UTF-8 (lone surrogate)") from None


def _encode_binary(value: Any, where: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(where, "binary", f"expected a base64 string, got {type(value).__name__}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _bad(where, "binary", f"invalid base64: {exc}") from None


ENCODERS: dict[str, Encoder] = {
    "json": _encode_json,
    "string": _encode_string,
    "binary": _encode_binary,
}


def _decode_json(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return data.decode("utf-8", "replace")


def _decode_string(data: bytes | None) -> Any:
    return None if data is None else data.decode("utf-8", "replace")


def _decode_binary(data: bytes | None) -> Any:
    return None if data is None else base64.b64encode(data).decode("ascii")


DECODERS: dict[str, Decoder] = {
    "json": _decode_json,
    "string": _decode_string,
    "binary": _decode_binary,
}


def encode_headers(
    headers: list[Header] | Mapping[str, str | None] | None, where: str
) -> list[tuple[str, bytes | None]]:
    if not headers:
        return []
    try:
        if isinstance(headers, Mapping):
            return [(k, None if v is None else v.encode()) for k, v in headers.items()]
        return [(h.key, None if h.value is None else h.value.encode()) for h in headers]
    except UnicodeEncodeError:
        raise BodyInvalid(f"{where}: not encodable as UTF-8", [where]) from None


def decode_headers(headers: Sequence[tuple[str, bytes | None]]) -> list[dict[str, Any]]:
    return [
        {"key": k, "value": None if v is None else v.decode("utf-8", "replace")} for k, v in headers
    ]
