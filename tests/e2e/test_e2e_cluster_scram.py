"""SCRAM credentials in a two-broker cluster (app/core/replication/zk_scram.py): a
password changed and a credential deleted through broker 1's Kafka door by kafka-python's
AlterUserScramCredentials hold on broker 2 (ZooKeeper's ``/config/users/<user>``, every
broker's watch), though each broker keeps its own users file with the old credentials:
a revoked credential no longer logs in anywhere."""

from __future__ import annotations

from typing import Any

import pytest
from cluster import Access, Cluster, wait_until
from conftest import ClusterFactory
from kafka.admin import KafkaAdminClient
from kafka.admin._users import (
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from scram_login import scram_login

from app.core.security.users import UsersFile

pytestmark = pytest.mark.timeout(300)

ADMIN = ("admin", "admin-secret-1")
OLD = "carol's first password"
NEW = "carol's second password"
SHA256, SHA512 = "SCRAM-SHA-256", "SCRAM-SHA-512"


def admin(cluster: Cluster, broker_id: int, user: str, password: str, mechanism: str) -> Any:
    """kafka-python's admin client bootstrapped at one broker only, logged in there by
    SCRAM (its constructor authenticates, or raises), its requests sent to that broker."""
    client = KafkaAdminClient(
        bootstrap_servers=cluster.kafka_bootstrap(broker_id),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=user,
        sasl_plain_password=password,
        request_timeout_ms=10_000,
    )
    # kafka-python sends Describe/AlterUserScramCredentials to a random broker of the
    # metadata ("least loaded"): the test needs the alteration to reach this one, and
    # the client has no public way to say so.
    client._manager.least_loaded_node = lambda: broker_id
    return client


def can_login(
    cluster: Cluster, broker_id: int, user: str, password: str, mechanism: str = SHA256
) -> bool:
    """One SCRAM exchange with one broker: False only on SASL_AUTHENTICATION_FAILED
    (kafka-python's clients would retry a refusal for their whole bootstrap timeout)."""
    return scram_login("127.0.0.1", cluster.kafka_ports[broker_id], user, password, mechanism)


@pytest.mark.slow
def test_a_scram_change_on_one_broker_holds_on_the_other(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(
        size=2,
        kafka=True,
        start=False,
        access=Access(auth=ADMIN),
        env={
            "LOGBUS_AUTHENTICATION": "basic",
            "LOGBUS_AUTHORIZER": "acl",
            "LOGBUS_SUPER_USERS": "User:admin",
            "LOGBUS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        },
    )
    # Each broker's own users file (<data-dir>/users.json), made on its machine.
    for broker in cluster.brokers.values():
        users = UsersFile(broker.data_dir / "users.json")
        users.add(ADMIN[0], ADMIN[1], n=2**12)
        users.add("carol", OLD, n=2**12)
    cluster.start()
    assert can_login(cluster, 2, "carol", OLD)
    users_two = (cluster.brokers[2].data_dir / "users.json").read_bytes()

    on_one = admin(cluster, 1, *ADMIN, SHA512)
    try:
        changed = on_one.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("carol", ScramMechanism.SCRAM_SHA_256, NEW)]
        )
        assert changed == {"carol": None}
        wait_until(
            lambda: can_login(cluster, 2, "carol", NEW),
            timeout=30,
            message="carol's new password on broker 2",
        )
        # Broker 2's users file still holds the old one: ZooKeeper's copy wins.
        assert not can_login(cluster, 2, "carol", OLD)
        assert not can_login(cluster, 1, "carol", OLD)

        deleted = on_one.alter_user_scram_credentials(
            [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)]
        )
        assert deleted == {"carol": None}
        wait_until(
            lambda: not can_login(cluster, 2, "carol", NEW),
            timeout=30,
            message="carol's deleted credential refused on broker 2",
        )
        # No fallback to broker 2's users file, which still holds OLD's credentials: in a
        # cluster the door's alterations go to ZooKeeper, never to a users file.
        assert (cluster.brokers[2].data_dir / "users.json").read_bytes() == users_two
        assert not can_login(cluster, 2, "carol", OLD)
        # The mechanism neither alteration named is still carol's.
        assert can_login(cluster, 2, "carol", OLD, SHA512)
    finally:
        on_one.close()
