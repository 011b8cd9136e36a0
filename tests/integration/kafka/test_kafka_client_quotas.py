"""DescribeClientQuotas and AlterClientQuotas on the Kafka door: the quotas HTTP's
``/quotas`` sets and describes, through the same store and manager, with Kafka's filter
(exact, default and specified components, ``strict``), its per-entry errors and its
authorization (DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster). kafka-python and
librdkafka offer no client quota admin calls, so the protocol is spoken with kio.

One broker for the module: SASL_PLAINTEXT beside HTTP Basic, ``authorizer=acl``,
``User:admin`` super, at most 3 alterations per request. Entities are named per test;
only the filter test sets a default entity."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka_harness import KafkaBroker, admin_http, login, sasl_acl_broker
from kio.schema.alter_client_quotas.v0 import request as alter_v0
from kio.schema.alter_client_quotas.v0 import response as alter_v0_answer
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.alter_client_quotas.v1 import response as alter_v1_answer
from kio.schema.describe_client_quotas.v0 import request as describe_v0
from kio.schema.describe_client_quotas.v0 import response as describe_v0_answer
from kio.schema.describe_client_quotas.v1 import request as describe_v1
from kio.schema.describe_client_quotas.v1 import response as describe_v1_answer
from kio.schema.errors import ErrorCode

EXACT, DEFAULT, SPECIFIED = 0, 1, 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    yield from sasl_acl_broker(
        tmp_path_factory.mktemp("kafka-client-quotas"),
        ("LOGBUS_KAFKA_CLIENT_QUOTA_MAX_ENTRIES_PER_REQUEST", "3"),
    )


def entity(m: Any, **parts: str | None) -> tuple[Any, ...]:
    """Kafka's components: ``user=``, ``client_id=`` (None: the default entity), ``ip=``."""
    return tuple(
        m.EntityData(entity_type=kind.replace("_", "-"), entity_name=name)
        for kind, name in parts.items()
    )


def op(m: Any, key: str, value: float = 0.0, remove: bool = False) -> Any:
    return m.OpData(key=key, value=value, remove=remove)


def alter(
    broker: KafkaBroker, entries: list[tuple[tuple[Any, ...], list[Any]]], *, user: str = "admin",
    validate_only: bool = False, m: Any = alter_v1, answer: Any = alter_v1_answer,
) -> list[tuple[ErrorCode, str | None]]:  # fmt: skip
    request = m.AlterClientQuotasRequest(
        entries=tuple(m.EntryData(entity=e, ops=tuple(ops)) for e, ops in entries),
        validate_only=validate_only,
    )
    got = login(broker, user).call(request, answer.AlterClientQuotasResponse)
    return [(r.error_code, r.error_message) for r in got.entries]


def describe(
    broker: KafkaBroker, *components: tuple[str, int, str | None], strict: bool = False,
    user: str = "admin", m: Any = describe_v1, answer: Any = describe_v1_answer,
) -> Any:  # fmt: skip
    request = m.DescribeClientQuotasRequest(
        components=tuple(
            m.ComponentData(entity_type=t, match_type=mt, match=match)
            for t, mt, match in components
        ),
        strict=strict,
    )
    return login(broker, user).call(request, answer.DescribeClientQuotasResponse)


