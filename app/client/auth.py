"""Credentials the SDK presents to a secured broker (``auth=`` of Producer, Consumer, Admin).

- ``BasicAuth("alice", "secret")`` or the tuple ``("alice", "secret")``: HTTP Basic,
  checked against the broker's users file;
- ``BearerAuth(token)`` or a plain ``str``: a JWT from your identity provider, sent as
  ``Authorization: Bearer``.

Every request of the client carries the header, its fetch connections (app/wire.py)
included. Send credentials only over TLS (``https://``) on an untrusted network.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True, slots=True)
class BasicAuth:
    username: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"BasicAuth({self.username!r}, '***')"


@dataclass(frozen=True, slots=True)
class BearerAuth:
    token: str

    def __repr__(self) -> str:
        return "BearerAuth('***')"


Auth: TypeAlias = BasicAuth | BearerAuth | tuple[str, str] | str | None


def authorization(auth: Auth) -> str | None:
    """The ``Authorization`` header value for ``auth`` (None: no header)."""
    if auth is None:
        return None
    if isinstance(auth, tuple):
        auth = BasicAuth(*auth)
    if isinstance(auth, str):
        auth = BearerAuth(auth)
    if isinstance(auth, BasicAuth):
        if ":" in auth.username:
            raise ValueError("a Basic user name cannot contain ':'")
        pair = f"{auth.username}:{auth.password}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")
    if isinstance(auth, BearerAuth):
        if not auth.token or any(c in auth.token for c in "\r\n "):
            raise ValueError("a bearer token is one non-empty word")
        return f"Bearer {auth.token}"
    raise TypeError(f"auth is BasicAuth, BearerAuth, (user, password) or a token, not {auth!r}")
