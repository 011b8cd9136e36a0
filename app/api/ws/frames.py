"""The frames ``WS /ws/subscribe`` sends, rendered from a partition's read, and the
cache that shares them between sockets.

:func:`json_frame` and :func:`binary_frame` turn one chunk read from a log (a
:class:`~app.core.log.log.FetchInfo`) into the frame a subscriber is sent (layouts in
:mod:`app.api.ws.protocol`), or into nothing when the chunk held no visible record.
:class:`FrameCache` keeps rendered frames so N subscribers of one partition cost about
one decode, not N, within FRAME_CACHE_BYTES for the whole broker. Pure functions and
one loop-owned cache: no I/O here (the subscription in :mod:`app.api.ws.subscribe`
reads and sends).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from app.api import typed
from app.api.fetch_service import aborted_pairs
from app.api.routers.fetch import json_records, records_answer
from app.api.ws.protocol import binary_header
from app.common.batch import BatchHeader, iter_headers
from app.common.isolation import committed_batches

if TYPE_CHECKING:
    from app.core.log.log import FetchInfo, Log

# (frame, records in it, stored bytes it covers, next offset, bytes of its first batch);
# no frame when the chunk held no visible record (control batches only).
Rendered = tuple[str | bytes | None, int, int, int, int]


# The shared frames of all sockets together stay under these.
FRAME_CACHE_BYTES = 8 * 1024 * 1024
FRAME_CACHE_ENTRIES = 1024


@dataclass(eq=False, slots=True)
class _CachedFrame:
    log: Log
    done: asyncio.Future[Rendered | None]
    # Log.truncations when rendered: after a cut the same offsets may hold other records.
    truncations: int = 0
    size: int = 0


class FrameCache:
    """Recently rendered frames, shared by a broker's sockets, keyed by partition,
    start offset and format.

    Subscribers of one partition mostly ask for the same chunks: those woken by
    one append all read from the same position, and those replaying a backlog
    from the same start cut it at the same batch boundaries. The first renders
    a chunk; the others (including those asking while it renders) send the same
    frame. Any chunk of whole batches from the position is a correct answer, so
    a cached frame serves every socket whose credit allows it, even after more
    records were appended (the pump then reads on from its next offset). A frame
    below the log start offset is never served: retention removed those records.
    Bounded by FRAME_CACHE_BYTES, least recently used out first.
    """

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str, int, int, str, str, str, str], _CachedFrame] = (
            OrderedDict()
        )
        self._bytes = 0
        # Sockets using the cache: when the last leaves, nobody will ask for its frames.
        self.users = 0

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def join(self) -> None:
        self.users += 1

    def leave(self) -> None:
        """A socket is done with the cache; the last one out empties it (up to
        FRAME_CACHE_BYTES otherwise stay alive with no subscriber to share them)."""
        self.users -= 1
        if self.users == 0:
            # Renders in flight still finish: their futures stay with their waiters.
            self._entries.clear()
            self._bytes = 0

    async def get(
        self,
        log: Log,
        fmt: tuple[str, str, str, str],
        position: int,
        limit: int | None,
        max_bytes: int,
        render: Callable[[], Awaitable[Rendered | None]],
    ) -> Rendered | None:
        key = (log.topic, log.partition, position, *fmt)
        entry = self._entries.get(key)
        if entry is not None and entry.log is log and entry.truncations == log.truncations:
            rendered = await asyncio.shield(entry.done)
            if rendered is not None and position >= log.log_start_offset:
                _, count, used, _, first = rendered
                # What Log.read would give this socket: batches within max_bytes, or one.
                if (limit is None or count <= limit) and (used <= max_bytes or used == first):
                    if self._entries.get(key) is entry:  # not evicted while we waited
                        self._entries.move_to_end(key)
                    return rendered
            return await render()
        if entry is not None:
            self._drop(key)
        entry = _CachedFrame(log, asyncio.get_running_loop().create_future(), log.truncations)
        self._entries[key] = entry
        rendered = None
        try:
            rendered = await render()
        finally:
            # Also on an error or a cancel: sockets waiting on this render go and read.
            entry.done.set_result(rendered)
            if rendered is None:
                if self._entries.get(key) is entry:
                    self._drop(key)
            elif self._entries.get(key) is entry:
                frame = rendered[0]
                entry.size = 0 if frame is None else len(frame)
                self._bytes += entry.size
                self._evict()
        return rendered

    def _drop(self, key: tuple[str, int, int, str, str, str, str]) -> None:
        self._bytes -= self._entries.pop(key).size

    def _evict(self) -> None:
        while self._entries and (
            self._bytes > FRAME_CACHE_BYTES or len(self._entries) > FRAME_CACHE_ENTRIES
        ):
            oldest = next(iter(self._entries))
            self._drop(oldest)

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._entries if k[0] == topic]:
            self._drop(key)


def json_frame(
    topic: str,
    partition: int,
    position: int,
    info: FetchInfo,
    key_format: str,
    value_format: str,
    limit: int | None,
    schemas: typed.SchemaCache | None = None,
) -> Rendered:
    """(frame or None when no record is visible, records, stored bytes used, next offset)."""
    data = info.read_bytes()
    records, next_offset = json_records(
        data,
        position,
        key_format if schemas is None else typed.walk_format(key_format),
        value_format if schemas is None else typed.walk_format(value_format),
        limit,
        topic=topic,
        partition=partition,
        aborted=aborted_pairs(info),
    )
    if schemas is not None:  # avro, jsonschema, protobuf: decoded by the id each carries
        schemas.decode_records(records, key_format, value_format)
    used = first = 0
    for _, header in iter_headers(data):
        if header.base_offset >= next_offset:
            break
        used += header.size
        first = first or header.size
    if not records:
        return None, 0, used, next_offset, first
    frame = orjson.dumps(
        {"type": "records", **records_answer(topic, partition, info, next_offset, records)}
    ).decode()
    return frame, len(records), used, next_offset, first


def binary_frame(
    topic: str, partition: int, position: int, info: FetchInfo, limit: int | None
) -> Rendered:
    """(frame, records at or after ``position``, bytes used, next offset); whole batches,
    cut after the batch that reaches ``limit`` records. A read_committed read's frame
    holds only the batches a read_committed reader keeps (no frame when none is); its
    ``used`` and next offset cover the dropped ones too (they cost the bytes credit as
    read)."""
    data = info.read_bytes()
    view = memoryview(data)
    aborted = aborted_pairs(info)
    batches: Iterable[tuple[int, BatchHeader]] = iter_headers(data)
    kept: set[int] | None = None  # None: every batch, sent as one slice of the read
    if aborted is not None:
        batches = list(batches)
        kept = {pos for pos, _ in committed_batches(view, batches, aborted)}
    count = used = first = 0
    next_offset = position
    pieces: list[memoryview] = []
    for pos, header in batches:
        if limit is not None and count >= limit and used:
            break
        if kept is None or pos in kept:
            count += header.last_offset - max(header.base_offset, position) + 1
            if kept is not None:
                pieces.append(view[pos : pos + header.size])
        used = pos + header.size
        first = first or header.size
        next_offset = header.next_offset
    if kept is None:
        pieces.append(view[:used])
    elif not pieces:
        return None, 0, used, next_offset, first
    head = binary_header(topic, partition, info.high_watermark, next_offset)
    return b"".join((head, *pieces)), count, used, next_offset, first
