"""What a client knows of the cluster, and the calls that route by it.

A client starts from one or more bootstrap URLs (a list or a comma-separated
string, as Kafka's ``bootstrap.servers``). ``GET /metadata`` tells it the live
brokers (id and URL) and each partition's leader; produce, fetch and offset
lookups go to the leader, group calls to the group's coordinator
(``POST /coordinator``), everything else to any broker that answers.

The cache is refreshed when a broker says it is stale (307/421
NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, NOT_COORDINATOR), when a broker
cannot be reached, and once it is ``metadata_max_age_ms`` old (Kafka's
``metadata.max.age.ms``). A 307 is never followed blindly: its body's
``leader_url`` is taken as a hint for one immediate retry, and the metadata
is refreshed anyway. A leader that cannot answer yet (OFFSET_NOT_AVAILABLE: just
elected, its high watermark still catching up) is asked again after a growing backoff
for up to ``LEADER_CATCH_UP_S``; so is a group coordinator answering a read_committed
consumer's offsets fetch UNSTABLE_OFFSET_COMMIT (KIP-447: a transaction that committed
offsets has not ended yet).

One broker alone (the metadata lists a single broker) is reached at the URL
the client was given, never at the URL it advertises: a single broker cannot
send a client elsewhere, and behind a proxy or a port mapping its advertised
URL may not even be reachable from here. So a client of a single broker
behaves exactly as before cluster mode.

:class:`Cluster` is plain state under a lock (shared by a consumer's polling
thread and its heartbeat thread). The routing rules (any broker, the leader, the
group's coordinator) are generators without I/O, written once (the ``*_route``
functions); :func:`run_sync` and :func:`run_async` drive any of them with the httpx
client they are given, e.g. ``run_sync(client, leader_route(cluster, tp, call, 0.1))``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from app.client import _http
from app.client._drive import drive_async, drive_sync
from app.client._http import Call
from app.client.auth import Auth, authorization
from app.client.errors import is_connection_error
from app.client.types import TopicPartition
from app.common.errors import BrokerNotAvailable, LogbusError

log = logging.getLogger(__name__)
T = TypeVar("T")

Bootstrap = str | Sequence[str]

# Error codes that mean "ask again where the partition or the group lives".
LEADER_MOVED = frozenset({"NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE"})
COORDINATOR_MOVED = frozenset(
    {"NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS"}
)
# How many times a leader- or coordinator-routed call is tried before its error is raised.
ROUTED_ATTEMPTS = 6
# "The leader cannot answer this yet; ask it again": a newly elected leader whose high
# watermark still lags the start of its epoch (ListOffsets latest). Retried at the same
# broker, backing off exponentially to TXN_BACKOFF_MAX_S, for up to LEADER_CATCH_UP_S
# (the default request timeout; Kafka's clients retry it until default.api.timeout.ms).
ASK_LEADER_AGAIN = frozenset({"OFFSET_NOT_AVAILABLE"})
# The same at a group's coordinator: offsets fetched with require_stable while a
# transaction that committed some is still open (KIP-447; Kafka's consumer retries it
# until its API timeout).
ASK_COORDINATOR_AGAIN = frozenset({"UNSTABLE_OFFSET_COMMIT"})
LEADER_CATCH_UP_S = 30.0


def bootstrap_urls(urls: Bootstrap) -> list[str]:
    """The normalized, deduplicated bootstrap URLs: a list, or one comma-separated string."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"a broker URL must be a string, got {item!r}")
        if item.strip():
            url = _http.normalize_url(item)
            if url not in out:
                out.append(url)
    if not out:
        raise ValueError("give at least one broker URL")
    return out


def error_code(exc: BaseException) -> str | None:
    code = getattr(exc, "error_code", None)
    return code if isinstance(code, str) else None


