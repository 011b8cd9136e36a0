"""Java String.hashCode and Kafka's partitionFor, checked against known values."""

from __future__ import annotations

import pytest

from app.groups.hashing import java_string_hashcode, kafka_abs, partition_for


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("Aa", 2112),
        ("BB", 2112),  # the classic collision
        ("hello", 99162322),
        ("consumer-group-1", 147483020),
        # A famous string whose hashCode is Integer.MIN_VALUE.
        ("polygenelubricants", -(1 << 31)),
        # Wraps to a negative int.
        ("my-group", -1906497762),
        # Non-BMP characters count as two UTF-16 code units (a surrogate pair).
        ("\U0001f600", 0xD83D * 31 + 0xDE00),
        ("é", 0xE9),
    ],
)
def test_java_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


def test_kafka_abs_maps_int_min_to_zero() -> None:
    assert kafka_abs(-(1 << 31)) == 0
    assert kafka_abs(-5) == 5
    assert kafka_abs(7) == 7


def test_partition_for_matches_kafka() -> None:
    # Utils.abs(hashCode) % 50
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("my-group", 50) == 1906497762 % 50 == 12
    assert all(0 <= partition_for(f"g{i}", 7) < 7 for i in range(200))
