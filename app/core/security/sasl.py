"""SASL mechanisms of the Kafka door, as pure exchanges: tokens in, tokens out. No I/O.

- PLAIN (RFC 4616): one message ``[authzid] NUL authcid NUL passwd``, UTF-8. The pair is
  checked by :class:`~app.core.security.authn.BasicAuthenticator` against the same
  scrypt hashes as HTTP Basic (the caller runs that slow check off the event loop); an
  authorization id other than the user's own is refused, as Kafka's PLAIN server does.
- SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802/7677, Kafka's KIP-84): two round trips,
  client-first -> server-first, client-final -> server-final, driven by ``scramp`` (a
  maintained implementation; its proof check is constant-time) against the credential
  the caller's lookup answers (StoredKey, ServerKey, salt, iterations: the broker's
  SCRAM store, :mod:`app.core.security.scram_store`). An unknown user, or one without a SCRAM credential for the mechanism,
  gets random keys with a salt of its name's (the same on every attempt, as a real
  user's, until the broker restarts) and the default iterations, so the exchange fails at
  the proof exactly as a wrong password does and answers do not tell which names exist
  (short of a user whose iterations are not the default).

- OAUTHBEARER (RFC 7628, Kafka's KIP-255): one client message, a GS2 header
  (``n,[a=authzid],``) and ``\x01``-separated ``key=value`` pairs ending ``\x01\x01``;
  ``auth=Bearer <JWT>`` carries the token, which the caller validates with the same
  :class:`~app.core.security.authn.JwtAuthenticator` (JWKS, issuer, audience, principal
  claim) as HTTP's ``Authorization: Bearer``. Kafka's SASL extensions (other keys) are
  read and ignored; an authorization id other than the token's own user is refused.

The principal is ``User:<name>``, the same as HTTP Basic's, so ACLs apply on both doors.
Every failure raises :class:`~app.common.errors.SaslAuthenticationFailed` whose message
never repeats the credentials.

Concurrency: one :class:`ScramExchange` per connection, used by that connection only.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable

from app.common.errors import SaslAuthenticationFailed
from app.core.security.users import SCRAM_ITERATIONS, ScramCredential

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
OAUTHBEARER = "OAUTHBEARER"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)
# The largest SASL token accepted (PLAIN: name + password; SCRAM: a few hundred bytes;
# OAUTHBEARER: a JWT, a few KB with many claims).
MAX_TOKEN_BYTES = 16 * 1024
# Keys the salts answered for names without a credential (ScramExchange._auth_info): one
# per process, so a name's salt is stable while the broker runs and guessable by no one.
_DECOY_KEY = secrets.token_bytes(32)


def parse_plain(token: bytes) -> tuple[str, str]:
    """The (user, password) of a PLAIN message; SaslAuthenticationFailed if malformed."""
    if len(token) > MAX_TOKEN_BYTES:
        raise SaslAuthenticationFailed("PLAIN: message too long")
    try:
        authzid, authcid, password = token.decode("utf-8").split("\0")
    except (UnicodeDecodeError, ValueError):
        raise SaslAuthenticationFailed(
            "PLAIN: message is not [authzid] NUL user NUL password"
        ) from None
    if not authcid or not password:
        raise SaslAuthenticationFailed("PLAIN: user name and password are required")
    if authzid and authzid != authcid:
        raise SaslAuthenticationFailed("PLAIN: authorization id must be empty or the user's own")
    return authcid, password


def parse_oauthbearer(message: bytes) -> tuple[str, str | None]:
    """The (bearer token, authorization id or None) of an OAUTHBEARER client message;
    SaslAuthenticationFailed if malformed (the module docstring gives the format)."""
    if len(message) > MAX_TOKEN_BYTES:
        raise SaslAuthenticationFailed("OAUTHBEARER: message too long")
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationFailed("OAUTHBEARER: message is not UTF-8") from None
    header, sep, rest = text.partition("\x01")
    fields = header.split(",")
    if not sep or len(fields) != 3 or fields[0] not in ("n", "y") or fields[2]:
        # "p=..." (channel binding) is refused: Kafka's OAUTHBEARER has none.
        raise SaslAuthenticationFailed("OAUTHBEARER: message does not start with a GS2 header")
    authzid = None
    if fields[1]:
        if not fields[1].startswith("a="):
            raise SaslAuthenticationFailed("OAUTHBEARER: malformed authorization id")
        authzid = fields[1][2:].replace("=2C", ",").replace("=3D", "=")
    if rest == "\x01":
        pairs: list[str] = []
    elif rest.endswith("\x01\x01"):
        pairs = rest[:-2].split("\x01")
    else:
        raise SaslAuthenticationFailed("OAUTHBEARER: message does not end with \\x01\\x01")
    token = None
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise SaslAuthenticationFailed("OAUTHBEARER: a key=value pair is malformed")
        if key == "auth":
            scheme, _, credentials = value.partition(" ")
            if scheme.lower() != "bearer" or not credentials.strip():
                raise SaslAuthenticationFailed("OAUTHBEARER: auth is not 'Bearer <token>'")
            token = credentials.strip()
    if token is None:
        raise SaslAuthenticationFailed("OAUTHBEARER: no auth=Bearer <token> in the message")
    return token, authzid


class ScramExchange:
    """One SCRAM authentication (server side): :meth:`step` twice."""

    def __init__(
        self, mechanism: str, credential: Callable[[str, str], ScramCredential | None]
    ) -> None:
        """``credential(name, mechanism)``: the stored credential, or None."""
        import scramp  # loaded only by brokers whose Kafka door takes SCRAM

        self.mechanism = mechanism
        self._scramp = scramp
        self._credential = credential
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info)
        self._steps = 0
        self.user: str | None = None

    def _auth_info(self, name: str) -> tuple[bytes, bytes, bytes, int]:
        found = self._credential(name, self.mechanism)
        if found is None:
            # Random keys: no proof matches them. The salt is the name's own, the same on
            # every attempt as a real user's is: a fresh one each time told two attempts
            # at a name apart, so which names exist.
            size = 32 if self.mechanism == SCRAM_SHA_256 else 64
            salt = hmac.new(_DECOY_KEY, f"{self.mechanism}\0{name}".encode(), hashlib.sha256)
            found = ScramCredential(
                salt.digest()[:16],
                SCRAM_ITERATIONS,
                secrets.token_bytes(size),
                secrets.token_bytes(size),
            )
            self.user = None
        else:
            self.user = name
        return found.salt, found.stored_key, found.server_key, found.iterations

    @property
    def done(self) -> bool:
        return self._steps >= 2

    def step(self, token: bytes) -> bytes:
        """The server's answer to the client's next message; SaslAuthenticationFailed on a
        malformed message or a wrong proof. After the second step :attr:`user` names the
        authenticated user."""
        if len(token) > MAX_TOKEN_BYTES:
            raise SaslAuthenticationFailed(f"{self.mechanism}: message too long")
        try:
            text = token.decode("utf-8")
            if self._steps == 0:
                self._server.set_client_first(text)
                answer = self._server.get_server_first()
            elif self._steps == 1:
                self._server.set_client_final(text)
                answer = self._server.get_server_final()
                if self.user is None:  # cannot happen: the random keys match no proof
                    raise SaslAuthenticationFailed(f"{self.mechanism}: invalid credentials")
            else:
                raise SaslAuthenticationFailed(f"{self.mechanism}: the exchange is over")
        except (self._scramp.ScramException, UnicodeDecodeError, ValueError):
            raise SaslAuthenticationFailed(
                f"{self.mechanism}: authentication failed (invalid credentials or message)"
            ) from None
        self._steps += 1
        return str(answer).encode("utf-8")
