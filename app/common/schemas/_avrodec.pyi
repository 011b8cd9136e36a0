"""Types of the typed fetch's C decoder (app/common/schemas/_avrodec.c)."""

from collections.abc import Callable
from typing import Any

DECLINED: object
ZERO_WIDTH_ITEMS: int

class Reader:
    """``Reader(program, bytes_as_text)``: one schema's Avro decoder."""

    def __init__(
        self,
        program: list[tuple[Any, ...]],
        bytes_as_text: bool = False,
        zero_width_items: int = ...,
    ) -> None: ...
    def read(self, data: bytes | bytearray | memoryview, start: int) -> Any: ...
    def read_within(
        self, data: bytes | bytearray | memoryview, start: int, left: int, limit: int
    ) -> tuple[Any, int]: ...

class FramedDecoder:
    """``FramedDecoder(fallback, budget)(data)``: one Confluent-framed record's value; the
    values all its records build from no bytes share ``budget`` (``left`` of ``limit``)."""

    left: int
    limit: int

    def __init__(self, fallback: Callable[[bytes], Any], budget: int = ...) -> None: ...
    def __call__(self, data: bytes | None) -> Any: ...
    def target(self, header: bytes | None, reader: Reader | None) -> None: ...
