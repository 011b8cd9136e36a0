"""Client quotas (app/core/security/quotas.py): Kafka's precedence of entities, the shared
measurement of principals under one quota, the throttle arithmetic, and the file store."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from app.core.security.quotas import (
    DEFAULT,
    FETCH,
    PRODUCE,
    REQUEST,
    Entity,
    FileQuotaStore,
    InvalidQuota,
    QuotaConfig,
    QuotaFilter,
    QuotaManager,
    Quotas,
    alteration,
)

# Kafka's documented order (docs "Quotas": most specific first), as (user, client-id).
KAFKA_ORDER = [
    ("alice", "app"),  # /config/users/<user>/clients/<client-id>
    ("alice", DEFAULT),  # /config/users/<user>/clients/<default>
    ("alice", None),  # /config/users/<user>
    (DEFAULT, "app"),  # /config/users/<default>/clients/<client-id>
    (DEFAULT, DEFAULT),  # /config/users/<default>/clients/<default>
    (DEFAULT, None),  # /config/users/<default>
    (None, "app"),  # /config/clients/<client-id>
    (None, DEFAULT),  # /config/clients/<default>
]


def test_precedence_is_kafkas_order() -> None:
    # Each entity gets a distinct value; removing the winner each time must reveal the
    # next one in Kafka's order.
    quotas = {Entity(u, c): {PRODUCE: float(i + 1)} for i, (u, c) in enumerate(KAFKA_ORDER)}
    for i in range(len(KAFKA_ORDER)):
        found = QuotaConfig(quotas).resolve(PRODUCE, "alice", "app")
        assert found is not None and found[0] == float(i + 1), KAFKA_ORDER[i]
        del quotas[Entity(*KAFKA_ORDER[i])]
    assert QuotaConfig(quotas).resolve(PRODUCE, "alice", "app") is None


def test_precedence_is_per_key_and_names_do_not_leak() -> None:
    config = QuotaConfig(
        {
            Entity("alice"): {PRODUCE: 100.0},
            Entity(DEFAULT): {FETCH: 50.0, PRODUCE: 10.0},
            Entity(None, "batch"): {REQUEST: 5.0},
        }
    )
    assert config.resolve(PRODUCE, "alice", "x") == (100.0, "alice", "")
    # alice sets no fetch quota: the user default applies, measured for alice alone.
    assert config.resolve(FETCH, "alice", "x") == (50.0, "alice", "")
    assert config.resolve(PRODUCE, "bob", "x") == (10.0, "bob", "")
    assert config.resolve(REQUEST, "bob", "batch") == (5.0, "", "batch")
    assert config.resolve(REQUEST, "bob", "other") is None


def test_tags_share_or_separate_measurements() -> None:
    clock = [0.0]
    m = QuotaManager(11, 1.0, clock=lambda: clock[0])
    m.update(QuotaConfig({Entity("alice"): {PRODUCE: 100.0}, Entity(DEFAULT): {PRODUCE: 100.0}}))
    # alice's two client ids share alice's quota: the burst (11 s x 100 B/s) is shared.
    assert m.record(PRODUCE, "alice", "one", 1100) == 0.0
    assert m.record(PRODUCE, "alice", "two", 100) == pytest.approx(1.0)
    # bob (the user default) is measured apart from carol, and from alice.
    assert m.record(PRODUCE, "bob", "one", 1100) == 0.0
    assert m.record(PRODUCE, "carol", "one", 1100) == 0.0


def test_throttle_brings_the_rate_back_to_the_quota() -> None:
    """A client that waits its throttle times sends, after the first window's burst,
    exactly the quota per second."""
    clock = [0.0]
    m = QuotaManager(11, 0.2, clock=lambda: clock[0])
    m.update(QuotaConfig({Entity("alice"): {PRODUCE: 200_000.0}}))
    sent: list[tuple[float, int]] = []
    while clock[0] < 30:
        throttle = m.record(PRODUCE, "alice", "c", 20_000)
        assert throttle <= m.max_throttle_s
        clock[0] += 0.003 + throttle
        sent.append((clock[0], 20_000))
    for start, end in ((3, 8), (10, 16), (20, 30)):
        rate = sum(n for t, n in sent if start <= t < end) / (end - start)
        assert rate == pytest.approx(200_000, rel=0.05)


def test_no_quota_costs_nothing_and_throttle_is_bounded() -> None:
    m = QuotaManager(11, 1.0)
    assert m.record(PRODUCE, "alice", "", 10**9) == 0.0
    m.update(QuotaConfig({Entity(DEFAULT): {REQUEST: 1.0}}))
    for _ in range(100):
        throttle = m.record(REQUEST, "alice", "", 1.0)
    assert throttle == m.max_throttle_s == 11.0


def test_entities_and_values_are_checked() -> None:
    with pytest.raises(InvalidQuota):
        Entity().validate()
    with pytest.raises(InvalidQuota):
        Entity.from_json([{"entity_type": "topic", "entity_name": "x"}])
    with pytest.raises(InvalidQuota):
        QuotaConfig.from_json({"quotas": [{"entity": [], "values": {}}]})
    with pytest.raises(InvalidQuota):
        QuotaConfig.from_json(
            {"quotas": [{"entity": [{"entity_type": "user"}], "values": {"bogus": 1}}]}
        )
    with pytest.raises(InvalidQuota):
        QuotaConfig.from_json(
            {"quotas": [{"entity": [{"entity_type": "user"}], "values": {PRODUCE: 0}}]}
        )
    e = Entity.from_json(
        [
            {"entity_type": "user", "entity_name": None},
            {"entity_type": "client-id", "entity_name": "a"},
        ]
    )
    assert e == Entity(DEFAULT, "a") and e.path() == "users/<default>/clients/a"


def test_file_store_round_trip_and_reload(tmp_path: Path) -> None:
    store = FileQuotaStore(tmp_path / "quotas.json", poll_s=0.05)
    assert not store.load()
    config = store.alter([(Entity("alice"), [(PRODUCE, 1024.0), (REQUEST, 10.0)])])
    assert config.quotas == {Entity("alice"): {PRODUCE: 1024.0, REQUEST: 10.0}}
    config = store.alter(
        [(Entity("alice"), [(REQUEST, None)]), (Entity(None, DEFAULT), [(FETCH, 5.0)])]
    )
    assert (
        store.load().quotas
        == config.quotas
        == {
            Entity("alice"): {PRODUCE: 1024.0},
            Entity(None, DEFAULT): {FETCH: 5.0},
        }
    )
    seen: list[QuotaConfig] = []
    store.watch(seen.append)
    try:
        time.sleep(0.1)
        doc = json.loads((tmp_path / "quotas.json").read_text())
        doc["quotas"] = [q for q in doc["quotas"] if q["entity"][0].get("entity_type") == "user"]
        (tmp_path / "quotas.json").write_text(json.dumps(doc))
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.02)
        assert seen and seen[-1].quotas == {Entity("alice"): {PRODUCE: 1024.0}}
    finally:
        store.close()


def test_a_describe_filter_matches_as_kafkas() -> None:
    """Kafka's DescribeClientQuotas filter (ClientQuotasImage.matches): exact names, the
    default entity, any entity of a type (the default included), ``strict``."""
    entities = {
        "alice": Entity("alice"),
        "default": Entity(DEFAULT),
        "alice/app": Entity("alice", "app"),
        "app": Entity(None, "app"),
    }
    config = QuotaConfig({e: {REQUEST: 1.0} for e in entities.values()})

    def selected(*components: tuple[str, int, str | None], strict: bool = False) -> set[str]:
        found = config.describe(QuotaFilter.parse(components, strict))
        return {name for name, e in entities.items() if any(e == f for f, _ in found)}

    assert selected() == set(entities)
    assert selected(strict=True) == set()
    assert selected(("user", 0, "alice")) == {"alice", "alice/app"}
    assert selected(("user", 0, "alice"), strict=True) == {"alice"}
    assert selected(("user", 1, None)) == {"default"}
    assert selected(("user", 2, None)) == {"alice", "default", "alice/app"}
    assert selected(("user", 2, None), ("client-id", 2, None)) == {"alice/app"}
    assert selected(("client-id", 0, "app"), strict=True) == {"app"}
    assert selected(("ip", 2, None)) == set()
    # HTTP's GET /quotas is the same filter: exact parts, not strict.
    assert config.select("alice", None) == config.describe(
        QuotaFilter.parse([("user", 0, "alice")], False)
    )
    for bad in (
        [("group", 2, None)],
        [("", 2, None)],
        [("user", 0, None)],
        [("user", 1, "x")],
        [("user", 3, None)],
        [("user", 2, None), ("user", 0, "x")],
        [("ip", 2, None), ("client-id", 2, None)],
    ):
        with pytest.raises(InvalidQuota):
            QuotaFilter.parse(bad, False)


def test_an_alteration_is_checked_with_kafkas_reasons() -> None:
    assert alteration([("user", "alice"), ("client-id", None)], [(PRODUCE, 10, False)]) == (
        Entity("alice", DEFAULT),
        [(PRODUCE, 10.0)],
    )
    assert alteration([("user", None)], [(FETCH, 0.0, True)]) == (Entity(DEFAULT), [(FETCH, None)])
    refusals = {
        "no IP quotas": ([("ip", "10.0.0.1")], [(PRODUCE, 1, False)]),
        "request_rate": ([("user", "a")], [("request_percentage", 50, False)]),
        "unknown quota key": ([("user", "a")], [("nope", 1, False)]),
        "more than once in the entity": ([("user", "a"), ("user", "b")], [(PRODUCE, 1, False)]),
        "appears more than once for": ([("user", "a")], [(PRODUCE, 1, False), (PRODUCE, 2, False)]),
        "above 0": ([("user", "a")], [(PRODUCE, float("nan"), False)]),
        "'group'": ([("group", "a")], [(PRODUCE, 1, False)]),
        "names a user": ([], [(PRODUCE, 1, False)]),
        "at least one op": ([("user", "a")], []),
    }
    for reason, (components, ops) in refusals.items():
        with pytest.raises(InvalidQuota, match=reason):
            alteration(components, ops)


def test_quotas_alter_writes_holds_and_audits(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    quotas = Quotas(QuotaManager(), FileQuotaStore(tmp_path / "quotas.json"))
    change = alteration([("user", "alice")], [(PRODUCE, 100, False)])
    with caplog.at_level("INFO", logger="logbus.audit"):
        config = asyncio.run(quotas.alter([change], "User:admin"))
    assert quotas.manager.config is config and config.quotas == {Entity("alice"): {PRODUCE: 100.0}}
    assert FileQuotaStore(tmp_path / "quotas.json").load().quotas == config.quotas
    assert "CHANGED principal=User:admin ALTER_CLIENT_QUOTAS users/alice" in caplog.text
