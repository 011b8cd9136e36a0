"""The cluster's SCRAM credentials in ZooKeeper, where Kafka keeps them: in each user's
dynamic-config node, beside its client quotas (:mod:`app.core.replication.zk_quotas`),
with change notices so every broker's SCRAM logins follow an alteration within a second.

Format (Kafka's; :mod:`app.core.replication.zk_configs` for the node and the notice)::

    /config/users/<user>  {"version": 1, "config": {
        "SCRAM-SHA-256": "salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>",
        "SCRAM-SHA-512": "...",
        "logbus.scram.managed": "true",
        "producer_byte_rate": "1048576.0"}}     (a quota: zk_quotas.py's key)
    /config/changes/config_change_<seq>  {"version": 2, "entity_path": "users/<user>"}

Base64 is the standard alphabet with padding (Kafka's ``ScramCredentialUtils``).
``logbus.scram.managed`` records that AlterUserScramCredentials changed the user's
credentials, so a node whose mechanisms were all deleted still says the user is managed:
the combination rule (:mod:`app.core.security.scram_store`) then gives the user no
credential rather than its users file's copy. A node with a SCRAM key (written by
Kafka's own tools) is managed too.

Invariants: every write is a compare-and-set of the user's whole config (read, the
SCRAM keys and the marker replaced, every other key written back as read), retried on a
conflicting write, so a quota store writing the same node loses nothing and is lost by
nothing. Kafka's per-user rules are :class:`~app.core.security.users.ScramAlteration`'s,
applied to what the node holds at the write (or, for a user not yet managed, to the
receiving broker's users file credentials: the first alteration keeps the mechanisms it
does not name). An upsertion needs the user in the receiving broker's users file
(RESOURCE_NOT_FOUND otherwise); a deletion does not: it deletes what ZooKeeper manages
(RESOURCE_NOT_FOUND for a credential it does not hold), as Kafka, so a revocation holds
whichever broker receives it; an alteration of a user whose node cannot be read is
refused (UNKNOWN_SERVER_ERROR, nothing written), the others go on. Fail closed: a user
node that cannot be read makes its user managed without credentials, a SCRAM value that
cannot be read leaves that mechanism absent (each logged); a failed reload keeps the
last set.

Concurrency: blocking kazoo calls (``alter``, ``iterations`` and ``start`` in a worker
thread); :meth:`credential` is a dict lookup (the event loop's); the ChildrenWatch
callback runs on kazoo's thread and swaps the set whole under the lock. Thread-safe.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from kazoo.exceptions import NoNodeError

from app.core.replication.zk_configs import (
    CHANGE_PREFIX,
    CHANGES,
    USERS,
    UnreadableConfig,
    change_notice,
    decode_name,
    encode_config,
    read_config,
    unreadable_message,
    user_path,
)
from app.core.replication.zk_watched import ZkLayout, ZkWatchedStore
from app.core.security.quotas import DEFAULT
from app.core.security.scram_store import Credentials, effective, iterations_of, users_file
from app.core.security.users import (
    SCRAM_MECHANISMS,
    SCRAM_MIN_ITERATIONS,
    ScramAlteration,
    ScramCredential,
    ScramRefused,
    ScramUpsertion,
    UsersFile,
)

__all__ = ["MANAGED", "ZkScramStore", "format_credential", "parse_credential"]

_log = logging.getLogger(__name__)

MANAGED = "logbus.scram.managed"
# The users ZooKeeper manages: name -> credentials by mechanism.
Managed = dict[str, Credentials]


def format_credential(credential: ScramCredential) -> str:
    """Kafka's text of a SCRAM credential."""

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return (
        f"salt={b64(credential.salt)},stored_key={b64(credential.stored_key)},"
        f"server_key={b64(credential.server_key)},iterations={credential.iterations}"
    )


