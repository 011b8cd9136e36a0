"""Keys and values of the records in ``__transaction_state``, in Kafka's TransactionLog
format (byte for byte what a Kafka broker writes and reads).

Every record is an ordinary RecordBatch v2 record of a compacted topic: the latest value
per key is a transactional id's state, a null value (tombstone) forgets the id.

Key (``TransactionLogKey``, version 0; big-endian)::

    version         int16   0
    transactionalId string  int16 length + UTF-8 bytes

Value (``TransactionLogValue``), prefixed by its version (int16):

* version 0 (what Kafka writes until ``transaction.version`` 2; Logbus writes it)::

    ProducerId                        int64
    ProducerEpoch                     int16
    TransactionTimeoutMs              int32
    TransactionStatus                 int8    (:class:`TxnState` ids)
    TransactionPartitions             nullable array (int32 count, -1 = null) of
        Topic                           string
        PartitionIds                    array (int32 count) of int32
    TransactionLastUpdateTimestampMs  int64
    TransactionStartTimestampMs       int64

* version 1 (flexible): the same fields with compact strings and arrays (unsigned varint
  length + 1, 0 = null) and tagged fields after each struct: tag 0 PreviousProducerId
  (int64), tag 1 NextProducerId (int64), tag 2 ClientTransactionVersion (int16). Read, so
  a log written by a newer Kafka loads; never written.

``TransactionPartitions`` is null in the Empty state (Kafka writes it so) and the list
of partitions otherwise. Decoding raises :class:`~app.common.errors.CorruptRecord` on
anything else (an unknown version, short or trailing bytes): anyone may produce to the
topic, and the loader skips such a record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from app.common.errors import CorruptRecord
from app.txn.model import TxnState

KEY_VERSION = 0
VALUE_VERSION = 0  # written; 0 and 1 are read
_MAX_VALUE_VERSION = 1

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """One transactional id's state as ``__transaction_state`` records it."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    # (topic, partition) pairs; empty in the Empty state.
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    last_update_ms: int = -1
    start_ms: int = -1
    # Version 1 tagged fields (defaults when absent).
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return _I16.pack(KEY_VERSION) + _I16.pack(len(raw)) + raw


def decode_key(data: bytes | bytearray | memoryview) -> str:
    """The transactional id of a key; CorruptRecord if it is not a TransactionLogKey v0."""
    buf = bytes(data)
    if len(buf) < 4:
        raise CorruptRecord(f"__transaction_state key of {len(buf)} bytes is too short")
    (version,) = _I16.unpack_from(buf, 0)
    if version != KEY_VERSION:
        raise CorruptRecord(f"__transaction_state key version {version} is unknown")
    (length,) = _I16.unpack_from(buf, 2)
    if length < 0 or 4 + length != len(buf):
        raise CorruptRecord(f"__transaction_state key: string of {length} in {len(buf)} bytes")
    try:
        return buf[4:].decode()
    except UnicodeDecodeError as exc:
        raise CorruptRecord(f"__transaction_state key is not UTF-8: {exc}") from None


def _grouped(partitions: Iterable[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return list(by_topic.items())


def encode_value(value: TxnLogValue) -> bytes:
    """Version 0 bytes (with the version prefix)."""
    if value.state is TxnState.EMPTY and value.partitions:
        raise ValueError("a transaction in the Empty state has no partitions")
    out = bytearray(_I16.pack(VALUE_VERSION))
    out += _I64.pack(value.producer_id)
    out += _I16.pack(value.producer_epoch)
    out += _I32.pack(value.timeout_ms)
    out += _I8.pack(value.state.id)
    if value.state is TxnState.EMPTY:
        out += _I32.pack(-1)
    else:
        groups = _grouped(value.partitions)
        out += _I32.pack(len(groups))
        for topic, ids in groups:
            raw = topic.encode()
            out += _I16.pack(len(raw)) + raw
            out += _I32.pack(len(ids))
            for p in ids:
                out += _I32.pack(p)
    out += _I64.pack(value.last_update_ms)
    out += _I64.pack(value.start_ms)
    return bytes(out)


class _Reader:
    """Big-endian reads over one value; CorruptRecord past the end."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.buf):
            raise CorruptRecord("__transaction_state value is truncated")
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return int(v)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptRecord("__transaction_state value is truncated")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.buf) or shift > 28:
                raise CorruptRecord("__transaction_state value: bad varint")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def string(self, compact: bool) -> str:
        n = self.uvarint() - 1 if compact else self.take(_I16)
        try:
            return self.raw(n).decode()
        except UnicodeDecodeError as exc:
            raise CorruptRecord(f"__transaction_state value: topic is not UTF-8: {exc}") from None

    def count(self, compact: bool) -> int:
        """An array's length; -1 for null."""
        return self.uvarint() - 1 if compact else self.take(_I32)

    def tagged(self) -> dict[int, bytes]:
        fields: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.raw(self.uvarint())
        return fields


def decode_value(data: bytes | bytearray | memoryview | None) -> TxnLogValue | None:
    """The value (None for a tombstone); CorruptRecord if it is not a TransactionLogValue."""
    if data is None:
        return None
    r = _Reader(bytes(data))
    version = r.take(_I16)
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise CorruptRecord(f"__transaction_state value version {version} is unknown")
    flexible = version >= 1
    producer_id = r.take(_I64)
    epoch = r.take(_I16)
    timeout_ms = r.take(_I32)
    status = r.take(_I8)
    try:
        state = TxnState.from_id(status)
    except ValueError:
        raise CorruptRecord(f"__transaction_state value: unknown status {status}") from None
    partitions: set[tuple[str, int]] = set()
    topics = r.count(flexible)
    for _ in range(max(topics, 0)):
        topic = r.string(flexible)
        n = r.count(flexible)
        for _ in range(max(n, 0)):
            partitions.add((topic, r.take(_I32)))
        if flexible:
            r.tagged()
    last_update = r.take(_I64)
    start = r.take(_I64)
    prev_pid = next_pid = -1
    client_version = 0
    if flexible:
        tags = r.tagged()
        try:
            if 0 in tags:
                (prev_pid,) = _I64.unpack(tags[0])
            if 1 in tags:
                (next_pid,) = _I64.unpack(tags[1])
            if 2 in tags:
                (client_version,) = _I16.unpack(tags[2])
        except struct.error as exc:
            raise CorruptRecord(f"__transaction_state value: bad tagged field: {exc}") from None
    if r.pos != len(r.buf):
        raise CorruptRecord(
            f"__transaction_state value: {len(r.buf) - r.pos} bytes after the last field"
        )
    return TxnLogValue(
        producer_id=producer_id,
        producer_epoch=epoch,
        timeout_ms=timeout_ms,
        state=state,
        partitions=frozenset(partitions),
        last_update_ms=last_update,
        start_ms=start,
        previous_producer_id=prev_pid,
        next_producer_id=next_pid,
        client_transaction_version=client_version,
    )
