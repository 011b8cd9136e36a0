"""``__transaction_state`` records in Kafka's TransactionLog format, checked against bytes
laid out by hand from Kafka's schemas (TransactionLogKey v0, TransactionLogValue v0/v1)."""

from __future__ import annotations

import struct

import pytest

from app.common.errors import CorruptRecord
from app.groups.hashing import partition_for
from app.txn.model import VALID_PREVIOUS, TxnState
from app.txn.records import TxnLogValue, decode_key, decode_value, encode_key, encode_value


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def test_key_is_version_0_and_a_kafka_string() -> None:
    assert encode_key("tx-é") == b"\x00\x00" + _string("tx-é")
    assert decode_key(encode_key("tx-é")) == "tx-é"
    for bad in (b"\x00", b"\x00\x01\x00\x00", b"\x00\x00\x00\x05ab", b"\x00\x00\x00\x01\xff"):
        with pytest.raises(CorruptRecord):
            decode_key(bad)


def test_value_v0_bytes_are_kafkas() -> None:
    value = TxnLogValue(
        producer_id=1000,
        producer_epoch=3,
        timeout_ms=60_000,
        state=TxnState.ONGOING,
        partitions=frozenset({("b", 1), ("a", 2), ("a", 0)}),
        last_update_ms=1_700_000_000_123,
        start_ms=1_700_000_000_000,
    )
    expected = (
        struct.pack(">hqhib", 0, 1000, 3, 60_000, 1)
        + struct.pack(">i", 2)
        + _string("a")
        + struct.pack(">iii", 2, 0, 2)
        + _string("b")
        + struct.pack(">ii", 1, 1)
        + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)
    )
    assert encode_value(value) == expected
    assert decode_value(expected) == value


def test_empty_state_writes_null_partitions() -> None:
    value = TxnLogValue(5, 0, 100, TxnState.EMPTY, last_update_ms=1, start_ms=-1)
    data = encode_value(value)
    assert data == struct.pack(">hqhibiqq", 0, 5, 0, 100, 0, -1, 1, -1)
    assert decode_value(data) == value
    assert decode_value(None) is None
    with pytest.raises(ValueError):
        encode_value(TxnLogValue(5, 0, 100, TxnState.EMPTY, partitions=frozenset({("t", 0)})))


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_flexible_value_v1_with_tagged_fields_is_read() -> None:
    topic = b"orders"
    data = (
        struct.pack(">hqhib", 1, 7, 2, 900, 2)
        + _uvarint(2)  # one topic (compact: n + 1)
        + _uvarint(len(topic) + 1)
        + topic
        + _uvarint(3)
        + struct.pack(">ii", 0, 4)
        + _uvarint(0)  # the topic's tagged fields
        + struct.pack(">qq", 11, 10)
        + _uvarint(2)  # two tagged fields
        + _uvarint(0)
        + _uvarint(8)
        + struct.pack(">q", 6)
        + _uvarint(2)
        + _uvarint(2)
        + struct.pack(">h", 2)
    )
    v = decode_value(data)
    assert v is not None
    assert (v.producer_id, v.producer_epoch, v.timeout_ms, v.state) == (
        7,
        2,
        900,
        TxnState.PREPARE_COMMIT,
    )
    assert v.partitions == {("orders", 0), ("orders", 4)}
    assert (v.last_update_ms, v.start_ms) == (11, 10)
    assert (v.previous_producer_id, v.next_producer_id, v.client_transaction_version) == (6, -1, 2)


@pytest.mark.parametrize(
    "data",
    [
        b"\x00",
        struct.pack(">h", 2) + b"\x00" * 40,  # unknown version
        struct.pack(">hqhib", 0, 1, 0, 1, 9) + struct.pack(">iqq", -1, 0, 0),  # unknown status
        struct.pack(">hqhibiqq", 0, 5, 0, 100, 0, -1, 1, -1) + b"x",  # trailing bytes
        struct.pack(">hqhibi", 0, 5, 0, 100, 1, 3),  # truncated array
    ],
)
def test_damaged_values_are_corrupt_records(data: bytes) -> None:
    with pytest.raises(CorruptRecord):
        decode_value(data)


def test_state_ids_and_transitions_are_kafkas() -> None:
    assert [(s.id, s.kafka_name) for s in TxnState] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]
    assert VALID_PREVIOUS[TxnState.PREPARE_COMMIT] == {TxnState.ONGOING}
    assert TxnState.PREPARE_EPOCH_FENCE in VALID_PREVIOUS[TxnState.PREPARE_ABORT]


def test_transactional_ids_hash_as_kafka() -> None:
    # Java: "my-txn".hashCode() == -1061187895; Utils.abs(...) % 50 == 45.
    assert partition_for("my-txn", 50) == 45