def parse_credential(text: str) -> ScramCredential:
    """The credential of Kafka's text; ValueError when a field is missing or invalid."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")  # base64 padding is '=': split once
        if not eq:
            raise ValueError(f"{part!r} is not key=value")
        fields[key.strip()] = value.strip()
    try:
        iterations = int(fields["iterations"])
        salt, stored, server = (
            base64.b64decode(fields[k], validate=True) for k in ("salt", "stored_key", "server_key")
        )
    except (KeyError, binascii.Error) as exc:
        raise ValueError(f"a SCRAM credential needs salt, keys and iterations: {exc}") from None
    if iterations < SCRAM_MIN_ITERATIONS or not salt or not stored or not server:
        raise ValueError(f"SCRAM iterations {iterations} < {SCRAM_MIN_ITERATIONS} or empty keys")
    return ScramCredential(salt, iterations, stored, server)


def _managed(config: Mapping[str, str]) -> bool:
    return config.get(MANAGED) == "true" or any(m in config for m in SCRAM_MECHANISMS)


def _credentials(name: str, config: Mapping[str, str]) -> dict[str, ScramCredential]:
    out: dict[str, ScramCredential] = {}
    for mechanism in SCRAM_MECHANISMS:
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            out[mechanism] = parse_credential(text)
        except ValueError as exc:
            _log.warning("SCRAM credential %s of %s in ZooKeeper ignored: %s", mechanism, name, exc)
    return out


def _with_credentials(
    config: Mapping[str, str], credentials: Mapping[str, ScramCredential]
) -> dict[str, str]:
    """``config`` with its SCRAM keys replaced by ``credentials``, marked managed."""
    new = {k: v for k, v in config.items() if k not in SCRAM_MECHANISMS}
    new.update({m: format_credential(c) for m, c in credentials.items()})
    new[MANAGED] = "true"
    return new


class ZkScramStore(ZkWatchedStore[Managed, Managed]):
    """The SCRAM store of a cluster (module docstring), over this broker's users file at
    ``users_path``; :class:`~app.core.security.scram_store.ScramStore`'s interface."""

    LAYOUT = ZkLayout((USERS,), CHANGES, CHANGE_PREFIX, "SCRAM credentials")

    def __init__(self, connect: str, session_timeout_ms: int, users_path: Path) -> None:
        super().__init__(connect, session_timeout_ms)
        self._users = UsersFile(users_path)
        self._local = users_file(users_path)
        self._managed: Managed = {}

    def _read_user(self, name: str, path: str) -> Credentials | None:
        """The user's credentials when ZooKeeper manages it, else None."""
        try:
            data, _ = self.client.get(path)
        except NoNodeError:
            return None
        try:
            config = read_config(data)
        except ValueError as exc:
            _log.warning("user znode %s cannot be read (%s): its SCRAM logins refused", path, exc)
            return {}
        return _credentials(name, config) if _managed(config) else None

    def _read_all(self) -> Managed:
        managed: Managed = {}
        for encoded in self.client.get_children(USERS):
            name = decode_name(encoded)
            if name == DEFAULT:
                continue
            found = self._read_user(name, f"{USERS}/{encoded}")
            if found is not None:
                managed[name] = found
        return managed

    def _install(self, read: Managed) -> Managed:
        self._managed = read
        return read

    def _current(self) -> Managed:
        return self._managed

    def credential(self, name: str, mechanism: str) -> ScramCredential | None:
        found = effective(self._local.get(), self._managed, name)
        return None if found is None else found.get(mechanism)

    def iterations(self) -> dict[str, dict[str, int]]:
        return iterations_of(self._users.entries(), self._managed)

    def _alter_user(
        self, name: str, alteration: ScramAlteration, local: Credentials | None
    ) -> ScramRefused | None:
        """One user's alterations by compare-and-set of its node; its refusal or None.
        ``local``: its users file credentials, None when it is no user of this broker
        (then only what ZooKeeper manages can be changed: deleted)."""
        outcome: list[ScramRefused | None] = [None]

        def change(config: dict[str, str]) -> dict[str, str]:
            current = _credentials(name, config) if _managed(config) else local
            applied = alteration.apply(name, current)
            if isinstance(applied, ScramRefused):
                outcome[0] = applied
                return config  # unchanged: nothing is written
            outcome[0] = None
            return _with_credentials(config, applied)

        path = user_path(name)
        try:
            self._compare_and_set(path, read_config, change, encode_config, change_notice(path))
        except UnreadableConfig as exc:
            # Overwriting would drop what the node holds (its quotas, say) unseen.
            return ScramRefused("UNKNOWN_SERVER_ERROR", f"{name}: {unreadable_message(path, exc)}")
        return outcome[0]

    def alter(
        self, deletions: Iterable[tuple[str, str]], upsertions: Iterable[ScramUpsertion]
    ) -> dict[str, ScramRefused | None]:
        alteration = ScramAlteration.of(deletions, upsertions)
        local = self._users.entries()
        outcome: dict[str, ScramRefused | None] = {}
        for name in alteration.users:
            entry = local.get(name)
            if entry is None and alteration.upserts(name):
                # An upsertion makes no user: refused without reading ZooKeeper.
                refused = alteration.apply(name, None)
                assert isinstance(refused, ScramRefused)
                outcome[name] = refused
                continue
            # Deletions of a user this broker does not have still apply to what ZooKeeper
            # holds (Kafka's): the credentials serve on the brokers that have the user, and
            # a revocation must not depend on which broker the admin client asked.
            scram = None if entry is None else entry.scram
            outcome[name] = self._alter_user(name, alteration, scram)
        self._trim_changes()
        self._reload()  # this broker holds the change at once, the others by the watch
        return outcome
