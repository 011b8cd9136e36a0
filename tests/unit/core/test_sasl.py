"""The Kafka door's SASL exchanges as pure logic: PLAIN and OAUTHBEARER parsing, and
SCRAM's server side (RFC 5802/7677) against scramp's client, with credentials as
``logbus users`` stores them."""

from __future__ import annotations

import pytest
import scramp
from hypothesis import given
from hypothesis import strategies as st

from app.common.errors import SaslAuthenticationFailed
from app.core.security.sasl import ScramExchange, parse_oauthbearer, parse_plain
from app.core.security.users import ScramCredential

PASSWORD = "correct horse battery"


def test_plain_messages() -> None:
    assert parse_plain(b"\0alice\0secret") == ("alice", "secret")
    assert parse_plain(b"alice\0alice\0secret") == ("alice", "secret")
    for bad in (b"alice\0secret", b"bob\0alice\0secret", b"\0\0secret", b"\0alice\0", b"\xff"):
        with pytest.raises(SaslAuthenticationFailed):
            parse_plain(bad)


def test_oauthbearer_messages() -> None:
    # librdkafka's and kafka-python's initial responses (RFC 7628 section 3.1).
    assert parse_oauthbearer(b"n,,\x01auth=Bearer a.b.c\x01\x01") == ("a.b.c", None)
    assert parse_oauthbearer(b"n,a=alice,\x01auth=Bearer t\x01\x01") == ("t", "alice")
    # SASL extensions (KIP-342) are read past; an escaped authorization id is unescaped.
    with_ext = b"n,a=a=2Cb=3D,\x01traceId=42\x01auth=bearer t\x01\x01"
    assert parse_oauthbearer(with_ext) == ("t", "a,b=")
    for bad in (
        b"\x01",  # a client's answer to an error challenge: never a token
        b"n,,\x01auth=Bearer t\x01",  # the final separator missing
        b"p=tls-unique,,\x01auth=Bearer t\x01\x01",  # channel binding
        b"n,,\x01\x01",
        b"n,,\x01auth=Basic dXNlcjpwdw==\x01\x01",
        b"n,,\x01auth=Bearer \x01\x01",
        b"n,,\x01novalue\x01\x01",
        b"n,x=y,\x01auth=Bearer t\x01\x01",
        b"\xff",
        b"n,,\x01auth=Bearer " + b"x" * 20_000 + b"\x01\x01",
    ):
        with pytest.raises(SaslAuthenticationFailed):
            parse_oauthbearer(bad)


@given(st.binary(max_size=200))
def test_oauthbearer_parsing_refuses_garbage_with_an_authentication_failure(
    message: bytes,
) -> None:
    # Whatever a client sends, the answer is a token or SASL_AUTHENTICATION_FAILED.
    try:
        bearer, _ = parse_oauthbearer(message)
    except SaslAuthenticationFailed:
        return
    assert bearer


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


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_an_unknown_name_answers_like_a_known_one_every_time(mechanism: str) -> None:
    """A known user's server-first message names the same salt and iterations on every
    attempt; an unknown name's must too, or two attempts (no password, no login) tell
    which names exist."""
    stored = {("alice", mechanism): ScramCredential.make(mechanism, PASSWORD)}

    def salt_and_iterations(user: str) -> tuple[str, str]:
        exchange = ScramExchange(mechanism, lambda n, m: stored.get((n, m)))
        client = scramp.ScramClient([mechanism], user, "any password")
        fields = dict(
            f.split("=", 1)
            for f in exchange.step(client.get_client_first().encode()).decode().split(",")
        )
        return fields["s"], fields["i"]

    assert salt_and_iterations("alice") == salt_and_iterations("alice")
    assert salt_and_iterations("nobody") == salt_and_iterations("nobody")
    assert salt_and_iterations("nobody") != salt_and_iterations("somebody")
    assert salt_and_iterations("nobody")[1] == salt_and_iterations("alice")[1]
