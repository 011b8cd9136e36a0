"""Broker-side schema validation (issue 18): Confluent Server's topic configs
``confluent.value.schema.validation`` and ``confluent.key.schema.validation``.

With one on, every record a producer writes to the topic must carry, in its value (key),
Confluent's wire-format header (magic byte 0, then a 4-byte big-endian schema id) with an
id registered under the topic's subject by TopicNameStrategy (``<topic>-value``,
``<topic>-key``), as a live version. Otherwise the produce is refused with
INVALID_RECORD naming the record's index, and nothing of the request is written. A null
value (a tombstone: compacted topics need them) or a null key (no key) carries nothing
typed and passes.

Where it runs: on the RecordBatch v2 bytes every door produces, before the append
(:func:`app.api.produce_service.produce_raw` for HTTP binary produce and the Kafka door's
Produce; :func:`app.api.routers.records.append_json_records` for HTTP JSON and WebSocket
produce, which maps the index back to the request's record). One function,
:meth:`SchemaValidation.find_refusal`, makes the decision for all of them.

Cost per batch: only the records' key and value are looked at (their first 5 bytes),
through the compiled record reader (compressed batches are decompressed once); payloads
are not decoded against the schema (Confluent Server checks the id, not the payload).
Topics without the configs pay one tuple comparison per request.

The ids of a subject are cached (:class:`SchemaValidation`): an id in the cache is
accepted without a registry read; an id not in it makes one read of this broker's
registry replica (a schema registered a moment ago is found), so a producer of a freshly
registered schema is never refused by a stale cache. Entries expire after
``schema_validation_cache_ms``, which bounds how long a deleted version's id is still
accepted.

A broker with no replica of ``_schemas`` (in a cluster whose ``_schemas`` has fewer
replicas than brokers) asks the ``_schemas`` leader instead, as a registry read on such a
broker is served (``app/api/registry_forward.py``): ``GET
/schema-registry/schemas?subjectPrefix=<subject>`` there (the subject's live versions
and their ids), through the one inter-broker HTTP client (``app/api/inter_broker.py``),
which verifies the leader and presents this broker's certificate (the call is the
broker's own, not a client's). The answer fills the same cache, so a cached id costs the
same set lookup as anywhere; only a miss (or an expired entry) waits on the leader. No
leader (an election), no answer, or an error answer: BROKER_NOT_AVAILABLE, retriable.

Concurrency: used on the event loop only (the registry's store is the loop's); two
produces that miss at once may both ask (the later answer wins, both are current).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

import httpx

from app.api.inter_broker import InterBrokerHttp
from app.common.batch import RecordBatchReader, iter_headers
from app.common.errors import BrokerNotAvailable, CorruptRecord, InvalidRecord
from app.common.schema_errors import RegistryNotLeader, SchemaRegistryError

if TYPE_CHECKING:
    from app.registry.service import SchemaRegistry

MAGIC = 0
HEADER_BYTES = 5
# The leader's registry path for a subject's live versions and their ids.
LEADER_PATH = "/schema-registry/schemas"


class _AskLeader(Exception):
    """This broker has no ``_schemas`` replica: ``subject``'s ids are the leader's to give
    (raised out of the synchronous scan, answered by :meth:`SchemaValidation.find_refusal`)."""

    def __init__(self, subject: str, leader_url: str | None) -> None:
        super().__init__(subject)
        self.subject = subject
        self.leader_url = leader_url


class Refusal(NamedTuple):
    """The first record of a body that fails validation: ``record``, its index among the
    body's records (control batches skipped), ``key`` or ``value``, and why."""

    record: int
    field: str
    reason: str


class _Refused(Exception):
    """A record fails validation (raised out of the synchronous scan at the first one,
    returned by :meth:`SchemaValidation.find_refusal`)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal


class SchemaValidationFailed(InvalidRecord):
    """A produced record without a schema id registered for the topic's subject, on a
    topic with ``confluent.value.schema.validation`` (or the key variant) on. HTTP 422;
    the Kafka door answers INVALID_RECORD with the record's batch index."""

    index: int
    field: str

    def __init__(self, topic: str, refusal: Refusal) -> None:
        super().__init__(
            f"record {refusal.record} of the request to {topic}: {refusal.reason}",
            index=refusal.record,
            field=refusal.field,
        )


def subject_of(topic: str, field: str) -> str:
    """TopicNameStrategy: Confluent Server validates against ``<topic>-<key|value>``."""
    return f"{topic}-{field}"


