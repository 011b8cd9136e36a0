"""OffsetIndex / TimeIndex: lookups against a bisect reference, sanity checks, truncation."""

from __future__ import annotations

import bisect
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.log.index import OFFSET_ENTRY, TIME_ENTRY, IndexCorrupt, OffsetIndex, TimeIndex


def _offset_index(tmp_path: Path, base: int = 1000, max_bytes: int = 1 << 20) -> OffsetIndex:
    idx = OffsetIndex(tmp_path / "x.index", base, max_bytes)
    idx.reset()
    return idx


def test_offset_index_layout_is_big_endian_u32_pairs(tmp_path: Path) -> None:
    idx = _offset_index(tmp_path)
    idx.append(1005, 4096)
    idx.append(1010, 8200)
    raw = (tmp_path / "x.index").read_bytes()
    assert raw == struct.pack(">IIII", 5, 4096, 10, 8200)
    assert OFFSET_ENTRY.size == 8 and TIME_ENTRY.size == 12


def test_time_index_layout_is_i64_then_u32(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "x.timeindex", 50, 1 << 20)
    idx.reset()
    assert idx.maybe_append(1_700_000_000_000, 57)
    assert not idx.maybe_append(1_700_000_000_000, 60)  # not a new maximum
    assert (tmp_path / "x.timeindex").read_bytes() == struct.pack(">qI", 1_700_000_000_000, 7)


def test_offset_lookup_empty_and_before_first(tmp_path: Path) -> None:
    idx = _offset_index(tmp_path)
    assert idx.lookup(5000) == (1000, 0)
    idx.append(1100, 500)
    assert idx.lookup(1099) == (1000, 0)
    assert idx.lookup(1100) == (1100, 500)
    assert idx.lookup(99999) == (1100, 500)
    assert idx.lookup(99999, max_position=500) == (1000, 0)
    assert idx.lookup_position(499) == (1000, 0)
    assert idx.lookup_position(500) == (1100, 500)


def test_offset_index_rejects_non_increasing(tmp_path: Path) -> None:
    idx = _offset_index(tmp_path)
    idx.append(1010, 100)
    with pytest.raises(ValueError):
        idx.append(1010, 200)
    with pytest.raises(ValueError):
        idx.append(1020, 100)


@settings(max_examples=60, deadline=None)
@given(
    deltas=st.lists(st.tuples(st.integers(1, 1000), st.integers(1, 10_000)), max_size=200),
    targets=st.lists(st.integers(0, 300_000), min_size=1, max_size=30),
)
def test_offset_lookup_matches_bisect_reference(
    tmp_path_factory: pytest.TempPathFactory, deltas: list[tuple[int, int]], targets: list[int]
) -> None:
    base = 7
    idx = _offset_index(tmp_path_factory.mktemp("idx"), base)
    offsets, positions = [], []
    off, pos = base, 0
    for d_off, d_pos in deltas:
        off += d_off
        pos += d_pos
        idx.append(off, pos)
        offsets.append(off)
        positions.append(pos)
    reloaded = OffsetIndex(idx.path, base, 1 << 20)
    for target in targets:
        i = bisect.bisect_right(offsets, target) - 1
        expected = (offsets[i], positions[i]) if i >= 0 else (base, 0)
        assert idx.lookup(target) == expected
        assert reloaded.lookup(target) == expected
        j = bisect.bisect_right(positions, target) - 1
        assert idx.lookup_position(target) == ((offsets[j], positions[j]) if j >= 0 else (base, 0))


@settings(max_examples=60, deadline=None)
@given(
    entries=st.lists(st.tuples(st.integers(-5, 10**6), st.integers(0, 50)), max_size=100),
    targets=st.lists(st.integers(-10, 10**6 + 10), min_size=1, max_size=20),
)
def test_time_lookup_matches_reference(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[int, int]], targets: list[int]
) -> None:
    idx = TimeIndex(tmp_path_factory.mktemp("tidx") / "x.timeindex", 0, 1 << 20)
    idx.reset()
    ref: dict[int, int] = {}
    offset = 0
    last_ts: int | None = None
    for ts, step in entries:
        offset += step
        appended = idx.maybe_append(ts, offset)
        assert appended == (last_ts is None or ts > last_ts)
        if appended:
            ref[ts] = offset
            last_ts = ts
    keys = sorted(ref)
    reloaded = TimeIndex(idx.path, 0, 1 << 20)
    for target in targets:
        below = [k for k in keys if k < target]
        expected = (below[-1], ref[below[-1]]) if below else None
        assert idx.lookup_before(target) == expected
        assert reloaded.lookup_before(target) == expected
    assert reloaded.last_entry() == ((keys[-1], ref[keys[-1]]) if keys else None)


