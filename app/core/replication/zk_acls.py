"""The cluster's ACLs in ZooKeeper, laid out as Kafka's ``ZkAclStore``, with change
notifications so every broker reloads within a second of a change.

Layout (under the connect string's optional chroot)::

    /kafka-acl/<Type>/<name>                     LITERAL bindings of one resource
    /kafka-acl-extended/prefixed/<Type>/<name>   PREFIXED bindings of one resource
    /kafka-acl-changes/acl_changes_<seq>         PERSISTENT_SEQUENTIAL, "<Type>:<PATTERN>:<name>"

``<Type>`` is Kafka's (``Topic``, ``Group``, ``Cluster``, ``TransactionalId``); ``<name>``
is percent-encoded (a group id may hold ``/``; ``.`` and ``..``, which ZooKeeper refuses
as node names, as ``%2E`` and ``%2E%2E``). A resource node's value is Kafka's::

    {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                             "operation": "Read", "host": "*"}]}

Writes are compare-and-set on the resource node's version (retried on a conflict), each
with its change node in the same transaction; every broker's ChildrenWatch on
``/kafka-acl-changes`` reloads the whole set (ACL sets are small) and hands it to
``on_change``. A writer keeps the newest ``KEEP_CHANGES`` (100) change nodes and
deletes older ones. Connection, change notices and compare-and-set are
:class:`~app.core.replication.zk_watched.ZkWatchedStore`'s. Blocking kazoo calls: the
broker runs writes in a worker thread; watch callbacks run on kazoo's thread. Thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import unquote

import orjson
from kazoo.exceptions import NoNodeError

from app.core.replication.zk_watched import ZkLayout, ZkWatchedStore, node_name
from app.core.security.acl import (
    AclBinding,
    AclFilter,
    AclSnapshot,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from app.core.security.store import apply_create, apply_delete

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
CHANGES = "/kafka-acl-changes"
CHANGE_PREFIX = "acl_changes_"
ZK_TYPES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
}
_BY_ZK_TYPE = {v: k for k, v in ZK_TYPES.items()}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


_OPS = {_camel(o.value): o for o in Operation if o is not Operation.ANY}


def resource_path(rtype: ResourceType, pattern: PatternType, name: str) -> str:
    root = PREFIXED_ROOT if pattern is PatternType.PREFIXED else LITERAL_ROOT
    return f"{root}/{ZK_TYPES[rtype]}/{node_name(name)}"


def encode_entries(acls: Sequence[AclBinding]) -> bytes:
    entries = [
        {
            "principal": a.principal,
            "permissionType": a.permission.value.capitalize(),
            "operation": _camel(a.operation.value),
            "host": a.host,
        }
        for a in sorted(acls, key=lambda a: (a.principal, a.host, a.operation.value))
    ]
    return orjson.dumps({"version": 1, "acls": entries})


def decode_entries(
    data: bytes, rtype: ResourceType, pattern: PatternType, name: str
) -> list[AclBinding]:
    try:
        entries = orjson.loads(data)["acls"]
        return [
            AclBinding(
                rtype,
                name,
                pattern,
                e["principal"],
                e["host"],
                _OPS[e["operation"]],
                Permission(e["permissionType"].upper()),
            )
            for e in entries
        ]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise InvalidAcl(f"ACL znode {resource_path(rtype, pattern, name)}: {exc}") from None


class ZkAclStore(ZkWatchedStore[frozenset[AclBinding], AclSnapshot]):
    """:class:`app.core.security.store.AclStore` over ZooKeeper (module docstring)."""

    LAYOUT = ZkLayout((LITERAL_ROOT, PREFIXED_ROOT), CHANGES, CHANGE_PREFIX, "ACLs")

    def __init__(self, connect: str, session_timeout_ms: int) -> None:
        super().__init__(connect, session_timeout_ms)
        self._snapshot = AclSnapshot()
        self._version = 0

    def _read_all(self) -> frozenset[AclBinding]:
        found: set[AclBinding] = set()
        for pattern, root in (
            (PatternType.LITERAL, LITERAL_ROOT),
            (PatternType.PREFIXED, PREFIXED_ROOT),
        ):
            for zk_type in self.client.get_children(root):
                rtype = _BY_ZK_TYPE.get(zk_type)
                if rtype is None:
                    continue
                for encoded in self.client.get_children(f"{root}/{zk_type}"):
                    name = unquote(encoded)
                    try:
                        data, _ = self.client.get(resource_path(rtype, pattern, name))
                    except NoNodeError:
                        continue
                    found.update(decode_entries(data, rtype, pattern, name))
        return frozenset(found)

    def _install(self, read: frozenset[AclBinding]) -> AclSnapshot:
        if read != self._snapshot.bindings:
            self._version += 1
            self._snapshot = AclSnapshot(read, self._version)
        return self._snapshot

    def _current(self) -> AclSnapshot:
        return self._snapshot

    def load(self) -> AclSnapshot:
        return self._snapshot

    def _update(
        self,
        rtype: ResourceType,
        pattern: PatternType,
        name: str,
        change: Callable[[set[AclBinding]], set[AclBinding]],
    ) -> None:
        """Apply ``change`` to one resource's bindings by compare-and-set, its change
        node written with it."""
        self._compare_and_set(
            resource_path(rtype, pattern, name),
            lambda data: set() if data is None else set(decode_entries(data, rtype, pattern, name)),
            lambda current: change(set(current)),
            lambda new: encode_entries(list(new)) if new else None,
            f"{ZK_TYPES[rtype]}:{pattern.value}:{name}".encode(),
        )

    def create(self, bindings: Sequence[AclBinding]) -> AclSnapshot:
        apply_create(AclSnapshot(), bindings)  # validates every binding first
        by_resource: dict[tuple[ResourceType, PatternType, str], set[AclBinding]] = {}
        for b in bindings:
            by_resource.setdefault((b.resource_type, b.pattern_type, b.name), set()).add(b)
        for (rtype, pattern, name), added in by_resource.items():
            self._update(rtype, pattern, name, added.__or__)
        self._trim_changes()
        return self._reload()

    def delete(self, filters: Sequence[AclFilter]) -> tuple[list[list[AclBinding]], AclSnapshot]:
        current = AclSnapshot(self._read_all())
        matched, _ = apply_delete(current, filters)
        gone = {a for group in matched for a in group}
        resources = {(a.resource_type, a.pattern_type, a.name) for a in gone}
        for rtype, pattern, name in resources:
            self._update(rtype, pattern, name, lambda cur: {a for a in cur if a not in gone})
        self._trim_changes()
        return matched, self._reload()
