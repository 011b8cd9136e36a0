"""Offset checkpoint files, in Kafka's text format, written atomically.

``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` in
the data dir hold one offset per partition::

    0                       version
    2                       number of entries
    orders 0 1234           topic partition offset
    orders 1 977

A write goes to ``<name>.tmp``, is fsynced, renamed over the old file and the
directory is fsynced, so a crash leaves either the old or the new file, never
a mix. A stray ``.tmp`` is ignored (and removed by the loader).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

VERSION = 0


class CheckpointCorrupt(ValueError):
    """A checkpoint file does not parse; callers fall back to a safe default."""


def fsync_dir(path: Path) -> None:
    fsync_path(path, os.O_DIRECTORY)


def fsync_path(path: Path, flags: int = 0) -> None:
    """fsync a file (or, with ``os.O_DIRECTORY``, a directory) by its name."""
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def format_entries(lines: list[str]) -> bytes:
    return f"{VERSION}\n{len(lines)}\n".encode() + "".join(f"{line}\n" for line in lines).encode()


def parse_entries(path: Path, fields: int) -> list[list[str]]:
    """The entry lines of a versioned checkpoint file, split into ``fields`` fields each."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointCorrupt(f"{path}: not text") from e
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointCorrupt(f"{path}: missing the version or count line")
    if lines[0].strip() != str(VERSION):
        raise CheckpointCorrupt(f"{path}: unknown version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointCorrupt(f"{path}: bad count line {lines[1]!r}") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if count != len(entries) or any(len(e) != fields for e in entries):
        raise CheckpointCorrupt(f"{path}: expected {count} entries of {fields} fields")
    return entries


class OffsetCheckpointFile:
    """A file of ``topic partition offset`` lines after a version and a count line.

    Each ``write`` replaces the whole file atomically (tmp, fsync, rename,
    directory fsync). Not for concurrent writers: the log manager serializes
    its writes; reads may run at any time and see the old or the new file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        lines = [
            f"{topic} {partition} {offset}"
            for (topic, partition), offset in sorted(offsets.items())
        ]
        write_atomically(self.path, format_entries(lines))

    def read(self) -> dict[tuple[str, int], int]:
        """The offsets; empty when the file does not exist. Raises :class:`CheckpointCorrupt`."""
        if not self.path.exists():
            return {}
        out: dict[tuple[str, int], int] = {}
        for topic, partition, offset in parse_entries(self.path, 3):
            try:
                out[(topic, int(partition))] = int(offset)
            except ValueError:
                raise CheckpointCorrupt(
                    f"{self.path}: bad entry {topic} {partition} {offset}"
                ) from None
        return out
