"""The producer's per-record work: compiled (``_native``, C) where built, pure Python otherwise.

Owns what ``send`` does per record, behind one interface with two
implementations that give identical bytes, partitions and callbacks (the
tests check them against each other and against aiokafka's builder):

* :class:`RecordBuffer` (``NativeRecordBuffer`` or :class:`PyRecordBuffer`):
  the records of one RecordBatch v2 being filled. ``append(timestamp, key,
  value, headers=None)`` encodes one record and returns None once
  ``batch_size`` is reached; ``count`` is how many it holds (record ``i`` has
  offset delta ``i``); ``add_callback``/``run_callbacks`` keep the delivery
  callbacks and call them all in one loop when the batch is answered;
  ``build()`` makes the batch (header, CRC-32C, compression) once.
* ``FastSend`` (compiled only, else None): ``Producer.send``'s common case in
  one C call (see ``_native.c``); everything it does not take goes to the
  Python ``send``.
* ``build_plain_many(buffers)``: several uncompressed batches built into one
  request body in one copy, the CRC and copy without the GIL (compiled; the
  pure-Python one returns None and the caller joins each batch's ``build()``);
* :func:`murmur2`: Kafka's hash, compiled or
  :func:`app.common.partitioner.murmur2`;
* :class:`LatencyRecorder`: the delivery callback of ``logbus perf produce``
  (keeps acknowledgement time minus record timestamp, ms), compiled so the
  tool does not measure its own callback;
* :data:`Lock`: the accumulator's lock, ``threading.Lock``'s interface; the
  compiled one is taken by ``FastSend`` without a Python call.

Why compiled: in Python, encoding a record through aiokafka's builder costs
~430 ns, a RecordMetadata ~380 ns and the send call itself ~600 ns, against
the 1 us a record may take at 1 M records/s. The extension is built by ``pip
install`` (``setup.py``; a C compiler and Python headers, which Debian's
``python3-dev`` has) and is optional: where it is missing, or with
``LOGBUS_NO_EXTENSIONS=1`` in the environment, the pure-Python classes are
used, with the same behaviour at the old speed.

Concurrency: as :mod:`app.client.producer.batch` states for the batch that owns
a buffer (filled under the accumulator's lock, answered on the sender's thread).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import crc32c
from aiokafka import codec

from app.common.batch import (
    HEADER,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    TRANSACTIONAL_MASK,
    RecordBatchBuilder,
    stamp_producer,
)
from app.common.partitioner import murmur2 as py_murmur2

log = logging.getLogger(__name__)

HeaderList = Sequence[tuple[str, bytes | None]]
Callback = Callable[[Any, BaseException | None], None]

_COMPRESS: dict[int, Callable[[bytes], bytes]] = {
    1: codec.gzip_encode,
    2: codec.snappy_encode,
    3: codec.lz4_encode,
    4: codec.zstd_encode,
}
_CRC = struct.Struct(">I")
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21


class PyRecordBuffer:
    """The pure-Python record buffer: aiokafka's builder (compiled by aiokafka, or its own
    pure-Python one) plus a list of callbacks. Its methods are the interface the C one
    has too (:data:`RecordBufferLike`, what a ProducerBatch needs of its buffer); the
    tests hold the two to the same bytes and callbacks."""

    __slots__ = ("_builder", "callbacks", "compression", "count", "transactional")

    def __init__(self, batch_size: int, compression: int = 0) -> None:
        self.compression = compression
        self._builder = RecordBatchBuilder(
            magic=MAGIC,
            compression_type=compression,
            is_transactional=0,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=batch_size,
        )
        self.count = 0
        self.transactional = False
        self.callbacks: list[tuple[int, float, Callback]] = []

    def append(
        self,
        timestamp: float,
        key: bytes | None,
        value: bytes | None,
        headers: HeaderList | None = None,
        /,
    ) -> bool | None:
        # aiokafka's pure-Python builder takes int timestamps only; its compiled one truncates.
        meta = self._builder.append(
            self.count, int(timestamp), key, value, list(headers) if headers else []
        )
        if meta is None:
            return None
        self.count += 1
        return True

    def append_values(
        self, values: Iterator[bytes | None], timestamp: int, /
    ) -> tuple[int, bool, bytes | None]:
        append = self._builder.append
        i = start = self.count
        no_headers: list[tuple[str, bytes | None]] = []
        try:
            for value in values:
                if append(i, timestamp, None, value, no_headers) is None:
                    return i - start, True, value
                i += 1
            return i - start, False, None
        finally:
            self.count = i

    def add_callback(self, index: int, timestamp: float, callback: Callback, /) -> None:
        self.callbacks.append((index, timestamp, callback))

    def run_callbacks(
        self,
        topic: str,
        partition: int,
        base_offset: int,
        log_append_time: int,
        error: BaseException | None,
        metadata_type: type,
        on_error: Callable[[BaseException], None],
        /,
    ) -> None:
        callbacks, self.callbacks = self.callbacks, []
        for index, ts, cb in callbacks:
            try:
                if error is None:
                    offset = base_offset + index if base_offset >= 0 else -1
                    stamp = log_append_time if log_append_time >= 0 else int(ts)
                    cb(metadata_type(topic, partition, offset, stamp), None)
                else:
                    cb(None, error)
            except Exception as exc:
                on_error(exc)

    def callback_count(self) -> int:
        return len(self.callbacks)

    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool = False
    ) -> None:
        self._builder.set_producer_state(producer_id, producer_epoch, base_sequence)
        # aiokafka's builder takes the transactional flag only when made; build() sets it.
        self.transactional = transactional

    def size(self) -> int:
        return int(self._builder.size())

    def build(self) -> bytes:
        """The whole batch; call once (the builder compresses its buffer in place)."""
        data = self._builder.build()
        if not self.transactional:
            return bytes(data)
        buf = bytearray(data)
        b = self._builder
        stamp_producer(buf, 0, b.producer_id, b.producer_epoch, b.base_sequence, transactional=True)
        return bytes(buf)


# The record buffers' one interface, stated by the Python one (the C type is untyped).
RecordBufferLike = PyRecordBuffer


def build_batch(
    records: bytes,
    count: int,
    compression: int,
    first_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool = False,
) -> bytes:
    """A RecordBatch v2 from its encoded records, byte for byte as aiokafka's compiled
    builder (the producer's codec before this module) makes it: compressed whenever a codec
    is set, as Kafka's producer does, even where that does not make it smaller.
    """
    attributes = compression | (TRANSACTIONAL_MASK if transactional else 0)
    data = _COMPRESS[compression](records) if compression else records
    out = bytearray(HEADER.size + len(data))
    HEADER.pack_into(
        out,
        0,
        0,
        len(out) - 12,
        NO_PARTITION_LEADER_EPOCH,
        MAGIC,
        0,
        attributes,
        count - 1,
        first_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    out[HEADER.size :] = data
    _CRC.pack_into(out, _CRC_OFFSET, crc32c.crc32c(memoryview(out)[_ATTRIBUTES_OFFSET:]))
    return bytes(out)


class PyLatencyRecorder:
    """``recorder(metadata, error)``: keeps wall-clock now minus the record's timestamp (ms),
    or the error; the pure-Python form of the compiled one."""

    __slots__ = ("_values", "errors")

    def __init__(self) -> None:
        self._values = array("d")
        self.errors: list[BaseException | None] = []

    def __call__(self, meta: Any, exc: BaseException | None) -> None:
        if meta is None:
            self.errors.append(exc)
        else:
            self._values.append(time.time() * 1000.0 - meta[3])

    def latencies(self) -> bytes:
        return self._values.tobytes()


def py_build_plain_many(buffers: list[Any]) -> bytes | None:
    """The pure-Python form of the compiled ``build_plain_many``: None, so the caller joins
    the batches' own ``build()``."""
    return None


NativeRecordBuffer: type | None = None
FastSend: Any = None
build_plain_many: Callable[[list[Any]], bytes | None] = py_build_plain_many
murmur2: Callable[[bytes], int] = py_murmur2
FutureBase: type
Lock: Callable[[], Any] = threading.Lock
LatencyRecorder: Callable[[], Any] = PyLatencyRecorder

if os.environ.get("LOGBUS_NO_EXTENSIONS", "") not in ("", "0"):
    _native: Any = None
else:
    try:
        from app.client.producer import _native  # type: ignore[attr-defined,no-redef]
    except ImportError:  # not built here (no compiler at install): the pure-Python path
        _native = None

if _native is not None:

    class _NativeRecordBuffer(_native.RecordBuffer):  # type: ignore[misc]
        """The C record buffer, plus ``build`` (per batch: header, CRC, compression)."""

        __slots__ = ()

        def build(self) -> bytes:
            """The whole batch; once (the buffer goes back to a pool for the next batches)."""
            if not self.compression:
                data = self.build_plain()  # header and CRC in C; None without SSE4.2
                if data is not None:
                    return bytes(data)
            data = build_batch(
                self.records(),
                self.count,
                self.compression,
                self.first_timestamp,
                self.max_timestamp,
                self.producer_id,
                self.producer_epoch,
                self.base_sequence,
                bool(self.transactional),
            )
            self.release()
            return data

    NativeRecordBuffer = _NativeRecordBuffer
    FastSend = _native.FastSend
    build_plain_many = _native.build_plain_many
    murmur2 = _native.murmur2
    FutureBase = _native.FutureBase
    Lock = _native.Lock
    LatencyRecorder = _native.LatencyRecorder
else:

    class _PyFutureBase:
        """What a DeliveryFuture refers to: its batch, its index there, its timestamp."""

        __slots__ = ("_batch", "_index", "_timestamp")

        def __init__(self, batch: Any, index: int, timestamp: float) -> None:
            self._batch = batch
            self._index = index
            self._timestamp = timestamp

    FutureBase = _PyFutureBase

COMPILED = _native is not None
# The buffer batches use: the C one where built.
RecordBuffer: Callable[[int, int], RecordBufferLike] = NativeRecordBuffer or PyRecordBuffer
