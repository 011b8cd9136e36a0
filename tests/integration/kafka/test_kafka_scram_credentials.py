"""DescribeUserScramCredentials and AlterUserScramCredentials on the Kafka door: the
SCRAM credentials ``logbus users add`` writes, described and changed by kafka-python's
admin client, and the changed credential is what the next SCRAM login is checked
against; Kafka's per-user errors and authorization (DESCRIBE / ALTER on the cluster) with
kio. One broker: SASL_PLAINTEXT, ``authorizer=acl``, ``User:admin`` super."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka.admin._users import (
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka_harness import SASL_PASSWORD, KafkaBroker, login, sasl_acl_broker, scram_admin, wait_for
from kio.schema.alter_user_scram_credentials.v0 import request as alter_m
from kio.schema.alter_user_scram_credentials.v0.response import AlterUserScramCredentialsResponse
from kio.schema.describe_user_scram_credentials.v0 import request as describe_m
from kio.schema.describe_user_scram_credentials.v0.response import (
    DescribeUserScramCredentialsResponse,
)
from kio.schema.errors import ErrorCode
from scram_login import scram_login

NEW_PASSWORD = "a brand new passphrase"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    yield from sasl_acl_broker(
        tmp_path_factory.mktemp("kafka-scram"), users=("admin", "reader", "carol", "dave")
    )


def admin(broker: KafkaBroker, user: str = "admin", password: str = SASL_PASSWORD) -> Any:
    return scram_admin(broker, user, password, request_timeout_ms=10_000)


def can_login(broker: KafkaBroker, user: str, password: str) -> bool:
    """One SCRAM-SHA-256 exchange: False only on SASL_AUTHENTICATION_FAILED (kafka-python's
    clients would retry a refusal for their whole bootstrap timeout)."""
    return scram_login("127.0.0.1", broker.kafka_port, user, password)


def test_kafka_python_describes_and_changes_what_the_users_file_keeps(broker: KafkaBroker) -> None:
    client = admin(broker)
    try:
        described = client.describe_user_scram_credentials(["carol"])
        assert described["carol"]["error"] is None
        assert sorted(
            (int(i["mechanism"]), i["iterations"]) for i in described["carol"]["credential_infos"]
        ) == [(1, 8192), (2, 8192)]
        assert {"admin", "reader", "carol", "dave"} <= set(client.describe_user_scram_credentials())
        # A new SCRAM-SHA-256 credential for carol; her SCRAM-SHA-512 one goes.
        changed = client.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "carol", ScramMechanism.SCRAM_SHA_256, NEW_PASSWORD, iterations=4096
                ),
                UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512),
            ]
        )
        assert changed == {"carol": None}
        after = client.describe_user_scram_credentials(["carol"])["carol"]["credential_infos"]
        assert [(int(i["mechanism"]), i["iterations"]) for i in after] == [(1, 4096)]
    finally:
        client.close()
    wait_for("the new credential", lambda: can_login(broker, "carol", NEW_PASSWORD), timeout=15)
    assert not can_login(broker, "carol", SASL_PASSWORD)


def alter(
    broker: KafkaBroker, deletions: list[Any], upsertions: list[Any], user: str = "admin"
) -> dict[str, tuple[ErrorCode, str | None]]:
    answer = login(broker, user).call(
        alter_m.AlterUserScramCredentialsRequest(
            deletions=tuple(deletions), upsertions=tuple(upsertions)
        ),
        AlterUserScramCredentialsResponse,
    )
    return {r.user: (r.error_code, r.error_message) for r in answer.results}


def upsert(name: str, mechanism: int = 1, iterations: int = 4096) -> Any:
    return alter_m.ScramCredentialUpsertion(
        name=name,
        mechanism=mechanism,
        iterations=iterations,
        salt=b"salt",
        salted_password=b"x" * 32,
    )  # type: ignore[arg-type]


def delete(name: str, mechanism: int = 1) -> Any:
    return alter_m.ScramCredentialDeletion(name=name, mechanism=mechanism)  # type: ignore[arg-type]


def test_each_user_is_answered_with_kafkas_errors(broker: KafkaBroker) -> None:
    answered = alter(
        broker,
        [delete("nobody"), delete("dave", 1), delete("dave", 1)],
        [upsert("reader", iterations=1000), upsert("admin", mechanism=3)],
    )
    assert answered["nobody"][0] == ErrorCode.resource_not_found
    assert answered["dave"][0] == ErrorCode.duplicate_resource
    assert answered["reader"][0] == ErrorCode.unacceptable_credential
    assert "1000 iterations" in (answered["reader"][1] or "")
    assert answered["admin"][0] == ErrorCode.unsupported_sasl_mechanism
    # Nothing of a refused user changed: dave still has both credentials.
    described = login(broker, "admin").call(
        describe_m.DescribeUserScramCredentialsRequest(
            users=(describe_m.UserName(name="dave"), describe_m.UserName(name="nobody"))
        ),
        DescribeUserScramCredentialsResponse,
    )
    (dave, nobody) = described.results
    assert dave.error_code == ErrorCode.none and len(dave.credential_infos) == 2
    assert nobody.error_code == ErrorCode.resource_not_found
    twice = login(broker, "admin").call(
        describe_m.DescribeUserScramCredentialsRequest(
            users=(describe_m.UserName(name="dave"), describe_m.UserName(name="dave"))
        ),
        DescribeUserScramCredentialsResponse,
    )
    assert [r.error_code for r in twice.results] == [ErrorCode.duplicate_resource]
    # A valid alteration beside a refused one is applied.
    answered = alter(broker, [delete("dave", 2)], [upsert("reader", iterations=99_999)])
    assert answered == {
        "dave": (ErrorCode.none, None),
        "reader": (ErrorCode.unacceptable_credential, answered["reader"][1]),
    }
    # Deleting what dave no longer has.
    assert alter(broker, [delete("dave", 2)], [])["dave"][0] == ErrorCode.resource_not_found


def test_without_the_cluster_operations_nothing_is_described_or_changed(
    broker: KafkaBroker,
) -> None:
    described = login(broker, "reader").call(
        describe_m.DescribeUserScramCredentialsRequest(users=None),
        DescribeUserScramCredentialsResponse,
    )
    assert described.error_code == ErrorCode.cluster_authorization_failed
    assert described.results == ()
    answered = alter(broker, [delete("admin")], [upsert("reader")], user="reader")
    assert {code for code, _ in answered.values()} == {ErrorCode.cluster_authorization_failed}
    assert set(answered) == {"admin", "reader"}
    assert can_login(broker, "admin", SASL_PASSWORD)
