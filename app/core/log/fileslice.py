"""Segment file descriptors that live as long as anyone uses them, and slices of them.

A segment's ``.log`` is open as one :class:`SegmentFile`. The segment holds
it, and so does every reader while it reads (a local reference in each read
method) and every :class:`FileSlice` a fetch hands out, until the bytes are
sent. The descriptor is closed when the last of them lets go: CPython frees
an object as soon as its reference count drops to zero, and a
``SegmentFile`` takes part in no reference cycle, so that is the moment the
last holder drops it, on whatever thread that happens.

Why not close it with the segment: compaction and retention delete segments
while fetches are under way, and with ``file.delete.delay.ms=0`` a slice
handed out a moment earlier would be read through a closed descriptor
(``EBADF``) or, worse, through the same number already reused for another
file or a socket, whose bytes a client would then get. Counting the holders
makes that impossible whatever the delay: a deleted file stays readable
through its descriptor until its last reader is done, and its number is free
for reuse only after that.

The rule for users: keep the ``SegmentFile`` (or the ``FileSlice``) in a
variable for as long as its ``fd`` number is in use; never keep the number
alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass


class SegmentFile:
    """One open descriptor of a segment file, closed when the last reference goes."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    # os.close bound at definition: at interpreter exit module globals may be gone first.
    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        with contextlib.suppress(OSError):
            _close(self.fd)

    def __repr__(self) -> str:
        return f"SegmentFile(fd={self.fd})"


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment file, for ``os.sendfile``.

    The slice holds its :class:`SegmentFile`, so the descriptor stays open
    (and its file readable, even deleted) for as long as the slice exists.
    """

    file: SegmentFile
    position: int
    length: int

    @property
    def fd(self) -> int:
        """The descriptor number: use it only while holding the slice."""
        return self.file.fd

    def read(self) -> bytes:
        """The bytes, through ``os.pread`` (the copy path; prefer sendfile)."""
        fd = self.file.fd
        data = os.pread(fd, self.length, self.position)
        if len(data) == self.length:
            return data
        parts = [data]
        got = len(data)
        while got < self.length:
            chunk = os.pread(fd, self.length - got, self.position + got)
            if not chunk:  # the file was truncated under us
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)
