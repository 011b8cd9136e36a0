"""Client quotas in Kafka's model: byte rates and a request rate per user and/or client id.

Entities (Kafka's ``/config/users/<user>/clients/<client-id>`` znodes): a quota is set on
an :class:`Entity` ``(user, client_id)`` where each part is absent (``None``), a name, or
:data:`DEFAULT` (Kafka's ``<default>``). Keys (:data:`KEYS`):

- ``producer_byte_rate``: bytes/s of produce requests (HTTP bodies, WebSocket produce
  messages);
- ``consumer_byte_rate``: bytes/s of fetch answers;
- ``request_rate``: requests (and WebSocket messages) per second. Kafka's
  ``request_percentage`` is CPU time on the request threads; a broker of one event loop
  has no such threads, so the rate of requests is the quota here.

Which quota applies to a (user, client id) is Kafka's order (:data:`PRECEDENCE`), looked
up per key: the most specific entity that sets that key wins. The principals that share a
quota share its measurement: Kafka's metric tags, built by :meth:`QuotaConfig.resolve`
(a quota on ``users/alice`` is shared by every client id of alice; one on
``users/<default>`` is measured for each user apart).

Enforcement (:class:`QuotaManager`) follows Kafka: usage is measured over a window of
``window_num`` samples of ``window_size_s`` (Kafka's ``quota.window.num=11``,
``quota.window.size.seconds=1``), as a :class:`TokenBucket` of that window's worth of
credit (Kafka's KIP-599 measurement; see the class for why not the sampled rate); when a
principal is over, its answer is delayed by the time that brings it back to its quota
(at most the whole window, as Kafka). Nothing is refused.

Administration, written once for both doors (HTTP's ``/quotas``, the Kafka door's
DescribeClientQuotas and AlterClientQuotas): :class:`QuotaFilter` is Kafka's describe
filter (components matched exactly, as the default entity, or as any entity of the type;
``strict``), :func:`alteration` checks one entity's changes with Kafka's messages, and
:class:`Quotas` (the manager and its store, a file or ZooKeeper) applies them, updates
the manager and audits the change. Kafka's ``ip`` entities are not kept: a filter naming
one matches nothing, an alteration of one is refused.

Concurrency: :class:`QuotaManager` (and the answers :meth:`QuotaConfig.resolve` memoizes)
are used from the event loop only (no locks): a record
is a few dict lookups and float operations. :class:`QuotaConfig` snapshots are immutable
and replaced whole by the store's watcher. :meth:`Quotas.alter` runs the store's blocking
write in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from app.core.security import audit

DEFAULT = "<default>"
PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_rate"
KEYS = (PRODUCE, FETCH, REQUEST)
# Kafka's entity types; Logbus keeps quotas on the first two.
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
NO_IP_QUOTAS = "Logbus keeps no IP quotas (connection limits: kafka_max_connections_per_ip)"
# Kafka's share of request-thread time: a measure Logbus does not have (module docstring).
REQUEST_PERCENTAGE = "request_percentage"
QUOTAS_FILE = "quotas.json"
# Beyond this many measured (key, user, client) triples, idle ones are dropped: client ids
# are chosen by clients, so the table must not grow without bound.
MAX_SENSORS = 50_000


class InvalidQuota(ValueError):
    """A quota entity, key or value that Kafka's rules refuse."""


