"""The SCRAM stores' shared parts without ZooKeeper: the combination rule
(app/core/security/scram_store.py), the one-broker store on its users file, Kafka's text
of a credential (app/core/replication/zk_scram.py) and the dynamic-config node that
quota and SCRAM keys share (app/core/replication/zk_configs.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
import pytest

from app.core.replication.zk_configs import encode_config, read_config
from app.core.replication.zk_scram import format_credential, parse_credential
from app.core.security.scram_store import FileScramStore, effective, iterations_of
from app.core.security.users import ScramCredential, UsersFile

SHA256, SHA512 = "SCRAM-SHA-256", "SCRAM-SHA-512"


def test_the_combination_rule(tmp_path: Path) -> None:
    users = UsersFile(tmp_path / "users.json")
    users.add("alice", "pw", n=2**12)
    users.add("bob", "pw", n=2**12)
    local = users.entries()
    new = ScramCredential.make(SHA256, "new", 4096)
    managed = {"alice": {SHA256: new}, "zoe": {SHA256: new}}
    # Managed: exactly ZooKeeper's (SCRAM-SHA-512 deleted there stays absent).
    assert effective(local, managed, "alice") == {SHA256: new}
    # Never altered: the users file's.
    assert effective(local, managed, "bob") == local["bob"].scram
    # No user of this broker, whatever ZooKeeper holds.
    assert effective(local, managed, "zoe") is None
    assert effective(local, {"alice": {}}, "alice") == {}
    assert iterations_of(local, {"alice": {}}) == {"bob": {SHA256: 8192, SHA512: 8192}}


def test_the_file_store_is_the_users_file(tmp_path: Path) -> None:
    users = UsersFile(tmp_path / "users.json")
    users.add("alice", "pw", n=2**12)
    store = FileScramStore(users.path)
    store.start()
    assert store.credential("alice", SHA256) == users.entries()["alice"].scram[SHA256]
    salted = hashlib.pbkdf2_hmac("sha256", b"new", b"salt", 4096)
    answered = store.alter([("alice", SHA512), ("nobody", SHA512)], [])
    assert answered["alice"] is None
    refused = answered["nobody"]
    assert refused is not None and refused.code == "RESOURCE_NOT_FOUND"
    assert store.iterations() == {"alice": {SHA256: 8192}}
    assert store.alter([], [("alice", SHA256, 4096, b"salt", salted)]) == {"alice": None}
    got = users.entries()["alice"].scram
    assert got == {SHA256: ScramCredential.from_salted(SHA256, b"salt", 4096, salted)}


def test_kafkas_text_of_a_credential() -> None:
    credential = ScramCredential.make(SHA512, "pw", 4096)
    text = format_credential(credential)
    assert text.startswith("salt=") and text.endswith(",iterations=4096")
    assert [part.partition("=")[0] for part in text.split(",")] == [
        "salt",
        "stored_key",
        "server_key",
        "iterations",
    ]
    assert parse_credential(text) == credential
    for broken in ("", "salt=AAAA", text.replace("4096", "1000"), text.replace("salt=", "salt=!")):
        with pytest.raises(ValueError):
            parse_credential(broken)


def test_a_config_node_keeps_what_its_reader_does_not_know() -> None:
    data = orjson.dumps(
        {"version": 1, "config": {"producer_byte_rate": "1024.0", SHA256: "salt=x", "n": 5}}
    )
    config = read_config(data)
    assert config == {"producer_byte_rate": "1024.0", SHA256: "salt=x", "n": "5"}
    assert orjson.loads(encode_config(config)) == {"version": 1, "config": config}
    assert read_config(None) == {} and read_config(b"") == {}
    for broken in (b"{not json", b"[1]", b'{"config": [1]}', b'{"config": {"a": null}}'):
        with pytest.raises(ValueError):
            read_config(broken)
