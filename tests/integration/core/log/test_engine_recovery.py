"""Crash recovery: torn and corrupted tails, damaged indexes, stray files, clean restarts.

The promise under test: a crash at any byte never loses a batch that was
completely written before it, and never serves a damaged one.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_helpers import BASE_TS, check_log_dir, make_batch

from app.common.batch import decode_records
from app.core.log import Log, LogConfig

CONFIG = LogConfig().with_overrides({"segment.bytes": 1500, "index.interval.bytes": 150})


class Placed(NamedTuple):
    segment: int  # base offset of its segment
    position: int
    size: int
    first: int
    last: int


def _value(offset: int) -> bytes:
    return b"value-%d-" % offset + bytes([65 + offset % 26]) * (offset * 7 % 90)


def build(directory: Path, batches: int, seed: int) -> list[Placed]:
    """A log of ``batches`` random batches; returns where each one landed."""
    rng = random.Random(seed)
    log = Log(directory, CONFIG)
    placed = []
    for _ in range(batches):
        first = log.log_end_offset
        count = rng.randint(1, 6)
        data = make_batch([_value(first + i) for i in range(count)], timestamp=BASE_TS + first)
        seg = log.segments[-1]
        info = log.append(data)
        seg = log.segments[-1]
        placed.append(
            Placed(
                seg.base_offset,
                seg.size - len(data),
                len(data),
                info.first_offset,
                info.last_offset,
            )
        )
    log.close()
    return placed


def reopen(directory: Path, *, clean: bool = False, recovery_point: int = 0) -> Log:
    return Log(directory, CONFIG, clean_shutdown=clean, recovery_point=recovery_point)


def assert_log_holds(log: Log, end: int) -> None:
    """Exactly offsets [0, end), each with its value, readable and parseable by kafka-python."""
    assert log.log_end_offset == end
    records = list(decode_records(log.read(0, 1 << 30).read_bytes()))
    assert [(r.offset, r.value) for r in records] == [(o, _value(o)) for o in range(end)]
    assert check_log_dir(log.dir, start=0) == [(o, _value(o)) for o in range(end)]
    # Appends continue right after.
    info = log.append(make_batch([_value(end)]))
    assert info.first_offset == end
    assert [r.offset for r in decode_records(log.read(end, 1 << 20).read_bytes())] == [end]


def seg_path(directory: Path, base: int, ext: str = "log") -> Path:
    return directory / f"{base:020d}.{ext}"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Placed]]:
    directory = tmp_path_factory.mktemp("pristine") / "t-0"
    placed = build(directory, 60, seed=7)
    assert len({p.segment for p in placed}) >= 5
    return directory, placed


def _copy(pristine: Path, tmp: Path) -> Path:
    target = tmp / "t-0"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(pristine, target)
    return target


def test_cut_at_every_byte_of_the_active_segment(
    pristine: tuple[Path, list[Placed]], tmp_path: Path
) -> None:
    source, placed = pristine
    active = placed[-1].segment
    original = seg_path(source, active).read_bytes()
    directory = _copy(source, tmp_path)
    for cut in range(len(original) + 1):
        # Only the active segment changes between rounds; its indexes are rebuilt every time.
        seg_path(directory, active).write_bytes(original[:cut])
        log = reopen(directory, recovery_point=active)
        kept = [p for p in placed if p.segment < active or p.position + p.size <= cut]
        end = kept[-1].last + 1
        assert log.log_end_offset == end, f"cut at {cut}"
        assert log.truncated_bytes_on_load == cut - sum(p.size for p in kept if p.segment == active)
        if cut in (0, len(original) // 3, len(original) - 1, len(original)):
            assert_log_holds(log, end)
            log.truncate_to(end)
        log.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_cut_any_segment_anywhere(
    pristine: tuple[Path, list[Placed]], tmp_path: Path, data: st.DataObject
) -> None:
    source, placed = pristine
    segments = sorted({p.segment for p in placed})
    segment = data.draw(st.sampled_from(segments))
    size = seg_path(source, segment).stat().st_size
    cut = data.draw(st.integers(0, size))
    directory = _copy(source, tmp_path)
    with open(seg_path(directory, segment), "r+b") as f:
        f.truncate(cut)
    log = reopen(directory)
    if cut == size:  # nothing was cut
        kept = placed
    else:
        kept = [
            p
            for p in placed
            if p.segment < segment or (p.segment == segment and p.position + p.size <= cut)
        ]
        # Later segments are gone.
        assert [s.base_offset for s in log.segments][-1] <= segment
    end = kept[-1].last + 1 if kept else 0
    assert_log_holds(log, end)
    log.close()


def _crc_protected(p: Placed, position: int) -> bool:
    # baseOffset (0-7) and partitionLeaderEpoch (12-15) are outside the CRC by design
    # (Kafka's format: the broker stamps them); recovery checks offsets only for order.
    rel = position - p.position
    return not (0 <= rel < 8 or 12 <= rel < 16)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_corrupt_byte_ends_the_log_there(
    pristine: tuple[Path, list[Placed]], tmp_path: Path, data: st.DataObject
) -> None:
    source, placed = pristine
    victim = data.draw(st.sampled_from(placed))
    position = data.draw(
        st.integers(victim.position, victim.position + victim.size - 1).filter(
            lambda pos: _crc_protected(victim, pos)
        )
    )
    flip = data.draw(st.integers(1, 255))
    directory = _copy(source, tmp_path)
    with open(seg_path(directory, victim.segment), "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ flip]))
    log = reopen(directory)
    assert_log_holds(log, victim.first)
    assert log.truncated_bytes_on_load >= victim.size
    log.close()


def test_recovery_starts_at_the_recovery_point(
    pristine: tuple[Path, list[Placed]], tmp_path: Path
) -> None:
    source, placed = pristine
    segments = sorted({p.segment for p in placed})
    directory = _copy(source, tmp_path)
    # Damage in segment 0 goes unnoticed when the recovery point is past it.
    first = next(p for p in placed if p.segment == segments[0] and p.position > 0)
    with open(seg_path(directory, segments[0]), "r+b") as f:
        f.seek(first.position + 30)
        f.write(b"\xff\xff")
    log = reopen(directory, recovery_point=segments[2])
    assert log.recovered_segments_on_load == len(segments) - 2
    assert log.log_end_offset == placed[-1].last + 1
    log.close()
    log = reopen(directory, recovery_point=0)
    assert log.recovered_segments_on_load == 1
    assert_log_holds(log, first.first)
    log.close()


def test_clean_shutdown_skips_the_scan(pristine: tuple[Path, list[Placed]], tmp_path: Path) -> None:
    source, placed = pristine
    directory = _copy(source, tmp_path)
    log = reopen(directory, clean=True)
    assert log.recovered_segments_on_load == 0
    segments = len(log.segments)
    assert segments == len({p.segment for p in placed})
    log.close()
    log = reopen(directory, clean=False)
    assert log.recovered_segments_on_load == segments
    assert_log_holds(log, placed[-1].last + 1)
    log.close()


INDEX_DAMAGE = {
    "deleted": lambda path, rng: path.unlink(),
    "emptied": lambda path, rng: path.write_bytes(b""),
    "torn": lambda path, rng: path.write_bytes(
        path.read_bytes()[:-3] if path.stat().st_size > 3 else b"\x01"
    ),
    "garbage": lambda path, rng: path.write_bytes(rng.randbytes(path.stat().st_size + 8)),
    "zero-tail": lambda path, rng: path.write_bytes(path.read_bytes() + b"\x00" * 96),
    "reversed": lambda path, rng: path.write_bytes(
        b"".join(reversed([path.read_bytes()[i : i + 8] for i in range(0, path.stat().st_size, 8)]))
    ),
}


@pytest.mark.parametrize("damage", list(INDEX_DAMAGE))
@pytest.mark.parametrize("clean", [True, False])
def test_damaged_indexes_are_rebuilt(
    pristine: tuple[Path, list[Placed]], tmp_path: Path, damage: str, clean: bool
) -> None:
    source, placed = pristine
    directory = _copy(source, tmp_path)
    rng = random.Random(damage)
    for path in sorted(directory.glob("*.index")) + sorted(directory.glob("*.timeindex")):
        if path.stat().st_size >= 8 or damage in ("deleted", "emptied"):
            INDEX_DAMAGE[damage](path, rng)
    log = reopen(directory, clean=clean)
    end = placed[-1].last + 1
    for offset in range(0, end, 3):
        got = log.read(offset, 1)
        offsets = [r.offset for r in decode_records(got.read_bytes())]
        assert offsets[0] <= offset <= offsets[-1]
    for p in placed[::5]:
        ts = BASE_TS + p.first
        assert log.offset_for_timestamp(ts) == (p.first, ts)
    assert_log_holds(log, end)
    log.close()


def test_stray_files_are_removed(pristine: tuple[Path, list[Placed]], tmp_path: Path) -> None:
    source, placed = pristine
    directory = _copy(source, tmp_path)
    strays = [
        "leader-epoch-checkpoint.tmp",
        "00000000000000000000.log.deleted",
        "00000000000000000000.index.deleted",
        f"{placed[-1].segment:020d}.log.swap",
        f"{placed[-1].segment:020d}.log.cleaned",
        "00000000000099999999.index",
        "00000000000099999999.timeindex",
    ]
    for name in strays:
        (directory / name).write_bytes(b"junk")
    log = reopen(directory, clean=True)
    left = {p.name for p in directory.iterdir()}
    assert not left & set(strays)
    assert log.log_end_offset == placed[-1].last + 1
    log.close()


def test_torn_tail_beyond_a_clean_shutdown_is_not_scanned_but_never_served(tmp_path: Path) -> None:
    # After a clean shutdown the tail is trusted; the end offset comes from the last whole header.
    directory = tmp_path / "t-0"
    log = Log(directory, CONFIG)
    log.append(make_batch([b"a", b"b"]))
    log.close()
    with open(seg_path(directory, 0), "ab") as f:
        f.write(b"\x00" * 20)
    log = reopen(directory, clean=True)
    assert log.log_end_offset == 2
    assert [r.value for r in decode_records(log.read(0, 1 << 20).read_bytes())] == [b"a", b"b"]
    log.close()
