"""SCRAM credentials in ZooKeeper (app/core/replication/zk_scram.py) against a real
ZooKeeper: Kafka's ``/config/users/<user>`` node and value format, change notices under
``/config/changes``, every broker's store following an alteration, the combination rule
with each broker's users file (app/core/security/scram_store.py), and quotas
(app/core/replication/zk_quotas.py) and SCRAM keys in one node surviving each other's
writes."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import scramp
from kazoo.exceptions import ConnectionLoss
from zookeeper import ZooKeeperServer

from app.common.errors import SaslAuthenticationFailed
from app.core.replication.zk_quotas import ZkQuotaStore
from app.core.replication.zk_scram import MANAGED, ZkScramStore
from app.core.security.quotas import FETCH, PRODUCE, Entity
from app.core.security.sasl import ScramExchange
from app.core.security.users import UsersFile

SHA256, SHA512 = "SCRAM-SHA-256", "SCRAM-SHA-512"
OLD, NEW = "the users file's password", "a password set through the door"
# A change notice reaches the other store within milliseconds on a quiet machine; the
# bound is loose because a loaded CI host is not a timing instrument.
WATCH_BOUND_SECONDS = 10.0
CHROOT = "/scram-test"
KAFKA_VALUE = re.compile(
    r"^salt=[A-Za-z0-9+/]+=*,stored_key=[A-Za-z0-9+/]+=*,"
    r"server_key=[A-Za-z0-9+/]+=*,iterations=\d+$"
)


def upsertion(
    user: str, mechanism: str, password: str, iterations: int = 4096
) -> tuple[str, str, int, bytes, bytes]:
    """What a Kafka client sends: PBKDF2's SaltedPassword, never the password."""
    salt = hashlib.sha256(user.encode() + password.encode()).digest()[:16]
    algorithm = "sha256" if mechanism == SHA256 else "sha512"
    salted = hashlib.pbkdf2_hmac(algorithm, password.encode(), salt, iterations)
    return user, mechanism, iterations, salt, salted


