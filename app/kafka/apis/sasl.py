"""SaslHandshake and SaslAuthenticate: a client proves who it is on a SASL listener.

Kafka's flow (KIP-43, KIP-152): SaslHandshake names a mechanism; v1 is followed by
SaslAuthenticate requests carrying the mechanism's tokens, v0 by bare size-prefixed
tokens (:func:`raw_token`, called by the connection for those frames). PLAIN takes one
token; SCRAM two; OAUTHBEARER one (a JWT). A failure answers SASL_AUTHENTICATION_FAILED (with the reason in v1+)
and the connection closes after the answer, as Kafka does; a handshake on a non-SASL
listener or after authentication answers ILLEGAL_SASL_STATE, an unknown mechanism
UNSUPPORTED_SASL_MECHANISM with the enabled ones. A failure is answered
``kafka_failed_authentication_delay_ms`` late (Kafka's
``connection.failed.authentication.delay.ms``).

Re-authentication (KIP-368) with ``kafka_connections_max_reauth_ms`` > 0 (Kafka's
``connections.max.reauth.ms``; 0, the default, is off as in Kafka): SaslAuthenticate v1+
answers the session's lifetime, the setting or, for OAUTHBEARER, less when the token
expires sooner; the client (librdkafka does) re-authenticates on the same connection
before then, with the mechanism it used and as the same principal (another principal
fails and closes, as Kafka's "cannot change principals"). A session past its lifetime
serves nothing but SaslHandshake and SaslAuthenticate: the connection closes
(:mod:`app.kafka.connection`). Each outcome is one log line and,
for failures, one audit line (:mod:`app.core.security.audit`).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity

from app.common.errors import SaslAuthenticationFailed
from app.core.security import audit
from app.core.security.sasl import OAUTHBEARER, PLAIN, parse_oauthbearer, parse_plain
from app.kafka.apis.base import NO_THROTTLE, Context, response_module
from app.kafka.encode import build
from app.kafka.versions import SASL_AUTHENTICATE, SASL_HANDSHAKE

log = logging.getLogger(__name__)


async def sasl_handshake(ctx: Context, body: Entity | None, version: int) -> Any:
    m = response_module(SASL_HANDSHAKE, version)
    security, session = ctx.security, ctx.session
    mechanism = str(getattr(body, "mechanism", ""))
    # KIP-368: an authenticated session with a lifetime may authenticate again (v1, with
    # the mechanism it used); otherwise a second handshake is out of order.
    reauth = (
        session.authenticated
        and session.expires_at is not None
        and version >= 1
        and mechanism == session.mechanism
    )
    if security is None or not security.sasl or (session.authenticated and not reauth):
        return build(
            m.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state, mechanisms=()
        )
    session.reauthenticating = reauth
    enabled = tuple(security.mechanisms)
    if mechanism not in enabled:
        log.info("kafka SASL mechanism %r asked by %s is not enabled", mechanism, session.host)
        return build(
            m.SaslHandshakeResponse,
            error_code=ErrorCode.unsupported_sasl_mechanism,
            mechanisms=enabled,
        )
    session.mechanism = mechanism
    session.exchange = None
    session.raw_tokens = version == 0
    return build(m.SaslHandshakeResponse, error_code=ErrorCode.none, mechanisms=enabled)


async def step(ctx: Context, token: bytes) -> bytes:
    """The server's answer to one SASL token; SaslAuthenticationFailed (audited, the
    session marked to close) when refused. Authenticates the session when done."""
    security, session = ctx.security, ctx.session
    mechanism = session.mechanism
    try:
        if (
            security is None
            or mechanism is None
            or (session.authenticated and not session.reauthenticating)
        ):
            raise SaslAuthenticationFailed("no SASL handshake before SaslAuthenticate")
        if mechanism == PLAIN:
            name, password = parse_plain(token)
            identity = await security.verify_plain(name, password)
            _authenticated(ctx, identity.principal, mechanism)
            return b""
        if mechanism == OAUTHBEARER:
            bearer, authzid = parse_oauthbearer(token)
            identity = await security.verify_bearer(bearer)
            if authzid is not None and f"User:{authzid}" != identity.principal:
                raise SaslAuthenticationFailed(
                    "OAUTHBEARER: authorization id must be empty or the token's own user"
                )
            _authenticated(ctx, identity.principal, mechanism, identity.expires_at)
            return b""
        if session.exchange is None:
            session.exchange = security.scram(mechanism)
        exchange = session.exchange
        answer: bytes = exchange.step(token)
        if exchange.done:
            _authenticated(ctx, f"User:{exchange.user}", mechanism)
        return answer
    except SaslAuthenticationFailed as exc:
        session.close_after = True
        session.exchange = None
        audit.authentication_failed(mechanism or "none", session.host, exc.message)
        log.info("kafka SASL %s from %s failed: %s", mechanism, session.host, exc.message)
        # Kafka's connection.failed.authentication.delay.ms: slows password guessing.
        await asyncio.sleep(ctx.state.settings.kafka_failed_authentication_delay_ms / 1000)
        raise


def _authenticated(
    ctx: Context, principal: str, mechanism: str, credential_expires: float | None = None
) -> None:
    """Mark the session authenticated as ``principal``; with re-authentication on, its
    lifetime ends at ``kafka_connections_max_reauth_ms`` from now or when the credential
    expires (``credential_expires``, unix seconds), whichever is first."""
    session = ctx.session
    if session.reauthenticating and principal != session.principal:
        raise SaslAuthenticationFailed(
            f"re-authentication as {principal} on a connection of {session.principal}: "
            "a connection cannot change principals"
        )
    session.principal = principal
    session.authenticated = True
    session.exchange = None
    session.raw_tokens = False
    reauth_ms = ctx.state.settings.kafka_connections_max_reauth_ms
    if reauth_ms > 0:
        expires = time.time() + reauth_ms / 1000
        if credential_expires is not None:
            expires = min(expires, credential_expires)
        session.expires_at = expires
    again = " (re-authenticated)" if session.reauthenticating else ""
    session.reauthenticating = False
    log.info("kafka SASL %s from %s: %s%s", mechanism, session.host, principal, again)


def session_lifetime(ctx: Context) -> datetime.timedelta:
    """What SaslAuthenticate answers as ``session_lifetime_ms``: 0 (no re-authentication)
    unless the session has an end (KIP-368)."""
    expires = ctx.session.expires_at
    if expires is None:
        return NO_THROTTLE
    return datetime.timedelta(milliseconds=max(int((expires - time.time()) * 1000), 1))


async def sasl_authenticate(ctx: Context, body: Entity | None, version: int) -> Any:
    m = response_module(SASL_AUTHENTICATE, version)
    token = bytes(getattr(body, "auth_bytes", b""))
    try:
        answer = await step(ctx, token)
    except SaslAuthenticationFailed as exc:
        return build(
            m.SaslAuthenticateResponse,
            error_code=ErrorCode.sasl_authentication_failed,
            error_message=f"Authentication failed: {exc.message}",
            auth_bytes=b"",
            session_lifetime=NO_THROTTLE,
        )
    return build(
        m.SaslAuthenticateResponse,
        error_code=ErrorCode.none,
        error_message=None,
        auth_bytes=answer,
        session_lifetime=session_lifetime(ctx),
    )
