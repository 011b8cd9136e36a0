"""A crash at each step of a compaction swap leaves a correct log once it is loaded again.

Each case makes one step of the swap raise (standing in for the process dying
there), abandons the log without closing it, and loads the directory into a
fresh :class:`Log`, which recovers. Then: no leftover ``.cleaned``/``.swap``
files, every ``.log`` parses with kafka-python (CRCs checked), offsets are
unique and increasing, every key's latest value is there at its offset, every
record is one that was written, and a new pass completes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from log_helpers import BASE_TS, kafka_python_batches

from app.common.batch import BatchBuilder, decode_records
from app.core.log import Log, LogConfig
from app.core.log import log_cleanup as log_module  # the compaction swap calls its fsync_dir
from app.core.log.cleaner import LogCleaner
from app.core.log.index import TimeIndex
from app.core.log.segment import LogSegment

CONFIG = LogConfig().with_overrides(
    {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": 0.01,
        # Groups of about three input segments: several groups per pass.
        "segment.bytes": 2000,
        # Old segments stay open (as .deleted) after a swap, as in production.
        "file.delete.delay.ms": 60_000,
        "delete.retention.ms": 0,
    }
)

Write = tuple[bytes, bytes | None]
# 12 segments of 12 records; the last is active.
CLEANABLE_END = 132


class Crash(Exception):
    """The process 'dies' here."""


def build(directory: Path, *, pinned: bool = False) -> tuple[Log, dict[int, Write]]:
    """A log of 12 small segments with keys overwritten often, plus tombstones.

    ``pinned``: the last record of every segment has a key of its own, so every
    segment keeps a record and a copy spans all the segments it replaces.
    """
    log = Log(directory, CONFIG, clock_ms=lambda: BASE_TS + 10)
    writes: dict[int, Write] = {}
    n = 0
    for seg in range(12):
        for _ in range(4):
            builder = BatchBuilder()
            pairs: list[Write] = []
            for _ in range(3):
                key = b"key-%d" % (n * 7 % 17)
                if pinned and n % 12 == 11:
                    key = b"pin-%d" % n
                value = None if n % 23 == 5 else b"value-%d" % n
                pairs.append((key, value))
                builder.append(value, key, timestamp=BASE_TS + n)
                n += 1
            info = log.append(builder.build())
            for i, pair in enumerate(pairs):
                writes[info.first_offset + i] = pair
        if seg < 11:
            log.roll()
    return log, writes


def latest(writes: dict[int, Write]) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for offset in sorted(writes):
        key, value = writes[offset]
        out[key] = (offset, value)
    return out


def abandon(log: Log) -> None:
    """Drop a log as a dead process would: close descriptors, write nothing."""
    pending = [seg for _, seg in log._pending_deletes]
    for seg in [*log.segments, *pending]:
        seg.offset_index.seal()
        seg.time_index.seal()
        seg.close()  # with its indexes sealed first, it writes nothing


def check(directory: Path, writes: dict[int, Write]) -> Log:
    """Load ``directory`` after a crash and check everything the module docstring promises."""
    log = Log(directory, CONFIG, clock_ms=lambda: BASE_TS + 10)
    names = sorted(p.name for p in directory.iterdir())
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))], names
    offsets: list[int] = []
    for path in sorted(directory.glob("*.log")):
        for base, last, recs in kafka_python_batches(path.read_bytes()):
            assert int(path.stem) <= base <= last
            for offset, key, value in recs:
                assert writes[offset] == (key, value), f"offset {offset} holds a foreign record"
                offsets.append(offset)
    assert offsets == sorted(set(offsets)), "duplicated or reordered offsets"
    fetched = log.read(log.log_start_offset, 1 << 30)
    seen = {r.offset: (r.key, r.value) for r in decode_records(fetched.read_bytes())}
    assert sorted(seen) == offsets
    for key, (offset, value) in latest(writes).items():
        assert seen.get(offset) == (key, value), f"latest of {key!r} at {offset} lost"
    return log


def superseded_left(log: Log, writes: dict[int, Write], below: int) -> int:
    """Records below ``below`` that a later record below :data:`CLEANABLE_END` supersedes.

    The active segment is outside every pass's map, so it supersedes nothing.
    """
    newest = {key: offset for key, (offset, _) in latest(_below(writes)).items()}
    fetched = log.read(log.log_start_offset, 1 << 30)
    return sum(
        1
        for r in decode_records(fetched.read_bytes())
        if r.offset < below and newest.get(r.key or b"", r.offset) != r.offset
    )


def _below(writes: dict[int, Write]) -> dict[int, Write]:
    return {o: w for o, w in writes.items() if o < CLEANABLE_END}


Fault = tuple[Any, str, int, Callable[..., bool] | None]


def crash_at(monkeypatch: pytest.MonkeyPatch, fault: Fault) -> None:
    """Make ``owner.name`` raise :class:`Crash` on its ``call``-th use among those ``when``
    accepts; after that nothing runs that a dead process would not run (no file cleanup)."""
    owner, name, call, when = fault
    original = getattr(owner, name)
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if when is None or when(*args, **kwargs):
            calls[0] += 1
            if calls[0] == call:
                monkeypatch.setattr(LogSegment, "delete_files", lambda self: None)
                raise Crash(f"{name} call {call}")
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)


def to_live(_: Any, path: Path) -> bool:
    return not path.name.endswith((".swap", ".cleaned", ".deleted"))


def to_swap(_: Any, path: Path) -> bool:
    return path.name.endswith(".swap")


def second_group_goes_live(seg: LogSegment, old: str, new: str) -> bool:
    return seg.base_offset > 0 and old == ".swap"


Z = f"{0:020d}"
S = f"{12:020d}"
# (description, fault, whether the first group's swap is committed,
#  files that must be in the directory at the crash, files that must not)
STEPS = [
    ("after .cleaned written", (LogSegment, "change_file_suffixes", 1, None), False,
     [f"{Z}.log.cleaned", f"{Z}.index.cleaned", f"{Z}.log"], ["*.log.swap", "*.index.swap"]),
    ("after the copy's indexes became .swap", (TimeIndex, "rename", 1, to_swap), False,
     [f"{Z}.log.cleaned", f"{Z}.index.swap", f"{Z}.timeindex.cleaned"], ["*.log.swap"]),
    ("after rename to .swap", (LogSegment, "rename_to_deleted", 1, None), True,
     [f"{Z}.log.swap", f"{Z}.log"], ["*.deleted"]),
    ("after some old segments deleted", (LogSegment, "rename_to_deleted", 2, None), True,
     [f"{Z}.log.swap", f"{Z}.log.deleted", f"{S}.log"], []),
    ("after every old segment deleted", (LogSegment, "change_file_suffixes", 2, None), True,
     [f"{Z}.log.swap", f"{Z}.index.swap", f"{S}.log.deleted"], [f"{Z}.log"]),
    ("after some .swap files renamed live", (TimeIndex, "rename", 1, to_live), True,
     [f"{Z}.log.swap", f"{Z}.index", f"{Z}.timeindex.swap"], [f"{Z}.log"]),
    ("after every .swap renamed live", (log_module, "fsync_dir", 2, None), True,
     [f"{Z}.log", f"{Z}.log.deleted"], ["*.log.swap", "*.index.swap"]),
    ("in the second group's swap",
     (LogSegment, "change_file_suffixes", 1, second_group_goes_live), True,
     [f"{Z}.log", "*.log.swap", "*.log.deleted"], [f"{Z}.log.swap"]),
]  # fmt: skip


@pytest.mark.parametrize("pinned", [False, True], ids=["sparse", "pinned"])
@pytest.mark.parametrize(
    ("step", "fault", "committed", "present", "absent"), STEPS, ids=[s[0] for s in STEPS]
)
def test_crash_during_swap_leaves_a_correct_log(
    tmp_path: Path,
    pinned: bool,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
    fault: Fault,
    committed: bool,
    present: list[str],
    absent: list[str],
) -> None:
    directory = tmp_path / "t-0"
    log, writes = build(directory, pinned=pinned)
    assert log.segments[-1].base_offset == CLEANABLE_END
    before = superseded_left(log, writes, CLEANABLE_END)
    assert before > 50
    first_size = log.segments[0].size
    cleaner = LogCleaner(tmp_path, lambda: [log])
    with monkeypatch.context() as patch:
        crash_at(patch, fault)
        with pytest.raises(Crash):
            cleaner.clean(log, force=True)
        # A failure after the commit point takes the log offline; before it, nothing changed.
        assert log.online is not committed
        names = sorted(p.name for p in directory.iterdir())
        for pattern in present:
            assert list(directory.glob(pattern)), f"{pattern} missing at the crash: {names}"
        for pattern in absent:
            assert not list(directory.glob(pattern)), f"{pattern} present at the crash: {names}"
        abandon(log)

    reloaded = check(directory, writes)
    if committed:
        # The copy is in, in place of every old segment of its group (the swap marker
        # says where the group ended, wherever the copy's last record is).
        assert reloaded.segments[0].size < first_size
        assert superseded_left(reloaded, writes, reloaded.segments[1].base_offset) == 0
        assert len(reloaded.segments) < 12
    else:
        assert len(reloaded.segments) == 12
        assert superseded_left(reloaded, writes, CLEANABLE_END) == before
    assert reloaded.segments[-1].base_offset == CLEANABLE_END

    # The checkpoint never moved: the next pass does the whole job.
    result = LogCleaner(tmp_path, lambda: [reloaded]).clean(reloaded, force=True)
    assert result is not None and result.completed
    assert superseded_left(reloaded, writes, CLEANABLE_END) == 0
    reloaded.close()
    check(directory, writes).close()


def test_failed_rename_before_the_commit_point_keeps_the_log_in_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, writes = build(tmp_path / "t-0")
    cleaner = LogCleaner(tmp_path, lambda: [log])
    with monkeypatch.context() as patch:
        patch.setattr(LogSegment, "change_file_suffixes", _raise)
        with pytest.raises(OSError, match="rename failed"):
            cleaner.clean(log, force=True)
    assert log.online
    assert not list(log.dir.glob("*.cleaned")) and not list(log.dir.glob("*.swap"))
    log.append(_one(b"key-1", b"after"))
    # The failure backs the log off for a while; an explicit pass still runs.
    assert cleaner.run_once() is None
    assert cleaner.stats()["failures"] == 1
    result = cleaner.clean(log, force=True)
    assert result is not None and result.completed
    assert superseded_left(log, writes, CLEANABLE_END) == 0
    log.close()


def _raise(*_: object) -> None:
    raise OSError("rename failed")


def _one(key: bytes, value: bytes) -> bytes:
    builder = BatchBuilder()
    builder.append(value, key, timestamp=BASE_TS)
    return builder.build()


def test_damaged_swap_is_dropped_while_the_originals_are_intact(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log, writes = build(directory)
    log.close()
    first = directory / f"{0:020d}.log"
    # A .swap whose tail is garbage (the disk lied about the fsync).
    swap = directory / f"{0:020d}.log.swap"
    swap.write_bytes(first.read_bytes()[:100] + b"\xff" * 50)
    check(directory, writes).close()
    assert not swap.exists()


def test_crash_at_the_commit_point_of_an_empty_copy_completes_the_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20.4: every record of the first group is superseded, so its copy is empty;
    after a crash at the commit point every old segment of the group goes, not only
    the one whose base offset the copy has."""
    directory = tmp_path / "t-0"
    log = Log(directory, CONFIG, clock_ms=lambda: BASE_TS + 10)
    writes: dict[int, Write] = {}
    for round_ in range(10):
        for i in range(4):
            pairs: list[Write] = [(b"key-%d" % (i * 3 + j), b"v%d" % round_) for j in range(3)]
            builder = BatchBuilder()
            for key, value in pairs:
                builder.append(value, key, timestamp=BASE_TS)
            info = log.append(builder.build())
            for j, pair in enumerate(pairs):
                writes[info.first_offset + j] = pair
        log.roll()
    end = log.segments[-1].base_offset
    before = superseded_left(log, writes, end)
    groups: list[tuple[int, int]] = []
    original = Log.replace_segments

    def record(self: Log, old: Any, new: Any, *, truncations: int) -> bool:
        groups.append((old[0].base_offset, self.segments[len(old)].base_offset))
        return original(self, old, new, truncations=truncations)

    with monkeypatch.context() as patch:
        patch.setattr(Log, "replace_segments", record)
        crash_at(patch, (LogSegment, "rename_to_deleted", 1, None))
        with pytest.raises(Crash):
            LogCleaner(tmp_path, lambda: [log]).clean(log, force=True)
        assert (directory / f"{0:020d}.log.swap").stat().st_size == 0
        abandon(log)
    group_end = groups[0][1]
    assert group_end >= 24, "the first group spans several segments"
    assert (directory / f"{0:020d}.replaced-{group_end:020d}.swap").exists()
    # A marker whose swap never reached its commit point (no .log.swap) changes nothing.
    (directory / f"{60:020d}.replaced-{1000:020d}.swap").touch()

    reloaded = check(directory, writes)
    # Nothing of the group is left: the copy was empty and replaced all of it.
    assert reloaded.segments[1].base_offset >= group_end
    assert superseded_left(reloaded, writes, end) == before - group_end
    reloaded.close()
