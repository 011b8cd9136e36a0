"""Types of the broker's C helper (app/common/_jsonrecords.c)."""

from collections.abc import Callable
from typing import Any

PlainRecords = Callable[
    [
        list[tuple[Any, Any, Any, int | None, int | None]],
        int,
        int,
        Callable[[Any], bytes],
        Callable[[], int],
        Callable[[memoryview], int],
    ],
    tuple[dict[int, tuple[bytes, int]], list[tuple[int, int, int]]] | None,
]

def plain_records(
    records: list[tuple[Any, Any, Any, int | None, int | None]],
    num_partitions: int,
    now_ms: int,
    dumps: Callable[[Any], bytes],
    sticky: Callable[[], int],
    crc32c: Callable[[memoryview], int],
) -> tuple[dict[int, tuple[bytes, int]], list[tuple[int, int, int]]] | None: ...

PlainTuples = Callable[[list[Any]], list[tuple[Any, Any, Any, Any, Any]] | None]

def plain_tuples(records: list[Any]) -> list[tuple[Any, Any, Any, Any, Any]] | None: ...

OffsetsJson = Callable[[list[tuple[int, int, int]], dict[int, int]], bytes]

def offsets_json(placed: list[tuple[int, int, int]], first: dict[int, int]) -> bytes: ...
def murmur2(data: bytes | bytearray | memoryview) -> int: ...
