"""The Kafka door's security: its listener's protocol, SASL, TLS and the authorizer.

Kafka's listener security protocols (``kafka_security_protocol``): ``PLAINTEXT``,
``SSL`` (TLS; a verified client certificate's subject is the principal, as Kafka's
``ssl.principal.mapping.rules=DEFAULT``), ``SASL_PLAINTEXT`` and ``SASL_SSL`` (SASL
required before anything but ApiVersions, SaslHandshake and SaslAuthenticate, with the
mechanisms of ``kafka_sasl_mechanisms``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512,
OAUTHBEARER). TLS uses
the broker's own ``ssl_certfile``/``ssl_keyfile``/``ssl_ca_file``/``ssl_client_auth``.

SASL checks the same users as HTTP Basic (``users.json``; principal ``User:<name>``):
PLAIN through the same :class:`~app.core.security.authn.BasicAuthenticator` (its cache
of verified pairs too) when HTTP has one, SCRAM (:mod:`app.core.security.sasl`) against
the broker's SCRAM store (:func:`scram_store`: the users file's credentials on one broker,
ZooKeeper's combined with it in a cluster, :mod:`app.core.security.scram_store`). A PLAIN check is scrypt (hundreds
of milliseconds by design): it runs in a worker thread, at most
``kafka_sasl_max_concurrent_checks`` at once (an asyncio semaphore: a flood of attempts
waits on the loop, it neither pins the loop nor fills the thread pool).

Authorization is HTTP's :class:`~app.api.security.Security` (the same authorizer object,
ACL store and super users), so an ACL granted through one door holds on the other.

Concurrency: event loop only (the scrypt check in a worker thread).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from app.core.security.authn import (
    BasicAuthenticator,
    Identity,
    JwtAuthenticator,
    jwt_authenticator,
)
from app.core.security.sasl import OAUTHBEARER, PLAIN, ScramExchange
from app.core.security.scram_store import FileScramStore, ScramStore
from app.core.security.users import USERS_FILE

if TYPE_CHECKING:
    from app.config import Settings
    from app.core.security.acl import Action, Authorizer
    from app.core.security.store import AclStore


class Security(Protocol):
    """What the door uses of HTTP's ``app.api.security.Security`` (that module is the web
    stack's: the door sees it through this protocol)."""

    basic: BasicAuthenticator | None
    jwt: JwtAuthenticator | None
    authorizer: Authorizer | None
    store: AclStore | None

    def allowed(self, identity: Identity, host: str, action: Action) -> bool: ...

    async def _verify_once(
        self, basic: BasicAuthenticator, name: str, password: str
    ) -> Identity: ...


log = logging.getLogger(__name__)

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})


@dataclass
class KafkaSecurity:
    """One per Kafka listener (module docstring)."""

    protocol: str
    mechanisms: tuple[str, ...]
    basic: BasicAuthenticator | None
    guard: Security | None
    ssl_context: ssl.SSLContext | None
    max_checks: int = 2
    jwt: JwtAuthenticator | None = None
    # The SCRAM credentials SCRAM logins are checked against (:func:`scram_store`).
    scram_credentials: ScramStore | None = None
    _checks: asyncio.Semaphore | None = field(default=None, repr=False)

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    @property
    def authorizing(self) -> bool:
        return self.guard is not None and self.guard.authorizer is not None

    async def verify_plain(self, name: str, password: str) -> Identity:
        """The identity of a PLAIN pair; SaslAuthenticationFailed when refused."""
        basic = self.basic
        assert basic is not None
        identity = basic.cached(name, password)
        if identity is not None:
            return identity
        if self._checks is None:
            self._checks = asyncio.Semaphore(self.max_checks)
        async with self._checks:
            guard = self.guard
            if guard is not None and guard.basic is basic:
                # HTTP's: concurrent checks of one pair share one scrypt run.
                return await guard._verify_once(basic, name, password)
            return await asyncio.to_thread(basic.verify, name, password)

    async def verify_bearer(self, token: str) -> Identity:
        """The identity of an OAUTHBEARER token; SaslAuthenticationFailed when refused."""
        jwt = self.jwt
        assert jwt is not None
        identity = jwt.cached(token)
        if identity is not None:
            return identity
        if jwt.needs_io:  # a JWKS URL: fetching keys may block
            return await asyncio.to_thread(jwt.authenticate, token)
        return jwt.authenticate(token)

    def scram(self, mechanism: str) -> ScramExchange:
        store = self.scram_credentials
        assert store is not None
        return ScramExchange(mechanism, store.credential)

    def allowed(self, principal: str, mechanism: str, host: str, action: Action) -> bool:
        guard = self.guard
        if guard is None or guard.authorizer is None:
            return True
        return guard.allowed(Identity(principal, mechanism), host, action)


