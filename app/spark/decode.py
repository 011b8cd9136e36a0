"""RecordBatch v2 records straight into Arrow buffers, compiled with numba.

Decoding records one Python object at a time (aiokafka's Cython decoder
makes a bytes object per key and value and an int per offset and timestamp)
and then building Arrow arrays from those objects cost ~300 ns per record in
each Spark Python worker, as much CPU as the JVM side of the read. Here one
compiled loop walks the records of many batches and writes their fields into
preallocated numpy buffers: offsets, timestamps and timestamp types as
fixed-width columns, keys and values as Arrow binary layouts (an int32 end
offset per row plus one data buffer, a validity byte per row turned into a
bitmap afterwards), headers as a list of structs. Arrow then takes the
buffers as they are (:func:`pyarrow.Array.from_buffers`): no per-record
Python object at all.

The loop checks every length against the end of its record and batch, so
corrupt bytes raise :class:`~app.common.errors.CorruptRecord` rather than read
out of bounds. Compressed batches are decompressed first, batch by batch,
with the codecs aiokafka's decoder uses (:mod:`aiokafka.codec`).

``cache=True`` keeps the machine code in ``__pycache__`` beside this file
(or numba's user-wide cache when that is read-only, or ``NUMBA_CACHE_DIR``),
so only the first worker on a machine compiles (~1.5 s here, once per version
of this file); the others load it in ~0.15 s, after ~0.3 s importing numba,
once per Python worker (Spark reuses its workers across tasks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from aiokafka.codec import gzip_decode, lz4_decode, snappy_decode, zstd_decode

from app.common.batch import HEADER_SIZE, BatchHeader, Compression
from app.common.errors import CorruptRecord, UnsupportedCompressionType

try:
    import numba
    from numba.core import cgutils, types
    from numba.extending import intrinsic
except ImportError as e:  # pragma: no cover - numba is in the spark extra
    raise ImportError("the Spark data source needs numba: pip install 'logbus[spark]'") from e


def _jit(fn: Callable[..., Any]) -> Any:
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # no writable cache directory at all: compile in each process
        return numba.njit(nogil=True)(fn)


_inline = numba.njit(inline="always")

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

_DECOMPRESS: dict[int, Callable[[Any], bytes]] = {
    Compression.GZIP: gzip_decode,
    Compression.SNAPPY: lambda data: snappy_decode(bytes(data)),
    Compression.LZ4: lz4_decode,
    Compression.ZSTD: zstd_decode,
}

# Columns of the per-batch table the loop reads.
_START, _END, _BASE_OFFSET, _BASE_TS, _MAX_TS, _TS_TYPE, _COUNT = range(7)
# Cursors the loop carries from one segment to the next (the cur array).
_ROWS, _KEY_LEN, _VALUE_LEN, _HEADERS, _HKEY_LEN, _HVALUE_LEN = range(6)
_KEY_NULLS, _VALUE_NULLS, _HVALUE_NULLS = range(6, 9)


@_inline
def _varint(data: U8, pos: int, end: int) -> tuple[int, int]:  # pragma: no cover - compiled
    """The zig-zag varint at ``pos`` and the position after it; position -1 when cut or too long."""
    result = np.uint64(0)
    shift = np.uint64(0)
    while True:
        if pos >= end or shift > np.uint64(63):
            return 0, -1
        b = np.uint64(data[pos])
        pos += 1
        result |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            break
        shift += np.uint64(7)
    value = np.int64(result >> np.uint64(1)) ^ -np.int64(result & np.uint64(1))
    return int(value), pos


def _copy_typer(
    typingctx: Any, out: Any, at: Any, data: Any, pos: Any, n: Any
) -> tuple[Any, Any]:  # pragma: no cover - compiled
    """``out[at : at + n] = data[pos : pos + n]`` as one ``llvm.memcpy``.

    A slice assignment builds two array views per call and a byte loop does
    not vectorize (the arrays may alias): both ran ~3x slower per record here.
    """

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        out_v, at_v, data_v, pos_v, n_v = args
        dst = context.make_array(signature.args[0])(context, builder, out_v)
        src = context.make_array(signature.args[2])(context, builder, data_v)
        memcpy: Any = cgutils.raw_memcpy
        memcpy(builder, builder.gep(dst.data, [at_v]), builder.gep(src.data, [pos_v]), n_v, 1)
        return context.get_dummy_value()

    return types.void(out, at, data, pos, n), codegen


_copy: Any = intrinsic(_copy_typer)


@_inline
def _span(data: U8, pos: int, end: int) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """A length-prefixed nullable field at ``pos``: its length (-1 for null), where its
    bytes start, and the position after them; that position is -1 when the field is cut
    or its length is below -1."""
    n, pos = _varint(data, pos, end)
    if pos < 0 or n < -1 or n > end - pos:
        return 0, 0, -1
    return n, pos, pos + max(n, 0)


@_inline
def _put(  # pragma: no cover - compiled
    out: U8, at: int, valid: U8, ends: I32, i: int, data: U8, pos: int, n: int
) -> tuple[int, int]:
    """Entry ``i`` of a nullable binary column: the ``n`` bytes of ``data`` at ``pos``
    copied to ``out[at:]``, or null when ``n`` is -1. The column's new length and 1 for
    a null (0 otherwise), which the caller adds to its null count."""
    null = 0
    if n >= 0:
        _copy(out, at, data, pos, n)
        at += n
        valid[i] = 1
    else:
        valid[i] = 0
        null = 1
    ends[i + 1] = at
    return at, null


@_jit
def _decode(  # pragma: no cover - compiled
    data: U8,
    batches: I64,
    lo: int,
    hi: int,
    with_headers: bool,
    offsets: I64,
    timestamps: I64,
    ts_types: I32,
    key_ends: I32,
    key_data: U8,
    key_valid: U8,
    value_ends: I32,
    value_data: U8,
    value_valid: U8,
    header_ends: I32,
    hkey_ends: I32,
    hkey_data: U8,
    hvalue_ends: I32,
    hvalue_data: U8,
    hvalue_valid: U8,
    cur: I64,
) -> int:
    """Append the records of ``batches`` (rows of ``data``) with offsets in [lo, hi).

    Returns -1, or the index of the first batch found corrupt.
    """
    row = cur[0]
    kl = cur[1]
    vl = cur[2]
    nh = cur[3]
    hkl = cur[4]
    hvl = cur[5]
    knull = cur[6]
    vnull = cur[7]
    hvnull = cur[8]
    for b in range(batches.shape[0]):
        pos = batches[b, 0]
        end = batches[b, 1]
        base = batches[b, 2]
        base_ts = batches[b, 3]
        max_ts = batches[b, 4]
        ts_type = batches[b, 5]
        count = batches[b, 6]
        if pos < 0 or end > data.shape[0] or pos > end:
            return b
        for _ in range(count):
            length, pos = _varint(data, pos, end)
            if pos < 0 or length < 0 or length > end - pos:
                return b
            rend = pos + length
            pos += 1  # attributes
            ts_delta, pos = _varint(data, pos, rend)
            if pos < 0:
                return b
            offset_delta, pos = _varint(data, pos, rend)
            if pos < 0:
                return b
            offset = base + offset_delta
            if offset < lo or offset >= hi:
                pos = rend
                continue
            klen, kpos, pos = _span(data, pos, rend)
            if pos < 0:
                return b
            vlen, vpos, pos = _span(data, pos, rend)
            if pos < 0:
                return b
            offsets[row] = offset
            # Spark timestamps are microseconds, Kafka's milliseconds; LogAppendTime
            # batches carry the broker's time as maxTimestamp for every record.
            timestamps[row] = (max_ts if ts_type == 1 else base_ts + ts_delta) * 1000
            ts_types[row] = ts_type
            kl, null = _put(key_data, kl, key_valid, key_ends, row, data, kpos, klen)
            knull += null
            vl, null = _put(value_data, vl, value_valid, value_ends, row, data, vpos, vlen)
            vnull += null
            if with_headers:
                hcount, pos = _varint(data, pos, rend)
                if pos < 0 or hcount < 0 or hcount > rend - pos:
                    return b
                for _h in range(hcount):
                    hklen, pos = _varint(data, pos, rend)
                    if pos < 0 or hklen < 0 or hklen > rend - pos:
                        return b
                    _copy(hkey_data, hkl, data, pos, hklen)
                    hkl += hklen
                    pos += hklen
                    hkey_ends[nh + 1] = hkl
                    hvlen, hvpos, pos = _span(data, pos, rend)
                    if pos < 0:
                        return b
                    hvl, null = _put(
                        hvalue_data, hvl, hvalue_valid, hvalue_ends, nh, data, hvpos, hvlen
                    )
                    hvnull += null
                    nh += 1
                if pos != rend:
                    return b
                header_ends[row + 1] = nh
            row += 1
            pos = rend
        if pos != end:
            return b
    cur[0] = row
    cur[1] = kl
    cur[2] = vl
    cur[3] = nh
    cur[4] = hkl
    cur[5] = hvl
    cur[6] = knull
    cur[7] = vnull
    cur[8] = hvnull
    return -1


@dataclass
class Segment:
    """Whole batches of one fetch answer, ready for the compiled loop.

    ``data`` holds their records (decompressed when the batch was compressed);
    row ``i`` of ``batches`` gives batch ``i``'s records start and end in ``data``, base
    offset, base and max timestamp, timestamp type and record count.
    """

    data: U8
    batches: I64
    headers: list[BatchHeader] = field(default_factory=list)

    @property
    def records(self) -> int:
        """An upper bound on the rows it decodes to (its batches' record counts)."""
        return int(self.batches[:, _COUNT].sum())


def segment(
    body: bytes | bytearray | memoryview, batches: Sequence[tuple[int, BatchHeader]]
) -> Segment:
    """The records of ``batches`` (``(position, header)`` in ``body``, whole and not control)."""
    table = np.empty((len(batches), 7), dtype=np.int64)
    compressed = any(h.attributes & 0x07 for _, h in batches)
    parts: list[bytes | memoryview] = []
    at = 0
    view = memoryview(body)
    for i, (pos, h) in enumerate(batches):
        start, end = pos + HEADER_SIZE, pos + h.size
        if compressed:
            codec = h.attributes & 0x07
            records = view[start:end]
            if codec:
                decompress = _DECOMPRESS.get(codec)
                if decompress is None:
                    raise UnsupportedCompressionType(
                        f"batch at offset {h.base_offset} uses compression id {codec}"
                    )
                records = memoryview(decompress(records))
            parts.append(records)
            start, end = at, at + len(records)
            at = end
        table[i] = (start, end, h.base_offset, h.base_timestamp, h.max_timestamp,
                    h.timestamp_type, max(h.record_count, 0))  # fmt: skip
    data = np.frombuffer(b"".join(parts) if compressed else body, dtype=np.uint8)
    return Segment(data, table, [h for _, h in batches])


def _bitmap(valid: U8, n: int, nulls: int) -> pa.Buffer | None:
    if nulls == 0:
        return None
    return pa.py_buffer(np.packbits(valid[:n], bitorder="little"))


def _binary(
    kind: pa.DataType, n: int, ends: I32, data: U8, used: int, valid: U8, nulls: int
) -> pa.Array:
    if nulls == n:
        return pa.nulls(n, kind)
    return pa.Array.from_buffers(
        kind,
        n,
        [_bitmap(valid, n, nulls), pa.py_buffer(ends[: n + 1]), pa.py_buffer(data[:used])],
        null_count=nulls,
    )


@dataclass
class Columns:
    """Decoded rows as Arrow arrays (timestamps already in microseconds)."""

    key: pa.Array
    value: pa.Array
    offset: pa.Array
    timestamp: pa.Array
    timestamp_type: pa.Array
    headers: pa.Array | None

    def __len__(self) -> int:
        return len(self.offset)


def decode(
    segments: Sequence[Segment], lo: int, hi: int, headers_type: pa.DataType | None = None
) -> Columns:
    """The records with offsets in ``[lo, hi)`` of ``segments`` as Arrow arrays.

    ``headers_type`` (``list<struct<key: string, value: binary>>``, as Spark
    declares it) asks for the headers column; without it headers are skipped.
    """
    rows = sum(s.records for s in segments)
    size = sum(len(s.data) for s in segments)
    with_headers = headers_type is not None
    # Sized for the worst case: np.empty does not touch the pages it does not use.
    offsets = np.empty(rows, dtype=np.int64)
    timestamps = np.empty(rows, dtype=np.int64)
    ts_types = np.empty(rows, dtype=np.int32)
    key_ends = np.empty(rows + 1, dtype=np.int32)
    value_ends = np.empty(rows + 1, dtype=np.int32)
    key_valid = np.empty(rows, dtype=np.uint8)
    value_valid = np.empty(rows, dtype=np.uint8)
    key_data = np.empty(size, dtype=np.uint8)
    value_data = np.empty(size, dtype=np.uint8)
    key_ends[0] = value_ends[0] = 0
    # Each header takes at least two bytes (two one-byte lengths).
    most_headers = size // 2 + 1 if with_headers else 0
    header_ends = np.empty(rows + 1 if with_headers else 0, dtype=np.int32)
    hkey_ends = np.empty(most_headers + 1, dtype=np.int32)
    hvalue_ends = np.empty(most_headers + 1, dtype=np.int32)
    hvalue_valid = np.empty(most_headers, dtype=np.uint8)
    hkey_data = np.empty(size if with_headers else 0, dtype=np.uint8)
    hvalue_data = np.empty(size if with_headers else 0, dtype=np.uint8)
    if with_headers:
        header_ends[0] = hkey_ends[0] = hvalue_ends[0] = 0
    cur = np.zeros(9, dtype=np.int64)
    for s in segments:
        bad = _decode(
            s.data, s.batches, lo, hi, with_headers,
            offsets, timestamps, ts_types,
            key_ends, key_data, key_valid,
            value_ends, value_data, value_valid,
            header_ends, hkey_ends, hkey_data, hvalue_ends, hvalue_data, hvalue_valid,
            cur,
        )  # fmt: skip
        if bad >= 0:
            h = s.headers[bad] if s.headers else None
            where = f"the batch at offset {h.base_offset}" if h else f"batch {bad}"
            raise CorruptRecord(f"malformed records in {where}")
    n = int(cur[_ROWS])
    header_array = None
    if headers_type is not None:
        nh = int(cur[_HEADERS])
        hkeys = pa.Array.from_buffers(
            pa.string(), nh, [None, pa.py_buffer(hkey_ends[: nh + 1]),
                              pa.py_buffer(hkey_data[: int(cur[_HKEY_LEN])])],
        )  # fmt: skip
        # Header keys are strings: refuse bytes that are not UTF-8, as the object decoders do.
        if nh:
            hkeys.validate(full=True)
        hvalues = _binary(
            pa.binary(), nh, hvalue_ends, hvalue_data, int(cur[_HVALUE_LEN]),
            hvalue_valid, int(cur[_HVALUE_NULLS]),
        )  # fmt: skip
        struct_type = headers_type.value_type
        entries = pa.StructArray.from_arrays(
            [hkeys, hvalues], fields=[struct_type.field(0), struct_type.field(1)]
        )
        header_array = pa.Array.from_buffers(
            headers_type, n, [None, pa.py_buffer(header_ends[: n + 1])], children=[entries]
        )
    return Columns(
        key=_binary(
            pa.binary(), n, key_ends, key_data, int(cur[_KEY_LEN]), key_valid,
            int(cur[_KEY_NULLS]),
        ),
        value=_binary(
            pa.binary(), n, value_ends, value_data, int(cur[_VALUE_LEN]), value_valid,
            int(cur[_VALUE_NULLS]),
        ),
        offset=pa.array(offsets[:n]),
        timestamp=pa.Array.from_buffers(
            pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(timestamps[:n])]
        ),
        timestamp_type=pa.array(ts_types[:n]),
        headers=header_array,
    )  # fmt: skip
