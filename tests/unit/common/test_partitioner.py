"""Kafka-compatible key placement and the sticky null-key partitioner."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from app.common.partitioner import (
    StickyPartitioner,
    key_hash,
    murmur2,
    partition_for_key,
    to_positive,
)

# Kafka's own vectors: clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
# (testMurmur2), signed Java ints.
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka_utils_test(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_murmur2_accepts_buffers() -> None:
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


@given(st.binary(max_size=300))
def test_murmur2_agrees_with_kafka_python(data: bytes) -> None:
    # kafka-python returns the unsigned 32-bit value; Java (and we) return it signed.
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data) & 0xFFFFFFFF


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=10_000))
def test_partition_is_java_formula(key: bytes, n: int) -> None:
    p = partition_for_key(key, n)
    assert p == (kafka_python_murmur2(key) & 0x7FFFFFFF) % n
    assert 0 <= p < n


def test_to_positive_clears_sign_bit_like_java() -> None:
    assert to_positive(-(1 << 31)) == 0
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(5) == 5


def test_sticky_switches_partition_every_batch() -> None:
    sticky = StickyPartitioner(random.Random(7))
    picks = [sticky.next_partition("t", 4) for _ in range(200)]
    assert all(0 <= p < 4 for p in picks)
    assert all(a != b for a, b in itertools.pairwise(picks))
    assert set(picks) == {0, 1, 2, 3}


def test_sticky_single_partition_and_shrunk_topic() -> None:
    sticky = StickyPartitioner(random.Random(1))
    assert sticky.next_partition("t", 1) == 0
    for _ in range(5):
        sticky.next_partition("u", 8)
    sticky.forget("u")
    assert 0 <= sticky.next_partition("u", 2) < 2
    # A previous choice beyond a smaller partition count is ignored, not reused.
    sticky._last["v"] = 7
    assert 0 <= sticky.next_partition("v", 3) < 3


def test_key_hash_is_the_hash_partition_for_key_takes_modulo() -> None:
    # JSON produce places records with key_hash(key) % n: the same partitions.
    for i in range(200):
        key = f'"user-{i}"'.encode()
        for n in (1, 3, 4, 7, 100):
            assert key_hash(key) % n == partition_for_key(key, n)