def entries(answer: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert answer.error_code == ErrorCode.none, answer.error_message
    return {
        tuple((c.entity_type, c.entity_name) for c in e.entity): {v.key: v.value for v in e.values}
        for e in answer.entries
    }


def test_what_kafka_alters_http_describes_and_back(broker: KafkaBroker) -> None:
    alice, app = f"alice-{uuid.uuid4().hex[:6]}", f"app-{uuid.uuid4().hex[:6]}"
    assert (
        alter(
            broker,
            [
                (entity(alter_v1, user=alice), [op(alter_v1, "producer_byte_rate", 1_048_576)]),
                (
                    entity(alter_v1, user=alice, client_id=app),
                    [op(alter_v1, "consumer_byte_rate", 2048), op(alter_v1, "request_rate", 50)],
                ),
            ],
        )
        == [(ErrorCode.none, None)] * 2
    )
    with admin_http(broker) as h:
        seen = h.get("/quotas", params={"user": alice}).json()["quotas"]
        assert seen == [
            {"entity": [{"entity_type": "user", "entity_name": alice}],
             "values": {"producer_byte_rate": 1_048_576.0}},
            {"entity": [{"entity_type": "user", "entity_name": alice},
                        {"entity_type": "client-id", "entity_name": app}],
             "values": {"consumer_byte_rate": 2048.0, "request_rate": 50.0}},
        ]  # fmt: skip
        # Set over HTTP: described over Kafka.
        body = {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": app}],
                             "ops": [{"key": "request_rate", "value": 7}]}]}  # fmt: skip
        assert h.post("/quotas", json=body).status_code == 200
    assert entries(describe(broker, ("client-id", EXACT, app))) == {
        (("user", alice), ("client-id", app)): {"consumer_byte_rate": 2048.0, "request_rate": 50.0},
        (("client-id", app),): {"request_rate": 7.0},
    }
    # Remove ops; an entity left without quotas is described no more.
    assert (
        alter(
            broker,
            [
                (entity(alter_v1, user=alice), [op(alter_v1, "producer_byte_rate", remove=True)]),
                (
                    entity(alter_v1, user=alice, client_id=app),
                    [op(alter_v1, "request_rate", remove=True)],
                ),
            ],
        )
        == [(ErrorCode.none, None)] * 2
    )
    assert entries(describe(broker, ("user", EXACT, alice))) == {
        (("user", alice), ("client-id", app)): {"consumer_byte_rate": 2048.0},
    }


def test_validate_only_checks_and_changes_nothing(broker: KafkaBroker) -> None:
    name = f"dry-{uuid.uuid4().hex[:6]}"
    answered = alter(
        broker,
        [
            (entity(alter_v1, user=name), [op(alter_v1, "producer_byte_rate", 100)]),
            (entity(alter_v1, user=name, client_id=name), [op(alter_v1, "nope", 1)]),
        ],
        validate_only=True,
    )
    assert answered[0] == (ErrorCode.none, None)
    assert answered[1][0] == ErrorCode.invalid_request
    assert entries(describe(broker, ("user", EXACT, name))) == {}


def test_each_entry_is_answered_on_its_own(broker: KafkaBroker) -> None:
    name = f"bad-{uuid.uuid4().hex[:6]}"
    a = alter_v1
    answered = alter(
        broker,
        [
            (entity(a, ip="10.0.0.1"), [op(a, "producer_byte_rate", 100)]),
            (entity(a, user=name), [op(a, "request_percentage", 50)]),
            (entity(a, user=name, client_id="c"), [op(a, "consumer_byte_rate", 0)]),
        ],
    )
    assert [code for code, _ in answered] == [ErrorCode.invalid_request] * 3
    assert "no IP quotas" in (answered[0][1] or "")
    assert "request_rate" in (answered[1][1] or "") and "request_percentage" in (
        answered[1][1] or ""
    )
    assert "above 0" in (answered[2][1] or "")
    answered = alter(
        broker,
        [
            (entity(a, user=name), [op(a, "producer_byte_rate", 100)]),  # valid: applied
            (
                entity(a, user=name, client_id="d"),
                [op(a, "request_rate", 1), op(a, "request_rate", 2)],
            ),
            (entity(a, group=name), [op(a, "request_rate", 1)]),
        ],
    )
    assert answered[0] == (ErrorCode.none, None)
    assert answered[1][0] == answered[2][0] == ErrorCode.invalid_request
    assert "more than once" in (answered[1][1] or "") and "'group'" in (answered[2][1] or "")
    more = alter(
        broker,
        [
            (entity(a, user=name, client_id="e"), [op(a, "request_rate", math.nan)]),
            (entity(a, user=name, client_id="f"), [op(a, "request_rate", math.inf)]),
            (entity(a, user=name), [op(a, "request_rate", 3)]),
        ],
    )
    assert [code for code, _ in more] == [ErrorCode.invalid_request] * 2 + [ErrorCode.none]
    assert entries(describe(broker, ("user", EXACT, name))) == {
        (("user", name),): {"producer_byte_rate": 100.0, "request_rate": 3.0},
    }
    twice = alter(
        broker,
        [
            (entity(a, user=name), [op(a, "request_rate", 4)]),
            (entity(a, user=name), [op(a, "request_rate", 5)]),
        ],
    )
    assert twice[0] == (ErrorCode.none, None)
    assert twice[1][0] == ErrorCode.invalid_request and "twice" in (twice[1][1] or "")
    assert entries(describe(broker, ("user", EXACT, name), strict=True)) == {
        (("user", name),): {"producer_byte_rate": 100.0, "request_rate": 4.0},
    }