class Cluster:
    """Bootstrap URLs, live brokers, partition leaders and group coordinators, as last learnt."""

    def __init__(
        self, urls: Bootstrap, metadata_max_age_ms: int = 300_000, auth: Auth = None
    ) -> None:
        self.bootstrap = bootstrap_urls(urls)
        # The Authorization header every client of this cluster sends (app/client/auth.py).
        self.authorization = authorization(auth)
        self.max_age_s = metadata_max_age_ms / 1000
        self._lock = threading.Lock()
        # The URL that last answered: where calls for "any broker" go first.
        self._default = self.bootstrap[0]
        self._brokers: dict[int, str] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._counts: dict[str, int] = {}
        self._coordinators: dict[str, str] = {}
        self._refreshed_at: float | None = None
        self._stale: set[str] = set()

    # ---- reading ----

    @property
    def default_url(self) -> str:
        return self._default

    def is_multi(self) -> bool:
        """More than one broker is known (or given): routing and failover matter."""
        with self._lock:
            return len(self._brokers) > 1 or len(self.bootstrap) > 1

    def candidates(self) -> list[str]:
        """URLs to try for a call any broker can answer: the last good one first."""
        with self._lock:
            urls = [self._default]
            if len(self._brokers) > 1:
                urls += sorted(self._brokers.values())
            urls += self.bootstrap
        return list(dict.fromkeys(urls))

    def leader_url(self, tp: TopicPartition) -> str:
        """Where to send produce, fetch and offset calls of ``tp`` (any broker while unknown)."""
        with self._lock:
            if len(self._brokers) > 1:
                url = self._brokers.get(self._leaders.get(tp, -1))
                if url is not None:
                    return url
            return self._default

    def broker_urls(self) -> list[str]:
        """Every live broker's URL, for calls each broker answers for itself (list groups);
        for a single broker, the URL we reach it at."""
        with self._lock:
            if len(self._brokers) > 1:
                return sorted(set(self._brokers.values()))
            return [self._default]

    def partition_count(self, topic: str) -> int | None:
        with self._lock:
            return self._counts.get(topic)

    def topics(self) -> list[str]:
        with self._lock:
            return list(self._counts)

    def needs_refresh(self, topics: Iterable[str] = ()) -> bool:
        """Never fetched, older than ``metadata_max_age_ms``, or marked stale for one of ``topics``."""
        with self._lock:
            if self._refreshed_at is None:
                return True
            if time.monotonic() - self._refreshed_at >= self.max_age_s:
                return True
            return any(t in self._stale for t in topics)

    def coordinator_url(self, group: str) -> str | None:
        with self._lock:
            return self._coordinators.get(group)

    # ---- learning ----

    def answered(self, url: str) -> None:
        with self._lock:
            self._default = url

    def failed(self, url: str) -> None:
        """``url`` could not be reached: try another broker first next time, and look again."""
        with self._lock:
            if self._default == url:
                urls = [self._default]
                if len(self._brokers) > 1:
                    urls += sorted(self._brokers.values())
                urls += self.bootstrap
                ordered = list(dict.fromkeys(urls))
                if len(ordered) > 1:
                    self._default = ordered[(ordered.index(url) + 1) % len(ordered)]
            for tp, leader in self._leaders.items():
                if self._brokers.get(leader) == url:
                    self._stale.add(tp.topic)
            for group in [g for g, u in self._coordinators.items() if u == url]:
                del self._coordinators[group]

    def mark_stale(self, topic: str) -> None:
        with self._lock:
            self._stale.add(topic)

    def update(self, body: dict[str, Any], topics: Iterable[str] | None = None) -> None:
        """Take a ``GET /metadata`` answer (asked for ``topics``; None: every topic)."""
        brokers = {
            int(b["id"]): _http.normalize_url(str(b["url"])) for b in body.get("brokers", ())
        }
        with self._lock:
            if brokers:
                self._brokers = brokers
            for t in body.get("topics", ()):
                name = str(t["name"])
                parts = t["partitions"]
                self._counts[name] = len(parts)
                for p in parts:
                    tp = TopicPartition(name, int(p["partition"]))
                    self._leaders[tp] = int(p.get("leader", -1))
                self._stale.discard(name)
            for name in topics or ():
                self._stale.discard(name)
            self._refreshed_at = time.monotonic()

    def leader_hint(self, tp: TopicPartition, exc: BaseException) -> str | None:
        """Take a NOT_LEADER_OR_FOLLOWER answer; the leader's URL when it named one.

        The metadata of the topic is marked stale either way: the hint serves one
        retry, the refresh confirms it.
        """
        leader = getattr(exc, "leader", None)
        url = getattr(exc, "leader_url", None)
        with self._lock:
            self._stale.add(tp.topic)
            if isinstance(url, str) and url:
                url = _http.normalize_url(url)
                if isinstance(leader, int) and leader >= 0:
                    self._brokers[leader] = url
                    self._leaders[tp] = leader
                return url
            self._leaders.pop(tp, None)
            return None

    def set_coordinator(self, group: str, url: str) -> None:
        with self._lock:
            self._coordinators[group] = url

    def forget_coordinator(self, group: str) -> None:
        with self._lock:
            self._coordinators.pop(group, None)

    def resolve(self, advertised: str, answered_by: str) -> str:
        """A URL a broker named (a coordinator): the URL we used, for a single broker."""
        advertised = _http.normalize_url(advertised)
        with self._lock:
            if advertised == answered_by or len(self._brokers) > 1:
                return advertised
            if self._brokers and advertised in self._brokers.values():
                return answered_by  # the one broker there is, reached as we reach it
            return advertised


