"""DescribeUserScramCredentials and AlterUserScramCredentials on the broker's SCRAM store
(:mod:`app.core.security.scram_store`, the one SaslAuthenticate's SCRAM exchange reads:
a credential altered here holds for the next authentication, on every broker of a
cluster within a second). One broker: the credentials ``logbus users add/passwd`` keep
beside each user's scrypt hash in its users file. A cluster: ZooKeeper's, in Kafka's
``/config/users/<user>`` nodes (``app/core/replication/zk_scram.py``), authoritative for
every user the door has altered; users never altered keep their users file's
credentials (the combination rule is the store module's). This module does not know
which store it has.

Describe answers each user's mechanisms and iteration counts (never a salt or key): every
user with credentials when ``users`` is null or empty; a named user without any
RESOURCE_NOT_FOUND, one named twice DUPLICATE_RESOURCE. Alter applies Kafka's per-user
rules (:class:`~app.core.security.users.ScramAlteration`, which both stores apply): a
mechanism code other than SCRAM-SHA-256 (1) and SCRAM-SHA-512 (2)
UNSUPPORTED_SASL_MECHANISM, iterations outside 4096-16384 UNACCEPTABLE_CREDENTIAL, a
(user, mechanism) twice DUPLICATE_RESOURCE, deleting a credential the user lacks
RESOURCE_NOT_FOUND; a refused user has none of its alterations applied. Unlike Kafka, an upsertion does not create a user: Logbus users also
need the scrypt hash HTTP Basic and PLAIN check (``logbus users add``), so an upsertion of
a user not in the receiving broker's users file is RESOURCE_NOT_FOUND (in a cluster a
deletion of one still deletes what ZooKeeper holds, as Kafka).

Authorized as Kafka's: DESCRIBE on the cluster for describe (else a top-level
CLUSTER_AUTHORIZATION_FAILED), ALTER on the cluster for alter (else every user
CLUSTER_AUTHORIZATION_FAILED); changes audited (names and mechanisms only).

Concurrency: event loop; the store is read and written in a worker thread.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from kio.schema.errors import ErrorCode

from app.common.errors import ClusterAuthorizationFailed
from app.core.security import audit
from app.core.security.acl import Operation
from app.core.security.scram_store import ScramStore
from app.core.security.users import ScramRefused, ScramUpsertion
from app.kafka import authorize
from app.kafka.apis.base import NO_THROTTLE, Context, response_module
from app.kafka.encode import build, error_code
from app.kafka.versions import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS

# Kafka's ScramMechanism wire codes.
MECHANISMS: Final = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
CODES: Final = {name: code for code, name in MECHANISMS.items()}


def _store(ctx: Context) -> ScramStore:
    store = ctx.scram
    assert store is not None, "the Kafka listener is given the broker's SCRAM store"
    return store


async def describe_user_scram_credentials(ctx: Context, body: Any, version: int) -> Any:
    """Each user's SCRAM mechanisms and iterations (module docstring)."""
    m = response_module(DESCRIBE_USER_SCRAM_CREDENTIALS, version)

    def answer(code: ErrorCode, message: str | None, results: list[Any]) -> Any:
        return build(
            m.DescribeUserScramCredentialsResponse,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            results=tuple(results),
        )

    def result(user: str, code: ErrorCode, message: str | None, infos: dict[str, int]) -> Any:
        return build(
            m.DescribeUserScramCredentialsResult,
            user=user,
            error_code=code,
            error_message=message,
            credential_infos=tuple(
                build(m.CredentialInfo, mechanism=CODES[mech], iterations=n)
                for mech, n in infos.items()
                if mech in CODES
            ),
        )

    try:
        authorize.check(ctx, Operation.DESCRIBE, None)
    except ClusterAuthorizationFailed as exc:
        return answer(error_code(exc), exc.message, [])
    known = await asyncio.to_thread(_store(ctx).iterations)
    if not body.users:
        return answer(
            ErrorCode.none, None, [result(u, ErrorCode.none, None, i) for u, i in known.items()]
        )
    names = [u.name for u in body.users]
    results = []
    for name in dict.fromkeys(names):
        if names.count(name) > 1:
            results.append(result(name, ErrorCode.duplicate_resource, f"{name} is named twice", {}))
        elif name not in known:
            results.append(
                result(name, ErrorCode.resource_not_found, f"{name} has no SCRAM credentials", {})
            )
        else:
            results.append(result(name, ErrorCode.none, None, known[name]))
    return answer(ErrorCode.none, None, results)


async def alter_user_scram_credentials(ctx: Context, body: Any, version: int) -> Any:
    """Per user: its deletions and upsertions applied, or the first refusal."""
    m = response_module(ALTER_USER_SCRAM_CREDENTIALS, version)
    order = list(
        dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions])
    )

    def response(outcome: dict[str, tuple[ErrorCode, str | None]]) -> Any:
        return build(
            m.AlterUserScramCredentialsResponse,
            throttle_time=NO_THROTTLE,
            results=tuple(
                build(
                    m.AlterUserScramCredentialsResult,
                    user=name,
                    error_code=outcome[name][0],
                    error_message=outcome[name][1],
                )
                for name in order
            ),
        )

    try:
        authorize.check(ctx, Operation.ALTER, None)
    except ClusterAuthorizationFailed as exc:
        return response({name: (error_code(exc), exc.message) for name in order})
    outcome: dict[str, tuple[ErrorCode, str | None]] = {}

    def mechanism(name: str, code: int) -> str | None:
        found = MECHANISMS.get(int(code))
        if not name:
            outcome.setdefault(name, (ErrorCode.unacceptable_credential, "an empty user name"))
        elif found is None:
            outcome.setdefault(
                name,
                (ErrorCode.unsupported_sasl_mechanism, f"{name}: SCRAM mechanism code {code}"),
            )
        return found

    deletions = [(d.name, mech) for d in body.deletions if (mech := mechanism(d.name, d.mechanism))]
    upsertions: list[ScramUpsertion] = [
        (u.name, mech, int(u.iterations), bytes(u.salt), bytes(u.salted_password))
        for u in body.upsertions
        if (mech := mechanism(u.name, u.mechanism))
    ]
    # A user refused for its mechanism has none of its alterations applied.
    deletions = [d for d in deletions if d[0] not in outcome]
    upsertions = [u for u in upsertions if u[0] not in outcome]
    applied: dict[str, ScramRefused | None] = {}
    if deletions or upsertions:
        applied = await asyncio.to_thread(_store(ctx).alter, deletions, upsertions)
    for name, refusal in applied.items():
        if refusal is None:
            outcome[name] = (ErrorCode.none, None)
        else:
            outcome[name] = (ErrorCode[refusal.code.lower()], refusal.message)
    ok = {name for name, refusal in applied.items() if refusal is None}
    done = [f"{n}: delete {mech}" for n, mech in deletions if n in ok]
    done += [f"{u[0]}: upsert {u[1]} ({u[2]} iterations)" for u in upsertions if u[0] in ok]
    if done:
        audit.changed(ctx.session.principal, "ALTER_USER_SCRAM_CREDENTIALS", done)
    return response(outcome)