def test_the_filter_is_kafkas(broker: KafkaBroker) -> None:
    """Exact names, the default entity, any entity of a type (the default included), and
    ``strict``; the first test to set defaults, so every default here is its own."""
    u, c = f"fu-{uuid.uuid4().hex[:6]}", f"fc-{uuid.uuid4().hex[:6]}"
    a = alter_v1
    assert (
        alter(
            broker,
            [
                (entity(a, user=u), [op(a, "producer_byte_rate", 1)]),
                (entity(a, user=None), [op(a, "producer_byte_rate", 2)]),
                (entity(a, user=u, client_id=c), [op(a, "producer_byte_rate", 3)]),
            ],
        )
        == [(ErrorCode.none, None)] * 3
    )
    assert (
        alter(
            broker,
            [
                (entity(a, client_id=c), [op(a, "producer_byte_rate", 4)]),
                (entity(a, user=None, client_id=None), [op(a, "producer_byte_rate", 5)]),
            ],
        )
        == [(ErrorCode.none, None)] * 2
    )

    def found(*components: tuple[str, int, str | None], strict: bool = False) -> set[float]:
        """The producer_byte_rate of each entity selected (each entity here has its own)."""
        return {
            values["producer_byte_rate"]
            for key, values in entries(describe(broker, *components, strict=strict)).items()
            if any(name in (u, c, None) for _, name in key)
        }

    assert found() == {1, 2, 3, 4, 5}
    assert found(strict=True) == set()
    assert found(("user", EXACT, u)) == {1, 3}
    assert found(("user", EXACT, u), strict=True) == {1}
    assert found(("user", DEFAULT, None)) == {2, 5}
    assert found(("user", DEFAULT, None), strict=True) == {2}
    assert found(("user", SPECIFIED, None)) == {1, 2, 3, 5}
    assert found(("user", SPECIFIED, None), strict=True) == {1, 2}
    assert found(("user", SPECIFIED, None), ("client-id", SPECIFIED, None)) == {3, 5}
    assert found(("user", EXACT, u), ("client-id", EXACT, c), strict=True) == {3}
    assert found(("client-id", EXACT, c), strict=True) == {4}
    assert found(("client-id", DEFAULT, None), ("user", DEFAULT, None)) == {5}
    # Logbus keeps no ip quotas: a filter on ip selects nothing.
    assert entries(describe(broker, ("ip", SPECIFIED, None))) == {}
    assert entries(describe(broker, ("ip", EXACT, "10.0.0.1"))) == {}
    # v0 (not flexible) answers the same.
    old = describe(broker, ("user", EXACT, u), m=describe_v0, answer=describe_v0_answer)
    assert entries(old) == {
        (("user", u),): {"producer_byte_rate": 1.0},
        (("user", u), ("client-id", c)): {"producer_byte_rate": 3.0},
    }
    assert alter(
        broker,
        [(entity(alter_v0, user=u), [op(alter_v0, "producer_byte_rate", remove=True)])],
        m=alter_v0,
        answer=alter_v0_answer,
    ) == [(ErrorCode.none, None)]
    assert found(("user", EXACT, u), strict=True) == set()
    # The defaults go again, so later tests see none.
    alter(
        broker,
        [
            (entity(a, user=None), [op(a, "producer_byte_rate", remove=True)]),
            (
                entity(a, user=None, client_id=None),
                [op(a, "producer_byte_rate", remove=True)],
            ),
        ],
    )