# ---- the calls ---------------------------------------------------------------


def metadata_call(topics: Iterable[str] | None, auto_create: bool = False) -> Call[dict[str, Any]]:
    params: dict[str, str | int] = {}
    if topics is not None:
        params["topics"] = ",".join(topics)
        if auto_create:
            params["allow_auto_topic_creation"] = "true"
    return Call("GET", "/metadata", lambda body: dict(body), params=params)


def _coordinator_call(group: str) -> Call[dict[str, Any]]:
    return Call("POST", "/coordinator", lambda body: dict(body), json={"key": group})


def _try_next(exc: LogbusError, call: Call[Any]) -> bool:
    """May another broker answer ``call`` after this error from one?"""
    if getattr(exc, "connect_failed", False):
        return True  # never reached a broker
    if is_connection_error(exc):
        # The request may have been processed: only a read is safe to send again elsewhere.
        return call.method == "GET"
    return type(exc) is BrokerNotAvailable  # starting or stopping: another may serve


def _moved_leader(cluster: Cluster, tp: TopicPartition, url: str, exc: LogbusError) -> str | None:
    """Learn from a failed leader-routed call; the URL to retry at once, if any."""
    code = error_code(exc)
    if code == "NOT_LEADER_OR_FOLLOWER":
        hint = cluster.leader_hint(tp, exc)
        return hint if hint != url else None
    if code in LEADER_MOVED or code == "UNKNOWN_TOPIC_OR_PARTITION":
        cluster.mark_stale(tp.topic)
    elif is_connection_error(exc):
        cluster.failed(url)
        cluster.mark_stale(tp.topic)
    return None


def _leader_retriable(cluster: Cluster, exc: LogbusError) -> bool:
    code = error_code(exc)
    if code in LEADER_MOVED:
        return True
    # Elsewhere (a down broker, a fresh topic the leader has not loaded yet) only
    # when there is somewhere else to go: a single broker keeps its errors as before.
    return (is_connection_error(exc) or code == "UNKNOWN_TOPIC_OR_PARTITION") and cluster.is_multi()


def _coordinator_moved(cluster: Cluster, group: str, url: str, exc: LogbusError) -> str | None:
    """Learn from a failed group call; the coordinator URL to retry at once, if named."""
    cluster.forget_coordinator(group)
    if is_connection_error(exc):
        cluster.failed(url)
        return None
    hint = getattr(exc, "coordinator_url", None)
    if error_code(exc) == "NOT_COORDINATOR" and isinstance(hint, str) and hint:
        hint = _http.normalize_url(hint)
        if hint != url:
            cluster.set_coordinator(group, hint)
            return hint
    return None


def _coordinator_retriable(cluster: Cluster, exc: LogbusError) -> bool:
    if error_code(exc) in COORDINATOR_MOVED:
        return True
    return is_connection_error(exc) and cluster.is_multi()


def _found_coordinator(cluster: Cluster, group: str, answer: dict[str, Any], by: str) -> str:
    url = cluster.resolve(str(answer["url"]), by)
    cluster.set_coordinator(group, url)
    return url


def _is_missing_endpoint(exc: LogbusError) -> bool:
    return getattr(exc, "status", None) in (404, 405)


# ---- the routes, without I/O -------------------------------------------------
#
# Each route is a generator that yields what it needs done: a call at one broker
# (:class:`_Send`; the driver sends back the decoded answer, or throws the call's
# LogbusError in) or a pause (:class:`_Sleep`). The blocking and the asyncio drivers
# below make them happen, so every routing rule is written once.


@dataclass(frozen=True, slots=True)
class _Send:
    call: Call[Any]
    url: str


@dataclass(frozen=True, slots=True)
class _Sleep:
    seconds: float


Route = Generator[_Send | _Sleep, Any, T]


