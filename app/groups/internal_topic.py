"""What the group and the transaction coordinators share about their compacted
internal topic (``__consumer_offsets``, ``__transaction_state``): which of its
partitions this broker serves, loading them as leadership arrives, and routing a key
(group id, transactional id) to its partition.

Kafka's CoordinatorRuntime/TransactionStateManager loading, once:

* **Partition states.** In a cluster a partition led here is ``loading`` (its log is
  replayed in a worker thread) then ``loaded``; one not led here is absent. A
  per-partition generation lets a load started under an older leadership notice and
  give up (a newer load runs, or the partition went).
* **Routing.** :meth:`InternalTopicRuntime._served` answers whether a key's partition is
  served here now: COORDINATOR_LOAD_IN_PROGRESS while it loads (or while this broker
  takes it over), NOT_COORDINATOR naming the leader elsewhere. A lone broker serves
  every partition.
* **The topic.** :meth:`InternalTopicRuntime.ensure_topic` creates it on first use,
  as Kafka does, once (a lock), and waits briefly for the new partitions led here to
  load (they are empty) so the creating request need not answer LOAD_IN_PROGRESS.
* **Replay.** :func:`read_chunks` reads a partition's log from its start to its end in
  chunks of whole batches, for a subclass's replay to decode.
* **Errors of a write.** :meth:`InternalTopicRuntime._acknowledged` turns a write's
  NOT_LEADER_OR_FOLLOWER into NOT_COORDINATOR naming the coordinator it points to
  (:meth:`InternalTopicRuntime._leader_after`; none when it is this broker, still taking
  over), and too few in-sync replicas or a replication timeout into
  COORDINATOR_NOT_AVAILABLE: Kafka's answers, after which the client finds the
  coordinator again and retries (the write is on the leader and may still be
  replicated).

A subclass says what a partition holds: ``_reader`` (open its log on the loop; the
returned callable replays it in a worker thread), ``_install_partition`` (install what
was replayed, on the loop), ``_unload`` (forget a partition no longer led) and the
errors to raise for its keys (``_load_in_progress``, ``_not_coordinator``,
``_not_available``). Where the topic lives, who leads its partitions and how it is
created: the placement it is given (:class:`~app.core.internal_topic.InternalTopicPlacement`).

Concurrency: everything runs on the event loop, except the replay a ``_reader``
returns, which works on data of its own and is installed on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from app.common.batch import iter_headers
from app.common.errors import (
    LogbusError,
    NotEnoughReplicas,
    NotLeaderOrFollower,
    RequestTimedOut,
    TopicAlreadyExists,
)

if TYPE_CHECKING:
    from app.core.internal_topic import InternalTopicPlacement
    from app.core.log.log import Log

log = logging.getLogger(__name__)

LOADING = "loading"
LOADED = "loaded"

T = TypeVar("T")

_READ_CHUNK = 1 << 20


def read_chunks(
    part_log: Log, start: int | None = None, end: int | None = None
) -> Iterator[tuple[bytes, int]]:
    """``(buf, offset)`` pairs covering ``part_log`` from ``start`` (default: its start
    offset) to ``end`` (default: the end it had when called): ``buf`` holds whole batches
    (up to about 1 MiB), ``offset`` is the first offset it still has to give (its first
    batch may begin earlier: skip those records, as ``decode_records(buf,
    min_offset=offset)`` does). Blocking: run in a worker thread (a short tail may be
    read on the loop). Stops early if a read makes no progress."""
    offset = part_log.log_start_offset if start is None else max(start, part_log.log_start_offset)
    if end is None:
        end = part_log.log_end_offset
    while offset < end:
        buf = part_log.read(offset, _READ_CHUNK, max_offset=end).read_bytes()
        next_offset = offset
        for _, header in iter_headers(buf):
            next_offset = header.next_offset
        if next_offset <= offset:
            break
        yield buf, offset
        offset = next_offset


class InternalTopicRuntime(Generic[T]):
    """The partitions of ``topic`` led here and their loads; ``T`` is what one
    partition's replay yields. See the module docstring."""

    def __init__(self, placement: InternalTopicPlacement[Any], default_partitions: int) -> None:
        self.placement = placement
        self.topic = placement.topic
        self.node_id = placement.node_id
        # Partitions of the topic this broker creates; the topic, once it exists, is the
        # authority (the setting may have changed since), and the last count seen stands
        # while it is gone (deleted).
        self.default_partitions = default_partitions
        self._known_count: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.running = False
        # Cluster mode: the partitions led here (loading or loaded), a counter per
        # partition that a load started under an older leadership finds changed, and
        # the loads under way.
        self._partitions: dict[int, str] = {}
        self._generation: dict[int, int] = {}
        self.load_tasks: dict[int, asyncio.Task[None]] = {}
        self.topic_ready = False
        self._topic_lock: asyncio.Lock | None = None

    # -- what a subclass provides ------------------------------------------------------------

    def _reader(self, partition: int) -> Callable[[], T]:
        """On the loop: open ``partition``'s log (NotLeaderOrFollower when not led here);
        the callable returned replays it (blocking: run in a worker thread)."""
        raise NotImplementedError

    def _install_partition(self, partition: int, loaded: T) -> None:
        """On the loop, once ``partition`` is marked loaded: install what was replayed."""
        raise NotImplementedError

    def _unload(self, partition: int) -> None:
        """Forget what ``partition`` held (this broker no longer leads it)."""
        raise NotImplementedError

    def _load_in_progress(self, key: str, message: str) -> LogbusError:
        raise NotImplementedError

    def _not_coordinator(self, key: str, leader: int | None, url: str | None) -> LogbusError:
        raise NotImplementedError

    def _not_available(self, key: str, message: str) -> LogbusError:
        raise NotImplementedError

    def _topic_created(self) -> None:
        """On the loop, right after this broker created the topic: load the new partitions
        led here now rather than on the leadership listener's call (a no-op for one
        already loading; nothing alone, where every partition is served at once)."""
        self.placement.replay_leadership(self.on_leadership)

    # -- the topic -------------------------------------------------------------------------

    def num_partitions(self) -> int:
        """The topic's partition count: the topic's own once it exists, else the last one
        seen (it was deleted), else the count this broker would create it with."""
        count = self.placement.partitions()
        if count is not None:
            self._known_count = count
            return count
        if self._known_count is not None:
            return self._known_count
        return self.default_partitions

    async def ensure_topic(self) -> None:
        """Create the topic on first use, as Kafka does."""
        if self.topic_ready:
            return
        if self.placement.partitions() is not None:
            self.topic_ready = True  # another broker created it
            return
        if self._topic_lock is None:
            self._topic_lock = asyncio.Lock()
        async with self._topic_lock:
            if self.topic_ready:
                return
            with contextlib.suppress(TopicAlreadyExists):
                await self.placement.create(self.default_partitions)
            self.topic_ready = True
            self._topic_created()
            loads = list(self.load_tasks.values())
            if loads:
                # The new partitions this broker leads load in an instant (they are empty):
                # the request that created the topic need not answer LOAD_IN_PROGRESS.
                await asyncio.wait(loads, timeout=5)

    # -- partition states ------------------------------------------------------------------

    @property
    def loading(self) -> list[int]:
        """Cluster mode: the partitions this broker leads and is still loading."""
        return sorted(p for p, status in self._partitions.items() if status == LOADING)

    @property
    def coordinated_partitions(self) -> list[int]:
        """Cluster mode: the partitions whose keys this broker serves."""
        return sorted(p for p, status in self._partitions.items() if status == LOADED)

    def on_leadership(self, topic: str, partition: int, leads: bool) -> None:
        """ReplicaManager's listener (on the loop): load a partition this broker now
        leads, forget what one it no longer leads held."""
        if topic != self.topic or not self.running or self.loop is None:
            return
        if leads and partition in self._partitions:
            return  # already loading or loaded under this leadership
        self._generation[partition] = generation = self._generation.get(partition, 0) + 1
        task = self.load_tasks.pop(partition, None)
        if task is not None:
            task.cancel()
        if leads:
            self._partitions[partition] = LOADING
            self.load_tasks[partition] = self.loop.create_task(
                self._load_partition(partition, generation),
                name=f"load-{self.topic}-{partition}",
            )
        else:
            self._partitions.pop(partition, None)
            self._unload(partition)

    async def stop_loading(self, *others: asyncio.Task[None] | None) -> None:
        """Stop: no load starts any more; cancel those under way (and ``others``, tasks
        of the owner's) and wait until they have ended."""
        self.running = False
        tasks = [t for t in (*others, *self.load_tasks.values()) if t is not None]
        self.load_tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _current(self, partition: int, generation: int) -> bool:
        return (
            self.running
            and self._generation.get(partition) == generation
            and self._partitions.get(partition) == LOADING
        )

    async def _load_partition(self, partition: int, generation: int) -> None:
        delay = 0.1
        while True:
            try:
                replay = self._reader(partition)
                loaded = await asyncio.to_thread(replay)
                break
            except NotLeaderOrFollower:
                return  # leadership went; its listener call unloads
            except Exception:
                log.exception("loading %s-%d failed; retrying", self.topic, partition)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            if not self._current(partition, generation):
                return
        if not self._current(partition, generation):
            return  # lost (and maybe regained) leadership meanwhile: a newer load runs
        self.load_tasks.pop(partition, None)
        self._partitions[partition] = LOADED
        self._install_partition(partition, loaded)

    # -- routing ---------------------------------------------------------------------------

    def _served(self, key: str, partition: int, loading_message: str) -> None:
        """Return when this broker serves ``partition`` now (always, alone); else
        COORDINATOR_LOAD_IN_PROGRESS (``loading_message`` while it loads) or
        NOT_COORDINATOR naming its leader."""
        if self.placement.coordinates_every_key:
            return
        status = self._partitions.get(partition)
        if status == LOADED:
            return
        if status == LOADING:
            raise self._load_in_progress(key, loading_message)
        leader, url = self.placement.leader_of(partition)
        if leader == self.node_id:
            raise self._load_in_progress(
                key, f"this broker is taking over {self.topic}-{partition}; retry shortly"
            )
        raise self._not_coordinator(key, leader, url)

    def _leader_after(
        self, partition: int, exc: NotLeaderOrFollower
    ) -> tuple[int | None, str | None]:
        """The coordinator a failed write points to: the error's leader hint, else the
        partition's leader; None when that is this broker (it is still taking over)."""
        leader, url = exc.leader, exc.leader_url
        if leader is None:
            leader, url = self.placement.leader_of(partition)
        if leader == self.node_id:
            leader, url = None, None
        return leader, url

    async def _acknowledged(
        self, key: str, label: str, partition: int, write: Awaitable[None]
    ) -> None:
        """Await ``write`` (to ``partition``, for ``key``; ``label`` names the key in a
        message) and answer its failures as a coordinator does (module docstring)."""
        try:
            await write
        except NotLeaderOrFollower as exc:
            raise self._not_coordinator(key, *self._leader_after(partition, exc)) from None
        except (NotEnoughReplicas, RequestTimedOut) as exc:
            raise self._not_available(
                key,
                f"{label}: the write to {self.topic}-{partition} was not "
                f"acknowledged by every in-sync replica: {exc.message}",
            ) from None
