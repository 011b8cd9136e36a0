"""Authenticators: credentials in, a Kafka principal (``User:alice``) out. No transport.

- :class:`BasicAuthenticator`: a user name and password against ``users.json``
  (:mod:`.users`, salted scrypt). A check costs hundreds of milliseconds by design, so a
  verified pair is remembered (keyed by an HMAC of the pair under a per-process random
  key: the memory never holds a reusable hash of a password) until the users file
  changes; at most ``max_concurrent`` checks run at once. ``verify`` blocks: callers on
  an event loop run it in a worker thread, and ``cached`` first (a dict lookup).
- :class:`JwtAuthenticator`: a bearer JWT (Kafka's OAUTHBEARER idea), validated with
  PyJWT against a JWKS file (reread when it changes) or URL: signature by the key its
  ``kid`` names, ``exp`` required, ``iss`` and ``aud`` when configured, a leeway for
  clock skew; the principal is ``User:<claim>`` for the configured claim (``sub`` by
  default). A validated token is remembered until it expires.

Every failure raises :class:`~app.common.errors.SaslAuthenticationFailed` whose message
says why without repeating the credentials. A later mutual-TLS authenticator returns
an :class:`Identity` the same way (the certificate subject as principal).

Thread-safe: caches are dicts replaced or cleared whole; a race costs a recheck.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from app.common.errors import SaslAuthenticationFailed
from app.core.security.users import ScryptHash, UserEntry, UsersFile

# Cached successes per authenticator, at most; cleared whole when full.
CACHE_SIZE = 10_000
# The users/JWKS file's modification time is looked at no more often than this.
RELOAD_CHECK_S = 1.0


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a request is: a Kafka principal, and when the credential stops being valid."""

    principal: str
    mechanism: str
    expires_at: float | None = None  # unix seconds; None: does not expire


class Reloading:
    """A file's parsed content, reparsed when its modification time changes (checked at
    most once per RELOAD_CHECK_S); also the users file of the SCRAM stores
    (:mod:`app.core.security.scram_store`)."""

    def __init__(self, path: Path, parse: Callable[[Path], Any], on_reload: Callable[[], None]):
        self.path = path
        self._parse = parse
        self._on_reload = on_reload
        self._mtime: float | None = -1.0
        self._checked = 0.0
        self._value: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        now = time.monotonic()
        if now - self._checked >= RELOAD_CHECK_S:
            with self._lock:
                self._checked = now
                try:
                    mtime: float | None = self.path.stat().st_mtime_ns
                except FileNotFoundError:
                    mtime = None
                if mtime != self._mtime:
                    self._value = self._parse(self.path)
                    self._mtime = mtime
                    self._on_reload()
        return self._value


class BasicAuthenticator:
    mechanism = "basic"

    def __init__(self, users_path: Path, max_concurrent: int = 2) -> None:
        self._key = secrets.token_bytes(32)
        self._cache: dict[bytes, Identity] = {}
        self._users = Reloading(users_path, lambda p: UsersFile(p).entries(), self._cache.clear)
        self._slots = threading.Semaphore(max_concurrent)
        # Checked for unknown names, so they cost what a wrong password costs.
        self._dummy = ScryptHash.make(secrets.token_hex(16))

    def cache_key(self, name: str, password: str) -> bytes:
        """The key a verified pair is remembered under (an HMAC, never the password)."""
        return self._cache_key(name, password)

    def _cache_key(self, name: str, password: str) -> bytes:
        pair = name.encode("utf-8") + b"\0" + password.encode("utf-8")
        return hmac.new(self._key, pair, hashlib.sha256).digest()

    def cached(self, name: str, password: str) -> Identity | None:
        """The identity of a pair verified before (and since the users file last changed)."""
        self._users.get()  # drops the cache when the file changed
        return self._cache.get(self._cache_key(name, password))

    def verify(self, name: str, password: str) -> Identity:
        """Check the pair against its scrypt hash (slow, blocking). SaslAuthenticationFailed
        when the name is unknown or the password wrong (one message for both)."""
        users: dict[str, UserEntry] = self._users.get()
        with self._slots:
            entry = users.get(name)
            stored = None if entry is None else entry.scrypt
            ok = (stored or self._dummy).verify(password) and stored is not None
        if not ok:
            raise SaslAuthenticationFailed("Basic: unknown user or wrong password")
        identity = Identity(f"User:{name}", self.mechanism)
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()
        self._cache[self._cache_key(name, password)] = identity
        return identity


