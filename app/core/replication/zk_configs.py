"""Kafka's dynamic-config znodes, shared by the stores that keep parts of them: client
quotas (:mod:`app.core.replication.zk_quotas`) and SCRAM credentials
(:mod:`app.core.replication.zk_scram`) live side by side in one user's node.

Layout (under the connect string's optional chroot)::

    /config/users/<user>[/clients/<client-id>]   a user's configs (or <default>'s)
    /config/clients/<client-id>                  a client id's configs
    /config/changes/config_change_<seq>          PERSISTENT_SEQUENTIAL change notices,
                                                 {"version": 2, "entity_path": "users/alice"}

A node's value is Kafka's ``{"version": 1, "config": {"<key>": "<value>"}}``, every value
a string. A name is percent-encoded (Kafka's sanitized names; ``.`` and ``..``, which
ZooKeeper refuses as node names, as ``%2E`` and ``%2E%2E``); ``<default>`` is written
as is.

Invariant (what lets several stores share a node): a store reads only its own keys and
ignores the others, and changes a node by compare-and-set of the whole config, read,
its keys changed, every other key written back as it was (:func:`read_config` and
:func:`encode_config` keep what they do not know). Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote

import orjson

from app.core.replication.zk_watched import node_name
from app.core.security.quotas import DEFAULT

USERS = "/config/users"
CLIENTS = "/config/clients"
CHANGES = "/config/changes"
CHANGE_PREFIX = "config_change_"


def encode_name(name: str) -> str:
    return name if name == DEFAULT else node_name(name)


def decode_name(name: str) -> str:
    return name if name == DEFAULT else unquote(name)


def user_path(user: str) -> str:
    return f"{USERS}/{encode_name(user)}"


class UnreadableConfig(ValueError):
    """A node's value is not Kafka's config document (hand-written or damaged): readers
    log it and fail closed; a write refuses rather than overwrite what it cannot read."""


def unreadable_message(path: str, exc: ValueError) -> str:
    """What an alteration refused on an unreadable node answers: what to fix."""
    return (
        f"ZooKeeper node {path} cannot be read ({exc}); nothing was changed: repair or "
        "delete the node, then alter again"
    )


def read_config(data: bytes | None) -> dict[str, str]:
    """Every config key of a node's value (empty for no node or an empty value);
    UnreadableConfig when the value is not Kafka's config document."""
    if not data:
        return {}
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UnreadableConfig(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise UnreadableConfig("not a config document")
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise UnreadableConfig("config is not a mapping")
    out: dict[str, str] = {}
    for key, value in config.items():
        # Kafka writes strings; a number written by hand is read as its text.
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise UnreadableConfig(f"config {key!r} is not a string")
        out[key] = value if isinstance(value, str) else str(value)
    return out


def encode_config(config: Mapping[str, str]) -> bytes:
    return orjson.dumps({"version": 1, "config": dict(sorted(config.items()))})


def change_notice(path: str) -> bytes:
    """The value of the change notice of the node at ``path``."""
    return orjson.dumps({"version": 2, "entity_path": path.removeprefix("/config/")})
