"""The users of HTTP Basic: names and salted scrypt hashes in ``<data-dir>/users.json``.

Format::

    {"users": {"alice": {"scrypt": {"n": 131072, "r": 8, "p": 1,
                                    "salt": "<base64, 16 bytes>", "hash": "<base64, 32 bytes>"},
                         "scram": {"SCRAM-SHA-256": {"salt": "<base64>", "iterations": 4096,
                                                     "stored_key": "<base64>",
                                                     "server_key": "<base64>"},
                                   "SCRAM-SHA-512": {...}}}}}

``scram`` holds the SASL SCRAM credentials of the Kafka door (RFC 5802/7677, as Kafka's
``kafka-configs --alter --add-config SCRAM-SHA-256=[...]`` keeps them): per mechanism the
salt, the iteration count (>= 4096, Kafka's minimum) and StoredKey = H(HMAC(SaltedPassword,
"Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"); enough to verify a
client's proof and prove the server, never enough to log in (the password and
SaltedPassword are not kept). ``add`` and ``passwd`` write both forms; a user written
before SCRAM existed has no ``scram`` and can still use PLAIN (checked against scrypt).

Why scrypt (``hashlib.scrypt``, the standard library's binding of OpenSSL's): it is a
memory-hard, salted, slow hash that OWASP lists beside argon2id for password storage, and
it needs no new compiled dependency in the broker. The cost (N=2^17, r=8, p=1: 128 MiB
and a few hundred milliseconds per check, OWASP's minimum for scrypt) is stored per
user, so it can be raised later without invalidating older entries. Verifying compares
in constant time; a wrong name costs the same as a wrong password (a dummy hash is
checked), so answers do not tell which names exist.

The file is written whole (temporary file, fsync, rename) by ``logbus users`` on the
broker's machine; a running broker rereads it when its modification time changes, so
``add``/``passwd``/``remove`` take effect without a restart. Never holds a password.

On one broker the Kafka door's AlterUserScramCredentials changes the ``scram`` part of
existing users (:meth:`UsersFile.alter_scram`) and DescribeUserScramCredentials reads
it; in a cluster those credentials go to ZooKeeper instead and this file's ``scram``
serves only the users the door never altered (the rule:
:mod:`app.core.security.scram_store`). Kafka's per-user rules and error names are
:class:`ScramAlteration`'s, for both. A user is made only by ``logbus users add`` (it
needs the scrypt hash HTTP Basic and PLAIN check, which a SCRAM upsertion does not carry).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

USERS_FILE = "users.json"
SCRYPT_N = 2**17
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
HASH_BYTES = 32
# The SASL SCRAM mechanisms whose credentials are written beside the scrypt hash, and
# their iteration count (Kafka's default and minimum is 4096).
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_ITERATIONS = 8192
SCRAM_MIN_ITERATIONS = 4096
# Kafka's ScramMechanism.maxIterations: an upsertion above it is refused.
SCRAM_MAX_ITERATIONS = 16384
_SCRAM_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
# One writer of this process at a time (the door's alterations run in worker threads).
_WRITING = threading.Lock()
# A name is what follows "User:" in a principal: no colon, no space, not the wildcard.
_NAME = re.compile(r"^[A-Za-z0-9._@+=-]{1,128}$")


class InvalidUser(ValueError):
    """A user name or users file that cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class ScryptHash:
    n: int
    r: int
    p: int
    salt: bytes
    hash: bytes

    @classmethod
    def make(cls, password: str, n: int = SCRYPT_N) -> ScryptHash:
        salt = secrets.token_bytes(SALT_BYTES)
        return cls(n, SCRYPT_R, SCRYPT_P, salt, _scrypt(password, salt, n, SCRYPT_R, SCRYPT_P))

    def verify(self, password: str) -> bool:
        got = _scrypt(password, self.salt, self.n, self.r, self.p)
        return hmac.compare_digest(got, self.hash)

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "r": self.r,
            "p": self.p,
            "salt": base64.b64encode(self.salt).decode(),
            "hash": base64.b64encode(self.hash).decode(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScryptHash:
        return cls(
            int(data["n"]),
            int(data["r"]),
            int(data["p"]),
            base64.b64decode(data["salt"]),
            base64.b64decode(data["hash"]),
        )


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """One SCRAM mechanism's server-side credential (RFC 5802 section 3)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def make(
        cls, mechanism: str, password: str, iterations: int = SCRAM_ITERATIONS
    ) -> ScramCredential:
        import scramp  # the SCRAM implementation the Kafka door's server side uses

        salt, stored_key, server_key, count = scramp.ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=iterations
        )
        return cls(salt, count, stored_key, server_key)

    @classmethod
    def from_salted(
        cls, mechanism: str, salt: bytes, iterations: int, salted_password: bytes
    ) -> ScramCredential:
        """The credential of a SaltedPassword a client computed (Kafka's
        AlterUserScramCredentials upsertion: the password never leaves the client)."""
        h = _SCRAM_HASHES[mechanism]
        client_key = hmac.new(salted_password, b"Client Key", h).digest()
        server_key = hmac.new(salted_password, b"Server Key", h).digest()
        return cls(salt, iterations, h(client_key).digest(), server_key)

    def to_json(self) -> dict[str, Any]:
        return {
            "salt": base64.b64encode(self.salt).decode(),
            "iterations": self.iterations,
            "stored_key": base64.b64encode(self.stored_key).decode(),
            "server_key": base64.b64encode(self.server_key).decode(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScramCredential:
        iterations = int(data["iterations"])
        if iterations < SCRAM_MIN_ITERATIONS:
            raise ValueError(f"SCRAM iterations {iterations} < {SCRAM_MIN_ITERATIONS}")
        return cls(
            base64.b64decode(data["salt"]),
            iterations,
            base64.b64decode(data["stored_key"]),
            base64.b64decode(data["server_key"]),
        )


@dataclass(frozen=True, slots=True)
class UserEntry:
    """A user's stored credentials: the scrypt hash and the SCRAM ones by mechanism."""

    scrypt: ScryptHash
    scram: dict[str, ScramCredential]

    @classmethod
    def make(cls, password: str, n: int = SCRYPT_N) -> UserEntry:
        scram = {m: ScramCredential.make(m, password) for m in SCRAM_MECHANISMS}
        return cls(ScryptHash.make(password, n), scram)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"scrypt": self.scrypt.to_json()}
        if self.scram:
            doc["scram"] = {m: c.to_json() for m, c in sorted(self.scram.items())}
        return doc

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UserEntry:
        scram = {str(m): ScramCredential.from_json(c) for m, c in (data.get("scram") or {}).items()}
        return cls(ScryptHash.from_json(data["scrypt"]), scram)


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8"),
        salt=salt,
        n=n,
        r=r,
        p=p,
        maxmem=2 * 128 * n * r * p + 1024 * 1024,
        dklen=HASH_BYTES,
    )


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise InvalidUser(
            f"user name {name!r}: 1 to 128 of letters, digits and . _ @ + = - (no ':', no spaces)"
        )
    return name


