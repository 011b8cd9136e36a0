"""A byte range of a segment file: what a fetch hands to ``os.sendfile``."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment file, for ``os.sendfile``.

    ``fd`` stays open at least ``file.delete.delay.ms`` after the segment is
    deleted, so a slice handed out just before a deletion can still be sent.
    """

    fd: int
    position: int
    length: int

    def read(self) -> bytes:
        """The bytes, through ``os.pread`` (the copy path; prefer sendfile)."""
        data = os.pread(self.fd, self.length, self.position)
        if len(data) == self.length:
            return data
        parts = [data]
        got = len(data)
        while got < self.length:
            chunk = os.pread(self.fd, self.length - got, self.position + got)
            if not chunk:  # the file was truncated under us
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)