@dataclass(frozen=True, slots=True)
class Entity:
    """``user`` and ``client_id``: None (not part of the entity), a name, or DEFAULT."""

    user: str | None = None
    client_id: str | None = None

    def validate(self) -> Entity:
        if self.user is None and self.client_id is None:
            raise InvalidQuota("a quota entity names a user, a client id or both")
        for part in (self.user, self.client_id):
            if part is not None and (not part or len(part) > 255):
                raise InvalidQuota("an entity name has 1 to 255 characters")
        return self

    def to_json(self) -> list[dict[str, str | None]]:
        """Kafka's DescribeClientQuotas entity: components, ``entity_name`` None = default."""
        out: list[dict[str, str | None]] = []
        if self.user is not None:
            out.append({"entity_type": "user", "entity_name": _name(self.user)})
        if self.client_id is not None:
            out.append({"entity_type": "client-id", "entity_name": _name(self.client_id)})
        return out

    @classmethod
    def from_json(cls, components: Iterable[Mapping[str, Any]]) -> Entity:
        user: str | None = None
        client: str | None = None
        for c in components:
            kind, name = c.get("entity_type"), c.get("entity_name")
            if name is not None and not isinstance(name, str):
                raise InvalidQuota("entity_name is a string or null (the default entity)")
            value = DEFAULT if name is None else name
            if kind == "user" and user is None:
                user = value
            elif kind == "client-id" and client is None:
                client = value
            else:
                raise InvalidQuota(f"entity_type {kind!r}: user or client-id, each at most once")
        return cls(user, client).validate()

    def path(self) -> str:
        """Kafka's znode path under ``/config`` (``users/alice/clients/<default>``)."""
        if self.user is None:
            return f"clients/{self.client_id}"
        if self.client_id is None:
            return f"users/{self.user}"
        return f"users/{self.user}/clients/{self.client_id}"


def _name(part: str) -> str | None:
    return None if part == DEFAULT else part


# Kafka's order (docs, "Quotas" > "Quota configuration"), most specific first. Each entry
# is how to build the entity from (user, client_id): a name, DEFAULT, or None (absent).
PRECEDENCE: tuple[tuple[str | None, str | None], ...] = (
    ("user", "client"),
    ("user", DEFAULT),
    ("user", None),
    (DEFAULT, "client"),
    (DEFAULT, DEFAULT),
    (DEFAULT, None),
    (None, "client"),
    (None, DEFAULT),
)


def _unknown_key(key: str) -> InvalidQuota:
    if key == REQUEST_PERCENTAGE:
        return InvalidQuota(
            f"{REQUEST_PERCENTAGE} (a share of request-thread time) is not measured by "
            f"Logbus: its quotas are {', '.join(KEYS)} ({REQUEST} counts requests per second)"
        )
    return InvalidQuota(f"unknown quota key {key!r}: one of {', '.join(KEYS)}")