class JwtAuthenticator:
    mechanism = "bearer"

    def __init__(
        self,
        jwks_file: Path | None,
        jwks_url: str | None,
        issuer: str | None,
        audience: str | None,
        principal_claim: str = "sub",
        algorithms: Sequence[str] = ("RS256", "ES256", "PS256", "EdDSA"),
        leeway_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        import jwt  # PyJWT: loaded only by brokers that take bearer tokens

        if (jwks_file is None) == (jwks_url is None):
            raise ValueError("JWT authentication needs one of a JWKS file or a JWKS URL")
        self._jwt = jwt
        self._cache: dict[str, Identity] = {}
        self._jwks = (
            Reloading(jwks_file, self._parse_jwks, self._cache.clear)
            if jwks_file is not None
            else None
        )
        self._client = jwt.PyJWKClient(jwks_url, lifespan=300) if jwks_url else None
        self.issuer = issuer
        self.audience = audience
        self.principal_claim = principal_claim
        self.algorithms = list(algorithms)
        self.leeway_s = leeway_s
        self._clock = clock

    @property
    def needs_io(self) -> bool:
        """Whether an uncached check may fetch keys over the network (a JWKS URL)."""
        return self._client is not None

    def _parse_jwks(self, path: Path) -> dict[str | None, Any]:
        try:
            keys = self._jwt.PyJWKSet.from_dict(orjson.loads(path.read_bytes())).keys
        except FileNotFoundError:
            return {}
        return {key.key_id: key for key in keys}

    def cached(self, token: str) -> Identity | None:
        if self._jwks is not None:
            self._jwks.get()
        identity = self._cache.get(token)
        expires = None if identity is None else identity.expires_at
        if expires is not None and expires + self.leeway_s <= self._clock():
            self._cache.pop(token, None)
            return None
        return identity

    def _key(self, token: str) -> Any:
        jwt = self._jwt
        try:
            if self._client is not None:
                return self._client.get_signing_key_from_jwt(token).key
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise SaslAuthenticationFailed(f"bearer token refused: {_why(exc)}") from None
        assert self._jwks is not None
        keys: dict[str | None, Any] = self._jwks.get()
        kid = header.get("kid")
        key = keys.get(kid)
        if key is None and kid is None and len(keys) == 1:
            key = next(iter(keys.values()))
        if key is None:
            raise SaslAuthenticationFailed("bearer token refused: signed by an unknown key")
        return key.key

    def authenticate(self, token: str) -> Identity:
        """Validate ``token`` (blocking only with a JWKS URL); the identity it names."""
        identity = self.cached(token)
        if identity is not None:
            return identity
        jwt = self._jwt
        key = self._key(token)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": ["exp"], "verify_aud": self.audience is not None},
            )
        except jwt.PyJWTError as exc:
            raise SaslAuthenticationFailed(f"bearer token refused: {_why(exc)}") from None
        # PyJWT checks exp against the wall clock; the injected clock (tests) checks too.
        exp = float(claims["exp"])
        if exp + self.leeway_s <= self._clock():
            raise SaslAuthenticationFailed("bearer token refused: Signature has expired")
        name = claims.get(self.principal_claim)
        if not isinstance(name, str) or not name or ":" in name:
            raise SaslAuthenticationFailed(
                f"bearer token refused: claim {self.principal_claim!r} is not a user name"
            )
        identity = Identity(f"User:{name}", self.mechanism, exp)
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()
        self._cache[token] = identity
        return identity


class JwtSettings(Protocol):
    """The ``jwt_*`` settings a :class:`JwtAuthenticator` is built from (the broker's
    ``Settings`` has them; the core does not import it)."""

    @property
    def jwt_jwks_file(self) -> Path | None: ...
    @property
    def jwt_jwks_url(self) -> str | None: ...
    @property
    def jwt_issuer(self) -> str | None: ...
    @property
    def jwt_audience(self) -> str | None: ...
    @property
    def jwt_principal_claim(self) -> str: ...
    @property
    def jwt_algorithms(self) -> str: ...
    @property
    def jwt_clock_skew_s(self) -> float: ...


def jwt_authenticator(settings: JwtSettings) -> JwtAuthenticator:
    """The bearer-token check of HTTP's ``Authorization: Bearer`` and the Kafka door's
    OAUTHBEARER, from the same settings."""
    return JwtAuthenticator(
        settings.jwt_jwks_file,
        settings.jwt_jwks_url,
        settings.jwt_issuer,
        settings.jwt_audience,
        settings.jwt_principal_claim,
        settings.jwt_algorithms.split(","),
        settings.jwt_clock_skew_s,
    )


def _why(exc: Exception) -> str:
    # PyJWT's messages name the failed check, never the token's content.
    return str(exc) or type(exc).__name__
