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
from app.common.errors import InvalidRequest

Encoder = Callable[[Any], bytes | None]
Decoder = Callable[[bytes | None], Any]


class FormatError(ValueError):
    """A key or value that its format cannot encode. Carries no location: the produce
    loop adds it, so a valid record never pays for building one."""


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
            msg = err["msg"]
            if err["type"] == "value_error" and "error" in err.get("ctx", {}):
                msg = str(err["ctx"]["error"])  # our own sentence, without "Value error, "
            parts.append(f"{loc}: {msg}")
        message = "; ".join(parts)
        if malformed:
            message = f"malformed JSON body: {message}"
        return cls(message, locs)

    @classmethod
    def at(cls, where: str, reason: str) -> BodyInvalid:
        return cls(f"{where}: {reason}", [where])


def _encode_json(value: Any) -> bytes | None:
    if value is None:
        return None
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise FormatError(f"{exc} (format json)") from None


def _encode_string(value: Any) -> bytes | None:
    if value is None:
        return None
    if type(value) is not str:
        raise FormatError(f"expected a string, got {type(value).__name__} (format string)")
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise FormatError("not encodable as UTF-8: lone surrogate (format string)") from None


def _encode_binary(value: Any) -> bytes | None:
    if value is None:
        return None
    if type(value) is not str:
        raise FormatError(f"expected a base64 string, got {type(value).__name__} (format binary)")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise FormatError(f"invalid base64: {exc} (format binary)") from None


def _framed(value: Any) -> Any:
    return value


# Internal, never a request's format: bytes framed by app/api/typed.py (produce), and the
# raw bytes that typed.py decodes after the walk (fetch).
FRAMED = "framed"

ENCODERS: dict[str, Encoder] = {
    "json": _encode_json,
    "string": _encode_string,
    "binary": _encode_binary,
    FRAMED: _framed,
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
    FRAMED: _framed,
}


def encode_headers(
    headers: Sequence[Header | Mapping[str, Any]] | Mapping[str, str | None] | None,
) -> list[tuple[str, bytes | None]]:
    """Headers as given in a produce body (an object, or a list of {"key", "value"})."""
    if not headers:
        return []
    try:
        if isinstance(headers, Mapping):
            return [(k, None if v is None else v.encode()) for k, v in headers.items()]
        out: list[tuple[str, bytes | None]] = []
        for h in headers:
            key, value = (h.key, h.value) if isinstance(h, Header) else (h["key"], h.get("value"))
            out.append((key, None if value is None else value.encode()))
        return out
    except UnicodeEncodeError:
        raise FormatError("not encodable as UTF-8: lone surrogate") from None


def decode_headers(headers: Sequence[tuple[str, bytes | None]]) -> list[dict[str, Any]]:
    return [
        {"key": k, "value": None if v is None else v.decode("utf-8", "replace")} for k, v in headers
    ]