def check_values(values: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in values.items():
        if key not in KEYS:
            raise _unknown_key(key)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise InvalidQuota(f"{key} is a finite number above 0")
        out[key] = float(value)
    return out


def _entity(components: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity of Kafka's components ``(entity_type, entity_name)``, a name None
    standing for the default entity; InvalidQuota as Kafka refuses them."""
    parts: dict[str, str] = {}
    for kind, name in components:
        if kind not in ENTITY_TYPES:
            raise InvalidQuota(f"entity_type {kind!r}: one of {', '.join(ENTITY_TYPES)}")
        if kind in parts:
            raise InvalidQuota(f"entity_type {kind!r} appears more than once in the entity")
        parts[kind] = DEFAULT if name is None else name
    if IP in parts:
        raise InvalidQuota(NO_IP_QUOTAS)
    return Entity(parts.get(USER), parts.get(CLIENT_ID)).validate()


Change = tuple[Entity, list[tuple[str, float | None]]]


def alteration(
    components: Iterable[tuple[str, str | None]],
    ops: Iterable[tuple[str, float | None, bool]],
) -> Change:
    """One entity's change, checked: ``components`` as :func:`_entity`, ``ops`` each
    ``(key, value, remove)`` (value None or ignored with remove). The answer's ops are
    ``(key, value)``, value None removing the key. InvalidQuota (with Kafka's reasons:
    an unknown entity type or key, a key twice, a value not above 0) otherwise."""
    entity = _entity(components)
    out: list[tuple[str, float | None]] = []
    seen: set[str] = set()
    for key, value, remove in ops:
        if key in seen:
            raise InvalidQuota(f"quota key {key!r} appears more than once for the entity")
        seen.add(key)
        if remove:
            if key not in KEYS:
                raise _unknown_key(key)
            out.append((key, None))
        elif value is None:
            raise InvalidQuota(f"{key}: a value, or remove")
        else:
            out.append((key, check_values({key: value})[key]))
    if not out:
        raise InvalidQuota("an alteration has at least one op")
    return entity, out


# How a describe filter's component matches (Kafka's DescribeClientQuotas match_type).
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


@dataclass(frozen=True, slots=True)
class QuotaFilter:
    """Kafka's DescribeClientQuotas filter: ``exact`` entity type -> the name (or DEFAULT)
    an entity must have; ``specified`` the types it must have with any name (the default
    included); ``strict``: it has no other types. :meth:`parse` builds it from the wire's
    components."""

    exact: Mapping[str, str]
    specified: frozenset[str] = frozenset()
    strict: bool = False

    @classmethod
    def parse(cls, components: Iterable[tuple[str, int, str | None]], strict: bool) -> QuotaFilter:
        """From ``(entity_type, match_type, match)`` components; InvalidQuota as Kafka
        refuses them (an empty, unknown or repeated type, a match inconsistent with its
        match type, ``ip`` with user or client-id)."""
        exact: dict[str, str] = {}
        specified: set[str] = set()
        for kind, match_type, match in components:
            if not kind:
                raise InvalidQuota("a filter component has an entity_type")
            if kind in exact or kind in specified:
                raise InvalidQuota(f"entity_type {kind!r} appears more than once in the filter")
            if kind not in ENTITY_TYPES:
                raise InvalidQuota(f"entity_type {kind!r}: one of {', '.join(ENTITY_TYPES)}")
            if match_type == MATCH_EXACT:
                if match is None:
                    raise InvalidQuota(f"{kind}: match_type 0 (exact) needs a match")
                exact[kind] = match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    raise InvalidQuota(f"{kind}: match_type 1 (default) takes no match")
                exact[kind] = DEFAULT
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    raise InvalidQuota(f"{kind}: match_type 2 (specified) takes no match")
                specified.add(kind)
            else:
                raise InvalidQuota(f"{kind}: match_type {match_type}: 0, 1 or 2")
        named = exact.keys() | specified
        if IP in named and named & {USER, CLIENT_ID}:
            raise InvalidQuota("an ip filter component goes with no user or client-id one")
        return cls(exact, frozenset(specified), strict)

    def matches(self, entity: Entity) -> bool:
        parts = {
            kind: part
            for kind, part in ((USER, entity.user), (CLIENT_ID, entity.client_id))
            if part is not None
        }
        if self.strict and len(parts) != len(self.exact) + len(self.specified):
            return False
        return all(parts.get(kind) == name for kind, name in self.exact.items()) and all(
            kind in parts for kind in self.specified
        )


class QuotaConfig:
    """An immutable snapshot: entity -> {key: value}."""

    def __init__(self, quotas: Mapping[Entity, Mapping[str, float]] | None = None) -> None:
        self.quotas: dict[Entity, dict[str, float]] = {
            e: dict(v) for e, v in (quotas or {}).items() if v
        }
        self._keys = {k for v in self.quotas.values() for k in v}
        # resolve()'s answers: a principal asks the same question on every request.
        self._resolved: dict[tuple[str, str, str], tuple[float, str, str] | None] = {}

    def __bool__(self) -> bool:
        return bool(self.quotas)

    def has(self, key: str) -> bool:
        return key in self._keys

    def resolve(self, key: str, user: str, client_id: str) -> tuple[float, str, str] | None:
        """(quota, metric user tag, metric client tag) for ``key``, or None (no quota).

        Principals with the same tags share one measurement, as Kafka's metric tags:
        the tags keep the parts the matched entity names (its defaults stand for the
        actual user or client id, each measured apart)."""
        question = (key, user, client_id)
        try:
            return self._resolved[question]
        except KeyError:
            pass
        if len(self._resolved) >= MAX_SENSORS:
            self._resolved.clear()
        found = self._resolved[question] = self._resolve(key, user, client_id)
        return found

    def _resolve(self, key: str, user: str, client_id: str) -> tuple[float, str, str] | None:
        for u_rule, c_rule in PRECEDENCE:
            entity = Entity(
                user if u_rule == "user" else u_rule,
                client_id if c_rule == "client" else c_rule,
            )
            values = self.quotas.get(entity)
            if values is not None and key in values:
                return (
                    values[key],
                    "" if u_rule is None else user,
                    "" if c_rule is None else client_id,
                )
        return None

    def altered(self, entity: Entity, ops: Iterable[tuple[str, float | None]]) -> QuotaConfig:
        """A new snapshot with ``ops`` applied to ``entity`` (value None removes the key)."""
        quotas = {e: dict(v) for e, v in self.quotas.items()}
        current = quotas.setdefault(entity, {})
        for key, value in ops:
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        return QuotaConfig(quotas)

    def select(
        self, user: str | None, client_id: str | None
    ) -> list[tuple[Entity, dict[str, float]]]:
        """The entries whose parts match: a filter part None matches anything, a name or
        DEFAULT matches exactly (a :class:`QuotaFilter` of exact components, not strict)."""
        exact = {
            kind: part for kind, part in ((USER, user), (CLIENT_ID, client_id)) if part is not None
        }
        return self.describe(QuotaFilter(exact))

    def describe(self, found: QuotaFilter) -> list[tuple[Entity, dict[str, float]]]:
        """The entries the filter selects, sorted by user then client id."""
        return sorted(
            ((e, dict(v)) for e, v in self.quotas.items() if found.matches(e)),
            key=lambda item: (item[0].user or "", item[0].client_id or ""),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "quotas": [{"entity": e.to_json(), "values": v} for e, v in self.select(None, None)]
        }

    @classmethod
    def from_json(cls, obj: Any) -> QuotaConfig:
        if not isinstance(obj, dict) or not isinstance(obj.get("quotas", []), list):
            raise InvalidQuota('a quotas document is {"quotas": [...]}')
        quotas: dict[Entity, dict[str, float]] = {}
        for entry in obj.get("quotas", []):
            entity = Entity.from_json(entry.get("entity") or ())
            quotas[entity] = check_values(entry.get("values") or {})
        return cls(quotas)


class TokenBucket:
    """Kafka's ``TokenBucket`` measurement (KIP-599): credit up to ``burst`` units that
    refills at ``quota`` per second; a record spends its value, and a debt is the time to
    wait: ``-tokens / quota``.

    Kafka's older sampled ``Rate`` lets a first burst of a whole window through and, when
    that sample expires ``window`` later, lets the same burst through again: the rate
    oscillates with the window's period and never smooths out. The bucket, with the same
    window settings (``burst = quota * window_num * window_size_s``), admits that one burst
    and then holds the rate at the quota over any interval."""

    __slots__ = ("last", "stamp", "tokens")

    def __init__(self, burst: float, now: float) -> None:
        self.tokens = burst
        self.stamp = now
        self.last = now

    def record(self, value: float, quota: float, burst: float, now: float) -> float:
        """Spend ``value``; the throttle time in seconds it earned (0.0 if none)."""
        tokens = min(burst, self.tokens + (now - self.stamp) * quota) - value
        self.tokens = tokens
        self.stamp = self.last = now
        return 0.0 if tokens >= 0.0 else -tokens / quota


class QuotaManager:
    """Measures usage and computes throttle times; one per broker, event loop only."""

    def __init__(
        self,
        window_num: int = 11,
        window_size_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window_num < 2 or window_size_s <= 0:
            raise ValueError("quota windows: at least 2 samples of a positive size")
        self.window_num = window_num
        self.window_size_s = window_size_s
        self.max_throttle_s = window_num * window_size_s
        self.config = QuotaConfig()
        self.clock = clock
        self._rates: dict[tuple[str, str, str], TokenBucket] = {}

    def update(self, config: QuotaConfig) -> None:
        self.config = config

    def record(self, key: str, user: str, client_id: str, value: float) -> float:
        """Record ``value`` (bytes or 1 request) for the principal; the throttle time in
        seconds it earned (0.0 within its quota or with no quota)."""
        config = self.config
        if not config.has(key):
            return 0.0
        found = config.resolve(key, user, client_id)
        if found is None:
            return 0.0
        quota, u_tag, c_tag = found
        now = self.clock()
        tags = (key, u_tag, c_tag)
        burst = quota * self.max_throttle_s
        bucket = self._rates.get(tags)
        if bucket is None:
            if len(self._rates) >= MAX_SENSORS:
                self._expire(now)
            bucket = self._rates[tags] = TokenBucket(burst, now)
        return min(bucket.record(value, quota, burst, now), self.max_throttle_s)

    def _expire(self, now: float) -> None:
        idle = self.max_throttle_s
        for tags in [t for t, r in self._rates.items() if now - r.last > idle]:
            del self._rates[tags]
        if len(self._rates) >= MAX_SENSORS:
            self._rates.clear()


class QuotaStore(Protocol):
    """Where the broker's quotas are kept: :class:`FileQuotaStore`, or ZooKeeper in a
    cluster (``app/core/replication/zk_quotas.py``); ``start`` optional."""

    def load(self) -> QuotaConfig: ...

    def alter(self, changes: Iterable[Change]) -> QuotaConfig: ...

    def watch(self, on_change: Callable[[QuotaConfig], None]) -> None: ...

    def close(self) -> None: ...


class Quotas:
    """The broker's quota manager and the store it is loaded from, shared by the doors:
    HTTP's ``/quotas`` and the Kafka door's AlterClientQuotas change quotas through
    :meth:`alter` (event loop)."""

    def __init__(self, manager: QuotaManager, store: QuotaStore) -> None:
        self.manager = manager
        self.store = store

    async def start(self) -> None:
        starter = getattr(self.store, "start", None)
        if starter is not None:
            await asyncio.to_thread(starter)
        self.manager.update(await asyncio.to_thread(self.store.load))
        self.store.watch(self.manager.update)

    async def stop(self) -> None:
        await asyncio.to_thread(self.store.close)

    async def alter(self, changes: list[Change], principal: str) -> QuotaConfig:
        """Apply ``changes`` (each :func:`alteration`'s) in one write of the store, hold
        the manager to the result at once (other brokers within a second, by the store's
        watch) and audit the change as ``principal``'s."""
        config: QuotaConfig = await asyncio.to_thread(self.store.alter, changes)
        self.manager.update(config)
        audit.changed(
            principal, "ALTER_CLIENT_QUOTAS", [f"{e.path()}: {ops}" for e, ops in changes]
        )
        return config


class FileQuotaStore:
    """One broker's quotas: ``<data-dir>/quotas.json`` (written atomically), reloaded
    within a second when it changes on disk (another process editing it)."""

    def __init__(self, path: Path, poll_s: float = 1.0) -> None:
        self.path = path
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._mtime: float | None = None

    def load(self) -> QuotaConfig:
        try:
            raw = self.path.read_bytes()
            self._mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return QuotaConfig()
        return QuotaConfig.from_json(json.loads(raw or b"{}"))

    def alter(self, changes: Iterable[Change]) -> QuotaConfig:
        with self._lock:
            config = self.load()
            for entity, ops in changes:
                config = config.altered(entity, ops)
            tmp = self.path.with_suffix(".tmp")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(config.to_json(), indent=1, sort_keys=True))
            os.replace(tmp, self.path)
            self._mtime = self.path.stat().st_mtime
            return config

    def watch(self, on_change: Callable[[QuotaConfig], None]) -> None:
        def poll() -> None:
            while not self._stop.wait(self.poll_s):
                try:
                    mtime = self.path.stat().st_mtime
                except FileNotFoundError:
                    continue
                if mtime != self._mtime:
                    try:
                        on_change(self.load())
                    except (InvalidQuota, ValueError, OSError):
                        continue  # a half-edited file: the next poll tries again

        self._thread = threading.Thread(target=poll, name="quota-file-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
