"""``WS /ws/subscribe``: records pushed to a consumer as they are appended.

One socket, two tasks:

* the *control* task reads client messages (credit, seek, pause, resume,
  commit, ping) and applies them to the subscription's state;
* the *pump* sends records. It waits on one :class:`asyncio.Event` that every
  subscribed partition's append listener sets (:mod:`app.api.longpoll`), as do
  credit grants, seeks and resumes; there is no polling anywhere. Each round
  it reads at most one chunk per partition from that partition's position
  with :meth:`Log.read`, sends it, and advances.

Memory is bounded by flow control: nothing is read without credit, a read is
capped by the remaining byte credit (and sized from the record credit), and
the pump holds one chunk at a time, which it hands to the transport only when
uvicorn's transport is below its high-water mark (uvicorn's ``send`` waits
for ``resume_writing``). A client that stops reading therefore holds at most
one chunk plus the transport's buffer, whatever its credit. Rendered frames
are shared between sockets through :class:`FrameCache` (at most
FRAME_CACHE_BYTES for the whole broker), so N subscribers of a partition
cost about one decode, not N.

Credit: the subscribe message's ``credit`` sets which dimensions are limited
(``records``, ``bytes`` or both; default ``{"records": 0}``), and ``credit``
messages add to them. Records are counted as sent; bytes as the stored
record-batch bytes sent. A batch is never split, so in binary format (and in
bytes for JSON) one batch may overdraw the credit; nothing more is sent until
it is positive again.

The binary frame layout is in :mod:`app.api.ws.protocol`.

Isolation (``isolation_level`` in the subscribe message): a ``read_committed``
subscription reads up to the last stable offset (:func:`app.api.routers.fetch.read_log`)
and sends only what a read_committed reader keeps (:mod:`app.common.isolation`): JSON
frames without aborted records, binary frames without aborted or control batches. A
partition is held at the LSO while a transaction is open there; the marker that ends
it is an append, which wakes the pump.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.websockets import WebSocket

from app.api import typed
from app.api.fetch_service import read_log
from app.api.security import authorize
from app.api.util import INLINE_WORK_BYTES, leader_log, partition_count, run_blocking
from app.api.ws import common
from app.api.ws.common import ClientGone, send_bytes, send_error, send_text
from app.api.ws.frames import FrameCache, Rendered, binary_frame, json_frame
from app.api.ws.group import GroupMember, coordinator_of
from app.api.ws.protocol import (
    MAX_CREDIT,
    SUBSCRIBE_CLIENT,
    Close,
    Commit,
    CreditGrant,
    OffsetsStart,
    Pause,
    Ping,
    Resume,
    Seek,
    Subscribe,
    TimestampStart,
    internal_error_frame,
    validate,
)
from app.common.errors import (
    InvalidRequest,
    LogbusError,
    OffsetNotAvailable,
    OffsetOutOfRange,
    StoredBatchCorrupt,
    UnknownTopicOrPartition,
)
from app.common.isolation import READ_COMMITTED
from app.core.security.acl import Action, Operation, Resource, ResourceType
from app.core.topology import list_offset
from app.groups.coordinator import OffsetCommit

if TYPE_CHECKING:
    from app.api.state import AppState
    from app.api.ws.stats import WsStats
    from app.core.log.log import FetchInfo, Log
    from app.core.log.manager import LogManager

logger = logging.getLogger(__name__)

# One read per partition per round; the most a socket holds in memory (plus
# one batch that is larger). Above INLINE_WORK_BYTES rendering goes to a thread.
CHUNK_BYTES = 512 * 1024
# First guess of a record's stored size, to size a read from the record credit.
INITIAL_BYTES_PER_RECORD = 128.0


@dataclass(eq=False, slots=True)
class Cursor:
    topic: str
    partition: int
    log: Log
    position: int
    paused: bool = False
    # Out of range (or its topic gone): nothing is sent until a seek.
    stalled: bool = False
    # Bumped by a seek, so a chunk read before it does not move the position back.
    generation: int = 0

    def describe(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.position,
            "log_start_offset": self.log.log_start_offset,
            "high_watermark": self.log.high_watermark,
            "last_stable_offset": self.log.last_stable_offset,
            "paused": self.paused,
        }


class Subscription:
    def __init__(
        self,
        ws: WebSocket,
        state: AppState,
        stats: WsStats,
        idle_timeout: float,
        frames: FrameCache,
    ) -> None:
        assert state.manager is not None  # common.serve checked it
        self.ws = ws
        self.frames = frames
        self.state = state
        self.manager: LogManager = state.manager
        self.stats = stats
        self.idle_timeout = idle_timeout
        self.max_message_bytes = state.settings.max_request_bytes
        self.send_timeout_s = state.settings.send_timeout_ms / 1000
        self.cursors: dict[tuple[str, int], Cursor] = {}
        self.wake = asyncio.Event()
        self.format = "json"
        self.key_format = "json"
        self.value_format = "json"
        self.schemas: typed.SchemaCache | None = None
        self.isolation_level = "read_uncommitted"
        self.committed = False
        self.records_credit: int | None = 0
        self.bytes_credit: int | None = None
        self.bytes_per_record = INITIAL_BYTES_PER_RECORD
        self.member: GroupMember | None = None

    # -- setup -------------------------------------------------------------------

    async def run(self) -> None:
        self.idle = common.IdleTimer(self.ws, self.idle_timeout)
        try:
            await self._run()
        finally:
            self.idle.cancel()

    async def _run(self) -> None:
        try:
            obj = await common.receive_message(self.ws, self.idle, self.max_message_bytes)
            sub = validate(obj, {"subscribe": Subscribe})
            assert isinstance(sub, Subscribe)
            stalled = self._subscribe(sub)
            if self.member is not None:
                await self.member.join()
        except LogbusError as exc:
            with contextlib.suppress(ClientGone):
                await send_error(self.ws, exc)
            await common.close(self.ws, Close.BAD_REQUEST, "subscribe refused")
            return
        except ClientGone:
            return
        try:
            await self._serve(stalled)
        finally:
            if self.member is not None:
                await self.member.leave()

    async def _serve(self, stalled: list[OffsetOutOfRange]) -> None:
        for log in {id(c.log): c.log for c in self.cursors.values()}.values():
            self.state.waiters.register(log, self.wake)
        pump = asyncio.create_task(self._pump(), name="ws-subscribe-pump")
        try:
            subscribed: dict[str, Any] = {
                "type": "subscribed",
                "format": self.format,
                "partitions": [c.describe() for c in self.cursors.values()],
                "credit": {"records": self.records_credit, "bytes": self.bytes_credit},
            }
            if self.member is not None:
                subscribed["group"] = self.member.group_id
                subscribed["member_id"] = self.member.member_id
            await send_text(self.ws, orjson.dumps(subscribed).decode())
            for out_of_range in stalled:
                await send_error(self.ws, out_of_range)
            if self.member is not None:
                await self.member.start_loop()
            await self._control()
        except ClientGone:
            pass
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, ClientGone):
                await pump
            for cursor in self.cursors.values():
                self.state.waiters.unregister(cursor.log, self.wake)

    def _subscribe(self, sub: Subscribe) -> list[OffsetOutOfRange]:
        """Resolve partitions and start positions; out-of-range starts are reported
        after the ``subscribed`` frame and leave their partition stalled."""
        if not sub.topics and not sub.partitions:
            raise InvalidRequest("message: a subscribe names `topics` or `partitions`")
        # Kafka's Fetch: READ on every topic; a group member also READ on the group.
        names = {*(sub.topics or ()), *(tp.topic for tp in sub.partitions or ())}
        authorize(
            self.ws,
            *[Action(Operation.READ, Resource(ResourceType.GROUP, g)) for g in [sub.group] if g],
            *[Action(Operation.READ, Resource(ResourceType.TOPIC, t)) for t in sorted(names)],
        )
        if sub.group is not None:
            return self._subscribe_group(sub)
        if sub.instance_id is not None or sub.server_assignor is not None:
            raise InvalidRequest("message: `instance_id` and `server_assignor` need a `group`")
        if sub.start == "committed":
            raise InvalidRequest("message.start: 'committed' needs a group")
        wanted: list[tuple[str, int]] = []
        for topic in sub.topics or ():
            n = partition_count(self.state, topic)
            wanted.extend((topic, p) for p in range(n))
        wanted.extend((tp.topic, tp.partition) for tp in sub.partitions or ())
        self._set_delivery(sub)
        explicit: dict[tuple[str, int], int] = {}
        if isinstance(sub.start, OffsetsStart):
            for topic, by_partition in sub.start.offsets.items():
                for key, offset in by_partition.items():
                    if not (key.isascii() and key.isdigit()):
                        raise InvalidRequest(
                            f"message.start.offsets.{topic}: partition keys are numbers, got {key!r}"
                        )
                    explicit[(topic, int(key))] = offset
            unknown = set(explicit) - set(wanted)
            if unknown:
                t, p = sorted(unknown)[0]
                raise InvalidRequest(f"message.start.offsets: {t}-{p} is not subscribed")
        stalled: list[OffsetOutOfRange] = []
        for topic, p in wanted:
            if (topic, p) in self.cursors:
                continue
            log = leader_log(self.state, topic, p)
            hw = log.high_watermark
            if sub.start == "earliest":
                position = log.log_start_offset
            elif isinstance(sub.start, TimestampStart):
                found = log.offset_for_timestamp(sub.start.timestamp)
                position = self._latest(topic, p, log) if found is None else found[0]
            elif isinstance(sub.start, OffsetsStart):
                given = explicit.get((topic, p))
                if given is not None:
                    position = given
                elif sub.start.default == "earliest":
                    position = log.log_start_offset
                else:
                    position = self._latest(topic, p, log)
            else:
                position = self._latest(topic, p, log)
            cursor = Cursor(topic, p, log, position)
            if not log.log_start_offset <= position <= hw:
                cursor.stalled = True
                stalled.append(OffsetOutOfRange(topic, p, position, log.log_start_offset, hw))
            self.cursors[(topic, p)] = cursor
        return stalled

    def _subscribe_group(self, sub: Subscribe) -> list[OffsetOutOfRange]:
        """Validate a group subscribe; partitions come from the coordinator once joined."""
        assert sub.group is not None
        if sub.partitions:
            raise InvalidRequest(
                "message.partitions: a group member gets its partitions from the group; "
                "subscribe to `topics`"
            )
        if sub.start is not None and not isinstance(sub.start, str):
            raise InvalidRequest(
                "message.start: with a group, 'committed' (default), 'earliest' or 'latest'"
            )
        topics = list(dict.fromkeys(sub.topics or ()))
        for topic in topics:
            partition_count(self.state, topic)  # UNKNOWN_TOPIC_OR_PARTITION first
        self._set_delivery(sub)
        self.member = GroupMember(
            self,
            coordinator_of(self.ws),
            sub.group,
            topics,
            instance_id=sub.instance_id,
            server_assignor=sub.server_assignor,
            start=sub.start or "committed",
            default=sub.default,
            read_committed=self.committed,
        )
        return []

    def _set_delivery(self, sub: Subscribe) -> None:
        self.format = sub.format
        self.key_format = sub.key_format
        self.value_format = sub.value_format
        self.schemas = (
            typed.schema_cache(self.ws)
            if typed.is_typed(sub.key_format, sub.value_format)
            else None
        )
        self.isolation_level = sub.isolation_level
        self.committed = sub.isolation_level == READ_COMMITTED
        self.records_credit = sub.credit.records
        self.bytes_credit = sub.credit.bytes
        if self.records_credit is None and self.bytes_credit is None:
            raise InvalidRequest("message.credit: give `records`, `bytes` or both")

    # -- group membership (app.api.ws.group.Host) ----------------------------------------

    def add_partition(self, topic: str, partition: int, position: int) -> dict[str, Any]:
        log = leader_log(self.state, topic, partition)
        cursor = Cursor(topic, partition, log, position)
        self.cursors[(topic, partition)] = cursor
        self.state.waiters.register(log, self.wake)
        self.wake.set()
        return cursor.describe()

    def drop_partition(self, topic: str, partition: int) -> None:
        cursor = self.cursors.pop((topic, partition), None)
        if cursor is not None:
            self.state.waiters.unregister(cursor.log, self.wake)

    def offsets_error(self, topic: str, partition: int) -> OffsetNotAvailable | None:
        return self.state.topology.offsets_error(topic, partition)

    def positions(self) -> dict[tuple[str, int], int]:
        return {tp: c.position for tp, c in self.cursors.items()}

    async def send_frame(self, text: str) -> None:
        await send_text(self.ws, text)

    async def send_failure(self, exc: LogbusError) -> None:
        await send_error(self.ws, exc)

    # -- control -------------------------------------------------------------------

    async def _control(self) -> None:
        while True:
            try:
                obj = await common.receive_message(self.ws, self.idle, self.max_message_bytes)
                await self._handle(obj)
            except LogbusError as exc:
                await send_error(self.ws, exc)
            except ClientGone:
                raise
            except Exception as exc:
                # A bug must cost this message, not the socket or the broker.
                logger.exception("WebSocket control message failed")
                await send_text(self.ws, internal_error_frame(exc))

    async def _handle(self, obj: dict[str, Any]) -> None:
        msg = validate(obj, SUBSCRIBE_CLIENT)
        if isinstance(msg, CreditGrant):
            self._grant(msg)
        elif isinstance(msg, Seek):
            self._seek(msg)
        elif isinstance(msg, Pause | Resume):
            cursors = [self._cursor(tp.topic, tp.partition) for tp in msg.partitions]
            for cursor in cursors:
                cursor.paused = isinstance(msg, Pause)
        elif isinstance(msg, Ping):
            pong: dict[str, Any] = {"type": "pong"}
            if msg.id is not None:
                pong["id"] = msg.id
            await send_text(self.ws, orjson.dumps(pong).decode())
        elif isinstance(msg, Commit):
            await self._commit(msg)
        else:
            raise InvalidRequest("already subscribed: one subscribe per socket")
        self.wake.set()

    async def _commit(self, msg: Commit) -> None:
        if self.member is None:
            raise InvalidRequest(
                "commit needs a group: subscribe with `group`, or keep each partition's "
                "next_offset and resume with start.offsets"
            )
        offsets = None
        if msg.offsets is not None:
            offsets = [
                OffsetCommit(c.topic, c.partition, c.offset, metadata=c.metadata)
                for c in msg.offsets
            ]
        try:
            done = await self.member.commit(offsets)
        except LogbusError as exc:
            await send_error(self.ws, exc, id=msg.id)
            return
        ack = {"type": "commit_ack", "id": msg.id, "offsets": done}
        await send_text(self.ws, orjson.dumps(ack).decode())

    def _grant(self, msg: CreditGrant) -> None:
        if msg.records is None and msg.bytes is None:
            raise InvalidRequest("message: a credit grant gives `records` and/or `bytes`")
        for name, amount, current in (
            ("records", msg.records, self.records_credit),
            ("bytes", msg.bytes, self.bytes_credit),
        ):
            if amount is not None and current is None:
                raise InvalidRequest(
                    f"message.{name}: this subscription's credit is not counted in {name}"
                )
        if msg.records is not None and self.records_credit is not None:
            self.records_credit = min(MAX_CREDIT, self.records_credit + msg.records)
        if msg.bytes is not None and self.bytes_credit is not None:
            self.bytes_credit = min(MAX_CREDIT, self.bytes_credit + msg.bytes)

    def _cursor(self, topic: str, partition: int) -> Cursor:
        cursor = self.cursors.get((topic, partition))
        if cursor is None:
            raise InvalidRequest(f"not subscribed to {topic}-{partition}")
        return cursor

    def _seek(self, msg: Seek) -> None:
        cursor = self._cursor(msg.topic, msg.partition)
        log = self.manager.get_log(msg.topic, msg.partition)
        if log is not cursor.log:
            # The topic was deleted and created again: follow the new log.
            self.state.waiters.unregister(cursor.log, self.wake)
            cursor.log = log
            self.state.waiters.register(log, self.wake)
        start, hw = log.log_start_offset, log.high_watermark
        if msg.offset == "earliest":
            offset = start
        elif msg.offset == "latest":
            offset = self._latest(msg.topic, msg.partition, log)
        else:
            offset = msg.offset
        if not start <= offset <= hw:
            raise OffsetOutOfRange(msg.topic, msg.partition, offset, start, hw)
        cursor.position = offset
        cursor.generation += 1
        cursor.stalled = False

    # -- pump ----------------------------------------------------------------------

    def _latest(self, topic: str, partition: int, log: Log) -> int:
        """Where a start or seek at ``latest`` goes: :meth:`_end`, by ListOffsets' rule
        (:func:`app.core.topology.list_offset`): OffsetNotAvailable (retriable) while this
        broker leads since an election too recent for its high watermark to be its end."""
        offset, _ = list_offset(
            log,
            "latest",
            read_committed=self.committed,
            unavailable=self.state.topology.offsets_error(topic, partition),
        )
        return offset

    def _end(self, log: Log) -> int:
        """Where this subscription's reads end now: the LSO (read_committed) or the HW."""
        return log.last_stable_offset if self.committed else log.high_watermark

    def _has_credit(self) -> bool:
        return (self.records_credit is None or self.records_credit > 0) and (
            self.bytes_credit is None or self.bytes_credit > 0
        )

    async def _pump(self) -> None:
        waiters = self.state.waiters
        try:
            while not waiters.closed:
                # Cleared before looking: a wakeup during the round is kept for the next.
                self.wake.clear()
                progressed = False
                for cursor in list(self.cursors.values()):
                    if not self._has_credit():
                        break
                    if cursor.paused or cursor.stalled:
                        continue
                    if cursor.position < self._end(cursor.log):
                        if await self._send_chunk(cursor):
                            progressed = True
                    else:
                        await self._alive(cursor)
                if not progressed:
                    await self.wake.wait()
        except ClientGone:
            pass
        except Exception:
            logger.exception("WebSocket subscription failed")
            await common.close(self.ws, Close.INTERNAL_ERROR, "internal error")

    async def _alive(self, cursor: Cursor) -> bool:
        """False when its topic was deleted: the partition is then stalled and the client
        told (UNKNOWN_TOPIC_OR_PARTITION)."""
        try:
            current = self.manager.get_log(cursor.topic, cursor.partition)
        except UnknownTopicOrPartition:
            current = None
        if current is cursor.log:
            return True
        cursor.stalled = True
        self.frames.forget_topic(cursor.topic)
        await send_error(self.ws, UnknownTopicOrPartition(cursor.topic, cursor.partition))
        return False

    async def _send_chunk(self, cursor: Cursor) -> bool:
        """Send one chunk from the cursor's position; True when the position moved."""
        gen = cursor.generation
        position = cursor.position
        limit = self.records_credit
        max_bytes = CHUNK_BYTES
        if self.bytes_credit is not None:
            max_bytes = min(max_bytes, self.bytes_credit)
        if limit is not None:
            max_bytes = min(max_bytes, max(1, int(limit * self.bytes_per_record)))
        if not await self._alive(cursor):
            return False
        log = cursor.log

        async def render() -> Rendered | None:
            info = read_log(log, position, max_bytes, committed=self.committed)
            if not info.size:
                return None
            self.stats.hold(info.size)
            try:
                return await self._render(cursor, position, info, limit)
            finally:
                self.stats.release(info.size)

        fmt = (self.format, self.key_format, self.value_format, self.isolation_level)
        try:
            rendered = await self.frames.get(log, fmt, position, limit, max_bytes, render)
        except (OffsetOutOfRange, StoredBatchCorrupt) as exc:
            # The partition stops here (the damaged range is named; a seek moves past it),
            # the socket and its other partitions go on.
            cursor.stalled = True
            await send_error(self.ws, exc)
            return False
        if rendered is None:
            return False
        frame, count, used, next_offset, _ = rendered
        if self.cursors.get((cursor.topic, cursor.partition)) is not cursor:
            # Revoked (its assignment frame is out) while this chunk was read: the
            # partition's records now go to its new owner.
            return False
        if frame is not None:
            await self._send_held(frame)
        if cursor.generation == gen:
            cursor.position = next_offset
        if self.records_credit is not None:
            self.records_credit -= count
        if self.bytes_credit is not None:
            self.bytes_credit -= used
        if count:
            self.bytes_per_record = max(1.0, used / count)
            self.stats.frames_sent += 1
            self.stats.records_sent += count
        return next_offset > position

    async def _send_held(self, frame: str | bytes) -> None:
        """Send a records frame under the broker's memory budget (app/api/memory.py).

        The frame's size is reserved before it is handed to the transport and released
        once the send returns, which uvicorn's WebSocket protocol does when the transport's
        buffer is below its low-water mark: a subscriber that does not read holds at most
        one frame, and all of them together at most the budget; the others wait (their
        pumps pause, nothing is read for them). A client that takes none of a frame for
        ``send_timeout_ms`` is closed with ``Close.SLOW_CONSUMER`` and its frame freed.
        """
        # A str frame is encoded as UTF-8 by the send: about its length in bytes.
        held = await self.state.memory.reserve(len(frame), timeout_s=None)
        try:
            send = send_bytes if isinstance(frame, bytes) else send_text
            try:
                await asyncio.wait_for(send(self.ws, frame), self.send_timeout_s)  # type: ignore[arg-type]
            except TimeoutError:
                logger.info(
                    "closing a WebSocket subscriber that took no frame for %.0f s",
                    self.send_timeout_s,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        common.close(self.ws, Close.SLOW_CONSUMER, "send timeout"), 1.0
                    )
                raise ClientGone from None
        finally:
            held.release()

    async def _render(
        self, cursor: Cursor, position: int, info: FetchInfo, limit: int | None
    ) -> Rendered:
        topic, partition = cursor.topic, cursor.partition
        if self.format == "binary":
            return binary_frame(topic, partition, position, info, limit)
        args = (
            topic,
            partition,
            position,
            info,
            self.key_format,
            self.value_format,
            limit,
            self.schemas,
        )
        if info.size > INLINE_WORK_BYTES:
            return await run_blocking(json_frame, *args)
        return json_frame(*args)


async def endpoint(ws: WebSocket) -> None:
    async def run(state: AppState, stats: WsStats, idle: float) -> None:
        frames: FrameCache = ws.app.state.logbus_ws_frames
        frames.join()
        try:
            await Subscription(ws, state, stats, idle, frames).run()
        finally:
            frames.leave()

    await common.serve(ws, "subscribe", run)
