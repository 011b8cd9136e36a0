"""Types of the typed produce's C helper (app/common/schemas/_avroenc.c)."""

from collections.abc import Callable
from typing import Any

class Encoder:
    """``Encoder(program, header, fallback)(value)``: ``header`` + ``value``'s Avro binary."""

    def __init__(
        self, program: list[tuple[Any, ...]], header: bytes, fallback: Callable[[Any], bytes]
    ) -> None: ...
    def __call__(self, value: Any) -> bytes: ...
    def fast(self, value: Any) -> bytes | None: ...

def encode_records(
    records: list[tuple[Any, Any, Any, int | None, int | None]],
    encode_key: Callable[[Any], bytes] | None,
    encode_value: Callable[[Any], bytes] | None,
) -> list[tuple[Any, Any, Any, int | None, int | None]]: ...

EncodeRecords = Callable[
    [
        list[tuple[Any, Any, Any, int | None, int | None]],
        Callable[[Any], bytes] | None,
        Callable[[Any], bytes] | None,
    ],
    list[tuple[Any, Any, Any, int | None, int | None]],
]
