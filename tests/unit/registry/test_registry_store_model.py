"""The registry's service and store against a model (hypothesis, stateful).

A real :class:`SchemaRegistry` over a real LogManager (one broker's topology, so
``_schemas`` is a real compacted topic on disk) is driven through registrations, lookups,
soft and permanent deletes of versions and subjects, and restarts. After every step the
subjects, versions, ids and deleted flags match a dict model, ids are never reused (a new
schema gets max-ever + 1, also after permanent deletes), and a store rebuilt from the
topic alone equals the live one.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from app.common.batch import decode_records
from app.common.errors import LogbusError
from app.core.local_topology import LocalTopology
from app.core.log import LogManager
from app.registry.config import RegistryConfig
from app.registry.records import SCHEMAS_TOPIC
from app.registry.service import SchemaInput, SchemaRegistry
from app.registry.storage import SchemasLog, replay
from app.registry.store import SchemaStore

SUBJECTS = ["a-value", "b-value"]
# Records with different fields: compatibility is NONE here (the API tests check levels).
SCHEMAS = [
    '{"type":"record","name":"R","fields":[{"name":"f' + str(i) + '","type":"string"}]}'
    for i in range(3)
]


@dataclass
class ModelVersion:
    schema: int
    id: int
    deleted: bool = False


class RegistryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="registry-model-"))
        self.loop = asyncio.new_event_loop()
        self.manager = LogManager(self.tmp / "data")
        self.manager.start()
        self.topology = LocalTopology(self.manager, 0, "http://b0")
        self.registry = self._start()
        self._run(self.registry.set_compatibility(None, "NONE"))
        self.model: dict[str, dict[int, ModelVersion]] = {}
        self.max_id = 0

    def _start(self) -> SchemaRegistry:
        log = SchemasLog(self.topology, 0, "http://b0", 1, 1000)
        registry = SchemaRegistry(log, RegistryConfig())
        self.loop.run_until_complete(registry.start())
        return registry

    def teardown(self) -> None:
        self.loop.close()
        self.manager.shutdown()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _run(self, coro: object) -> tuple[object, int | None]:
        try:
            return self.loop.run_until_complete(coro), None  # type: ignore[arg-type]
        except LogbusError as exc:
            return None, getattr(exc, "confluent_code", -1)

    def _call(self, fn: object, *args: object, **kwargs: object) -> tuple[object, int | None]:
        try:
            return fn(*args, **kwargs), None  # type: ignore[operator]
        except LogbusError as exc:
            return None, getattr(exc, "confluent_code", -1)

    def _id_of(self, schema: int) -> int | None:
        for versions in self.model.values():
            for v in versions.values():
                if v.schema == schema:
                    return v.id
        return None

    # -- steps ---------------------------------------------------------------------------

    @rule(subject=st.sampled_from(SUBJECTS), schema=st.integers(0, len(SCHEMAS) - 1))
    def register(self, subject: str, schema: int) -> None:
        result, error = self._run(self.registry.register(subject, SchemaInput(SCHEMAS[schema])))
        assert error is None, error
        versions = self.model.setdefault(subject, {})
        live = [n for n, v in versions.items() if not v.deleted and v.schema == schema]
        if live:
            number = live[-1]
            expected_id = versions[number].id
        else:
            number = max(versions, default=0) + 1
            known = self._id_of(schema)
            if known is None:
                self.max_id += 1
                known = self.max_id
            expected_id = known
            versions[number] = ModelVersion(schema, expected_id)
        assert (result.version, result.id) == (number, expected_id)  # type: ignore[attr-defined]

    @rule(subject=st.sampled_from(SUBJECTS), schema=st.integers(0, len(SCHEMAS) - 1))
    def lookup(self, subject: str, schema: int) -> None:
        result, error = self._call(self.registry.lookup, subject, SchemaInput(SCHEMAS[schema]))
        versions = self.model.get(subject, {})
        if not versions:
            assert error == 40401
            return
        live = [n for n, v in versions.items() if not v.deleted and v.schema == schema]
        if not live:
            assert error == 40403
            return
        assert error is None
        assert result.version == max(live)  # type: ignore[attr-defined]

    @rule(
        subject=st.sampled_from(SUBJECTS),
        number=st.integers(1, 4),
        permanent=st.booleans(),
    )
    def delete_version(self, subject: str, number: int, permanent: bool) -> None:
        result, error = self._run(
            self.registry.delete_version(subject, number, permanent=permanent)
        )
        versions = self.model.get(subject, {})
        v = versions.get(number)
        if not versions:
            assert error == 40401
        elif v is None or (v.deleted and not permanent):
            assert error in (40402, 40406), error
        elif not v.deleted and permanent:
            assert error == 40407
        else:
            assert error is None, error
            assert result == number
            if permanent:
                del versions[number]
                if not versions:
                    del self.model[subject]
            else:
                v.deleted = True

    @rule(subject=st.sampled_from(SUBJECTS), permanent=st.booleans())
    def delete_subject(self, subject: str, permanent: bool) -> None:
        result, error = self._run(self.registry.delete_subject(subject, permanent=permanent))
        versions = self.model.get(subject, {})
        live = sorted(n for n, v in versions.items() if not v.deleted)
        if not versions:
            assert error == 40401
        elif permanent and live:
            assert error == 40405
        elif not permanent and not live:
            assert error == 40404
        else:
            assert error is None, error
            if permanent:
                assert result == sorted(versions)
                del self.model[subject]
            else:
                assert result == live
                for n in live:
                    versions[n].deleted = True

    @rule()
    def restart(self) -> None:
        """A new registry over the same topic (the broker restarted) holds the same state."""
        before = self.registry.store.snapshot()
        self.registry = self._start()
        assert self.registry.store.snapshot() == before

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        store = self.registry._read()
        seen = {
            s: {n: (v.id, v.deleted) for n, v in versions.items()}
            for s, versions in store.subjects.items()
        }
        expected = {
            s: {n: (v.id, v.deleted) for n, v in versions.items()}
            for s, versions in self.model.items()
        }
        assert seen == expected
        assert store.max_id == self.max_id
        for s, versions in self.model.items():
            live = sorted(n for n, v in versions.items() if not v.deleted)
            if live:
                assert self.registry.versions(s) == live
                assert self.registry.get_version(s, "latest").version == live[-1]

    @invariant()
    def rebuilt_from_the_topic_equals_live(self) -> None:
        part_log = self.topology.replica_log(SCHEMAS_TOPIC, 0)
        if part_log is None:
            return
        rebuilt = replay(part_log, SchemaStore(), part_log.log_end_offset)
        assert rebuilt.snapshot() == self.registry._read().snapshot()

    @invariant()
    def compacted_topic_rebuilds_the_same_state(self) -> None:
        """What compaction may leave (the latest record per key, tombstones gone) rebuilds
        the same registry, max id included (the NOOP's maxId of permanent deletes)."""
        part_log = self.topology.replica_log(SCHEMAS_TOPIC, 0)
        if part_log is None:
            return
        buf = part_log.read(0, 1 << 30, max_offset=part_log.log_end_offset).read_bytes()
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for record in decode_records(buf):
            assert record.key is not None
            value = None if record.value is None else bytes(record.value)
            latest[bytes(record.key)] = (record.offset, value)
        compacted = SchemaStore()
        for key, (offset, value) in sorted(latest.items(), key=lambda kv: kv[1][0]):
            if value is not None:
                compacted.apply(key, value, offset)
        assert compacted.snapshot() == self.registry._read().snapshot()


RegistryMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=20,
    suppress_health_check=[HealthCheck.too_slow],
)
test_registry_model = RegistryMachine.TestCase
