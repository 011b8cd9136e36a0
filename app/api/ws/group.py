"""Consumer-group membership of a ``/ws/subscribe`` socket.

The socket is the member: the broker heartbeats for it (a timer at the
coordinator's heartbeat interval, and at once when the coordinator says
another member's change gives it work, see :meth:`GroupCoordinator.watch`),
applies each answer to the subscription's cursors and pushes an
``assignment`` frame. Revocations are applied before the frame is sent and
acknowledged by an immediate heartbeat whose ``owned_partitions`` no longer
lists them, so a partition moves to its new owner within a few round trips
on the event loop, not a heartbeat interval. The socket closing, for any
reason, leaves the group at once (epoch -1, -2 for a static member); so
does a frame the heartbeat loop cannot deliver (the socket is gone), and a
leave survives the cancellation of whoever asked for it. The loop must stop
whatever the timing of that cancellation, so it waits on an event set by a
timer, never on ``asyncio.wait_for`` (which on Python 3.11 drops a
cancellation arriving in the step its wait is woken).

Liveness: the broker heartbeats for the member as long as the socket lives,
and the socket lives only while the client proves it is there: the server's
WebSocket pings (:func:`app.api.server.ws_keepalive`) come every quarter of
the session timeout and a pong missing for three quarters of it cuts the
socket, so a frozen client loses its partitions within the session timeout,
as an HTTP member that stops heartbeating does.

In cluster mode the member lives in this broker's coordinator, so a group
subscribe is refused with NOT_COORDINATOR (naming the coordinator) on a broker
that does not coordinate the group. Should the group's coordinator move away
later, the socket gives up its partitions (an ``assignment`` frame revoking
all), sends the NOT_COORDINATOR error frame and stops heartbeating: the client
subscribes again at the coordinator named.

A ``read_committed`` member starting from committed offsets does not start a
partition whose offsets an open transaction committed (KIP-447's
``require_stable``, as Kafka's read_committed consumers ask): the committed
offset it would read is about to be replaced (commit) or confirmed (abort),
and starting from it would hand out again what that transaction's consumer
already processed. Such a partition is owned (the coordinator sees it
acknowledged) but waits, retried every :data:`UNSTABLE_RETRY_S`, and appears
in an ``assignment`` frame only once it starts; a revocation before that is
silent (the client never saw it). So does a partition whose replica here was
just elected leader and cannot yet say where its log ends (OFFSET_NOT_AVAILABLE,
as ListOffsets answers): a committed offset above its lagging high watermark, or
a start at ``latest``, waits for the watermark rather than starting from it
(which would hand out again records the group had already consumed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

import orjson

from app.api.ws.common import ClientGone
from app.common.errors import BrokerNotAvailable, LogbusError, NotCoordinator, OffsetNotAvailable
from app.common.group_errors import FencedMemberEpoch, StaleMemberEpoch, UnknownMemberId
from app.core.topology import list_offset
from app.groups.coordinator import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    GroupCoordinator,
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommit,
)

if TYPE_CHECKING:
    from starlette.websockets import WebSocket

logger = logging.getLogger(__name__)

TP = tuple[str, int]

# How often a read_committed member retries partitions whose committed offsets an open
# transaction holds (Kafka's consumer retries its OffsetFetch at retry.backoff.ms, 100).
UNSTABLE_RETRY_S = 0.1
StartMode = Literal["committed", "earliest", "latest"]


class Host(Protocol):
    """What the membership needs from the subscription that owns it."""

    def add_partition(self, topic: str, partition: int, position: int) -> dict[str, Any]: ...

    def drop_partition(self, topic: str, partition: int) -> None: ...

    def offsets_error(self, topic: str, partition: int) -> OffsetNotAvailable | None:
        """The topology's: OffsetNotAvailable while this broker's replica, newly leader,
        cannot say where its log ends (:func:`app.core.topology.list_offset`)."""
        ...

    def positions(self) -> dict[TP, int]: ...

    async def send_frame(self, text: str) -> None: ...

    async def send_failure(self, exc: LogbusError) -> None: ...


def coordinator_of(ws: WebSocket) -> GroupCoordinator:
    coordinator: GroupCoordinator | None = getattr(ws.app.state, "coordinator", None)
    if coordinator is None:
        raise BrokerNotAvailable("the group coordinator is not serving yet (starting) or stopping")
    return coordinator


class GroupMember:
    def __init__(
        self,
        host: Host,
        coordinator: GroupCoordinator,
        group_id: str,
        topics: Sequence[str],
        *,
        instance_id: str | None,
        server_assignor: str | None,
        start: StartMode,
        default: Literal["earliest", "latest"],
        read_committed: bool = False,
    ) -> None:
        self.host = host
        self.coordinator = coordinator
        self.group_id = group_id
        self.topics = list(topics)
        self.instance_id = instance_id
        self.server_assignor = server_assignor
        self.start = start
        self.default = default
        # A read_committed member's "latest" is the last stable offset.
        self.read_committed = read_committed
        self.member_id = ""
        self.member_epoch = JOIN_EPOCH
        self.owned: set[TP] = set()
        # Owned but not started: their committed offsets wait for a transaction to end.
        self._waiting: set[TP] = set()
        self.interval = coordinator.config.heartbeat_interval_ms / 1000
        self._due = asyncio.Event()
        # A heartbeat is due at once (the coordinator's poke or a revocation to ack), not
        # only a retry of the waiting partitions.
        self._poked = False
        self._heartbeat_at = 0.0
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        # Set by leave() (and when the socket is found gone): no heartbeat after it.
        self._closing = False
        self._joined = False
        self._joined_with: list[TP] = []

    # -- lifecycle ----------------------------------------------------------------------

    async def join(self) -> None:
        """The first heartbeat; its errors (bad group id, assignor, instance id in use)
        refuse the subscribe."""
        answer = await self.coordinator.heartbeat(self.group_id, self._request())
        self._joined = True
        self._accept(answer)
        self._heartbeat_at = asyncio.get_running_loop().time() + self.interval
        self.coordinator.watch(self.group_id, self.member_id, self._poke)
        self._joined_with = answer.assignment

    async def start_loop(self) -> None:
        """Apply the join's answer (the subscription has been confirmed by now) and start
        heartbeating."""
        async with self._lock:
            await self._apply(self._joined_with)
        self._task = asyncio.create_task(self._loop(), name="ws-group-heartbeat")

    async def leave(self) -> None:
        """Stop heartbeating and leave the group now. Raises nothing but the caller's own
        cancellation (the socket is gone whatever happens here), and leaves even then."""
        # The flag stops the loop at its next step should a cancellation be lost on the
        # way (a library that swallows one): a loop that must stop stops, whatever the
        # timing.
        self._closing = True
        task = self._task
        try:
            if task is not None and not task.done():
                task.cancel()
                # asyncio.wait, not awaiting the task: a cancellation of *this* call must
                # reach us, not be taken for the task's own.
                await asyncio.wait({task})
        finally:
            # Also when this call is cancelled while the loop winds down.
            await self._leave_group()

    async def _leave_group(self) -> None:
        """Send the leave heartbeat once (epoch -1, -2 for a static member). Shielded: a
        cancelled caller (a broker shutting down cancels the socket's handler) still
        leaves, or the member would hold its partitions until a session timeout."""
        if not self._joined:
            return
        self._joined = False
        self.coordinator.watch(self.group_id, self.member_id, None)
        epoch = STATIC_LEAVE_EPOCH if self.instance_id is not None else LEAVE_EPOCH
        request = HeartbeatRequest(self.member_id, epoch, self.instance_id)
        leaving = asyncio.ensure_future(self.coordinator.heartbeat(self.group_id, request))
        try:
            await asyncio.shield(leaving)
        except asyncio.CancelledError:
            leaving.add_done_callback(self._leave_done)
            raise
        except Exception as exc:
            # Stopping broker or member already gone: the session timeout is the fallback
            # (nobody heartbeats for this member any more).
            logger.debug("group %s: leave of %s failed: %s", self.group_id, self.member_id, exc)

    def _leave_done(self, task: asyncio.Future[HeartbeatResponse]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.debug(
                "group %s: leave of %s failed: %s", self.group_id, self.member_id, task.exception()
            )

    # -- heartbeats -----------------------------------------------------------------------

    def _request(self) -> HeartbeatRequest:
        if self.member_epoch == JOIN_EPOCH:
            return HeartbeatRequest(
                member_id=self.member_id,
                member_epoch=JOIN_EPOCH,
                instance_id=self.instance_id,
                subscribed_topics=self.topics,
                server_assignor=self.server_assignor,
                owned_partitions=sorted(self.owned),
            )
        # Always explicit: revocations count as done only once a list leaves them out.
        return HeartbeatRequest(
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            instance_id=self.instance_id,
            owned_partitions=sorted(self.owned),
        )

    def _accept(self, answer: HeartbeatResponse) -> None:
        self.member_id = answer.member_id
        self.member_epoch = answer.member_epoch
        self.interval = answer.heartbeat_interval_ms / 1000

    async def _loop(self) -> None:
        """Heartbeat every interval, or at once when :attr:`_due` is set; ends when the
        member leaves (cancelled), its socket is gone (then it leaves itself) or its
        coordinator moved."""
        loop = asyncio.get_running_loop()
        try:
            while not self._closing:
                # A timer that sets the event, not asyncio.wait_for: on Python 3.11
                # wait_for returns the result of a wait woken in the same step as a
                # cancellation and drops the cancellation, so leave() could never stop
                # this loop. Event.wait() keeps it.
                delay = max(0.0, self._heartbeat_at - loop.time())
                if self._waiting:
                    delay = min(delay, UNSTABLE_RETRY_S)
                timer = loop.call_later(delay, self._due.set)
                try:
                    await self._due.wait()
                finally:
                    timer.cancel()
                self._due.clear()
                if self._closing:
                    return
                try:
                    if self._waiting and not self._poked and loop.time() < self._heartbeat_at:
                        # Not a heartbeat yet: only the waiting partitions are retried.
                        async with self._lock:
                            await self._apply(sorted(self.owned))
                        continue
                    await self.heartbeat()
                except NotCoordinator as exc:
                    await self._moved(exc)
                    return
                except LogbusError as exc:
                    if exc.retriable:
                        continue  # coordinator loading or stopping: next interval
                    await self.host.send_failure(exc)
                except ClientGone:
                    raise
                except Exception:
                    # A bug costs this heartbeat; the next one (or the session timeout)
                    # recovers.
                    logger.exception("WebSocket group heartbeat failed")
        except ClientGone:
            # The socket is gone: leave now rather than when its reader notices (a
            # member whose frames cannot be delivered must not keep its partitions).
            self._closing = True
            await self._leave_group()

    async def _moved(self, exc: NotCoordinator) -> None:
        """The group's coordinator is another broker now: this member cannot heartbeat
        from here, so it stops consuming before its session there expires."""
        logger.info(
            "group %s: coordinator moved (%s); member %s stops", self.group_id, exc, self.member_id
        )
        self._joined = False
        self.coordinator.watch(self.group_id, self.member_id, None)
        async with self._lock:
            await self._apply([])
        await self.host.send_failure(exc)

    def _poke(self) -> None:
        self._poked = True
        self._due.set()

    async def heartbeat(self) -> None:
        self._poked = False
        self._heartbeat_at = asyncio.get_running_loop().time() + self.interval
        async with self._lock:
            try:
                answer = await self.coordinator.heartbeat(self.group_id, self._request())
            except (FencedMemberEpoch, UnknownMemberId):
                # Our partitions may be someone else's now: drop them all, then rejoin
                # (with the same id when fenced, as KIP-848 asks).
                await self._apply([])
                self.coordinator.watch(self.group_id, self.member_id, None)
                self.member_epoch = JOIN_EPOCH
                answer = await self.coordinator.heartbeat(self.group_id, self._request())
                self.coordinator.watch(self.group_id, answer.member_id, self._poke)
            self._accept(answer)
            revoked = await self._apply(answer.assignment)
        if revoked:
            # Acknowledge the revocation now (Kafka's client does the same): the new
            # owner is waiting for these partitions.
            self._poke()

    async def _apply(self, assignment: Sequence[TP]) -> bool:
        """Move the cursors to ``assignment`` (starting the partitions that may start) and
        push the frame when the socket's partitions changed; True when partitions were
        revoked (the coordinator waits for the acknowledgement)."""
        new = set(assignment)
        revoked = self.owned - new
        added = new - self.owned
        started_revoked = revoked - self._waiting
        self._waiting -= revoked
        for topic, partition in sorted(started_revoked):
            self.host.drop_partition(topic, partition)
        self.owned = (self.owned - revoked) | added
        self._waiting |= added
        described, failed = self._start(self._ready()) if self._waiting else ([], None)
        if started_revoked or described:
            await self._send_assignment(started_revoked, described)
        if failed is not None:
            if revoked:
                self._poke()  # the acknowledgement the caller will not get to send
            raise failed
        return bool(revoked)

    async def _send_assignment(self, revoked: set[TP], described: list[dict[str, Any]]) -> None:
        frame = {
            "type": "assignment",
            "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "revoked": [{"topic": t, "partition": p} for t, p in sorted(revoked)],
            "assigned": described,
            "partitions": [{"topic": t, "partition": p} for t, p in sorted(self.started)],
        }
        await self.host.send_frame(orjson.dumps(frame).decode())

    @property
    def started(self) -> set[TP]:
        """The partitions whose records this socket is sent."""
        return self.owned - self._waiting

    def _ready(self) -> set[TP]:
        """The waiting partitions that may start: all of them, but for a read_committed
        member starting from committed offsets those an open transaction committed."""
        if not (self.read_committed and self.start == "committed"):
            return set(self._waiting)
        return self._waiting - self.coordinator.unstable_partitions(self.group_id).keys()

    def _start(self, ready: set[TP]) -> tuple[list[dict[str, Any]], LogbusError | None]:
        """Start ``ready``: their descriptions for the frame, and the first error of those
        that could not start (not led here, topic gone). Those are given up (not owned), so
        the next heartbeat's assignment offers them again, and each partition is added to
        the socket at most once. One whose start is not known yet (OFFSET_NOT_AVAILABLE)
        keeps waiting."""
        if not ready:
            return [], None
        try:
            committed = self._committed(ready)
        except LogbusError as exc:
            self._waiting -= ready
            self.owned -= ready
            return [], exc
        described: list[dict[str, Any]] = []
        failed: LogbusError | None = None
        for tp in sorted(ready):
            try:
                position = self._start_position(tp, committed.get(tp))
            except OffsetNotAvailable:
                continue  # a new leader's watermark catching up: retried
            except LogbusError as exc:
                self._waiting.discard(tp)
                self.owned.discard(tp)
                failed = failed or exc
                continue
            self._waiting.discard(tp)
            try:
                described.append(self.host.add_partition(tp[0], tp[1], position))
            except LogbusError as exc:
                self.owned.discard(tp)
                failed = failed or exc
        return described, failed

    def _committed(self, added: set[TP]) -> dict[TP, int]:
        """The group's committed offsets of ``added`` (none unless ``start`` is committed)."""
        if self.start != "committed":
            return {}
        topics = sorted({t for t, _ in added})
        return {
            (c.topic, c.partition): c.offset
            for c in self.coordinator.fetch_offsets(self.group_id, topics)
            if c.offset >= 0
        }

    def _start_position(self, tp: TP, committed: int | None) -> int:
        """The committed offset when it is in the log's range, else the fallback (the LSO
        for read_committed at ``latest``). OffsetNotAvailable while this broker's replica,
        just elected, has a watermark below its epoch's start: a committed offset above
        that watermark may well be in range, and ``latest`` is not known yet."""
        log = self.coordinator.manager.get_log(*tp)
        start, hw = log.log_start_offset, log.high_watermark
        if committed is not None and start <= committed <= hw:
            return committed
        unavailable = self.host.offsets_error(*tp)
        if committed is not None and committed > hw and unavailable is not None:
            raise unavailable
        mode = self.default if self.start == "committed" else self.start
        if mode == "earliest":
            return start
        offset, _ = list_offset(
            log, "latest", read_committed=self.read_committed, unavailable=unavailable
        )
        return offset

    # -- commits --------------------------------------------------------------------------

    async def commit(self, offsets: Sequence[OffsetCommit] | None) -> list[dict[str, Any]]:
        """Commit ``offsets`` (None: every owned partition's position) with this member's
        epoch; after STALE_MEMBER_EPOCH heartbeat once and retry, as Kafka's client does."""
        if offsets is None:
            positions = self.host.positions()
            offsets = [OffsetCommit(t, p, o) for (t, p), o in sorted(positions.items())]
        try:
            done = await self.coordinator.commit_offsets(
                self.group_id, self.member_id, self.member_epoch, offsets
            )
        except StaleMemberEpoch:
            await self.heartbeat()
            done = await self.coordinator.commit_offsets(
                self.group_id, self.member_id, self.member_epoch, offsets
            )
        return [{"topic": c.topic, "partition": c.partition, "offset": c.offset} for c in done]