def any_route(cluster: Cluster, call: Call[T]) -> Route[T]:
    """``call`` at the first broker that answers (the last good one first)."""
    urls = cluster.candidates()
    for i, url in enumerate(urls):
        try:
            result: T = yield _Send(call, url)
        except LogbusError as exc:
            if i == len(urls) - 1 or not _try_next(exc, call):
                raise
            log.debug(
                "%s %s at %s failed (%s); trying the next broker", call.method, call.path, url, exc
            )
            cluster.failed(url)
            continue
        cluster.answered(url)
        return result
    raise AssertionError("unreachable")


def refresh_route(
    cluster: Cluster, topics: Iterable[str] | None, auto_create: bool = False
) -> Route[dict[str, Any]]:
    """The metadata of ``topics`` (None: every topic) from any broker, learnt by ``cluster``."""
    names = None if topics is None else list(topics)
    body: dict[str, Any] = yield from any_route(cluster, metadata_call(names, auto_create))
    cluster.update(body, names)
    return body


def coordinator_route(cluster: Cluster, group: str) -> Route[str]:
    """The coordinator's URL: cached, else found with ``POST /coordinator`` at any broker."""
    url = cluster.coordinator_url(group)
    if url is not None:
        return url
    try:
        urls = cluster.candidates()
        for url in urls:
            try:
                answer: dict[str, Any] = yield _Send(_coordinator_call(group), url)
            except LogbusError as exc:
                if url == urls[-1] or not _try_next(exc, _coordinator_call(group)):
                    raise
                cluster.failed(url)
                continue
            cluster.answered(url)
            if _http.normalize_url(str(answer["url"])) != url and cluster.is_multi() is False:
                # Is the named broker the one we reach (a single broker behind a proxy)?
                yield from refresh_route(cluster, (), False)
            return _found_coordinator(cluster, group, answer, url)
    except LogbusError as exc:
        if not _is_missing_endpoint(exc):
            raise
    # A broker without FindCoordinator coordinates every group itself.
    return cluster.default_url


class CatchingUp:
    """The pauses of one call between :data:`ASK_LEADER_AGAIN` answers: growing from
    ``backoff_s`` to ``TXN_BACKOFF_MAX_S`` (Kafka's retry.backoff.ms up to
    retry.backoff.max.ms), for up to ``catch_up_s`` after the first."""

    __slots__ = ("catch_up_s", "pause_s", "until")

    def __init__(self, backoff_s: float, catch_up_s: float) -> None:
        self.pause_s = backoff_s
        self.catch_up_s = catch_up_s
        self.until: float | None = None

    def pause(self, exc: LogbusError) -> float | None:
        """How long to wait before asking again; None: raise ``exc`` (another error, or
        the time is up)."""
        code = error_code(exc)
        if code not in ASK_LEADER_AGAIN and code not in ASK_COORDINATOR_AGAIN:
            return None
        now = time.monotonic()
        if self.until is None:
            self.until = now + self.catch_up_s
        if now + self.pause_s > self.until:
            return None
        pause = self.pause_s
        self.pause_s = min(pause * 2, TXN_BACKOFF_MAX_S)
        return pause


def _send_catching_up(call: Call[T], url: str, catching_up: CatchingUp) -> Route[T]:
    """``call`` at ``url``, asked again after each pause ``catching_up`` grants (the
    partition behind ``url`` is catching up: nothing moved, so no attempt is spent);
    any other error, or the catch-up time being over, raises."""
    while True:
        try:
            result: T = yield _Send(call, url)
            return result
        except LogbusError as exc:
            wait = catching_up.pause(exc)
            if wait is None:
                raise
            log.debug("%s %s at %s: %s; asking again", call.method, call.path, url, exc)
            yield _Sleep(wait)


def leader_route(
    cluster: Cluster,
    tp: TopicPartition,
    call: Call[T],
    backoff_s: float,
    *,
    catch_up_s: float = LEADER_CATCH_UP_S,
) -> Route[T]:
    """``call`` at ``tp``'s leader; moves of the leader are followed with a metadata refresh
    (up to :data:`ROUTED_ATTEMPTS` tries). A leader that cannot answer yet
    (:data:`ASK_LEADER_AGAIN`) is asked again after a backoff growing from ``backoff_s``
    to ``TXN_BACKOFF_MAX_S``, for up to ``catch_up_s`` from its first such answer; those
    tries do not count as attempts (the leader did not move)."""
    url = cluster.leader_url(tp)
    attempt = 0
    catching_up = CatchingUp(backoff_s, catch_up_s)
    while True:
        try:
            return (yield from _send_catching_up(call, url, catching_up))
        except LogbusError as exc:
            attempt += 1
            if attempt == ROUTED_ATTEMPTS or not _leader_retriable(cluster, exc):
                raise
            hint = _moved_leader(cluster, tp, url, exc)
        if hint is None:
            yield _Sleep(backoff_s)
        try:
            yield from refresh_route(cluster, [tp.topic], False)
        except LogbusError as refresh_error:
            log.debug("metadata refresh failed: %s", refresh_error)
        url = hint or cluster.leader_url(tp)


