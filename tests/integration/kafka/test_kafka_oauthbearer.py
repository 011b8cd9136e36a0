"""SASL OAUTHBEARER on the Kafka door: JWTs checked as HTTP's bearer tokens.

One SASL_PLAINTEXT broker for the module with ACLs on (super user ``User:root``, nobody
else granted anything) and a JWKS file; librdkafka (``oauth_cb``) and kafka-python
(``sasl_oauth_token_provider``) present tokens. A token's ``sub`` is the principal the
authorizer sees, so root's token writes and reads while bob's valid token is refused
by the ACLs; a token signed by another key, or expired, fails authentication.

The broker also has re-authentication on (``kafka_connections_max_reauth_ms``, KIP-368):
a session lasts 2 s, or less when its token expires sooner; librdkafka re-authenticates
on its connections, a connection past its session is closed, and a re-authentication as
another principal is refused."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from cryptography.hazmat.primitives.asymmetric import rsa
from kafka_harness import KafkaBroker, start_broker, stop_broker

ISSUER, AUDIENCE = "https://issuer.test", "logbus"
REAUTH_MS = 2000
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def token(sub: str, exp_in: float = 300, key: Any = KEY) -> str:
    claims = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time() + exp_in)}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    tmp = tmp_path_factory.mktemp("kafka-oauthbearer")
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key(), as_dict=True)
    jwk.update(kid="k1", use="sig", alg="RS256")
    (tmp / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    started = start_broker(
        tmp,
        ("LOGBUS_AUTHENTICATION", "jwt"),
        ("LOGBUS_AUTHORIZER", "acl"),
        ("LOGBUS_SUPER_USERS", "User:root"),
        ("LOGBUS_JWT_JWKS_FILE", str(tmp / "jwks.json")),
        ("LOGBUS_JWT_ISSUER", ISSUER),
        ("LOGBUS_JWT_AUDIENCE", AUDIENCE),
        ("LOGBUS_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT"),
        ("LOGBUS_KAFKA_SASL_MECHANISMS", "OAUTHBEARER,PLAIN"),
        ("LOGBUS_KAFKA_CONNECTIONS_MAX_REAUTH_MS", str(REAUTH_MS)),
    )
    yield started
    stop_broker(started)


def conf(
    broker: KafkaBroker, bearer: str, errors: list[KafkaError] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        # librdkafka asks for a token (and again before it expires); seconds since the epoch.
        "oauth_cb": lambda _config: (bearer, time.time() + 300),
    }
    if errors is not None:
        out["error_cb"] = errors.append
    return out


def test_librdkafka_writes_and_reads_with_a_token(broker: KafkaBroker) -> None:
    from test_kafka_sasl import produce_and_consume

    topic = f"oauth-{uuid.uuid4().hex[:8]}"
    got = produce_and_consume(conf(broker, token("root")), topic, 10)
    assert got == [f"v{i}".encode() for i in range(10)]


def test_the_token_s_subject_is_the_principal_the_acls_judge(broker: KafkaBroker) -> None:
    # bob authenticates (a valid token) but holds no ACL: his produce is refused by the
    # authorizer, not by authentication.
    topic = f"oauth-bob-{uuid.uuid4().hex[:8]}"
    errors: list[KafkaError] = []
    producer = Producer({**conf(broker, token("bob"), errors), "acks": "all"})
    reports: list[KafkaError | None] = []
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(15)
    assert reports and reports[0] is not None, reports
    assert reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, reports[0]
    assert all(e.code() != KafkaError._AUTHENTICATION for e in errors), errors


@pytest.mark.parametrize(
    "bearer",
    [token("root", key=OTHER_KEY), token("root", exp_in=-600)],
    ids=["signed-by-another-key", "expired"],
)
def test_librdkafka_with_a_bad_token_is_refused(broker: KafkaBroker, bearer: str) -> None:
    errors: list[KafkaError] = []
    admin = AdminClient(conf(broker, bearer, errors))
    admin.poll(0)  # runs oauth_cb
    # The request only starts the connection: it cannot succeed, and how it fails is
    # what error_cb reports below, so waiting it out longer would prove nothing more.
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not errors:
        admin.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "bearer token refused" in errors[0].str(), errors[0].str()


def test_kafka_python_presents_a_token(broker: KafkaBroker) -> None:
    from kafka import KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return token("root")

    topic = f"oauth-kp-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=Provider(),
    )
    try:
        meta = producer.send(topic, b"hello").get(timeout=30)
    finally:
        producer.close()
    assert meta.offset == 0


def test_http_takes_the_same_token(broker: KafkaBroker) -> None:
    import httpx

    answer = httpx.get(
        f"{broker.url}/topics", headers={"Authorization": f"Bearer {token('root')}"}, timeout=10
    )
    assert answer.status_code == 200, answer.text
    refused = httpx.get(
        f"{broker.url}/topics",
        headers={"Authorization": f"Bearer {token('root', key=OTHER_KEY)}"},
        timeout=10,
    )
    assert refused.status_code == 401


def test_oauthbearer_without_keys_is_refused_at_start(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from app.config import Settings

    settings = Settings(
        data_dir=tmp_path,
        kafka_listener="127.0.0.1:0",
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanisms="OAUTHBEARER",
    )
    with pytest.raises((ValueError, ValidationError), match="jwt_jwks_file or jwt_jwks_url"):
        settings.check_kafka_listener_exposure()


def _bearer_message(bearer: str) -> bytes:
    return f"n,,\x01auth=Bearer {bearer}\x01\x01".encode()


def _authenticate(wire: Any, bearer: str) -> Any:
    from kio.schema.errors import ErrorCode
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
    from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

    hs = wire.call(SaslHandshakeRequest(mechanism="OAUTHBEARER"), SaslHandshakeResponse)
    assert hs.error_code == ErrorCode.none
    return wire.call(
        SaslAuthenticateRequest(auth_bytes=_bearer_message(bearer)), SaslAuthenticateResponse
    )


def _metadata(wire: Any) -> Any:
    from kio.schema.metadata.v12.response import MetadataResponse

    return wire.call(_metadata_request(), MetadataResponse)


def test_a_session_ends_with_its_lifetime_unless_renewed(broker: KafkaBroker) -> None:
    from kio.schema.errors import ErrorCode
    from test_kafka_sasl import Wire

    # A session lasts kafka_connections_max_reauth_ms, or less when its token expires first.
    short = Wire(broker)
    answer = _authenticate(short, token("root", exp_in=1))
    assert answer.error_code == ErrorCode.none
    assert 0 < answer.session_lifetime.total_seconds() * 1000 <= 1000
    renewed = Wire(broker)
    first = time.monotonic()
    answer = _authenticate(renewed, token("root"))
    lifetime_ms = answer.session_lifetime.total_seconds() * 1000
    assert REAUTH_MS - 500 < lifetime_ms <= REAUTH_MS
    # Re-authenticated on its own connection before the end (past half its lifetime,
    # as clients do): it lives on past the first lifetime, within the second.
    _sleep_until(first + 0.6 * REAUTH_MS / 1000)
    assert _authenticate(renewed, token("root")).error_code == ErrorCode.none
    _sleep_until(first + 1.2 * REAUTH_MS / 1000)
    assert len(_metadata(renewed).brokers) == 1
    # Not renewed: its next request closes the connection.
    short.send(_metadata_request())
    assert short.closed()
    assert "after its SASL session expired" in broker.log()


def _sleep_until(when: float) -> None:
    # Time itself is the condition here: a session's lifetime.
    time.sleep(max(0.0, when - time.monotonic()))


def _metadata_request() -> Any:
    from kio.schema.metadata.v12.request import MetadataRequest

    return MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


def test_re_authentication_cannot_change_principals(broker: KafkaBroker) -> None:
    from kio.schema.errors import ErrorCode
    from test_kafka_sasl import Wire

    wire = Wire(broker)
    assert _authenticate(wire, token("root")).error_code == ErrorCode.none
    refused = _authenticate(wire, token("bob"))
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    assert "cannot change principals" in (refused.error_message or "")
    assert wire.closed()


def test_librdkafka_re_authenticates_and_keeps_producing(broker: KafkaBroker) -> None:
    topic = f"oauth-reauth-{uuid.uuid4().hex[:8]}"
    errors: list[KafkaError] = []
    producer = Producer({**conf(broker, token("root"), errors), "acks": "all"})
    delivered: list[int] = []
    expired_before = broker.log().count("after its SASL session expired")
    end = time.monotonic() + 1.5 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < end:  # across at least one session lifetime
        producer.produce(topic, b"v", on_delivery=lambda err, _m: delivered.append(err is None))
        sent += 1
        producer.poll(0.05)
    assert producer.flush(30) == 0
    assert delivered == [True] * sent
    # Re-authenticated in time: none of its connections was closed for an expired session.
    assert broker.log().count("after its SASL session expired") == expired_before
    assert not [e for e in errors if e.code() == KafkaError._AUTHENTICATION], errors
