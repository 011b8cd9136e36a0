"""Where ACL bindings live: the protocol, and one broker's file in its data dir.

``<data-dir>/acls.json``::

    {"version": 3, "acls": [{"resource_type": "TOPIC", "resource_name": "orders",
      "pattern_type": "LITERAL", "principal": "User:alice", "host": "*",
      "operation": "READ", "permission": "ALLOW"}, ...]}

Written whole to a temporary file, fsynced, then renamed over the old one: a crash
leaves the old set or the new one, never half of either. A missing file is the empty
set. ``version`` grows by one per change.

Concurrency: one lock serializes changes within the process; the file has one writer
(the broker owning the data dir: the CLI changes ACLs through the broker's ``/acls``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import orjson

from app.core.security.acl import AclBinding, AclFilter, AclSnapshot, InvalidAcl

ACLS_FILE = "acls.json"


class AclStore(Protocol):
    """Where the authorizer's bindings come from (a file or ZooKeeper). Blocking calls."""

    def load(self) -> AclSnapshot:
        """The current bindings."""
        ...

    def create(self, bindings: Sequence[AclBinding]) -> AclSnapshot:
        """Add the (validated) bindings; those already there stay once. The new set."""
        ...

    def delete(self, filters: Sequence[AclFilter]) -> tuple[list[list[AclBinding]], AclSnapshot]:
        """Remove every binding any filter matches: per filter, what it matched; the new set."""
        ...

    def watch(self, on_change: Callable[[AclSnapshot], None]) -> None:
        """Call ``on_change`` with the new set whenever another writer changes it."""
        ...

    def close(self) -> None: ...


def apply_create(snapshot: AclSnapshot, bindings: Sequence[AclBinding]) -> AclSnapshot:
    for acl in bindings:
        acl.validate()
    return AclSnapshot(snapshot.bindings | frozenset(bindings), snapshot.version + 1)


def apply_delete(
    snapshot: AclSnapshot, filters: Sequence[AclFilter]
) -> tuple[list[list[AclBinding]], AclSnapshot]:
    matched = [snapshot.select(f) for f in filters]
    gone = frozenset(acl for group in matched for acl in group)
    if not gone:
        return matched, snapshot
    return matched, AclSnapshot(snapshot.bindings - gone, snapshot.version + 1)


def encode(snapshot: AclSnapshot) -> bytes:
    acls = [acl.to_json() for acl in snapshot.select(AclFilter())]
    return orjson.dumps({"version": snapshot.version, "acls": acls}, option=orjson.OPT_INDENT_2)


def decode(data: bytes, where: str) -> AclSnapshot:
    try:
        doc = orjson.loads(data)
        return AclSnapshot(
            frozenset(AclBinding.from_json(a).validate() for a in doc["acls"]), int(doc["version"])
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise InvalidAcl(f"{where} is not an ACL file: {exc}") from None


class FileAclStore:
    """The ACLs of one broker in ``<data-dir>/acls.json`` (module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._snapshot = self._read()

    def _read(self) -> AclSnapshot:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return AclSnapshot()
        return decode(data, str(self.path))

    def _write(self, snapshot: AclSnapshot) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(encode(snapshot))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._snapshot = snapshot

    def load(self) -> AclSnapshot:
        return self._snapshot

    def create(self, bindings: Sequence[AclBinding]) -> AclSnapshot:
        with self._lock:
            new = apply_create(self._snapshot, bindings)
            if new.bindings != self._snapshot.bindings:
                self._write(new)
            return self._snapshot

    def delete(self, filters: Sequence[AclFilter]) -> tuple[list[list[AclBinding]], AclSnapshot]:
        with self._lock:
            matched, new = apply_delete(self._snapshot, filters)
            if new is not self._snapshot:
                self._write(new)
            return matched, self._snapshot

    def watch(self, on_change: Callable[[AclSnapshot], None]) -> None:
        """Nothing to watch: this process is the file's only writer."""

    def close(self) -> None:
        pass