def server_context(settings: Settings) -> ssl.SSLContext:
    """The listener's TLS context from the broker's certificate settings."""
    assert settings.ssl_certfile is not None and settings.ssl_keyfile is not None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(settings.ssl_certfile), str(settings.ssl_keyfile))
    if settings.ssl_ca_file is not None:
        context.load_verify_locations(cafile=str(settings.ssl_ca_file))
    context.verify_mode = {
        "none": ssl.CERT_NONE,
        "requested": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[settings.ssl_client_auth]
    return context


def scram_store(settings: Settings) -> ScramStore:
    """The broker's SCRAM credentials: ZooKeeper's over the users file in a cluster
    (``app/core/replication/zk_scram.py``), else the users file's; not started."""
    users = settings.users_file or settings.data_dir / USERS_FILE
    if settings.zookeeper:
        from app.core.replication.zk_scram import ZkScramStore

        return ZkScramStore(settings.zookeeper, settings.zookeeper_session_timeout_ms, users)
    return FileScramStore(users)


def build(
    settings: Settings, guard: Security | None, scram: ScramStore | None = None
) -> KafkaSecurity | None:
    """The door's security; None for a PLAINTEXT listener without an authorizer.
    ``scram``: the broker's SCRAM store (:func:`scram_store`), for SCRAM logins."""
    protocol = settings.kafka_security_protocol
    authorizing = guard is not None and guard.authorizer is not None
    if protocol == "PLAINTEXT" and not authorizing:
        return None
    mechanisms = tuple(settings.kafka_sasl_mechanism_list)
    basic = None
    if protocol in SASL_PROTOCOLS:
        if guard is not None and guard.basic is not None:
            basic = guard.basic
        else:
            basic = BasicAuthenticator(settings.users_file or settings.data_dir / USERS_FILE)
    jwt = None
    if protocol in SASL_PROTOCOLS and OAUTHBEARER in mechanisms:
        if guard is not None and guard.jwt is not None:
            jwt = guard.jwt
        else:
            jwt = jwt_authenticator(settings)
    context = server_context(settings) if protocol in TLS_PROTOCOLS else None
    log.info(
        "kafka listener security: %s%s%s",
        protocol,
        f", SASL {','.join(mechanisms)}" if protocol in SASL_PROTOCOLS else "",
        ", ACLs" if authorizing else "",
    )
    return KafkaSecurity(
        protocol,
        mechanisms,
        basic,
        guard,
        context,
        settings.kafka_sasl_max_concurrent_checks,
        jwt,
        scram if protocol in SASL_PROTOCOLS else None,
    )


def subject_name(der: bytes) -> str:
    """The RFC 4514 subject DN of a DER certificate (``CN=alice,O=Example``), as HTTP's
    ``app/api/peer.py`` names a client certificate (Kafka's DEFAULT principal mapping)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


__all__ = [
    "PLAIN",
    "KafkaSecurity",
    "Security",
    "build",
    "scram_store",
    "server_context",
    "subject_name",
]