class SchemaValidation:
    """The per-app validator and its cache of subject -> registered ids.

    ``registry`` is set by the registry's lifespan (``start_registry``) and cleared when
    it stops; a produce to a validating topic while it is None is refused as retriable
    (BROKER_NOT_AVAILABLE: nothing can be checked). Bounded: ``max_subjects`` entries,
    cleared when full (the working set is the validating topics, a few).
    """

    def __init__(
        self,
        ttl_ms: int,
        max_subjects: int,
        http: InterBrokerHttp | None = None,
        leader_timeout_ms: int = 10_000,
    ) -> None:
        self.registry: SchemaRegistry | None = None
        self.ttl_s = ttl_ms / 1000
        self.max_subjects = max_subjects
        # To the _schemas leader, for a broker without a replica (module docstring).
        self.http = http
        self.leader_timeout_s = leader_timeout_ms / 1000
        self._ids_by_subject: dict[str, tuple[frozenset[int], float]] = {}
        # The same ids as 5-byte headers (magic 0 + id): one slice and lookup per record.
        self._headers: dict[str, frozenset[bytes]] = {}

    def _ids(self, subject: str, fresh: frozenset[str], *, refresh: bool = False) -> frozenset[int]:
        """The ids of ``subject``'s live versions: cached, read again when ``refresh`` or
        older than the TTL (not when ``subject`` is in ``fresh``: just asked of the
        leader for this very request). Raises _AskLeader without a local replica."""
        cached = self._ids_by_subject.get(subject)
        now = time.monotonic()
        if cached is not None and (
            subject in fresh or (not refresh and now - cached[1] < self.ttl_s)
        ):
            return cached[0]
        registry = self.registry
        if registry is None:
            raise BrokerNotAvailable(
                "the schema registry is not serving, and this topic validates schema ids "
                "(confluent.*.schema.validation)"
            )
        try:
            ids = registry.subject_ids(subject)
        except RegistryNotLeader as exc:
            # No local replica of _schemas: the leader answers (find_refusal asks it).
            raise _AskLeader(subject, exc.leader_url) from None
        except SchemaRegistryError as exc:
            # No store: retriable.
            raise BrokerNotAvailable(f"cannot read the schema registry: {exc}") from exc
        self._remember(subject, ids, now)
        return ids

    def _remember(self, subject: str, ids: frozenset[int], now: float) -> None:
        if len(self._ids_by_subject) >= self.max_subjects:
            self._ids_by_subject.clear()
            self._headers.clear()
        self._ids_by_subject[subject] = (ids, now)
        self._headers[subject] = frozenset(b"\x00" + i.to_bytes(4, "big") for i in ids)

    async def _leader_ids(self, subject: str, leader_url: str | None) -> frozenset[int]:
        """``subject``'s live ids as the ``_schemas`` leader has them (module docstring);
        BrokerNotAvailable (retriable) when it cannot be asked or does not answer 200."""
        if leader_url is None or self.http is None:
            raise BrokerNotAvailable(
                "this broker has no replica of _schemas and its leader is unknown now (an "
                "election is under way); the topic validates schema ids "
                "(confluent.*.schema.validation)"
            )
        url = leader_url.rstrip("/") + LEADER_PATH
        try:
            answer = await self.http.client().get(
                url, params={"subjectPrefix": subject}, timeout=self.leader_timeout_s
            )
        except httpx.HTTPError as exc:
            raise BrokerNotAvailable(
                f"the _schemas leader at {leader_url} did not answer: {type(exc).__name__}"
            ) from None
        if answer.status_code != 200:
            raise BrokerNotAvailable(
                f"the _schemas leader at {leader_url} answered {answer.status_code}: "
                f"{answer.text[:200]}"
            )
        try:
            return frozenset(int(v["id"]) for v in answer.json() if v.get("subject") == subject)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise BrokerNotAvailable(
                f"the _schemas leader at {leader_url} answered what is not a list of schemas: {exc}"
            ) from None

    async def close(self) -> None:
        if self.http is not None:
            await self.http.close()

    def _allowed_headers(self, subject: str, fresh: frozenset[str]) -> frozenset[bytes]:
        """The 5-byte headers (magic 0 + id) a record of ``subject`` may start with."""
        self._ids(subject, fresh)
        return self._headers[subject]

    def _recheck(
        self, topic: str, field: str, data: bytes, fresh: frozenset[str], index: int
    ) -> frozenset[bytes]:
        """The slow path, for the ``field`` of record ``index`` whose header is not among
        the cached ones: the subject's headers again (its id was registered since the
        cache was filled), or :class:`_Refused`."""
        why = self._why_not(topic, field, data, fresh)
        if why is not None:
            raise _Refused(Refusal(index, field, why))
        return self._allowed_headers(subject_of(topic, field), fresh)

    def _why_not(self, topic: str, field: str, data: bytes, fresh: frozenset[str]) -> str | None:
        """The slow path, for a record whose header is not among the cached ones: why it
        is refused (None: its id was registered since the cache was filled)."""
        if len(data) < HEADER_BYTES or data[0] != MAGIC:
            first = "no bytes" if not data else f"first byte {data[0]}"
            return (
                f"the {field} is not in Confluent's wire format ({first}, {len(data)} bytes; "
                "expected magic byte 0 and a 4-byte schema id)"
            )
        schema_id = int.from_bytes(data[1:HEADER_BYTES], "big")
        subject = subject_of(topic, field)
        if schema_id not in self._ids(subject, fresh, refresh=True):
            return (
                f"the {field}'s schema id {schema_id} is not registered under subject {subject!r}"
            )
        return None

    async def find_refusal(
        self,
        topic: str,
        sides: tuple[bool, bool],
        body: bytes | bytearray | memoryview,
    ) -> Refusal | None:
        """The first record of ``body`` (RecordBatch v2 batches) that ``sides`` (check the
        key, check the value) refuse; None when all pass. Control batches are skipped
        (the broker writes them). A batch the record reader cannot read is CORRUPT_MESSAGE
        (``Log.append`` would refuse it all the same).

        Per record: one 5-byte slice and a set lookup against the cached headers of the
        subject's ids; only a miss takes the slow path (a registry read). On a broker
        without a ``_schemas`` replica that read is the leader's: the scan stops, the
        leader is asked (awaited), and the scan runs again with its answer (at most once
        per subject: twice for a key and a value)."""
        fresh: frozenset[str] = frozenset()
        while True:
            try:
                self._scan(topic, sides, body, fresh)
                return None
            except _Refused as refused:
                return refused.refusal
            except _AskLeader as ask:
                if ask.subject in fresh:  # pragma: no cover - _ids never asks twice
                    raise BrokerNotAvailable("the _schemas leader's answer was not kept") from None
                ids = await self._leader_ids(ask.subject, ask.leader_url)
                self._remember(ask.subject, ids, time.monotonic())
                fresh |= {ask.subject}

    def _scan(
        self,
        topic: str,
        sides: tuple[bool, bool],
        body: bytes | bytearray | memoryview,
        fresh: frozenset[str],
    ) -> None:
        """:meth:`find_refusal`'s synchronous scan; raises :class:`_Refused` at the first
        record refused, :class:`_AskLeader` when a subject's ids are the ``_schemas``
        leader's to give."""
        check_key, check_value = sides
        fields = [("key", check_key), ("value", check_value)]
        allowed = {
            field: self._allowed_headers(subject_of(topic, field), fresh)
            for field, on in fields
            if on
        }
        values = allowed.get("value")
        keys = allowed.get("key")
        index = 0
        view = memoryview(body)
        for pos, header in iter_headers(view):
            if header.is_control:
                continue
            try:
                records = list(RecordBatchReader(view[pos : pos + header.size]))
            except Exception as exc:  # the compiled reader's errors have no common base
                raise CorruptRecord(f"a record batch could not be read: {exc}") from None
            for record in records:
                # Per record a slice and a set lookup; only a miss takes the slow path.
                if values is not None:
                    value = record.value
                    if value is not None and value[:HEADER_BYTES] not in values:
                        values = self._recheck(topic, "value", value, fresh, index)
                if keys is not None:
                    key = record.key
                    if key is not None and key[:HEADER_BYTES] not in keys:
                        keys = self._recheck(topic, "key", key, fresh, index)
                index += 1

    async def check(
        self, topic: str, sides: tuple[bool, bool], body: bytes | bytearray | memoryview
    ) -> None:
        """:meth:`find_refusal`, raised as :class:`SchemaValidationFailed`."""
        refusal = await self.find_refusal(topic, sides, body)
        if refusal is not None:
            raise SchemaValidationFailed(topic, refusal)


NO_VALIDATION = (False, False)