class ScramRefused(Exception):
    """One user's SCRAM alteration refused: ``code`` is Kafka's error name
    (RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# A SCRAM upsertion: user, mechanism, iterations, salt, SaltedPassword.
ScramUpsertion = tuple[str, str, int, bytes, bytes]


class ScramAlteration:
    """One AlterUserScramCredentials request's per-user rules (Kafka's), written once for
    every SCRAM store (:meth:`UsersFile.alter_scram`, the cluster's ZooKeeper store):
    :meth:`of` checks what needs no stored state (a (user, mechanism) twice
    DUPLICATE_RESOURCE; iterations outside 4096-16384 or an empty salt or SaltedPassword
    UNACCEPTABLE_CREDENTIAL) and turns each upsertion's SaltedPassword into a
    credential; :meth:`apply` applies a user's alterations to the credentials the store
    holds for it now (no such user, or a deletion of a credential it does not have,
    RESOURCE_NOT_FOUND). A refused user has none of its alterations applied.

    Immutable once made, so a store may :meth:`apply` again when a compare-and-set
    retries. Mechanisms are SCRAM_MECHANISMS' names."""

    def __init__(
        self,
        changes: dict[str, list[tuple[str, ScramCredential | None]]],
        refused: dict[str, ScramRefused],
        upserted: frozenset[str] = frozenset(),
    ) -> None:
        self._changes = changes
        self._refused = refused
        self._upserted = upserted

    @property
    def users(self) -> list[str]:
        """Every user the request names, in the order first named (deletions first)."""
        return list(self._changes)

    def upserts(self, name: str) -> bool:
        """Whether the request upserts a credential of ``name`` (an upsertion refused by
        :meth:`of` included)."""
        return name in self._upserted

    @classmethod
    def of(
        cls, deletions: Iterable[tuple[str, str]], upsertions: Iterable[ScramUpsertion]
    ) -> ScramAlteration:
        changes: dict[str, list[tuple[str, ScramCredential | None]]] = {}
        refused: dict[str, ScramRefused] = {}
        seen: set[tuple[str, str]] = set()

        def note(name: str, mechanism: str) -> bool:
            changes.setdefault(name, [])
            if (name, mechanism) in seen:
                refused.setdefault(
                    name,
                    ScramRefused(
                        "DUPLICATE_RESOURCE",
                        f"{name}: {mechanism} is altered more than once in the request",
                    ),
                )
                return False
            seen.add((name, mechanism))
            return True

        for name, mechanism in deletions:
            if note(name, mechanism):
                changes[name].append((mechanism, None))
        upserted: set[str] = set()
        for name, mechanism, iterations, salt, salted in upsertions:
            upserted.add(name)
            if not note(name, mechanism):
                continue
            if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
                refused.setdefault(
                    name,
                    ScramRefused(
                        "UNACCEPTABLE_CREDENTIAL",
                        f"{name}: {iterations} iterations, outside "
                        f"{SCRAM_MIN_ITERATIONS}-{SCRAM_MAX_ITERATIONS}",
                    ),
                )
            elif not salt or not salted:
                refused.setdefault(
                    name,
                    ScramRefused("UNACCEPTABLE_CREDENTIAL", f"{name}: empty salt or password"),
                )
            else:
                credential = ScramCredential.from_salted(mechanism, salt, iterations, salted)
                changes[name].append((mechanism, credential))
        return cls(changes, refused, frozenset(upserted))

    def apply(
        self, name: str, current: Mapping[str, ScramCredential] | None
    ) -> dict[str, ScramCredential] | ScramRefused:
        """``name``'s credentials by mechanism once its alterations are applied to
        ``current`` (None: the store has no such user), or why it is refused."""
        refused = self._refused.get(name)
        if refused is not None:
            return refused
        if current is None:
            return ScramRefused(
                "RESOURCE_NOT_FOUND",
                f"no user {name!r}: `logbus users add` makes users (SCRAM and a "
                "password hash for HTTP Basic and PLAIN)",
            )
        ops = self._changes.get(name, [])
        missing = [m for m, c in ops if c is None and m not in current]
        if missing:
            return ScramRefused(
                "RESOURCE_NOT_FOUND", f"{name} has no {missing[0]} credential to delete"
            )
        scram = dict(current)
        for mechanism, new in ops:
            if new is None:
                del scram[mechanism]
            else:
                scram[mechanism] = new
        return scram


class UsersFile:
    """Read and change ``users.json`` (module docstring). Not thread-safe: one writer."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, ScryptHash]:
        """The scrypt hash of each user, by name."""
        return {name: entry.scrypt for name, entry in self.entries().items()}

    def entries(self) -> dict[str, UserEntry]:
        """Every user's stored credentials, by name."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            users = orjson.loads(data)["users"]
            return {check_name(n): UserEntry.from_json(u) for n, u in users.items()}
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise InvalidUser(f"{self.path} is not a users file: {exc}") from None

    def _write(self, users: dict[str, UserEntry]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"users": {n: e.to_json() for n, e in sorted(users.items())}}
        tmp = self.path.with_name(self.path.name + ".tmp")
        # Owner-only: the hashes are slow to attack, not impossible.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def add(self, name: str, password: str, n: int = SCRYPT_N) -> None:
        users = self.entries()
        if check_name(name) in users:
            raise InvalidUser(f"user {name!r} exists; use passwd to change its password")
        users[name] = UserEntry.make(password, n)
        self._write(users)

    def passwd(self, name: str, password: str, n: int = SCRYPT_N) -> None:
        users = self.entries()
        if name not in users:
            raise InvalidUser(f"no user {name!r}")
        users[name] = UserEntry.make(password, n)
        self._write(users)

    def remove(self, name: str) -> None:
        users = self.entries()
        if users.pop(name, None) is None:
            raise InvalidUser(f"no user {name!r}")
        self._write(users)

    def alter_scram(
        self, deletions: Iterable[tuple[str, str]], upsertions: Iterable[ScramUpsertion]
    ) -> dict[str, ScramRefused | None]:
        """Kafka's AlterUserScramCredentials on existing users, in one write: per user (in
        the order first named) None when all its alterations are applied, else the first
        refusal (:class:`ScramAlteration`'s rules), and none of its alterations applied."""
        alteration = ScramAlteration.of(deletions, upsertions)
        outcome: dict[str, ScramRefused | None] = {}
        with _WRITING:
            users = self.entries()
            changed = False
            for name in alteration.users:
                entry = users.get(name)
                applied = alteration.apply(name, None if entry is None else entry.scram)
                if isinstance(applied, ScramRefused):
                    outcome[name] = applied
                    continue
                assert entry is not None
                users[name] = UserEntry(entry.scrypt, applied)
                outcome[name] = None
                changed = True
            if changed:
                self._write(users)
        return outcome
