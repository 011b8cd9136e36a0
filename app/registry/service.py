"""The schema registry's rules (Confluent Schema Registry's), transport-neutral:
:class:`SchemaRegistry`.

Reads answer from this broker's :class:`~app.registry.store.SchemaStore`, caught up
with its replica of ``_schemas`` first (up to the replica's high watermark: only
committed records). Writes run on the ``_schemas`` leader only, one at a time (a lock):
catch the store up to the log end, decide against it, append the records (acks=all),
wait until every in-sync replica holds them, and apply them to the store by reading
them back, so the store only ever changes by replaying the log. Anywhere else a write
raises :class:`~app.common.schema_errors.RegistryNotLeader` naming the leader, and the
transport forwards the request there (Confluent's clients do not follow redirects).

Read-your-writes across brokers. A write is answered once every in-sync replica holds
it, but a follower learns that it is committed (its high watermark) only with its next
fetch. So the rule, which makes a schema registered through any broker readable at once
through any broker:

* **immutable facts are served from the local replica**: a schema by id, a version by
  its number (what a deserializer asks, the hot path). Once there they never change
  (only a version's soft-deleted flag may lag by one follower fetch);
* **a read that finds nothing there is not answered 404 at a follower**: it is asked of
  the leader, whose store holds every answered write;
* **questions about the current state** (``latest``, the lists of subjects and
  versions, a lookup, compatibility checks, config and mode, ``referencedby``) are
  asked of the leader by a follower (:class:`~app.common.schema_errors.RegistryNotLeader`
  from a read), as writes are.

Alone, or on the leader, everything is answered here.

Identity. A schema is stored as its parser's canonical form (its normalized form with
``normalize``); two registrations are the same schema when type, stored text and
references are equal. The same schema under a subject returns its version; under
another subject it gets the same id. A new id is ``max_id + 1`` (never reused).

References. A reference names ``(subject, version)``; it is resolved recursively into
:class:`~app.common.schemas.types.ResolvedReference` trees for the parser. A missing
version is 42201 (as Confluent: the schema cannot be parsed), a cycle or a tree deeper
than ``max_references_depth`` too. A version that a live version references cannot be
deleted (42206).

Concurrency: event loop only.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from app.common import schemas
from app.common.errors import LogbusError, NotEnoughReplicas, NotLeaderOrFollower, RequestTimedOut
from app.common.schema_errors import (
    IncompatibleSchema,
    InvalidCompatibilityLevel,
    InvalidMode,
    InvalidSchema,
    InvalidSchemaVersion,
    OperationNotPermitted,
    ReferenceExists,
    RegistryNotLeader,
    RegistryStoreError,
    SchemaNotFound,
    SchemaTooLarge,
    SubjectCompatibilityNotConfigured,
    SubjectModeNotConfigured,
    SubjectNotFound,
    SubjectNotSoftDeleted,
    SubjectSoftDeleted,
    VersionNotFound,
    VersionNotSoftDeleted,
    VersionSoftDeleted,
)
from app.common.schemas.types import COMPATIBILITY_LEVELS, SCHEMA_TYPES, ResolvedReference
from app.registry.config import (
    IMPORT,
    MODES,
    READONLY,
    RegistryConfig,
    compatibility_of,
    mode_of,
)
from app.registry.records import (
    ConfigKey,
    DeleteSubjectKey,
    ModeKey,
    NoopKey,
    Reference,
    SchemaKey,
    SchemaValue,
    encode_config,
    encode_delete_subject,
    encode_key,
    encode_mode,
    encode_noop,
    encode_schema,
)
from app.registry.storage import SchemasLog
from app.registry.store import Content, SchemaStore, StoredSchema, Version

T = TypeVar("T")
Record = tuple[bytes, bytes | None]
# A write's decision: the records to append and what to answer once they are durable.
Decision = tuple[list[Record], T]

MAX_VERSION = 2**31 - 1
LATEST = "latest"
# Parsed schemas kept (by content): compatibility checks parse every earlier version.
_PARSED_CACHE = 1_000


@dataclass(frozen=True, slots=True)
class SchemaInput:
    """A schema as a client gives it to register, look up or check (Confluent's
    RegisterSchemaRequest): its text, type and references, not parsed yet."""

    text: str
    schema_type: str = "AVRO"
    references: Sequence[Reference] = ()


@dataclass(frozen=True)
class Registered:
    """A version of a subject with its schema (a ``/subjects/{s}/versions/{v}`` answer)."""

    subject: str
    version: int
    id: int
    schema: StoredSchema
    deleted: bool = False

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id}
        body.update(schema_json(self.schema))
        return body


def schema_json(stored: StoredSchema) -> dict[str, Any]:
    """``schemaType`` (omitted for AVRO, as Confluent), ``references`` (when any) and
    ``schema``."""
    body: dict[str, Any] = {}
    if stored.schema_type != "AVRO":
        body["schemaType"] = stored.schema_type
    if stored.references:
        body["references"] = [r.as_json() for r in stored.references]
    body["schema"] = stored.schema
    return body


def parse_version(raw: str | int) -> int | str:
    """A path's version: ``latest`` (or -1, Confluent's alias), or 1..2^31-1; else 42202."""
    text = str(raw) if isinstance(raw, int) else raw.strip()
    if text == LATEST or text == "-1":
        return LATEST
    if not (text.isascii() and text.isdigit()) or len(text) > 10:
        raise InvalidSchemaVersion(raw)
    number = int(text)
    if not 1 <= number <= MAX_VERSION:
        raise InvalidSchemaVersion(raw)
    return number


class SchemaRegistry:
    """See the module docstring."""

    def __init__(self, log: SchemasLog, config: RegistryConfig) -> None:
        self.log = log
        self.config = config
        self.store = SchemaStore()
        self._write_lock = asyncio.Lock()
        self._parsed: dict[tuple[Content, bool], schemas.ParsedSchema] = {}

    async def start(self) -> None:
        """Rebuild the store from the local replica (a worker thread: it may be long)."""
        if not self.log.exists():
            return  # created by the first write; nothing to load
        part_log = self.log.local_log()
        if part_log is not None:
            self.store = await asyncio.to_thread(
                self.log.catch_up, SchemaStore(), to_log_end=self.log.leads()
            )

    # -- where requests go ---------------------------------------------------------------

    def leader_elsewhere(self) -> str | None:
        """The ``_schemas`` leader's URL when it is another broker (a read that found
        nothing is asked there; see the module docstring); None here or unknown."""
        leader, url = self.log.leader()
        if leader is None or leader == self.log.node_id:
            return None
        return url

    def _read(self, *, current: bool = False) -> SchemaStore:
        """The store, caught up with the replica's committed records. ``current``: a
        question about the current state, which a follower sends to the leader (module
        docstring); so does a broker without a replica of an existing ``_schemas``."""
        if current:
            leader = self.leader_elsewhere()
            if leader is not None:
                raise RegistryNotLeader(leader)
        if self.log.local_log() is None and self.log.exists() and not self.log.leads():
            raise RegistryNotLeader(self.log.leader()[1])
        self.store = self.log.catch_up(self.store)
        return self.store

    async def _write(self, decide: Callable[[SchemaStore], Decision[T]]) -> T:
        """Run ``decide`` against the leader's fresh store and make its records durable;
        its answer. RegistryNotLeader off the leader, RegistryStoreError when the write
        was not acknowledged (it may still be applied later, as with Kafka)."""
        async with self._write_lock:
            await self._ensure_topic()
            if not self.log.leads():
                leader, url = self.log.leader()
                if leader is None:
                    url = await self.log.wait_leader()
                    if self.log.leads():
                        url = None
                if url is not None:
                    raise RegistryNotLeader(url)
            if not self.log.leads():
                raise RegistryStoreError("_schemas has no leader now; retry")
            self.store = self.log.catch_up(self.store, to_log_end=True)
            records, answer = decide(self.store)
            if not records:
                return answer
            try:
                last = self.log.append(records)
                await self.log.replicated(last)
            except NotLeaderOrFollower as exc:
                raise RegistryNotLeader(exc.leader_url) from None
            except (NotEnoughReplicas, RequestTimedOut) as exc:
                raise RegistryStoreError(
                    f"the write to _schemas was not acknowledged by its in-sync replicas: "
                    f"{exc.message}"
                ) from None
            self.store = self.log.catch_up(self.store, to_log_end=True)
            return answer

    async def _ensure_topic(self) -> None:
        try:
            await self.log.ensure_topic()
        except Exception as exc:
            message = getattr(exc, "message", None) or repr(exc)
            raise RegistryStoreError(f"_schemas could not be created: {message}") from None

    # -- parsing -------------------------------------------------------------------------

    def _resolve(
        self,
        store: SchemaStore,
        schema_type: str,
        refs: Sequence[Reference],
        path: tuple[tuple[str, int], ...] = (),
        counter: list[int] | None = None,
    ) -> tuple[ResolvedReference, ...]:
        counter = counter if counter is not None else [0]
        if len(path) >= self.config.max_references_depth and refs:
            raise SchemaTooLarge(
                f"references nest deeper than {self.config.max_references_depth} levels "
                "(schema_registry_max_references_depth)"
            )
        resolved = []
        for ref in refs:
            counter[0] += 1
            if counter[0] > self.config.max_references:
                raise SchemaTooLarge(
                    f"more than {self.config.max_references} references in one schema "
                    "(schema_registry_max_references)"
                )
            version = store.version(ref.subject, ref.version)
            where = (ref.subject, ref.version)
            if version is None:
                raise _invalid(
                    schema_type,
                    f"reference '{ref.name}' names subject '{ref.subject}' "
                    f"version {ref.version}, which does not exist",
                )
            if where in path:
                raise _invalid(
                    schema_type,
                    f"reference cycle through subject '{ref.subject}' version {ref.version}",
                )
            stored = store.schema(version.id)
            assert stored is not None
            children = self._resolve(store, schema_type, stored.references, (*path, where), counter)
            resolved.append(
                ResolvedReference(
                    name=ref.name,
                    subject=ref.subject,
                    version=ref.version,
                    schema_type=stored.schema_type,
                    schema=stored.schema,
                    references=children,
                )
            )
        return tuple(resolved)

    def _parse(
        self,
        store: SchemaStore,
        schema_type: str,
        text: str,
        refs: Sequence[Reference],
    ) -> schemas.ParsedSchema:
        if schema_type not in SCHEMA_TYPES:
            raise _invalid(
                schema_type, f"unknown schema type; expected one of {', '.join(SCHEMA_TYPES)}"
            )
        if len(text) > self.config.max_schema_bytes:
            raise SchemaTooLarge(
                f"the schema has {len(text)} characters, over the limit of "
                f"{self.config.max_schema_bytes} (schema_registry_max_schema_bytes)"
            )
        key = ((schema_type, text, tuple(refs)), False)
        parsed = self._parsed.get(key)
        if parsed is None:
            resolved = self._resolve(store, schema_type, refs)
            parsed = _guarded_parse(schema_type, text, resolved)
            if len(self._parsed) >= _PARSED_CACHE:
                self._parsed.clear()
            self._parsed[key] = parsed
        return parsed

    def _content(
        self, store: SchemaStore, schema: SchemaInput, normalize: bool
    ) -> tuple[Content, schemas.ParsedSchema]:
        parsed = self._parse(store, schema.schema_type, schema.text, schema.references)
        stored_text = parsed.normalized() if normalize else parsed.canonical()
        return (schema.schema_type, stored_text, tuple(schema.references)), parsed

    def _parsed_of(self, store: SchemaStore, stored: StoredSchema) -> schemas.ParsedSchema:
        return self._parse(store, stored.schema_type, stored.schema, stored.references)

    # -- reads ---------------------------------------------------------------------------

    def schema_by_id(self, schema_id: int) -> StoredSchema:
        stored = self._read().schema(schema_id)
        if stored is None:
            raise SchemaNotFound(f"Schema {schema_id} not found", id=schema_id)
        return stored

    def parsed(self, stored: StoredSchema) -> schemas.ParsedSchema:
        """``stored`` parsed with its references (cached by content, as every parse here):
        what typed records encode and decode with."""
        return self._parsed_of(self._read(), stored)

    def formatted(self, stored: StoredSchema, fmt: str | None) -> StoredSchema:
        """``stored`` in the ``format`` a reader asked for (Confluent's query parameter):
        ``serialized`` gives a PROTOBUF schema as its base64 FileDescriptorProto (what
        confluent-kafka's Protobuf serializer and deserializer ask for); any other format,
        or another type, the schema as stored (Confluent ignores formats it does not know
        for a type)."""
        if fmt != "serialized" or stored.schema_type != "PROTOBUF":
            return stored
        serialized = getattr(self.parsed(stored), "serialized", None)
        if serialized is None:
            return stored
        return dataclasses.replace(stored, schema=serialized())

    def version_of_records(self, subject: str, version: int | None) -> Registered:
        """A subject's version (None: the newest live one) for typed records, read from this
        broker's replica without asking the ``_schemas`` leader (a produce must not wait on
        another broker; a schema registered a moment ago elsewhere may not be here yet, as
        with any replica). 40401/40402 as :meth:`get_version`."""
        return self._get_version(self._read(), subject, LATEST if version is None else version)

    def subject_ids(self, subject: str) -> frozenset[int]:
        """The ids of ``subject``'s live versions, from this broker's replica (broker-side
        schema validation, ``app/api/schema_validation.py``: a produce must not wait on
        another broker); empty for an unknown subject."""
        return frozenset(v.id for v in self._read().versions(subject))

    def max_id(self) -> int:
        return self._read(current=True).max_id

    def id_versions(self, schema_id: int, *, deleted: bool = False) -> list[Version]:
        store = self._read()
        if store.schema(schema_id) is None:
            raise SchemaNotFound(f"Schema {schema_id} not found", id=schema_id)
        return store.versions_of_id(schema_id, deleted=deleted)

    def subjects(self, prefix: str = "", *, deleted: bool = False) -> list[str]:
        names = self._read(current=True).subject_names(deleted=deleted)
        return [s for s in names if s.startswith(prefix)]

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        found = self._read(current=True).versions(subject, deleted=deleted)
        if not found:
            raise SubjectNotFound(subject)
        return [v.version for v in found]

    def get_version(self, subject: str, raw: str | int, *, deleted: bool = False) -> Registered:
        """A subject's version (``latest``: the newest live one); 40401/40402."""
        version = parse_version(raw)
        store = self._read(current=version == LATEST)
        return self._get_version(store, subject, version, deleted=deleted)

    def _get_version(
        self, store: SchemaStore, subject: str, version: int | str, *, deleted: bool = False
    ) -> Registered:
        if subject not in store.subjects:
            raise SubjectNotFound(subject)
        if version == LATEST:
            live = store.versions(subject, deleted=deleted)
            if not live:
                raise VersionNotFound(subject, LATEST)
            found: Version | None = live[-1]
        else:
            assert isinstance(version, int)
            found = store.version(subject, version)
            if found is not None and found.deleted and not deleted:
                found = None
        if found is None:
            if not store.versions(subject, deleted=deleted):
                raise SubjectNotFound(subject)
            raise VersionNotFound(subject, version)
        stored = store.schema(found.id)
        assert stored is not None
        return Registered(found.subject, found.version, found.id, stored, found.deleted)

    def all_schemas(
        self, prefix: str = "", *, deleted: bool = False, latest_only: bool = False
    ) -> list[Registered]:
        store = self._read(current=True)
        found = []
        for subject in store.subject_names(deleted=deleted):
            if not subject.startswith(prefix):
                continue
            versions = store.versions(subject, deleted=deleted)
            if latest_only:
                versions = versions[-1:]
            for v in versions:
                stored = store.schema(v.id)
                assert stored is not None
                found.append(Registered(v.subject, v.version, v.id, stored, v.deleted))
        return found

    def referenced_by(self, subject: str, raw: str | int) -> list[int]:
        store = self._read(current=True)
        version = self._get_version(store, subject, parse_version(raw))
        return sorted(
            {store.subjects[s][n].id for s, n in store.referenced_by(subject, version.version)}
        )

    def lookup(
        self, subject: str, schema: SchemaInput, *, normalize: bool = False, deleted: bool = False
    ) -> Registered:
        """The version of ``subject`` holding this schema (``POST /subjects/{s}``):
        40401 for no such subject, 40403 when no version holds it."""
        store = self._read(current=True)
        if not store.versions(subject, deleted=True):
            raise SubjectNotFound(subject)
        content, _ = self._content(store, schema, normalize)
        for v in reversed(store.versions(subject, deleted=deleted)):
            stored = store.schema(v.id)
            if stored is not None and stored.content == content:
                return Registered(v.subject, v.version, v.id, stored, v.deleted)
        raise SchemaNotFound(subject=subject)

    def compatibility(self, subject: str | None, *, default_to_global: bool = False) -> str:
        store = self._read(current=True)
        if subject is not None and subject not in store.configs and not default_to_global:
            raise SubjectCompatibilityNotConfigured(
                f"Subject '{subject}' does not have subject-level compatibility configured",
                subject=subject,
            )
        return compatibility_of(store, subject, self.config.default_compatibility)

    def mode(self, subject: str | None, *, default_to_global: bool = False) -> str:
        store = self._read(current=True)
        if subject is not None and subject not in store.modes and not default_to_global:
            raise SubjectModeNotConfigured(
                f"Subject '{subject}' does not have subject-level mode configured",
                subject=subject,
            )
        return mode_of(store, subject)

    def check_compatibility(
        self,
        subject: str,
        raw_version: str | int | None,
        schema: SchemaInput,
        *,
        normalize: bool = False,
    ) -> list[str]:
        """``[]`` when compatible, else the reasons: against one version (``raw_version``)
        or every live version (None), at the subject's level."""
        store = self._read(current=True)
        level = compatibility_of(store, subject, self.config.default_compatibility)
        if raw_version is None:
            previous = store.versions(subject)
        else:
            previous = [
                Version(r.subject, r.version, r.id, r.deleted)
                for r in (self._get_version(store, subject, parse_version(raw_version)),)
            ]
        _, parsed = self._content(store, schema, normalize)
        return self._incompatibilities(store, parsed, previous, level)

    def _incompatibilities(
        self,
        store: SchemaStore,
        parsed: schemas.ParsedSchema,
        previous: Sequence[Version],
        level: str,
    ) -> list[str]:
        if level == "NONE" or not previous:
            return []
        olds = []
        for v in previous:
            stored = store.schema(v.id)
            assert stored is not None
            if stored.schema_type != parsed.schema_type:
                return [
                    f"Incompatible schema type: {parsed.schema_type} after "
                    f"{stored.schema_type} (version {v.version})"
                ]
            try:
                olds.append(self._parsed_of(store, stored))
            except (InvalidSchema, SchemaTooLarge) as exc:
                # Stored before a limit it is over (max_zero_byte_values, a smaller
                # max_schema_bytes): nothing can be checked against it. Said as such,
                # not as the new schema's fault.
                return [
                    f"version {v.version} (schema id {v.id}) cannot be checked against: it "
                    f"does not parse under this registry's limits ({exc.message}); delete "
                    "that version, or set the subject's compatibility to NONE, to register "
                    "another schema"
                ]
        return list(schemas.check_compatibility(parsed, olds, level))

    # -- writes --------------------------------------------------------------------------

    async def register(
        self,
        subject: str,
        schema: SchemaInput,
        *,
        normalize: bool = False,
        schema_id: int | None = None,
        version: int | None = None,
    ) -> Registered:
        """Register a schema under ``subject`` (``POST /subjects/{s}/versions``).

        The same schema already a live version: that version, nothing written. Else
        checked against the subject's earlier live versions at its level (40901 with
        the reasons), and stored as a new version with the id of the same schema
        elsewhere or a new one. ``schema_id``/``version``: IMPORT mode only (42205)."""
        # The references as given now (a caller's list may change while the write waits).
        schema = dataclasses.replace(schema, references=tuple(schema.references))

        def decide(store: SchemaStore) -> Decision[Registered]:
            mode = mode_of(store, subject)
            if mode == READONLY:
                raise OperationNotPermitted(f"Subject {subject} is in read-only mode")
            importing = mode == IMPORT
            if (schema_id is not None or version is not None) and not importing:
                raise OperationNotPermitted(
                    f"Subject {subject} is not in import mode: an id or version cannot be given"
                )
            content, parsed = self._content(store, schema, normalize)
            existing = store.versions(subject, deleted=True)
            for v in reversed(existing):
                stored = store.schema(v.id)
                if v.deleted or stored is None or stored.content != content:
                    continue
                if schema_id is not None and schema_id != v.id:
                    continue
                return [], Registered(v.subject, v.version, v.id, stored)
            if not importing:
                level = compatibility_of(store, subject, self.config.default_compatibility)
                live = [v for v in existing if not v.deleted]
                reasons = self._incompatibilities(store, parsed, live, level)
                if reasons:
                    raise IncompatibleSchema(
                        "Schema being registered is incompatible with an earlier schema for "
                        f'subject "{subject}", details: {reasons}',
                        subject=subject,
                        reasons=reasons,
                    )
            if not existing and len(store.subjects) >= self.config.max_subjects:
                raise OperationNotPermitted(
                    f"the registry holds {self.config.max_subjects} subjects, its limit "
                    "(schema_registry_max_subjects)"
                )
            if len(existing) >= self.config.max_versions:
                raise OperationNotPermitted(
                    f"subject '{subject}' holds {self.config.max_versions} versions, the "
                    "limit (schema_registry_max_versions)"
                )
            new_id = self._choose_id(store, content, schema_id)
            number = (
                version if version is not None else (existing[-1].version + 1 if existing else 1)
            )
            taken = store.version(subject, number)
            if taken is not None:
                raise OperationNotPermitted(
                    f"version {number} of subject '{subject}' already exists with id {taken.id}"
                )
            value = SchemaValue(subject, number, new_id, *content)
            record = (encode_key(SchemaKey(subject, number)), encode_schema(value))
            stored = StoredSchema(new_id, *content)
            return [record], Registered(subject, number, new_id, stored)

        return await self._write(decide)

    def _choose_id(self, store: SchemaStore, content: Content, wanted: int | None) -> int:
        if wanted is None:
            found = store.id_of(content)
            return found if found is not None else store.max_id + 1
        holder = store.schema(wanted)
        if holder is not None and holder.content != content:
            raise OperationNotPermitted(
                f"Overwrite new schema with id {wanted} is not permitted: it holds another schema"
            )
        return wanted

    async def delete_version(self, subject: str, raw: str | int, *, permanent: bool) -> int:
        """Soft-delete a version (hidden; ``?deleted=true`` shows it) or, once soft-deleted,
        delete it for good (a tombstone). 42206 while a live version references it."""
        wanted = parse_version(raw)

        def decide(store: SchemaStore) -> Decision[int]:
            self._writable(store, subject)
            if not store.versions(subject, deleted=True):
                raise SubjectNotFound(subject)
            found = self._get_version(store, subject, wanted, deleted=permanent or wanted != LATEST)
            if store.referenced_by(subject, found.version):
                raise ReferenceExists(
                    f"One or more references exist to the schema {{subject={subject}, "
                    f"version={found.version}}}",
                    subject=subject,
                )
            key = encode_key(SchemaKey(subject, found.version))
            if not permanent:
                if found.deleted:
                    raise VersionSoftDeleted(
                        f"Subject '{subject}' Version {found.version} was soft deleted. Set "
                        "permanent=true to delete permanently"
                    )
                value = SchemaValue(
                    subject, found.version, found.id, *found.schema.content, deleted=True
                )
                return [(key, encode_schema(value))], found.version
            if not found.deleted:
                raise VersionNotSoftDeleted(
                    f"Subject '{subject}' Version {found.version} was not deleted first before "
                    "being permanently deleted"
                )
            return [(key, None), _noop(store)], found.version

        return await self._write(decide)

    async def delete_subject(self, subject: str, *, permanent: bool) -> list[int]:
        """Soft-delete every live version (then ``permanent``: remove them for good, with
        the subject's config and mode); the versions deleted."""

        def decide(store: SchemaStore) -> Decision[list[int]]:
            self._writable(store, subject)
            every = store.versions(subject, deleted=True)
            if not every:
                raise SubjectNotFound(subject)
            live = [v for v in every if not v.deleted]
            for v in live:
                if store.referenced_by(subject, v.version):
                    raise ReferenceExists(
                        f"One or more references exist to the schema {{subject={subject}, "
                        f"version={v.version}}}",
                        subject=subject,
                    )
            if not permanent:
                if not live:
                    raise SubjectSoftDeleted(
                        f"Subject '{subject}' was soft deleted. Set permanent=true to delete "
                        "permanently",
                        subject=subject,
                    )
                records: list[Record] = []
                for v in live:
                    stored = store.schema(v.id)
                    assert stored is not None
                    value = SchemaValue(subject, v.version, v.id, *stored.content, deleted=True)
                    records.append(
                        (encode_key(SchemaKey(subject, v.version)), encode_schema(value))
                    )
                records.append(
                    (
                        encode_key(DeleteSubjectKey(subject)),
                        encode_delete_subject(subject, live[-1].version),
                    )
                )
                return records, [v.version for v in live]
            if live:
                raise SubjectNotSoftDeleted(
                    f"Subject '{subject}' was not deleted first before being permanently deleted",
                    subject=subject,
                )
            records = [(encode_key(SchemaKey(subject, v.version)), None) for v in every]
            if subject in store.configs:
                records.append((encode_key(ConfigKey(subject)), None))
            if subject in store.modes:
                records.append((encode_key(ModeKey(subject)), None))
            records.append(_noop(store))
            return records, [v.version for v in every]

        return await self._write(decide)

    def _writable(self, store: SchemaStore, subject: str | None) -> None:
        if mode_of(store, subject) == READONLY:
            raise OperationNotPermitted(f"Subject {subject} is in read-only mode")

    async def set_compatibility(self, subject: str | None, level: str) -> str:
        if level not in COMPATIBILITY_LEVELS:
            raise InvalidCompatibilityLevel(
                f"Invalid compatibility level. Valid values are none, backward, forward, "
                f"full, backward_transitive, forward_transitive, and full_transitive: {level!r}"
            )

        def decide(store: SchemaStore) -> Decision[str]:
            return [(encode_key(ConfigKey(subject)), encode_config(level))], level

        return await self._write(decide)

    async def delete_compatibility(self, subject: str | None) -> str:
        """Unset a subject's level (the global one: back to the default); the level it had."""

        def decide(store: SchemaStore) -> Decision[str]:
            previous = compatibility_of(store, subject, self.config.default_compatibility)
            if (
                subject is not None
                and not store.versions(subject, deleted=True)
                and subject not in store.configs
            ):
                raise SubjectNotFound(subject)
            if subject not in store.configs:
                return [], previous
            return [(encode_key(ConfigKey(subject)), None)], previous

        return await self._write(decide)

    async def set_mode(self, subject: str | None, mode: str, *, force: bool = False) -> str:
        if mode not in MODES:
            raise InvalidMode(
                f"Invalid mode. Valid values are READWRITE, READONLY, IMPORT: {mode!r}"
            )

        def decide(store: SchemaStore) -> Decision[str]:
            if mode == IMPORT and not force:
                holds = store.versions(subject) if subject is not None else store.subject_names()
                if holds:
                    raise OperationNotPermitted(
                        "Cannot import since found existing subjects (set force=true)"
                    )
            return [(encode_key(ModeKey(subject)), encode_mode(mode))], mode

        return await self._write(decide)

    async def delete_mode(self, subject: str) -> str:
        def decide(store: SchemaStore) -> Decision[str]:
            previous = mode_of(store, subject)
            if subject not in store.modes:
                raise SubjectNotFound(subject)
            return [(encode_key(ModeKey(subject)), None)], previous

        return await self._write(decide)


def _noop(store: SchemaStore) -> Record:
    """Written with every permanent delete: ids up to ``max_id`` stay handed out even once
    compaction removes the tombstoned versions that named them."""
    return (encode_key(NoopKey()), encode_noop(store.max_id))


def _invalid(schema_type: str, message: str) -> InvalidSchema:
    return InvalidSchema(schema_type, message)


def _guarded_parse(
    schema_type: str, text: str, refs: tuple[ResolvedReference, ...]
) -> schemas.ParsedSchema:
    """The parser's answer; a parser that fails in an unforeseen way (a recursion limit on a
    deeply nested schema) is the schema's fault: 42201, never a 5xx."""
    try:
        return schemas.parse(schema_type, text, refs)
    except LogbusError:
        raise
    except (RecursionError, ValueError, TypeError, KeyError, IndexError) as exc:
        raise InvalidSchema(schema_type, f"{type(exc).__name__}: {exc}") from None
