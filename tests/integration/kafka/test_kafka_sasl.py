"""SASL and TLS on the Kafka door: a SASL_PLAINTEXT listener beside HTTP Basic, one
users file; a SASL_SSL one with a test CA's certificate.

librdkafka (confluent-kafka) with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, aiokafka with
PLAIN; a wrong password answered SASL_AUTHENTICATION_FAILED and the connection closed;
any request but ApiVersions/SaslHandshake/SaslAuthenticate before authentication closes
the connection. One broker for the module; each test its own topic."""

from __future__ import annotations

import asyncio
import io
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_harness import KafkaBroker, start_broker, stop_broker

from app.core.security.users import UsersFile

PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    tmp = tmp_path_factory.mktemp("kafka-sasl")
    users = UsersFile(tmp / "users.json")
    users.add("alice", PASSWORD, n=2**14)  # a cheap scrypt: the tests check many times
    broker = start_broker(
        tmp,
        ("LOGBUS_USERS_FILE", str(tmp / "users.json")),
        ("LOGBUS_AUTHENTICATION", "basic"),
        ("LOGBUS_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT"),
    )
    yield broker
    stop_broker(broker)


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def sasl_conf(broker: KafkaBroker, mechanism: str, password: str = PASSWORD) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": password,
    }


def produce_and_consume(conf: dict[str, Any], topic: str, count: int = 20) -> list[bytes]:
    producer = Producer({**conf, "enable.idempotence": True, "acks": "all"})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_librdkafka_authenticates_and_produces(sasl_broker: KafkaBroker, mechanism: str) -> None:
    topic = _topic(mechanism.lower())
    got = produce_and_consume(sasl_conf(sasl_broker, mechanism), topic)
    assert got == [f"v{i}".encode() for i in range(20)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_librdkafka_with_a_wrong_password_is_refused(
    sasl_broker: KafkaBroker, mechanism: str
) -> None:
    errors: list[KafkaError] = []
    conf = {**sasl_conf(sasl_broker, mechanism, "wrong password!"), "error_cb": errors.append}
    admin = AdminClient(conf)
    # The request only starts the connection: it cannot succeed, and how it fails is
    # what error_cb reports below, so waiting it out longer would prove nothing more.
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not errors:
        admin.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "Authentication failed" in errors[0].str()


def test_aiokafka_plain(sasl_broker: KafkaBroker) -> None:
    from aiokafka import AIOKafkaProducer

    topic = _topic("aio")

    async def run() -> int:
        producer = AIOKafkaProducer(
            bootstrap_servers=sasl_broker.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="alice",
            sasl_plain_password=PASSWORD,
        )
        await producer.start()
        try:
            meta = await producer.send_and_wait(topic, b"hello")
            return int(meta.offset)
        finally:
            await producer.stop()

    assert asyncio.run(run()) == 0
    got = produce_and_consume(sasl_conf(sasl_broker, "PLAIN"), topic, 0)
    assert got == []


# -- the protocol spoken directly -----------------------------------------------------
class Wire:
    """Requests on one connection (kio), answers read in order."""

    def __init__(self, broker: KafkaBroker) -> None:
        self.sock = socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=30)
        self.correlation = 0

    def send(self, request: Any) -> None:
        from kio.serial import entity_writer

        self.correlation += 1
        out = io.BytesIO()
        header_type = request.__header_schema__
        entity_writer(header_type)(
            out,
            header_type(
                request_api_key=request.__api_key__,
                request_api_version=request.__version__,
                correlation_id=self.correlation,
                client_id="test",
            ),
        )
        entity_writer(type(request))(out, request)
        payload = out.getvalue()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def frame(self) -> bytes | None:
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                return None
            data += chunk
        return data

    def call(self, request: Any, response_type: type) -> Any:
        from kio.serial import entity_reader

        self.send(request)
        data = self.frame()
        assert data is not None, "connection closed"
        _, size = entity_reader(response_type.__header_schema__)(data, 4)
        return entity_reader(response_type)(data, 4 + size)[0]

    def closed(self) -> bool:
        return self.frame() is None