def test_truncation(tmp_path: Path) -> None:
    idx = _offset_index(tmp_path, base=0)
    for i in range(1, 6):
        idx.append(i * 10, i * 100)
    idx.truncate_to_offset(30)
    assert len(idx) == 2 and idx.last_entry() == (20, 200)
    idx.truncate_to_position(150)
    assert len(idx) == 1
    assert (tmp_path / "x.index").stat().st_size == 8
    idx.append(15, 160)
    assert OffsetIndex(idx.path, 0, 1 << 20).lookup(100) == (15, 160)


def test_time_index_truncation(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "t.timeindex", 0, 1 << 20)
    idx.reset()
    for i in range(5):
        idx.maybe_append(100 + i, i * 10)
    idx.truncate_to_offset(20)
    assert len(idx) == 2
    assert TimeIndex(idx.path, 0, 1 << 20).last_entry() == (101, 10)


@pytest.mark.parametrize(
    "content",
    [
        struct.pack(">II", 5, 100) + b"\x00\x00",  # torn entry
        struct.pack(">IIII", 5, 100, 4, 200),  # offsets go back
        struct.pack(">IIII", 5, 100, 6, 100),  # positions repeat
        struct.pack(">IIII", 5, 100, 0, 0),  # zero tail of a preallocated file
    ],
)
def test_sanity_check_rejects_damaged_files(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(content)
    with pytest.raises(IndexCorrupt):
        OffsetIndex(path, 0, 1 << 20).load()


def test_sanity_check_rejects_missing_and_oversized(tmp_path: Path) -> None:
    with pytest.raises(IndexCorrupt):
        OffsetIndex(tmp_path / "nope.index", 0, 1 << 20).load()
    path = tmp_path / "big.index"
    path.write_bytes(struct.pack(">IIII", 1, 1, 2, 2))
    with pytest.raises(IndexCorrupt):
        OffsetIndex(path, 0, 8).load()


def test_full_index_and_unload(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "x.index", 0, 24)
    idx.reset()
    for i in range(3):
        assert not idx.is_full
        idx.append(i + 1, (i + 1) * 10)
    assert idx.is_full
    idx.seal()
    idx.unload()
    assert not idx.loaded
    assert idx.lookup(2) == (2, 20)
    assert idx.loaded


def test_sealed_index_budget_drops_the_oldest(tmp_path: Path) -> None:
    from app.core.log.index import SealedIndexBudget

    budget = SealedIndexBudget(8 * 10 * 2)  # room for two indexes of 10 entries
    indexes = []
    for n in range(4):
        idx = OffsetIndex(tmp_path / f"{n}.index", 0, 1 << 20)
        idx.reset()
        for i in range(10):
            idx.append(i + 1, (i + 1) * 100)
        idx.seal()
        indexes.append(idx)
    for idx in indexes:
        assert idx.lookup(5) == (5, 500)  # loads (or keeps) the columns
        budget.track(idx, len(idx) * 8)
    assert [idx.loaded for idx in indexes] == [False, False, True, True]
    assert budget.used_bytes == 160
    # A dropped index reloads transparently.
    assert indexes[0].lookup(7) == (7, 700)
    budget.forget(indexes[3])
    assert budget.used_bytes == 80


def test_global_budget_keeps_lookups_right(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.core.log import index as index_module

    monkeypatch.setattr(index_module.SEALED_INDEXES, "budget_bytes", 64)
    indexes = []
    for n in range(20):
        idx = OffsetIndex(tmp_path / f"{n}.index", 1000 * n, 1 << 20)
        idx.reset()
        for i in range(5):
            idx.append(1000 * n + i + 1, (i + 1) * 10)
        idx.seal()
        indexes.append(idx)
    for _ in range(3):
        for n, idx in enumerate(indexes):
            assert idx.lookup(1000 * n + 3) == (1000 * n + 3, 30)
    assert sum(idx.loaded for idx in indexes) <= 2