def logs_in(store: ZkScramStore, user: str, password: str, mechanism: str = SHA256) -> bool:
    """A whole SCRAM exchange (scramp's client) against the store's credentials."""
    exchange = ScramExchange(mechanism, store.credential)
    client = scramp.ScramClient([mechanism], user, password)
    try:
        server_first = exchange.step(client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        server_final = exchange.step(client.get_client_final().encode())
    except SaslAuthenticationFailed:
        return False
    client.set_server_final(server_final.decode())  # the server proved itself
    return exchange.done and exchange.user == user


def eventually(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WATCH_BOUND_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {WATCH_BOUND_SECONDS} s"
        time.sleep(0.01)


def users_file(path: Path, *names: str) -> Path:
    """A broker's own users file: each user with OLD (its SCRAM credentials salted anew,
    as `logbus users add` on each broker's machine makes them)."""
    users = UsersFile(path)
    for name in names:
        users.add(name, OLD, n=2**12)
    return path


@pytest.fixture
def brokers(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[list[ZkScramStore]]:
    """Two brokers' SCRAM stores: broker 1 knows alice, bob and carol, broker 2 alice and
    bob only."""
    connect = zookeeper.connect_string + CHROOT
    made = [
        ZkScramStore(connect, 6000, users_file(tmp_path / "b1.json", "alice", "bob", "carol")),
        ZkScramStore(connect, 6000, users_file(tmp_path / "b2.json", "alice", "bob")),
    ]
    for store in made:
        store.start()
    yield made
    for store in made:
        store.close()


@pytest.fixture
def quotas(zookeeper: ZooKeeperServer) -> Iterator[ZkQuotaStore]:
    store = ZkQuotaStore(zookeeper.connect_string + CHROOT, 6000)
    store.start()
    yield store
    store.close()


def test_an_alteration_on_one_broker_holds_on_the_other(brokers: list[ZkScramStore]) -> None:
    one, two = brokers
    assert logs_in(two, "alice", OLD) and logs_in(two, "alice", OLD, SHA512)
    # A new SCRAM-SHA-256 password for alice through broker 1.
    assert one.alter([], [upsertion("alice", SHA256, NEW)]) == {"alice": None}
    assert logs_in(one, "alice", NEW)
    eventually("broker 2 takes alice's new password", lambda: logs_in(two, "alice", NEW))
    assert not logs_in(two, "alice", OLD)
    # The first alteration kept what it did not name: broker 1's SCRAM-SHA-512.
    assert logs_in(two, "alice", OLD, SHA512)

    # Kafka's node and value format, and a change notice.
    data, _ = one.client.get("/config/users/alice")
    config = orjson.loads(data)["config"]
    assert orjson.loads(data)["version"] == 1
    assert set(config) == {SHA256, SHA512, MANAGED}
    assert KAFKA_VALUE.match(config[SHA256]) and config[SHA256].endswith(",iterations=4096")
    assert config[MANAGED] == "true"
    notices = one.client.get_children("/config/changes")
    assert notices and all(n.startswith("config_change_") for n in notices)
    bodies = [orjson.loads(one.client.get(f"/config/changes/{n}")[0]) for n in notices]
    assert {"version": 2, "entity_path": "users/alice"} in bodies
    assert two.iterations()["alice"] == {SHA256: 4096, SHA512: 8192}


def test_a_deleted_credential_does_not_fall_back_to_the_users_file(
    brokers: list[ZkScramStore],
) -> None:
    one, two = brokers
    assert one.alter([("alice", SHA256), ("alice", SHA512)], []) == {"alice": None}
    eventually("broker 2 drops alice's credentials", lambda: not logs_in(two, "alice", OLD))
    # Broker 2's users file still holds both: ZooKeeper manages alice now.
    assert UsersFile(two._users.path).entries()["alice"].scram.keys() == {SHA256, SHA512}
    assert not logs_in(two, "alice", OLD, SHA512) and not logs_in(one, "alice", OLD)
    data, _ = one.client.get("/config/users/alice")
    assert orjson.loads(data)["config"] == {MANAGED: "true"}
    assert "alice" not in two.iterations()
    # Deleting it again: alice has no such credential any more.
    again = one.alter([("alice", SHA256)], [])["alice"]
    assert again is not None and again.code == "RESOURCE_NOT_FOUND"
    # A new credential through broker 2 serves on broker 1.
    assert two.alter([], [upsertion("alice", SHA512, NEW)]) == {"alice": None}
    eventually("broker 1 takes it", lambda: logs_in(one, "alice", NEW, SHA512))
    assert not logs_in(one, "alice", NEW, SHA256)
    # bob was never altered: each broker's users file serves him.
    assert logs_in(one, "bob", OLD) and logs_in(two, "bob", OLD, SHA512)
    assert not one.client.exists("/config/users/bob")


def test_kafkas_rules_and_the_receiving_brokers_users(brokers: list[ZkScramStore]) -> None:
    one, two = brokers
    answered = two.alter(
        [("bob", SHA256), ("bob", SHA256)],
        [upsertion("carol", SHA256, NEW), upsertion("alice", SHA256, NEW, iterations=100)],
    )
    codes = {name: refusal and refusal.code for name, refusal in answered.items()}
    assert list(codes) == ["bob", "carol", "alice"]
    assert codes == {
        "bob": "DUPLICATE_RESOURCE",
        "carol": "RESOURCE_NOT_FOUND",  # not in broker 2's users file
        "alice": "UNACCEPTABLE_CREDENTIAL",
    }
    assert one.client.get_children("/config/users") == []  # nothing written
    # carol is broker 1's: altered there, but still no user of broker 2.
    assert one.alter([], [upsertion("carol", SHA256, NEW)]) == {"carol": None}
    eventually("broker 1 lets carol in", lambda: logs_in(one, "carol", NEW))
    two._reload()
    assert "carol" in two._managed and not logs_in(two, "carol", NEW)
    assert "carol" not in two.iterations()


def test_quotas_and_credentials_share_a_node(
    brokers: list[ZkScramStore], quotas: ZkQuotaStore
) -> None:
    one, two = brokers
    quotas.alter([(Entity("alice"), [(PRODUCE, 1024.0)])])
    assert one.alter([], [upsertion("alice", SHA256, NEW)]) == {"alice": None}
    data, _ = one.client.get("/config/users/alice")
    config = orjson.loads(data)["config"]
    assert config[PRODUCE] == "1024.0" and SHA256 in config
    # The quota reader ignores the SCRAM keys (it used to drop the user's quotas).
    assert quotas._reload().quotas.get(Entity("alice")) == {PRODUCE: 1024.0}
    # A quota write keeps the credentials (it used to rewrite the node with quotas only).
    quotas.alter([(Entity("alice"), [(FETCH, 2048.0)])])
    eventually("broker 2 sees the quota write", lambda: "alice" in two._managed)
    assert logs_in(two, "alice", NEW)
    data, _ = one.client.get("/config/users/alice")
    config = orjson.loads(data)["config"]
    assert config[PRODUCE] == "1024.0" and config[FETCH] == "2048.0"
    assert config[MANAGED] == "true" and KAFKA_VALUE.match(config[SHA256])

    # Concurrent writers of the node: compare-and-set loses neither's last write.
    def quota_writes() -> None:
        for i in range(1, 21):
            quotas.alter([(Entity("alice"), [(PRODUCE, float(i))])])

    def scram_writes() -> None:
        for i in range(4096, 4096 + 20):
            assert two.alter([], [upsertion("alice", SHA512, NEW, i)]) == {"alice": None}

    threads = [threading.Thread(target=quota_writes), threading.Thread(target=scram_writes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    data, _ = one.client.get("/config/users/alice")
    config = orjson.loads(data)["config"]
    assert config[PRODUCE] == "20.0" and config[FETCH] == "2048.0"
    assert config[SHA512].endswith(",iterations=4115") and SHA256 in config
    eventually(
        "both readers follow",
        lambda: (
            quotas.load().quotas.get(Entity("alice")) == {PRODUCE: 20.0, FETCH: 2048.0}
            and one.iterations().get("alice") == {SHA256: 4096, SHA512: 4115}
        ),
    )
    assert logs_in(one, "alice", NEW, SHA512)


def test_an_unreadable_node_fails_closed(brokers: list[ZkScramStore]) -> None:
    one, two = brokers
    one.client.create("/config/users/bob", b"{not json")
    one.client.create("/config/changes/config_change_", b"{}", sequence=True)
    eventually("broker 2 refuses bob", lambda: not logs_in(two, "bob", OLD))
    one.client.set(
        "/config/users/bob",
        orjson.dumps({"version": 1, "config": {SHA256: "salt=???,iterations=4096"}}),
    )
    one._reload()
    assert one._managed["bob"] == {} and not logs_in(one, "bob", OLD)


def test_an_alteration_of_an_unreadable_node_is_refused_and_the_others_go_on(
    brokers: list[ZkScramStore],
) -> None:
    """bob's node was damaged by hand: changing his credentials would overwrite what it
    holds unseen, so his alteration is refused with what to fix; alice's is made."""
    one, _ = brokers
    one.client.create("/config/users/bob", b"{not json")
    outcome = one.alter([], [upsertion("alice", SHA256, NEW), upsertion("bob", SHA256, NEW)])
    assert outcome["alice"] is None
    refused = outcome["bob"]
    assert refused is not None and refused.code == "UNKNOWN_SERVER_ERROR"
    assert "/config/users/bob cannot be read" in refused.message
    assert "repair or delete the node" in refused.message
    assert one.client.get("/config/users/bob")[0] == b"{not json"  # untouched
    assert logs_in(one, "alice", NEW) and not logs_in(one, "bob", NEW)
    one.client.delete("/config/users/bob")  # repaired: the same alteration now goes through
    assert one.alter([], [upsertion("bob", SHA256, NEW)]) == {"bob": None}
    assert logs_in(one, "bob", NEW)


def test_a_revocation_whose_reload_lost_the_connection_still_lands(
    brokers: list[ZkScramStore],
) -> None:
    """Broker 2's reload on the revocation's notice loses its connection mid-read: the
    watch does not call back again for that notice, so without a retry alice's revoked
    credential kept logging in on broker 2 until some later change."""
    one, two = brokers
    assert logs_in(two, "alice", OLD)
    read_all = two._read_all
    cut: list[bool] = []

    def cut_once() -> Any:
        if not cut:
            cut.append(True)
            raise ConnectionLoss()
        return read_all()

    two._read_all = cut_once  # type: ignore[method-assign]
    assert one.alter([("alice", SHA256)], []) == {"alice": None}
    assert not logs_in(one, "alice", OLD)
    eventually("broker 2's reload was cut off", lambda: bool(cut))
    eventually(
        "broker 2 refuses alice's revoked credential", lambda: not logs_in(two, "alice", OLD)
    )
    assert logs_in(two, "alice", OLD, SHA512)  # the first alteration kept broker 1's


def test_a_revocation_cut_off_right_after_its_write_still_reaches_every_broker(
    brokers: list[ZkScramStore],
) -> None:
    """Broker 1 loses its connection the moment alice's node is written: the change
    notice must have gone with the write. Written apart, the notice was lost, the
    alteration's retry found nothing left to delete (RESOURCE_NOT_FOUND), and broker 2
    went on accepting the revoked credential until some later change."""
    one, two = brokers
    assert logs_in(two, "alice", OLD)
    client = one.client
    node = "/config/users/alice"
    armed: list[bool] = []

    def after_the_write(method: Callable[..., Any]) -> Callable[..., Any]:
        """``method``, but losing the connection once a write of alice's node is made."""

        def call(*args: Any, **kwargs: Any) -> Any:
            if armed:
                armed.clear()
                raise ConnectionLoss()
            answer = method(*args, **kwargs)
            if method.__name__ in ("set", "create") and args and args[0] == node:
                armed.append(True)
            return answer

        return call

    def transaction() -> Any:
        tx = real_transaction()
        commit = tx.commit

        def committed() -> Any:
            answer = commit()
            armed.append(True)
            return answer

        tx.commit = committed
        return tx

    real_transaction = client.transaction
    for name in ("get", "set", "create", "delete", "get_children", "exists"):
        setattr(client, name, after_the_write(getattr(client, name)))
    client.transaction = transaction
    with pytest.raises(ConnectionLoss):
        one.alter([("alice", SHA256)], [])
    # What the door's client would do: retry, and hear the credential is gone.
    again = one.alter([("alice", SHA256)], [])["alice"]
    assert again is not None and again.code == "RESOURCE_NOT_FOUND"
    assert not logs_in(one, "alice", OLD)
    eventually(
        "broker 2 refuses alice's revoked credential", lambda: not logs_in(two, "alice", OLD)
    )


def test_a_user_named_dot_is_altered_in_a_node_zookeeper_accepts(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """'.' and '..' are valid user names (`logbus users add`) but node names ZooKeeper
    refuses: kazoo raised ValueError, failing the whole request (users named after it
    not altered, those before it altered and answered as failed). Their dots are encoded."""
    connect = zookeeper.connect_string + CHROOT
    store = ZkScramStore(connect, 6000, users_file(tmp_path / "u.json", ".", "..", "a.b"))
    store.start()
    try:
        outcome = store.alter([], [upsertion(n, SHA256, NEW) for n in (".", "..", "a.b")])
        assert outcome == {".": None, "..": None, "a.b": None}
        assert sorted(store.client.get_children("/config/users")) == ["%2E", "%2E%2E", "a.b"]
        for name in (".", "..", "a.b"):
            assert logs_in(store, name, NEW) and not logs_in(store, name, OLD)
    finally:
        store.close()


def test_a_broker_without_the_user_can_still_revoke_its_credentials(
    brokers: list[ZkScramStore],
) -> None:
    """carol is broker 1's user only. Her credentials in ZooKeeper serve on broker 1;
    deleting them through broker 2 (whichever broker the admin client asks) must revoke
    them, as Kafka deletes what ZooKeeper holds. It was RESOURCE_NOT_FOUND ("no user"), and carol kept logging in on broker 1.
    Upserting her through broker 2 is still refused: no user there."""
    one, two = brokers
    assert one.alter([], [upsertion("carol", SHA256, NEW)]) == {"carol": None}
    assert two.alter([("carol", SHA256)], []) == {"carol": None}
    eventually(
        "broker 1 refuses carol's revoked credential", lambda: not logs_in(one, "carol", NEW)
    )
    assert logs_in(one, "carol", OLD, SHA512)  # the mechanism not deleted
    again = two.alter([("carol", SHA256)], [])["carol"]
    assert again is not None and again.code == "RESOURCE_NOT_FOUND"
    refused = two.alter([("carol", SHA512)], [upsertion("carol", SHA256, NEW)])["carol"]
    assert refused is not None and refused.code == "RESOURCE_NOT_FOUND"
    assert logs_in(one, "carol", OLD, SHA512) and not logs_in(one, "carol", NEW)
    # A user ZooKeeper does not manage: broker 2 has no credential of carol's to delete.
    gone = two.alter([("dave", SHA256)], [])["dave"]
    assert gone is not None and gone.code == "RESOURCE_NOT_FOUND"
    assert not two.client.exists("/config/users/dave")