def test_a_request_before_authentication_closes_the_connection(sasl_broker: KafkaBroker) -> None:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.api_versions.v3.response import ApiVersionsResponse
    from kio.schema.metadata.v12.request import MetadataRequest

    wire = Wire(sasl_broker)
    versions = wire.call(
        ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        ApiVersionsResponse,
    )
    keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert keys[17] == (0, 1) and keys[36] == (0, 2)
    wire.send(
        MetadataRequest(
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    assert wire.closed()
    assert "Metadata before SASL authentication" in sasl_broker.log()


def test_a_failed_plain_authentication_is_answered_then_closed(sasl_broker: KafkaBroker) -> None:
    from kio.schema.errors import ErrorCode
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
    from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

    wire = Wire(sasl_broker)
    unknown = wire.call(SaslHandshakeRequest(mechanism="GSSAPI"), SaslHandshakeResponse)
    assert unknown.error_code == ErrorCode.unsupported_sasl_mechanism
    assert set(unknown.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse).error_code == (
        ErrorCode.none
    )
    refused = wire.call(
        SaslAuthenticateRequest(auth_bytes=b"\0alice\0not the password"),
        SaslAuthenticateResponse,
    )
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    assert "not the password" not in (refused.error_message or "")
    assert wire.closed()


def test_a_v0_handshake_takes_bare_tokens(sasl_broker: KafkaBroker) -> None:
    from kio.schema.errors import ErrorCode
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.metadata.v12.response import MetadataResponse
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest
    from kio.schema.sasl_handshake.v0.response import SaslHandshakeResponse

    wire = Wire(sasl_broker)
    hs = wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse)
    assert hs.error_code == ErrorCode.none
    token = f"\0alice\0{PASSWORD}".encode()
    wire.sock.sendall(struct.pack(">i", len(token)) + token)
    assert wire.frame() == b"\0\0\0\0"  # PLAIN's empty server answer
    meta = wire.call(
        MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        ),
        MetadataResponse,
    )
    assert len(meta.brokers) == 1


def test_users_carry_scram_credentials_never_the_password(tmp_path: Path) -> None:
    users = UsersFile(tmp_path / "users.json")
    users.add("bob", PASSWORD, n=2**14)
    text = (tmp_path / "users.json").read_text()
    assert PASSWORD not in text
    entry = users.entries()["bob"]
    assert set(entry.scram) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert all(c.iterations >= 4096 for c in entry.scram.values())


@pytest.fixture(scope="module")
def sasl_ssl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    import trustme

    tmp = tmp_path_factory.mktemp("kafka-sasl-ssl")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    with (tmp / "cert.pem").open("wb") as f:
        for pem in cert.cert_chain_pems:
            f.write(pem.bytes())
    cert.private_key_pem.write_to_path(str(tmp / "key.pem"))
    UsersFile(tmp / "users.json").add("alice", PASSWORD, n=2**14)
    broker = start_broker(
        tmp,
        ("LOGBUS_USERS_FILE", str(tmp / "users.json")),
        ("LOGBUS_AUTHENTICATION", "basic"),
        ("LOGBUS_KAFKA_SECURITY_PROTOCOL", "SASL_SSL"),
        ("LOGBUS_SSL_CERTFILE", str(tmp / "cert.pem")),
        ("LOGBUS_SSL_KEYFILE", str(tmp / "key.pem")),
        tls_ca=tmp / "ca.pem",
    )
    yield broker
    stop_broker(broker)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_librdkafka_over_sasl_ssl(sasl_ssl_broker: KafkaBroker, mechanism: str) -> None:
    # The fetch's records leave by read+write through TLS (sendfile cannot encrypt).
    assert sasl_ssl_broker.tls_ca is not None
    conf = {
        **sasl_conf(sasl_ssl_broker, mechanism),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(sasl_ssl_broker.tls_ca),
    }
    topic = _topic("tls")
    assert produce_and_consume(conf, topic, 300) == [f"v{i}".encode() for i in range(300)]


def test_plaintext_to_a_tls_listener_gets_nothing(sasl_ssl_broker: KafkaBroker) -> None:
    wire = Wire(sasl_ssl_broker)
    wire.sock.sendall(struct.pack(">i", 10) + b"\0" * 10)
    assert wire.closed()
