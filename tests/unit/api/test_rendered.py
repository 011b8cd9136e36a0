"""Rendered batches (app/api/rendered.py): a JSON fetch through the cache answers the
very bytes of rendering every record anew, on a miss and on a hit, and a batch rewritten
at the same offsets is never answered from what was rendered before."""

from __future__ import annotations

import orjson
import pytest

from app.api.rendered import RenderedBatches
from app.api.routers.fetch import json_records, json_records_fragment
from app.common.batch import BatchBuilder, build_control_batch, stamp

SAMPLES = [b'{"a": 1}', b"plain", b"\xff\xfe", None, b"7", b'"s"', b"[1, 2.5, null]"]


def _log(batches: list[list[tuple[bytes | None, bytes | None, list]]]) -> bytes:
    """Batches stamped at consecutive offsets, as a log read returns them; a control
    batch (a transaction marker, never rendered) between the first two."""
    out = bytearray()
    offset = 0
    for i, rows in enumerate(batches):
        builder = BatchBuilder()
        for j, (key, value, headers) in enumerate(rows):
            builder.append(value, key, headers, 1_000 + offset + j)
        data = bytearray(builder.build())
        stamp(data, 0, offset, 0)
        out += data
        offset += len(rows)
        if i == 0:
            marker = bytearray(
                build_control_batch(7, 0, commit=True, coordinator_epoch=0, timestamp=5)
            )
            stamp(marker, 0, offset, 0)
            out += marker
            offset += 1
    return bytes(out)


def _data() -> bytes:
    first = [(SAMPLES[-1 - i], v, []) for i, v in enumerate(SAMPLES)]
    second = [(b'"k"', b'{"n": %d}' % i, [("h", b"v"), ("n", None)]) for i in range(5)]
    third = [(None, b'"x"', [])]
    return _log([first, second, third])


def _answer(fragment: orjson.Fragment) -> bytes:
    return orjson.dumps({"records": fragment})


@pytest.mark.parametrize("key_format", ["json", "string", "binary"])
@pytest.mark.parametrize("value_format", ["json", "string", "binary"])
@pytest.mark.parametrize("offset", [0, 3, 7, 8, 10, 13, 14])
def test_cached_render_is_the_plain_render(key_format: str, value_format: str, offset: int) -> None:
    data = _data()
    cache = RenderedBatches(1 << 20)
    records, next_offset = json_records(data, offset, key_format, value_format)
    expected = orjson.dumps({"records": records})
    for _ in range(2):  # a miss (renders and keeps), then a hit (joins what was kept)
        fragment, nxt, count = json_records_fragment(data, offset, key_format, value_format, cache)
        assert (_answer(fragment), nxt, count) == (expected, next_offset, len(records))
    assert cache.hits >= 1 or not records
    # Another start offset within kept batches: served from them, still the same bytes.
    later, later_next = json_records(data, offset + 1, key_format, value_format)
    fragment, nxt, _ = json_records_fragment(data, offset + 1, key_format, value_format, cache)
    assert (_answer(fragment), nxt) == (orjson.dumps({"records": later}), later_next)


def test_aborted_transactions_are_left_out_as_in_the_plain_render() -> None:
    builder = BatchBuilder(producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
    builder.append(b"1", None, [], 5)
    data = bytearray(builder.build())
    stamp(data, 0, 0, 0)
    marker = bytearray(build_control_batch(9, 0, commit=False, coordinator_epoch=0, timestamp=6))
    stamp(marker, 0, 1, 0)
    plain = BatchBuilder()
    plain.append(b"2", None, [], 7)
    tail = bytearray(plain.build())
    stamp(tail, 0, 2, 0)
    log = bytes(data + marker + tail)
    cache = RenderedBatches(1 << 20)
    records, _ = json_records(log, 0, "json", "json", aborted=[(9, 0)])
    assert [r["value"] for r in records] == [2]
    fragment, _, count = json_records_fragment(log, 0, "json", "json", cache, aborted=[(9, 0)])
    assert _answer(fragment) == orjson.dumps({"records": records}) and count == 1


def test_a_batch_rewritten_at_the_same_offsets_is_rendered_anew() -> None:
    """Truncation and a new append may put other records at the same offsets: an entry is
    used only for the very bytes it was rendered from, whatever its key says."""
    cache = RenderedBatches(1 << 20)
    old = _log([[(b'"k"', b'"old"', [])]])
    new = _log([[(b'"k"', b'"new"', [])]])
    assert len(old) == len(new)
    first, _, _ = json_records_fragment(old, 0, "json", "json", cache)
    assert b'"old"' in _answer(first)
    # The same key (formats, base offset, length and even the CRC forged equal): bytes differ.
    (key,) = list(cache._entries)
    entry = cache._entries[key]
    assert cache.get(key, new) is None
    assert cache.get(key, entry.raw) is entry
    second, _, _ = json_records_fragment(new, 0, "json", "json", cache)
    assert b'"new"' in _answer(second) and b'"old"' not in _answer(second)


def test_the_cache_stays_within_its_bound() -> None:
    data = _data()
    cache = RenderedBatches(16384)
    for i in range(50):
        rows = [(b'"k%d"' % i, b'{"v": %d}' % j, []) for j in range(3)]
        json_records_fragment(_log([rows]), 0, "json", "json", cache)
        assert cache.held_bytes <= 16384
    assert 0 < len(cache) < 50
    # A batch over an eighth of the bound is rendered (the same answer) but not kept.
    small = RenderedBatches(2048)
    fragment, _, _ = json_records_fragment(data, 0, "json", "json", small)
    assert _answer(fragment) == orjson.dumps({"records": json_records(data, 0, "json", "json")[0]})
    assert len(small) == 0 and small.held_bytes == 0
