"""The audit log: Kafka's ``kafka.authorizer.logger``, under the name ``logbus.audit``.

What goes there: every authorization denial (principal, host, operation, resource),
every authentication failure (the mechanism and why, never the credentials: no
password, no token, no Authorization header), and every ACL or user change (who made it
and the bindings). Operators route it with ordinary logging configuration, e.g. to its
own file; it logs at INFO (changes) and WARNING (denials, failures).
"""

from __future__ import annotations

import logging

AUDIT = logging.getLogger("logbus.audit")


def denied(principal: str, host: str, operation: str, resource: str) -> None:
    AUDIT.warning(
        "DENIED principal=%s host=%s operation=%s resource=%s", principal, host, operation, resource
    )


def authentication_failed(mechanism: str, host: str, reason: str) -> None:
    AUDIT.warning("AUTHENTICATION_FAILED mechanism=%s host=%s reason=%s", mechanism, host, reason)


def changed(principal: str, what: str, items: list[str]) -> None:
    AUDIT.info("CHANGED principal=%s %s %s", principal, what, "; ".join(items) or "(nothing)")