def group_route(
    cluster: Cluster,
    group: str,
    call: Call[T],
    backoff_s: float,
    attempts: int = ROUTED_ATTEMPTS,
    *,
    catch_up_s: float = LEADER_CATCH_UP_S,
) -> Route[T]:
    """``call`` at ``group``'s coordinator, found again when it moved. A coordinator
    that cannot answer yet because a partition it leads is catching up
    (:data:`ASK_LEADER_AGAIN`: a reset to latest), or whose offsets are not stable yet
    (:data:`ASK_COORDINATOR_AGAIN`), is asked again as :func:`leader_route` does."""
    hint: str | None = None
    catching_up = CatchingUp(backoff_s, catch_up_s)
    attempt = 0
    while attempt < attempts:
        attempt += 1
        url = hint or (yield from coordinator_route(cluster, group))
        try:
            return (yield from _send_catching_up(call, url, catching_up))
        except LogbusError as exc:
            if not _coordinator_retriable(cluster, exc):
                raise
            hint = _coordinator_moved(cluster, group, url, exc)
            if attempt == attempts:
                raise
        if hint is None:
            yield _Sleep(backoff_s)
    raise AssertionError("unreachable")


# A transactional id's coordinator, kept beside the groups' under a key no group id can
# clash with in practice (a control character).
_TXN_KEY = "\x00txn:"
# The longest pause between two tries of a transactional call (Kafka's
# retry.backoff.max.ms default).
TXN_BACKOFF_MAX_S = 1.0


def txn_route(
    cluster: Cluster, transactional_id: str, call: Call[T], backoff_s: float, deadline: float
) -> Route[T]:
    """``call`` at ``transactional_id``'s coordinator, the leader of its
    ``__transaction_state`` partition: first any broker, then the one a 421
    NOT_COORDINATOR names. Every retriable answer (CONCURRENT_TRANSACTIONS while the
    previous transaction completes, a coordinator loading or moving, a broker down or
    restarting) is retried after ``backoff_s`` until ``deadline`` (``time.monotonic()``),
    as Kafka's producer retries its transactional requests until ``max.block.ms``. The
    coordinator's calls are safe to repeat (a retried EndTxn answers the same)."""
    key = _TXN_KEY + transactional_id
    pause = backoff_s
    while True:
        url = cluster.coordinator_url(key) or cluster.default_url
        try:
            result: T = yield _Send(call, url)
            return result
        except LogbusError as exc:
            now = time.monotonic()
            if not exc.retriable or now + backoff_s > deadline:
                raise
            moved = error_code(exc) in COORDINATOR_MOVED or is_connection_error(exc)
            hint = _coordinator_moved(cluster, key, url, exc) if moved else None
            log.debug("%s %s at %s: %s; retrying", call.method, call.path, url, exc)
        if hint is None:
            # Exponential, as Kafka's retry.backoff.ms up to retry.backoff.max.ms (KIP-580):
            # a coordinator down for the whole max_block_ms gets a few dozen requests from
            # each caller, not one every backoff_s.
            yield _Sleep(min(pause, deadline - now))
            pause = min(pause * 2, TXN_BACKOFF_MAX_S)
        else:
            pause = backoff_s


# ---- the drivers ---------------------------------------------------------------


def run_sync(client: httpx.Client, route: Route[T]) -> T:
    """``route``'s value, its calls made by blocking ``client`` requests."""

    def perform(op: _Send | _Sleep) -> Any:
        if isinstance(op, _Sleep):
            return time.sleep(op.seconds)
        return _http.run_sync(client, op.call, op.url)

    return drive_sync(route, perform)


async def run_async(client: httpx.AsyncClient, route: Route[T]) -> T:
    """``route``'s value, its calls awaited on ``client``."""

    async def perform(op: _Send | _Sleep) -> Any:
        if isinstance(op, _Sleep):
            return await asyncio.sleep(op.seconds)
        return await _http.run_async(client, op.call, op.url)

    return await drive_async(route, perform)
