"""A broker's error answer (``{"error_code", "message", "retriable", ...}``) as the exception
it names. No I/O.

The body becomes the :mod:`app.common.errors` class with the same ``error_code``, so
``except OffsetOutOfRange`` works the same in the broker, in an application and in a
follower broker reading its leader's answer, and the body's extra fields
(``log_start_offset``, ``leader_url``, ...) become attributes. Codes with no class here
become :class:`ServerError` carrying the code and the broker's ``retriable`` flag.

Used by the SDK (:mod:`app.client.errors` re-exports it), Spark tasks and the
fetch-answer interpreter (:mod:`app.common.fetch_answer`) that follower brokers use too.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.common import errors as core
from app.common import group_errors, schema_errors
from app.common.errors import LogbusError


def _classes_by_code() -> dict[str, type[LogbusError]]:
    """Every error class by the code it declares itself.

    Read from the tree's modules (``errors``, ``group_errors``, ``schema_errors``) rather than listed,
    so a class the broker team adds (and answers with) is raised by name here without a
    change. A class that
    inherits its code (PayloadTooLarge is a RecordTooLarge) is not the class
    for that code.
    """
    found: dict[str, type[LogbusError]] = {}
    for value in [
        *vars(core).values(),
        *vars(group_errors).values(),
        *vars(schema_errors).values(),
    ]:
        if (
            isinstance(value, type)
            and issubclass(value, LogbusError)
            and value is not LogbusError
            and "error_code" in vars(value)
        ):
            found.setdefault(value.error_code, value)
    return found


_BY_CODE = _classes_by_code()


class ServerError(LogbusError):
    """An error code with no class here; ``error_code`` and ``retriable`` come from the body."""

    def __init__(
        self,
        error_code: str,
        message: str,
        retriable: bool,
        status: int,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.error_code = error_code  # type: ignore[misc]
        self.retriable = retriable  # type: ignore[misc]
        self.status = status
        # The body's other fields (NOT_COORDINATOR's coordinator_url, ...), also as attributes.
        self.details = details or {}
        for name, value in self.details.items():
            if not hasattr(type(self), name) and name not in ("status", "details"):
                setattr(self, name, value)


def error_from_body(status: int, body: bytes | bytearray | memoryview) -> LogbusError:
    """The exception for an error answer (any status >= 300)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("error_code"), str):
        text = bytes(body[:200]).decode("utf-8", "replace")
        # 5xx without our error shape: a proxy or a crash, worth another try.
        return ServerError("UNKNOWN_SERVER_ERROR", f"HTTP {status}: {text}", status >= 500, status)
    return error_from_fields(status, data)


def error_from_fields(status: int, data: dict[str, Any]) -> LogbusError:
    code: str = data["error_code"]
    message = str(data.get("message", code))
    details = {k: v for k, v in data.items() if k not in ("error_code", "message", "retriable")}
    cls = _BY_CODE.get(code)
    if cls is None:
        return ServerError(code, message, bool(data.get("retriable", False)), status, details)
    # The classes' constructors build their message from fields; the broker
    # already wrote the message, so keep it verbatim and set the fields as attributes.
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    exc.message = message
    for name, value in details.items():
        # Never shadow a method (an INVALID_REQUEST body has a "fields" list; fields() is a method).
        if not callable(getattr(cls, name, None)):
            setattr(exc, name, value)
    exc._fields = details  # what fields() answers, as on the broker
    exc.details = details  # type: ignore[attr-defined]
    exc.status = status  # type: ignore[attr-defined]
    return exc


def is_retriable(exc: BaseException) -> bool:
    return isinstance(exc, LogbusError) and bool(exc.retriable)
