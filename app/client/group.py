"""Consumer-group membership for the blocking :class:`~app.client.consumer.Consumer`.

A background thread heartbeats (``POST /groups/{group}/heartbeat``) at the
interval the coordinator answers, always listing the partitions the consumer
holds *now*: the coordinator only hands a partition to another member once no
heartbeat lists it any more, so the list must never run ahead of what the
polling thread has actually let go.

The thread never touches the consumer's partitions itself. It stores the
latest assignment it was told about; the polling thread applies it inside
``poll`` (so ``on_revoked`` / ``on_assigned`` run on the application's thread,
as in Kafka) and wakes the thread to acknowledge a revocation at once rather
than a whole interval later.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from app.client import _cluster, _http
from app.client._cluster import Cluster
from app.client._http import group_path
from app.client.errors import is_retriable
from app.client.types import TopicPartition
from app.common.aio import wait_event
from app.common.errors import LogbusError
from app.common.group_errors import FencedMemberEpoch, UnknownMemberId

log = logging.getLogger(__name__)

# A heartbeat that met a moved coordinator is sent once more (at once to a coordinator
# the answer named, else after the backoff to the one found again); then the loop's
# own retry takes over.
_HEARTBEAT_ATTEMPTS = 2
# Until the first answer tells the real interval: short, so a join settles fast.
_FIRST_INTERVAL_S = 0.1
_REFUSED_RETRY_S = 1.0


def by_topic(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    grouped: dict[str, list[int]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(grouped.items())]


def _assignment(body: dict[str, Any]) -> set[TopicPartition]:
    return {
        TopicPartition(str(entry["topic"]), int(p))
        for entry in body["assignment"]["partitions"]
        for p in entry["partitions"]
    }


class _Membership:
    """One member of one group: its id, epoch, what it owns and what it was told.

    The I/O lives in the subclasses (a thread for :class:`GroupMembership`, a
    task for :class:`AsyncGroupMembership`). Every field the heartbeat and the
    polling side share is read and written under ``_lock`` (a plain lock also
    in the asyncio flavour: it is never held across an await).
    """

    def __init__(
        self,
        group_id: str,
        *,
        topics: list[str] | None,
        pattern: str | None,
        instance_id: str | None,
        server_assignor: str | None,
        rebalance_timeout_ms: int | None,
        retry_backoff_ms: int,
    ) -> None:
        if not group_id:
            raise ValueError("group_id must not be empty")
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe to a list of topics or a pattern, not both or neither")
        self.group_id = group_id
        self.path = group_path(group_id)
        self.topics = topics
        self.pattern = pattern
        self.instance_id = instance_id
        self.server_assignor = server_assignor
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._lock = threading.Lock()
        self.member_id = ""
        self.epoch = 0
        self.interval_s = _FIRST_INTERVAL_S
        self.beats = 0  # answers received; commit() waits on it after STALE_MEMBER_EPOCH
        self._owned: frozenset[TopicPartition] = frozenset()
        self._target: set[TopicPartition] | None = None
        self._lost = False
        # Bumped when the member is fenced: answers to requests sent before belong
        # to the dead epoch and are dropped.
        self._generation = 0
        self._error: LogbusError | None = None

    def _notify(self) -> None:
        """Wake the heartbeat loop to send now."""
        raise NotImplementedError

    # ---- called by the polling side ----

    def take(self) -> tuple[bool, set[TopicPartition] | None]:
        """(lost, new target): what the polling side must apply; each is handed out once."""
        with self._lock:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            lost, target = self._lost, self._target
            self._target = None
            return lost, target

    def set_owned(self, owned: Iterable[TopicPartition], *, after_loss: bool = False) -> None:
        """What the consumer holds now; heartbeats at once to acknowledge a change."""
        with self._lock:
            self._owned = frozenset(owned)
            if after_loss:
                self._lost = False
        self._notify()

    def mark_lost(self, exc: LogbusError) -> None:
        """The coordinator no longer knows this member (or this epoch): drop all, rejoin."""
        with self._lock:
            self._lost = True
            self._generation += 1
            self._target = None
            if isinstance(exc, UnknownMemberId):
                self.member_id = ""
            self.epoch = 0

    def identity(self) -> tuple[str, int]:
        with self._lock:
            return self.member_id, self.epoch

    # ---- the heartbeat loop's logic ----

    def _leave_call(self) -> _http.Call[dict[str, Any]] | None:
        member_id, epoch = self.identity()
        if not member_id or epoch <= 0:
            return None
        body = {"member_id": member_id, "member_epoch": -2 if self.instance_id is not None else -1}
        return _call(self.path, body)

    def _request(self) -> tuple[int, dict[str, Any]] | None:
        with self._lock:
            if self._lost and self._owned:
                # Rejoining while still listing partitions would claim them under the
                # new epoch before the application was told they were gone.
                return None
            generation = self._generation
            body: dict[str, Any] = {
                "member_id": self.member_id,
                "member_epoch": self.epoch,
                "owned_partitions": by_topic(self._owned),
            }
        if body["member_epoch"] == 0:
            body["subscribed_topics"] = self.topics
            body["subscribed_topic_regex"] = self.pattern
            body["instance_id"] = self.instance_id
            body["server_assignor"] = self.server_assignor
            body["rebalance_timeout_ms"] = self.rebalance_timeout_ms
        return generation, body

    def _apply(self, generation: int, answer: dict[str, Any]) -> None:
        with self._lock:
            if generation != self._generation:
                return
            self.member_id = str(answer["member_id"])
            self.epoch = int(answer["member_epoch"])
            self.interval_s = max(0.01, int(answer["heartbeat_interval_ms"]) / 1000)
            self._target = _assignment(answer)
            self.beats += 1

    def _failed(self, exc: Exception) -> float:
        """Take a failed heartbeat; how long to wait before the next one."""
        if isinstance(exc, FencedMemberEpoch | UnknownMemberId):
            log.info("group %s: %s; rejoining", self.group_id, exc)
            self.mark_lost(exc)
            return 0.0
        if isinstance(exc, LogbusError):
            if is_retriable(exc):
                return self.retry_backoff_s
            with self._lock:
                self._error = exc
            # The same request will be refused again until the application reacts:
            # keep trying (it may be a passing misconfiguration) without flooding.
            return max(self.retry_backoff_s, _REFUSED_RETRY_S)
        # A bug must not end membership silently: poll raises it.
        log.error("group %s: heartbeat failed", self.group_id, exc_info=exc)
        with self._lock:
            self._error = LogbusError(f"heartbeat failed: {exc!r}")
        return self.retry_backoff_s


class GroupMembership(_Membership):
    """Membership of a blocking consumer: a daemon thread heartbeats.

    Every call goes to the group's coordinator, found with ``POST /coordinator``
    and found again after NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a broker
    that cannot be reached; ``cluster`` is shared with the consumer.
    """

    def __init__(
        self, cluster: Cluster, group_id: str, *, request_timeout_ms: int, **kwargs: Any
    ) -> None:
        super().__init__(group_id, **kwargs)
        self._cluster = cluster
        # The thread's own client: httpx clients are not shared with the polling thread.
        self._client = _http.sync_client(
            cluster.default_url, request_timeout_ms, authorization=cluster.authorization
        )
        self._answered = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"logbus-heartbeat-{group_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def _notify(self) -> None:
        self._wake.set()

    def beat_now(self, timeout_s: float) -> None:
        """Heartbeat at once and wait for its answer (a commit learnt its epoch is stale)."""
        with self._lock:
            seen = self.beats
            self._wake.set()
            self._answered.wait_for(lambda: self.beats > seen, timeout_s)

    def close(self, leave: bool) -> None:
        """Stop heartbeating; with ``leave``, tell the coordinator (a static member only pauses)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        call = self._leave_call() if leave else None
        if call is not None:
            try:
                self._run_call(call, _HEARTBEAT_ATTEMPTS)
            except LogbusError as exc:
                # The session timeout removes the member anyway.
                log.warning("leaving group %s failed: %s", self.group_id, exc)
        self._client.close()

    def _run_call(self, call: _http.Call[Any], attempts: int) -> Any:
        return _cluster.run_sync(
            self._client,
            _cluster.group_route(
                self._cluster, self.group_id, call, self.retry_backoff_s, attempts
            ),
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = self.interval_s
            try:
                request = self._request()
                if request is not None:
                    generation, body = request
                    answer = self._run_call(_call(self.path, body), _HEARTBEAT_ATTEMPTS)
                    self._apply(generation, answer)
                    with self._lock:
                        self._answered.notify_all()
                    wait = self.interval_s
            except Exception as exc:
                wait = self._failed(exc)
            self._wake.wait(wait)
            self._wake.clear()


class AsyncGroupMembership(_Membership):
    """Membership of an :class:`~app.client.consumer.AsyncConsumer`: a task heartbeats."""

    def __init__(
        self,
        cluster: Cluster,
        group_id: str,
        *,
        request_timeout_ms: int,
        transport: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(group_id, **kwargs)
        self._cluster = cluster
        self._client = _http.async_client(
            cluster.default_url,
            request_timeout_ms,
            transport=transport,
            authorization=cluster.authorization,
        )
        self._wake = asyncio.Event()
        self._answered = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Set by close(): the loop sends nothing more, even should its cancellation be
        # lost on the way.
        self._closing = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"logbus-heartbeat-{self.group_id}"
        )

    def _notify(self) -> None:
        self._wake.set()

    async def beat_now(self, timeout_s: float) -> None:
        seen = self.beats
        self._wake.set()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.beats <= seen:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            self._answered.clear()
            await wait_event(self._answered, remaining)

    async def close(self, leave: bool) -> None:
        self._closing = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            # asyncio.wait, not awaiting the task: a cancellation of close() itself
            # must reach its caller, not be taken for the task's own.
            await asyncio.wait({task})
        call = self._leave_call() if leave else None
        if call is not None:
            try:
                await self._run_call(call, _HEARTBEAT_ATTEMPTS)
            except LogbusError as exc:
                log.warning("leaving group %s failed: %s", self.group_id, exc)
        await self._client.aclose()

    async def _run_call(self, call: _http.Call[Any], attempts: int) -> Any:
        return await _cluster.run_async(
            self._client,
            _cluster.group_route(
                self._cluster, self.group_id, call, self.retry_backoff_s, attempts
            ),
        )

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            wait = self.interval_s
            # Cleared before the request: a change made while it is out sends another.
            self._wake.clear()
            try:
                request = self._request()
                if request is not None:
                    generation, body = request
                    answer = await self._run_call(_call(self.path, body), _HEARTBEAT_ATTEMPTS)
                    self._apply(generation, answer)
                    self._answered.set()
                    wait = self.interval_s
            except Exception as exc:
                wait = self._failed(exc)
            # A timer that sets the event, not asyncio.wait_for: on Python 3.11 wait_for
            # returns the result of a wait woken in the same step as a cancellation and
            # drops the cancellation, so close() would wait for this loop forever.
            timer = loop.call_later(max(0.0, wait), self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()


def _call(path: str, body: dict[str, Any]) -> _http.Call[dict[str, Any]]:
    return _http.Call("POST", f"{path}/heartbeat", lambda answer: dict(answer), json=body)


def commit_call(
    group_id: str, member_id: str, epoch: int, offsets: dict[TopicPartition, int]
) -> _http.Call[None]:
    return _http.Call(
        "POST",
        f"{group_path(group_id)}/offsets",
        lambda _: None,
        json={
            "member_id": member_id,
            "member_epoch": epoch,
            "offsets": [
                {"topic": tp.topic, "partition": tp.partition, "offset": o}
                for tp, o in offsets.items()
            ],
        },
    )


def committed_call(
    group_id: str, topics: Iterable[str], require_stable: bool = False
) -> _http.Call[dict[TopicPartition, int | None]]:
    """OffsetFetch; ``require_stable`` (a read_committed consumer's, KIP-447): the
    coordinator answers UNSTABLE_OFFSET_COMMIT, asked again by the route, while a
    transaction that committed offsets of these partitions is open."""

    def parse(body: Any) -> dict[TopicPartition, int | None]:
        return {
            TopicPartition(str(o["topic"]), int(o["partition"])): (
                None if int(o["offset"]) < 0 else int(o["offset"])
            )
            for o in body["offsets"]
        }

    names = sorted(set(topics))
    # httpx repeats a list-valued parameter (?topic=a&topic=b); Call's params are scalars.
    query = "&".join(f"topic={quote(t, safe='')}" for t in names)
    if require_stable:
        query += "&require_stable=true"
    return _http.Call("GET", f"{group_path(group_id)}/offsets?{query}", parse)
