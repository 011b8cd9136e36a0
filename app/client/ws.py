"""An asyncio subscription over ``WS /ws/subscribe``: records pushed by the broker.

The broker sends nothing without credit (``openapi/asyncapi.yaml``), so the
credit is the buffer: :class:`Subscription` grants ``credit`` records up
front and tops the window up as the application takes records (half a window
at a time, so a grant is one small message per many records, never one per
record). At most ``credit`` records are ever buffered here.

Positions are the offset after the last record *handed to the application*
(or the start the broker reported), not the broker's ``next_offset``:
records still buffered when a connection drops were never seen, so a
reconnect (automatic, or after :meth:`Subscription.seek`) resubscribes with
``start: {"offsets": positions}`` and neither skips nor repeats.

``seek`` reconnects rather than sending ``seek``: frames already on the wire
for the old position could not be told apart from new ones by offset alone
(a seek backwards), and a reconnect costs a round trip. ``pause``/``resume``
are sent to the broker and also hold back what is already buffered.

With ``group=`` the socket is a group member for as long as it is open (the
broker heartbeats for it): ``assignment`` frames move partitions in and out
(buffered records of a revoked partition are dropped, ``on_revoked`` /
``on_assigned`` are called), partitions start at the group's commits, and
:meth:`Subscription.commit` commits the positions of the records handed out
(not the broker's position, which counts records still buffered here) and
waits for ``commit_ack``. A reconnect rejoins and resumes from the commits.

>>> async with subscribe("http://127.0.0.1:8080", topics=["orders"], start="earliest") as sub:  # doctest: +SKIP
...     async for record in sub:
...         print(record.partition, record.offset, record.value)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, NamedTuple

import orjson
import websockets
from websockets.asyncio.client import ClientConnection

from app.client._cluster import LEADER_CATCH_UP_S, Bootstrap, CatchingUp, bootstrap_urls
from app.client._http import normalize_url
from app.client.auth import Auth, authorization
from app.client.errors import ClientError, error_from_fields
from app.client.types import TopicPartition
from app.common.batch import RecordBatchReader, iter_headers
from app.common.errors import LogbusError
from app.common.isolation import check_isolation_level
from app.common.tls import default_context

log = logging.getLogger(__name__)

BINARY_MAGIC = b"LBW1"
# The broker closes a socket that sent nothing for idle_timeout_ms (120 s by default).
PING_INTERVAL_S = 30.0
Start = str | int | Mapping[TopicPartition, int]
RebalanceCallback = Callable[[set[TopicPartition]], None]


class WsRecord(NamedTuple):
    """One record. ``key``/``value`` are as ``key_format``/``value_format`` render them:
    JSON values, text (``string``) or bytes (``binary``, and always with ``format="binary"``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple[tuple[str, Any], ...]


def ws_url(url: str) -> str:
    base = normalize_url(url)
    if base.startswith("https://"):
        return "wss://" + base[len("https://") :] + "/ws/subscribe"
    return "ws://" + base.split("://", 1)[1] + "/ws/subscribe"


def _decode_field(value: Any, fmt: str) -> Any:
    # The broker base64-encodes binary keys and values in JSON frames.
    if fmt == "binary" and isinstance(value, str):
        return base64.b64decode(value)
    return value


class Subscription:
    """Records of the subscribed partitions, in offset order per partition.

    Use as ``async with`` (or close it) and ``async for``; it connects on ``async
    with`` or the first ``async for`` step. Errors the broker reports in ``error``
    frames are raised from the iterator as :mod:`app.common.errors` classes
    (OFFSET_OUT_OF_RANGE, ...); a dropped connection is retried ``reconnects`` times
    in a row from the positions.

    ``start``: ``"earliest"``, ``"latest"`` (the default without a group), an
    offset (with ``partitions``), or ``{TopicPartition: offset}`` (others start
    at latest). With ``group`` the socket is a member for as long as it is
    open: the broker assigns partitions (``assignment`` frames, reported to
    ``on_assigned`` / ``on_revoked``), ``start`` defaults to ``"committed"``
    (``default`` where the group committed nothing), and ``commit()`` commits
    what was handed out.

    ``isolation_level="read_committed"``: the broker sends only records below each
    partition's last stable offset, without those of aborted transactions (a
    partition is held while a transaction is open there); the default
    ``read_uncommitted`` sends every record, as Kafka's consumer.
    """

    def __init__(
        self,
        url: Bootstrap,
        *,
        topics: Iterable[str] | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        start: Start | None = None,
        format: str = "json",
        key_format: str = "json",
        value_format: str = "json",
        credit: int = 1000,
        reconnects: int = 5,
        reconnect_backoff_ms: int = 200,
        group: str | None = None,
        group_instance_id: str | None = None,
        default: str = "latest",
        on_assigned: RebalanceCallback | None = None,
        on_revoked: RebalanceCallback | None = None,
        auth: Auth = None,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        check_isolation_level(isolation_level)
        if (topics is None) == (partitions is None):
            raise ValueError("subscribe to topics or to partitions, not both or neither")
        if group is not None and (topics is None or not isinstance(start, str | None)):
            raise ValueError(
                "a group member subscribes to topics and starts at 'committed', "
                "'earliest' or 'latest'"
            )
        if credit < 2:
            raise ValueError("credit must be at least 2 (the window is topped up by halves)")
        if format not in ("json", "binary"):
            raise ValueError(f"format must be json or binary, got {format!r}")
        # Several URLs (a list or a comma-separated string): a connection refused by one
        # tries the next. The socket is not routed to partition leaders: the broker it
        # reaches serves the subscription.
        self._urls = [ws_url(u) for u in bootstrap_urls(url)]
        # Sent in the handshake's Authorization header (app/client/auth.py).
        self._authorization = authorization(auth)
        self.url = self._urls[0]
        self.topics = None if topics is None else list(topics)
        self.partitions = None if partitions is None else list(partitions)
        self.start: Start = start if start is not None else "committed" if group else "latest"
        self.format = format
        self.key_format = "binary" if format == "binary" else key_format
        self.value_format = "binary" if format == "binary" else value_format
        self.credit = credit
        self.isolation_level = isolation_level
        self.reconnects = reconnects
        self.reconnect_backoff_s = reconnect_backoff_ms / 1000
        self.positions: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        self._buffer: deque[WsRecord] = deque()
        self._held: list[WsRecord] = []
        self._ws: ClientConnection | None = None
        self._pinger: asyncio.Task[None] | None = None
        self._taken = 0  # records handed out since the last grant
        self._closed = False
        self.group = group
        self.group_instance_id = group_instance_id
        self.default = default
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.member_id = ""
        # The group's partitions for this socket (None without a group).
        self.assignment: set[TopicPartition] | None = None if group is None else set()
        # One reader at a time: commit() reads frames itself while the iterator is idle.
        self._reading = asyncio.Lock()
        self._acks: dict[int, asyncio.Future[list[dict[str, Any]]]] = {}
        self._ack_ids = itertools.count(1)

    # ---- connection ----

    def _subscribe_message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {
            "type": "subscribe",
            "format": self.format,
            "key_format": self.key_format,
            "value_format": self.value_format,
            "credit": {"records": self.credit},
        }
        if self.isolation_level != "read_uncommitted":
            msg["isolation_level"] = self.isolation_level
        if self.group is not None:
            # A member resumes from the group's commits, not from its own positions:
            # after a reconnect it may own other partitions.
            msg["group"] = self.group
            if self.group_instance_id is not None:
                msg["instance_id"] = self.group_instance_id
            msg["topics"] = self.topics
            msg["start"] = self.start
            msg["default"] = self.default
            return msg
        if self.topics is not None:
            msg["topics"] = self.topics
        else:
            assert self.partitions is not None
            msg["partitions"] = [{"topic": t, "partition": p} for t, p in self.partitions]
        offsets: dict[TopicPartition, int] = dict(self.positions)
        default = "latest"
        if isinstance(self.start, str):
            default = self.start
        elif isinstance(self.start, int):
            if self.partitions is None:
                raise ValueError("an integer start needs explicit partitions")
            offsets = {tp: self.start for tp in self.partitions} | offsets
        else:
            offsets = {TopicPartition(*tp): o for tp, o in self.start.items()} | offsets
        if offsets:
            nested: dict[str, dict[str, int]] = {}
            for tp, o in offsets.items():
                nested.setdefault(tp.topic, {})[str(tp.partition)] = o
            msg["start"] = {"offsets": nested, "default": default}
        else:
            msg["start"] = default
        return msg

    async def connect(self) -> None:
        """Open the socket and subscribe (done by the first ``async for`` step if not called).

        A refusal the broker marks retriable is asked again, as Kafka's consumer retries
        its look-ups: a new leader whose watermark is catching up (OFFSET_NOT_AVAILABLE,
        on a start at ``latest``) with the HTTP routes' backoff for up to
        ``LEADER_CATCH_UP_S``; any other retriable one (a coordinator loading, a leader
        being elected) up to ``reconnects`` times in a row, ``reconnect_backoff_ms``
        apart and growing. Anything else raises at once."""
        catching_up = CatchingUp(self.reconnect_backoff_s, LEADER_CATCH_UP_S)
        failures = 0
        while True:
            try:
                await self._subscribe()
                return
            except LogbusError as exc:
                if not exc.retriable or self._closed:
                    raise
                wait = catching_up.pause(exc)
                if wait is None:
                    failures += 1
                    if failures > self.reconnects:
                        raise
                    wait = self.reconnect_backoff_s * failures
                log.info("subscribe at %s refused (%s); asking again", self.url, exc)
                await asyncio.sleep(wait)

    async def _subscribe(self) -> None:
        """One attempt: open a socket, send the subscribe message, take its answer."""
        if self._closed:
            raise ClientError("the subscription is closed")
        ws = await self._open()
        try:
            await ws.send(orjson.dumps(self._subscribe_message()).decode())
            answer = orjson.loads(await ws.recv())
            if answer.get("type") == "error":
                raise error_from_fields(400, answer)
            if answer.get("type") != "subscribed":
                raise ClientError(f"expected a subscribed answer, got {answer.get('type')!r}")
        except BaseException:
            await ws.close()
            raise
        if self.group is not None:
            self.member_id = str(answer.get("member_id", ""))
            self._set_assignment(set(), [])
        for p in answer["partitions"]:
            self.positions.setdefault(TopicPartition(p["topic"], int(p["partition"])), p["offset"])
        self._ws = ws
        self._taken = 0
        # Buffered records came under the old socket's credit; the new one starts afresh.
        self._buffer.clear()
        self._held.clear()
        if self.paused:
            await self._send({"type": "pause", "partitions": self._tps(self.paused)})
        self._pinger = asyncio.get_running_loop().create_task(self._ping_loop())

    async def _open(self) -> ClientConnection:
        """A socket to the current URL, else to the next one that accepts."""
        start = self._urls.index(self.url)
        order = self._urls[start:] + self._urls[:start]
        for i, url in enumerate(order):
            try:
                # wss: the process's verifying context (app.common.tls), as every client.
                ssl = default_context() if url.startswith("wss://") else None
                ws = await websockets.connect(
                    url,
                    max_size=None,
                    ssl=ssl,
                    additional_headers=None
                    if self._authorization is None
                    else {"Authorization": self._authorization},
                )
            except OSError:
                if i == len(order) - 1:
                    raise
                log.info("cannot connect to %s; trying %s", url, order[i + 1])
                continue
            self.url = url
            return ws
        raise AssertionError("unreachable")

    async def _disconnect(self) -> None:
        for future in self._acks.values():
            if not future.done():
                future.set_exception(ClientError("the connection closed before the commit_ack"))
        self._acks.clear()
        if self._pinger is not None:
            self._pinger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pinger
            self._pinger = None
        if self._ws is not None:
            ws, self._ws = self._ws, None
            await ws.close()

    async def close(self) -> None:
        self._closed = True
        await self._disconnect()

    async def _ping_loop(self) -> None:
        while True:
            await asyncio.sleep(PING_INTERVAL_S)
            with contextlib.suppress(websockets.ConnectionClosed):
                await self._send({"type": "ping"})

    async def _send(self, message: dict[str, Any]) -> None:
        if self._ws is not None:
            await self._ws.send(orjson.dumps(message).decode())

    @staticmethod
    def _tps(tps: Iterable[TopicPartition]) -> list[dict[str, Any]]:
        return [{"topic": t, "partition": p} for t, p in sorted(tps)]

    # ---- controls ----

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record of ``tp`` (reconnects; see the module docstring)."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self.positions[TopicPartition(*tp)] = offset
        await self._disconnect()
        await self.connect()

    async def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(TopicPartition(*tp) for tp in tps)
        await self._send({"type": "pause", "partitions": self._tps(tps)})

    async def resume(self, *tps: TopicPartition) -> None:
        wanted = {TopicPartition(*tp) for tp in tps}
        self.paused -= wanted
        await self._send({"type": "resume", "partitions": self._tps(wanted)})
        back = [r for r in self._held if (r.topic, r.partition) in wanted]
        self._held = [r for r in self._held if (r.topic, r.partition) not in wanted]
        self._buffer.extendleft(reversed(back))

    # ---- records ----

    def _take_frame(self, frame: str | bytes) -> None:
        if isinstance(frame, bytes):
            self._take_binary(frame)
            return
        msg = orjson.loads(frame)
        kind = msg.get("type")
        if kind == "records":
            topic, partition = msg["topic"], int(msg["partition"])
            kf, vf = self.key_format, self.value_format
            self._buffer.extend(
                WsRecord(
                    topic,
                    partition,
                    r["offset"],
                    r["timestamp"],
                    _decode_field(r.get("key"), kf),
                    _decode_field(r.get("value"), vf),
                    tuple((h["key"], h.get("value")) for h in r.get("headers") or ()),
                )
                for r in msg["records"]
            )
        elif kind == "assignment":
            self._set_assignment(
                {TopicPartition(r["topic"], int(r["partition"])) for r in msg["revoked"]},
                msg["assigned"],
            )
        elif kind == "commit_ack":
            future = self._acks.pop(msg.get("id"), None)
            if future is not None and not future.done():
                future.set_result(msg.get("offsets") or [])
        elif kind == "error":
            error = error_from_fields(400, msg)
            future = self._acks.pop(msg.get("id"), None) if "id" in msg else None
            if future is None:
                raise error
            if not future.done():
                future.set_exception(error)
        # pong: nothing to do; the ping only keeps the socket alive.

    def _take_binary(self, frame: bytes) -> None:
        if frame[:4] != BINARY_MAGIC:
            raise ClientError("not a Logbus binary records frame")
        n = int.from_bytes(frame[4:6], "big")
        topic = frame[6 : 6 + n].decode()
        partition = int.from_bytes(frame[6 + n : 10 + n], "big", signed=True)
        body = frame[26 + n :]
        position = self.positions.get(TopicPartition(topic, partition), 0)
        for pos, header in iter_headers(body):
            if header.is_control or header.last_offset < position:
                continue
            for r in RecordBatchReader(bytes(body[pos : pos + header.size])):
                # Whole stored batches: the first may start before the position.
                if r.offset >= position:
                    self._buffer.append(
                        WsRecord(
                            topic,
                            partition,
                            r.offset,
                            r.timestamp,
                            r.key,
                            r.value,
                            tuple(r.headers),
                        )
                    )

    def _set_assignment(self, revoked: set[TopicPartition], assigned: list[dict[str, Any]]) -> None:
        """Apply an ``assignment`` frame: the broker already moved its cursors."""
        if self.assignment is None:
            return
        if revoked:

            def gone(r: WsRecord) -> bool:
                return TopicPartition(r.topic, r.partition) in revoked

            self._buffer = deque(r for r in self._buffer if not gone(r))
            self._held = [r for r in self._held if not gone(r)]
            for tp in revoked:
                self.positions.pop(tp, None)
            self.assignment -= revoked
            if self.on_revoked is not None:
                self.on_revoked(set(revoked))
        added = set()
        for p in assigned:
            tp = TopicPartition(p["topic"], int(p["partition"]))
            self.positions[tp] = int(p["offset"])
            added.add(tp)
        if added:
            self.assignment |= added
            if self.on_assigned is not None:
                self.on_assigned(added)

    async def commit(
        self, offsets: Mapping[TopicPartition, int] | None = None
    ) -> list[dict[str, Any]]:
        """Commit to the group (default: the position after each record handed out) and wait
        for the broker's ``commit_ack``; its ``offsets`` are returned.

        The positions are sent explicitly: the broker's own position also counts
        records still waiting here, which the application has not seen.
        """
        if self.group is None:
            raise ClientError("commit needs a group: subscribe(..., group=...)")
        if self._ws is None:
            await self.connect()
        wanted = (
            dict(offsets)
            if offsets is not None
            else {tp: o for tp, o in self.positions.items() if tp in (self.assignment or ())}
        )
        if not wanted:
            return []
        ack_id = next(self._ack_ids)
        future: asyncio.Future[list[dict[str, Any]]] = asyncio.get_running_loop().create_future()
        self._acks[ack_id] = future
        await self._send(
            {
                "type": "commit",
                "id": ack_id,
                "offsets": [
                    {"topic": tp.topic, "partition": tp.partition, "offset": o}
                    for tp, o in sorted(wanted.items())
                ],
            }
        )
        while not future.done():
            async with self._reading:
                if not future.done():
                    await self._read_frame()
        return future.result()

    async def _read_frame(self) -> None:
        assert self._ws is not None
        self._take_frame(await self._ws.recv())

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> WsRecord:
        if self._closed:
            raise StopAsyncIteration
        failures = 0
        while True:
            # Grants go out here, before anything is taken, so a cancelled step (a
            # wait_for around it) never loses a record it had already taken.
            await self._replenish()
            while self._buffer:
                record = self._buffer.popleft()
                tp = TopicPartition(record.topic, record.partition)
                if tp in self.paused:
                    self._held.append(record)
                    continue
                self._taken += 1  # a record handed out, or a repeat, spent credit
                if record.offset < self.positions.get(tp, 0):
                    continue  # handed out before a reconnect
                self.positions[tp] = record.offset + 1
                return record
            try:
                if self._ws is None:
                    await self.connect()
                async with self._reading:
                    if not self._buffer:
                        await self._read_frame()
                failures = 0
            except (websockets.ConnectionClosed, OSError) as exc:
                if self._closed:
                    raise StopAsyncIteration from None
                failures += 1
                if failures > self.reconnects:
                    raise
                log.info("subscription to %s dropped (%s); reconnecting", self.url, exc)
                await self._disconnect()
                await asyncio.sleep(self.reconnect_backoff_s * failures)

    async def _replenish(self) -> None:
        if self._ws is None or self._taken < self.credit // 2:
            return
        grant = self._taken
        with contextlib.suppress(websockets.ConnectionClosed):
            await self._send({"type": "credit", "records": grant})
        self._taken -= grant

    async def __aenter__(self) -> Subscription:
        await self.connect()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


subscribe = Subscription
"""``subscribe(url, topics=... | partitions=..., ...)``: a :class:`Subscription`, which
connects on ``async with`` or the first ``async for`` step. The options are
:class:`Subscription`'s."""
