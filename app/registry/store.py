"""The registry's state, a pure function of the ``_schemas`` records applied in order:
:class:`SchemaStore`.

Every broker keeps one, rebuilt from its replica of ``_schemas`` at start and then fed
the records its replica receives (:mod:`app.registry.storage`); nothing else changes it.
So two stores that applied the same records are equal (``snapshot()``), and the store a
restarted broker rebuilds is the one it had.

What it holds (the keys and values: :mod:`app.registry.records`):

* **versions**: per subject, version number -> (schema id, soft-deleted);
* **schemas**: id -> (type, schema text, references), while some version, deleted or
  not, still uses the id (a permanent delete of its last version forgets it);
* **identity**: (type, schema text, references) -> id, so the same schema registered
  under another subject reuses its id;
* **configs and modes**: per subject, and the global ones (key ``None``);
* **max_id**: the largest id any record ever named (a SCHEMA value, or a NOOP's
  ``maxId``), so a new id is ``max_id + 1`` and no id is ever handed out twice,
  even after its schema was permanently deleted and compacted away;
* **next_offset**: the offset of the next record to apply.

Invariants: a version's id is in ``schemas``; ``referrers[(s, v)]`` is the set of
versions whose references name ``(s, v)``. Records that do not parse are skipped
(logged), a tombstone of something unknown changes nothing: the replay never fails.

Concurrency: none; it is used from the event loop only (the initial replay may run in a
worker thread on a store no one else sees yet).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.common.errors import CorruptRecord
from app.registry import records
from app.registry.records import Reference

log = logging.getLogger(__name__)

# (schema type, schema text, references): what makes two registrations the same schema.
Content = tuple[str, str, tuple[Reference, ...]]


@dataclass(frozen=True, slots=True)
class StoredSchema:
    id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...]

    @property
    def content(self) -> Content:
        return (self.schema_type, self.schema, self.references)


@dataclass(frozen=True, slots=True)
class Version:
    subject: str
    version: int
    id: int
    deleted: bool


class SchemaStore:
    """See the module docstring."""

    def __init__(self) -> None:
        self.next_offset = 0
        self.max_id = 0
        self.subjects: dict[str, dict[int, Version]] = {}
        self.schemas: dict[int, StoredSchema] = {}
        self.users: dict[int, set[tuple[str, int]]] = {}
        self.by_content: dict[Content, int] = {}
        self.referrers: dict[tuple[str, int], set[tuple[str, int]]] = {}
        self.references: dict[tuple[str, int], tuple[Reference, ...]] = {}
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}

    # -- applying records --------------------------------------------------------------------

    def apply(
        self,
        key: bytes | bytearray | memoryview | None,
        value: bytes | bytearray | memoryview | None,
        offset: int,
    ) -> None:
        """Apply the record at ``offset`` (records are applied in offset order)."""
        self.next_offset = max(self.next_offset, offset + 1)
        if key is None:
            return
        try:
            parsed = records.decode_key(key)
            if isinstance(parsed, records.SchemaKey):
                if value is None:
                    self._drop_version(parsed.subject, parsed.version)
                else:
                    self._put_version(records.decode_schema(value))
            elif isinstance(parsed, records.ConfigKey):
                if value is None:
                    self.configs.pop(parsed.subject, None)
                else:
                    self.configs[parsed.subject] = records.decode_config(value)
            elif isinstance(parsed, records.ModeKey):
                if value is None:
                    self.modes.pop(parsed.subject, None)
                else:
                    self.modes[parsed.subject] = records.decode_mode(value)
            elif isinstance(parsed, records.DeleteSubjectKey):
                if value is not None:
                    self._delete_subject(parsed.subject, records.decode_delete_subject(value))
            elif isinstance(parsed, records.NoopKey):
                self.max_id = max(self.max_id, records.decode_noop(value))
        except CorruptRecord as exc:
            log.warning("skipped _schemas offset %d: %s", offset, exc)

    def apply_all(
        self,
        entries: Iterable[
            tuple[bytes | bytearray | memoryview | None, bytes | bytearray | memoryview | None, int]
        ],
    ) -> None:
        for key, value, offset in entries:
            self.apply(key, value, offset)

    def _put_version(self, value: records.SchemaValue) -> None:
        where = (value.subject, value.version)
        old = self.subjects.get(value.subject, {}).get(value.version)
        if old is not None:
            self._release(old)
        self.subjects.setdefault(value.subject, {})[value.version] = Version(
            value.subject, value.version, value.id, value.deleted
        )
        stored = StoredSchema(value.id, value.schema_type, value.schema, value.references)
        previous = self.schemas.get(value.id)
        if previous is not None and previous.content != stored.content:
            self.by_content.pop(previous.content, None)
        self.schemas[value.id] = stored
        self.by_content.setdefault(stored.content, value.id)
        self.users.setdefault(value.id, set()).add(where)
        self.references[where] = value.references
        for ref in value.references:
            self.referrers.setdefault((ref.subject, ref.version), set()).add(where)
        self.max_id = max(self.max_id, value.id)

    def _release(self, old: Version) -> None:
        where = (old.subject, old.version)
        for ref in self.references.pop(where, ()):
            users = self.referrers.get((ref.subject, ref.version))
            if users is not None:
                users.discard(where)
                if not users:
                    del self.referrers[(ref.subject, ref.version)]
        users = self.users.get(old.id)
        if users is not None:
            users.discard(where)
            if not users:
                del self.users[old.id]
                stored = self.schemas.pop(old.id, None)
                if stored is not None and self.by_content.get(stored.content) == old.id:
                    del self.by_content[stored.content]

    def _drop_version(self, subject: str, version: int) -> None:
        versions = self.subjects.get(subject)
        if versions is None or version not in versions:
            return
        self._release(versions.pop(version))
        if not versions:
            del self.subjects[subject]

    def _delete_subject(self, subject: str, up_to: int) -> None:
        versions = self.subjects.get(subject, {})
        for number, v in list(versions.items()):
            if number <= up_to and not v.deleted:
                versions[number] = Version(v.subject, v.version, v.id, True)

    # -- queries -----------------------------------------------------------------------------

    def subject_names(self, *, deleted: bool = False) -> list[str]:
        """Subjects with a live version (``deleted``: also those with soft-deleted only)."""
        return sorted(
            s
            for s, versions in self.subjects.items()
            if deleted or any(not v.deleted for v in versions.values())
        )

    def versions(self, subject: str, *, deleted: bool = False) -> list[Version]:
        """The subject's versions, oldest first (``deleted``: soft-deleted ones too)."""
        found = self.subjects.get(subject, {})
        return [found[n] for n in sorted(found) if deleted or not found[n].deleted]

    def version(self, subject: str, number: int) -> Version | None:
        return self.subjects.get(subject, {}).get(number)

    def schema(self, schema_id: int) -> StoredSchema | None:
        return self.schemas.get(schema_id)

    def id_of(self, content: Content) -> int | None:
        return self.by_content.get(content)

    def versions_of_id(self, schema_id: int, *, deleted: bool = False) -> list[Version]:
        """(subject, version) pairs that use ``schema_id``, sorted."""
        found = []
        for subject, number in sorted(self.users.get(schema_id, ())):
            v = self.subjects[subject][number]
            if deleted or not v.deleted:
                found.append(v)
        return found

    def referenced_by(self, subject: str, version: int) -> list[tuple[str, int]]:
        """Versions (live ones) whose references name ``subject`` version ``version``."""
        return sorted(
            where
            for where in self.referrers.get((subject, version), ())
            if (v := self.version(*where)) is not None and not v.deleted
        )

    def snapshot(self) -> dict[str, Any]:
        """Everything the store holds as plain data (two stores compare equal by it)."""
        return {
            "max_id": self.max_id,
            "versions": {
                s: {n: (v.id, v.deleted) for n, v in vs.items()} for s, vs in self.subjects.items()
            },
            "schemas": {i: s.content for i, s in self.schemas.items()},
            "configs": dict(self.configs),
            "modes": dict(self.modes),
        }
