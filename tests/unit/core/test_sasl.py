"""The Kafka door's SASL exchanges as pure logic: PLAIN parsing and SCRAM's server side
(RFC 5802/7677) against scramp's client, with credentials as ``logbus users`` stores them."""

from __future__ import annotations

import pytest
import scramp

from app.common.errors import SaslAuthenticationFailed
from app.core.security.sasl import ScramExchange, parse_plain
from app.core.security.users import ScramCredential

PASSWORD = "correct horse battery"


def test_plain_messages() -> None:
    assert parse_plain(b"\0alice\0secret") == ("alice", "secret")
    assert parse_plain(b"alice\0alice\0secret") == ("alice", "secret")
    for bad in (b"alice\0secret", b"bob\0alice\0secret", b"\0\0secret", b"\0alice\0", b"\xff"):
        with pytest.raises(SaslAuthenticationFailed):
            parse_plain(bad)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip_and_refusals(mechanism: str) -> None:
    stored = {("alice", mechanism): ScramCredential.make(mechanism, PASSWORD, 4096)}

    def run(user: str, password: str) -> ScramExchange:
        exchange = ScramExchange(mechanism, lambda n, m: stored.get((n, m)))
        client = scramp.ScramClient([mechanism], user, password)
        server_first = exchange.step(client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        server_final = exchange.step(client.get_client_final().encode())
        client.set_server_final(server_final.decode())  # the server proved itself
        return exchange

    done = run("alice", PASSWORD)
    assert done.done and done.user == "alice"
    with pytest.raises(SaslAuthenticationFailed):
        run("alice", "wrong password")
    with pytest.raises(SaslAuthenticationFailed):
        run("nobody", PASSWORD)  # fails at the proof, like a wrong password


def test_scram_credentials_keep_no_password_and_refuse_few_iterations() -> None:
    cred = ScramCredential.make("SCRAM-SHA-256", PASSWORD)
    assert PASSWORD.encode() not in cred.salt + cred.stored_key + cred.server_key
    assert cred.iterations >= 4096
    with pytest.raises(ValueError, match="iterations"):
        ScramCredential.from_json({**cred.to_json(), "iterations": 1000})
