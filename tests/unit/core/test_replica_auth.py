"""Inter-broker credentials: a replica's fetch proves which broker sends it."""

from __future__ import annotations

import pytest

from app.common.errors import ClusterAuthorizationFailed
from app.core.replication.auth import HEADER, ID_HEADER, ReplicaAuth

SECRET = bytes(range(32))


def test_a_brokers_own_credential_is_accepted() -> None:
    auth = ReplicaAuth(SECRET)
    auth.verify(2, auth.token(2))
    assert auth.header(2) == f"{HEADER}: {auth.token(2)}\r\n{ID_HEADER}: 2\r\n".encode()


@pytest.mark.parametrize(
    "presented",
    [None, "", "not-hex", ReplicaAuth(SECRET).token(3), ReplicaAuth(b"x" * 32).token(2), "é"],
)
def test_anything_else_is_refused(presented: str | None) -> None:
    with pytest.raises(ClusterAuthorizationFailed) as caught:
        ReplicaAuth(SECRET).verify(2, presented)
    assert "replica_id 2" in caught.value.message


def test_credentials_differ_per_broker_and_per_cluster() -> None:
    a, b = ReplicaAuth(SECRET), ReplicaAuth(bytes(32))
    assert len({a.token(1), a.token(2), b.token(1)}) == 3
