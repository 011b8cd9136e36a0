"""Where the Kafka door's SCRAM credentials are kept: one protocol, two stores.

- :class:`FileScramStore`, one broker: the ``scram`` part of ``<data-dir>/users.json``
  (:class:`~app.core.security.users.UsersFile`), which ``logbus users add/passwd`` write
  and AlterUserScramCredentials changes.
- ``app/core/replication/zk_scram.py: ZkScramStore``, a cluster: the credentials
  AlterUserScramCredentials writes live in ZooKeeper (Kafka's ``/config/users/<user>``
  dynamic configs), every broker reading a watch-fed copy, combined with its own users
  file by :func:`effective` (the combination rule below).

SaslAuthenticate's SCRAM exchange (:meth:`ScramStore.credential`),
DescribeUserScramCredentials (:meth:`ScramStore.iterations`) and
AlterUserScramCredentials (:meth:`ScramStore.alter`, Kafka's per-user rules of
:class:`~app.core.security.users.ScramAlteration`) go through the protocol and never ask
which store they have; the broker builds the one its deployment needs
(``app/kafka/security.py: scram_store``), as quotas pick theirs.

The combination rule (cluster mode), per user:

- only users of this broker's users file exist here: a name missing from it has no
  credential whatever ZooKeeper holds (``logbus users remove`` revokes every login on
  that broker), and an upsertion of it is RESOURCE_NOT_FOUND (a deletion of it deletes
  what ZooKeeper holds, which serves on the brokers that have the user);
- a user ZooKeeper *manages* (its node holds a SCRAM credential or says it is managed:
  the door altered one of its credentials) has exactly ZooKeeper's credentials: a
  mechanism deleted there is absent, never the users file's copy (a revoked credential
  stays revoked on every broker);
- any other user has its users file's credentials (``logbus users add/passwd``).

Concurrency: :meth:`ScramStore.credential` runs on the event loop (dict lookups; the
users file's modification time is looked at most once a second and the file reparsed
when it changed); ``iterations``, ``alter``, ``start`` and ``close`` block (the broker
runs them in a worker thread). Thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from app.core.security.authn import Reloading
from app.core.security.users import (
    ScramCredential,
    ScramRefused,
    ScramUpsertion,
    UserEntry,
    UsersFile,
)

# A user's credentials by mechanism name.
Credentials = Mapping[str, ScramCredential]


class ScramStore(Protocol):
    """The SCRAM credentials the Kafka door authenticates against and changes (module
    docstring)."""

    def start(self) -> None: ...

    def credential(self, name: str, mechanism: str) -> ScramCredential | None:
        """The credential ``name`` logs in with by ``mechanism``; None: it has none."""
        ...

    def iterations(self) -> dict[str, dict[str, int]]:
        """Each user with SCRAM credentials: its mechanisms' iteration counts."""
        ...

    def alter(
        self, deletions: Iterable[tuple[str, str]], upsertions: Iterable[ScramUpsertion]
    ) -> dict[str, ScramRefused | None]:
        """Kafka's AlterUserScramCredentials: per user (in the order first named) None
        when all its alterations are applied, else its refusal and nothing applied."""
        ...

    def close(self) -> None: ...


def effective(
    local: Mapping[str, UserEntry], managed: Mapping[str, Credentials], name: str
) -> Credentials | None:
    """The combination rule (module docstring): ``name``'s credentials, given this
    broker's users file (``local``) and the users ZooKeeper manages (``managed``, empty
    on one broker); None when ``name`` is no user here."""
    entry = local.get(name)
    if entry is None:
        return None
    found = managed.get(name)
    return entry.scram if found is None else found


def iterations_of(
    local: Mapping[str, UserEntry], managed: Mapping[str, Credentials]
) -> dict[str, dict[str, int]]:
    """Every user's effective mechanisms and iteration counts (users without any left
    out), by name."""
    out: dict[str, dict[str, int]] = {}
    for name in local:
        found = effective(local, managed, name)
        if found:
            out[name] = {m: c.iterations for m, c in sorted(found.items())}
    return out


def users_file(path: Path) -> Reloading:
    """The users file's entries, reparsed when it changes (``get()``)."""
    return Reloading(path, lambda p: UsersFile(p).entries(), lambda: None)


class FileScramStore:
    """One broker's SCRAM credentials: its users file's (module docstring)."""

    def __init__(self, path: Path) -> None:
        self._file = UsersFile(path)
        self._entries = users_file(path)

    def start(self) -> None:
        self._entries.get()

    def credential(self, name: str, mechanism: str) -> ScramCredential | None:
        found = effective(self._entries.get(), {}, name)
        return None if found is None else found.get(mechanism)

    def iterations(self) -> dict[str, dict[str, int]]:
        return iterations_of(self._file.entries(), {})

    def alter(
        self, deletions: Iterable[tuple[str, str]], upsertions: Iterable[ScramUpsertion]
    ) -> dict[str, ScramRefused | None]:
        return self._file.alter_scram(deletions, upsertions)

    def close(self) -> None:
        pass
