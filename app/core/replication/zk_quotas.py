"""The cluster's client quotas in ZooKeeper, laid out as Kafka's dynamic configs, with
change notifications so every broker reloads within a second (as app/core/replication/
zk_acls.py does for ACLs).

Layout (under the connect string's optional chroot)::

    /config/users/<user>                       quotas of a user (or <default>)
    /config/users/<user>/clients/<client-id>   quotas of a client id of a user
    /config/clients/<client-id>                quotas of a client id (any user)
    /config/changes/config_change_<seq>        PERSISTENT_SEQUENTIAL, {"version": 2,
                                               "entity_path": "users/alice"}

A name is percent-encoded (Kafka's sanitized names; ``.`` and ``..`` as ``%2E`` and
``%2E%2E``, :func:`~app.core.replication.zk_watched.node_name`); ``<default>`` is written
as is. A node's value is Kafka's ``{"version": 1, "config": {"producer_byte_rate":
"1048576"}}`` (values as strings); a node without quotas holds an empty config (its
children may have some). A user's node also holds its SCRAM credentials
(:mod:`app.core.replication.zk_scram`): this store reads only the quota keys
(``producer_byte_rate``, ``consumer_byte_rate``, ``request_rate``) and a write changes
them alone, every other key written back as read (:mod:`app.core.replication.zk_configs`).
Every broker's ChildrenWatch on ``/config/changes`` reloads the whole set (quota
sets are small) and hands it to ``on_change``; connection, change notices and
compare-and-set are :class:`~app.core.replication.zk_watched.ZkWatchedStore`'s. Blocking
kazoo calls: the broker runs writes in a worker thread; watch callbacks run on kazoo's
thread. Thread-safe.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable

from kazoo.exceptions import NoNodeError

from app.common.errors import LogbusError
from app.core.replication.zk_configs import (
    CHANGE_PREFIX,
    CHANGES,
    CLIENTS,
    USERS,
    UnreadableConfig,
    change_notice,
    encode_config,
    read_config,
    unreadable_message,
)
from app.core.replication.zk_configs import decode_name as _decode
from app.core.replication.zk_configs import encode_name as _encode
from app.core.replication.zk_watched import ZkLayout, ZkWatchedStore
from app.core.security.quotas import KEYS, Entity, QuotaConfig, check_values

_log = logging.getLogger(__name__)


def entity_path(entity: Entity) -> str:
    if entity.user is None:
        return f"{CLIENTS}/{_encode(entity.client_id or '')}"
    base = f"{USERS}/{_encode(entity.user)}"
    if entity.client_id is None:
        return base
    return f"{base}/clients/{_encode(entity.client_id)}"


def _values(data: bytes) -> dict[str, float]:
    """The quotas of a node's value: its quota keys only (a user's SCRAM credentials and
    any other key are other readers')."""
    config = read_config(data)
    return check_values({k: float(v) for k, v in config.items() if k in KEYS})


class ZkQuotaStore(ZkWatchedStore[QuotaConfig, QuotaConfig]):
    """The quota store of a cluster (module docstring); load/alter/watch/close as
    :class:`app.core.security.quotas.FileQuotaStore`."""

    LAYOUT = ZkLayout((USERS, CLIENTS), CHANGES, CHANGE_PREFIX, "quotas")

    def __init__(self, connect: str, session_timeout_ms: int) -> None:
        super().__init__(connect, session_timeout_ms)
        self._config = QuotaConfig()

    def _get(self, path: str) -> dict[str, float]:
        try:
            data, _ = self.client.get(path)
        except NoNodeError:
            return {}
        try:
            return _values(data)
        except (ValueError, TypeError):
            _log.warning("quota znode %s is not a quota config; ignored", path)
            return {}

    def _read_all(self) -> QuotaConfig:
        quotas: dict[Entity, dict[str, float]] = {}
        for encoded in self.client.get_children(USERS):
            user = _decode(encoded)
            quotas[Entity(user)] = self._get(f"{USERS}/{encoded}")
            with contextlib.suppress(NoNodeError):
                for c in self.client.get_children(f"{USERS}/{encoded}/clients"):
                    entity = Entity(user, _decode(c))
                    quotas[entity] = self._get(f"{USERS}/{encoded}/clients/{c}")
        for encoded in self.client.get_children(CLIENTS):
            quotas[Entity(None, _decode(encoded))] = self._get(f"{CLIENTS}/{encoded}")
        return QuotaConfig(quotas)

    def _install(self, read: QuotaConfig) -> QuotaConfig:
        self._config = read
        return read

    def _current(self) -> QuotaConfig:
        return self._config

    def load(self) -> QuotaConfig:
        return self._config

    def _update(self, entity: Entity, ops: list[tuple[str, float | None]]) -> None:
        def change(current: dict[str, str]) -> dict[str, str]:
            # The node's other keys (a user's SCRAM credentials) are written back as read.
            new = dict(current)
            for key, value in ops:
                if value is None:
                    new.pop(key, None)
                else:
                    new[key] = repr(value)
            return new

        path = entity_path(entity)
        self._compare_and_set(
            path, read_config, change, encode_config, change_notice(path), create_unchanged=True
        )

    def _check_readable(self, path: str) -> None:
        try:
            data, _ = self.client.get(path)
        except NoNodeError:
            return
        try:
            read_config(data)
        except UnreadableConfig as exc:
            raise LogbusError(unreadable_message(path, exc)) from None

    def alter(
        self, changes: Iterable[tuple[Entity, list[tuple[str, float | None]]]]
    ) -> QuotaConfig:
        """All or none: a node that cannot be read (hand-written, damaged) refuses the
        whole alteration before anything is written (LogbusError, UNKNOWN_SERVER_ERROR),
        as overwriting it would drop what it holds (a user's SCRAM credentials) unseen."""
        changes = list(changes)
        for entity, _ in changes:
            self._check_readable(entity_path(entity))
        for done, (entity, ops) in enumerate(changes):
            try:
                self._update(entity, ops)
            except UnreadableConfig as exc:  # damaged since the check: say what was written
                path = entity_path(entity)
                raise LogbusError(
                    f"ZooKeeper node {path} became unreadable during the alteration ({exc}): "
                    f"the {done} entities before it in the request were changed, it and "
                    "those after it were not; repair or delete the node, then alter again"
                ) from None
        self._trim_changes()
        return self._reload()