@pytest.mark.parametrize(
    ("components", "reason"),
    [
        ([("group", SPECIFIED, None)], "'group'"),
        ([("", SPECIFIED, None)], "entity_type"),
        ([("user", EXACT, None)], "needs a match"),
        ([("user", DEFAULT, "x")], "takes no match"),
        ([("user", SPECIFIED, "x")], "takes no match"),
        ([("user", 7, None)], "match_type 7"),
        ([("user", SPECIFIED, None), ("user", EXACT, "x")], "more than once"),
        ([("ip", SPECIFIED, None), ("user", SPECIFIED, None)], "ip"),
    ],
)
def test_a_filter_that_does_not_parse_is_invalid_request(
    broker: KafkaBroker, components: list[tuple[str, int, str | None]], reason: str
) -> None:
    answer = describe(broker, *components)
    assert answer.error_code == ErrorCode.invalid_request
    assert reason in (answer.error_message or "") and answer.entries is None


def test_without_the_cluster_operations_nothing_is_described_or_changed(
    broker: KafkaBroker,
) -> None:
    name = f"authz-{uuid.uuid4().hex[:6]}"
    a = alter_v1
    refused = describe(broker, ("user", EXACT, name), user="reader")
    assert refused.error_code == ErrorCode.cluster_authorization_failed
    assert refused.entries is None
    answered = alter(
        broker,
        [(entity(a, user=name), [op(a, "request_rate", 1)]),
         (entity(a, client_id=name), [op(a, "request_rate", 1)])],
        user="reader",
    )  # fmt: skip
    assert [code for code, _ in answered] == [ErrorCode.cluster_authorization_failed] * 2
    log = broker.log()
    assert "DENIED principal=User:reader host=127.0.0.1 operation=DESCRIBE_CONFIGS" in log
    assert "operation=ALTER_CONFIGS resource=CLUSTER" in log
    # DESCRIBE_CONFIGS on the cluster, granted over HTTP: describe, still not alter.
    acl = {"resource_type": "CLUSTER", "resource_name": "kafka-cluster",
           "principal": "User:reader", "operation": "DESCRIBE_CONFIGS"}  # fmt: skip
    with admin_http(broker) as h:
        assert h.post("/acls", json={"acls": [acl]}).status_code == 201
    assert entries(describe(broker, ("user", EXACT, name), user="reader")) == {}
    again = alter(broker, [(entity(a, user=name), [op(a, "request_rate", 1)])], user="reader")
    assert again[0][0] == ErrorCode.cluster_authorization_failed
    assert entries(describe(broker, ("user", EXACT, name))) == {}


def test_alterations_per_request_are_capped(broker: KafkaBroker) -> None:
    """``kafka_client_quota_max_entries_per_request`` (3 here): four entries are each
    answered INVALID_REQUEST naming the setting, and nothing changes."""
    name = f"cap-{uuid.uuid4().hex[:6]}"
    a = alter_v1
    four = [(entity(a, user=name, client_id=str(i)), [op(a, "request_rate", 1)]) for i in range(4)]
    answered = alter(broker, four)
    assert [code for code, _ in answered] == [ErrorCode.invalid_request] * 4
    assert all("kafka_client_quota_max_entries_per_request (3)" in (m or "") for _, m in answered)
    assert entries(describe(broker, ("user", EXACT, name))) == {}
    assert alter(broker, four[:3]) == [(ErrorCode.none, None)] * 3
