"""The Kafka door's settings: addresses, the never-a-wildcard advertised listener, and the
refusals that keep it from opening a broker its HTTP door protects."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config import Settings


def settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(data_dir=tmp_path, **values)  # type: ignore[arg-type]


def test_off_by_default_with_kafkas_limits(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert s.kafka_listener is None and s.kafka_advertised is None
    assert s.kafka_socket_request_max_bytes == 100 * 1024 * 1024


def test_the_advertised_listener_defaults_to_the_listener_and_never_a_wildcard(
    tmp_path: Path,
) -> None:
    assert settings(tmp_path, kafka_listener="127.0.0.1:9092").kafka_advertised == (
        "127.0.0.1",
        9092,
    )
    wide = settings(tmp_path, kafka_listener="0.0.0.0:9092")
    assert wide.kafka_advertised == (socket.gethostname(), 9092)
    given = settings(
        tmp_path, kafka_listener="0.0.0.0:9092", kafka_advertised_listener="kafka.example:19092"
    )
    assert given.kafka_advertised == ("kafka.example", 19092)
    with pytest.raises(ValidationError, match="wildcard"):
        settings(tmp_path, kafka_advertised_listener="0.0.0.0:9092")
    with pytest.raises(ValidationError, match="HOST:PORT"):
        settings(tmp_path, kafka_listener="no-port")


def test_no_plaintext_kafka_door_around_authentication(tmp_path: Path) -> None:
    s = settings(tmp_path, kafka_listener="127.0.0.1:9092", authentication="basic")
    with pytest.raises(ValueError, match="unauthenticated"):
        s.check_network_exposure()
    sasl = settings(
        tmp_path,
        kafka_listener="127.0.0.1:9092",
        authentication="basic",
        kafka_security_protocol="SASL_PLAINTEXT",
    )
    sasl.check_network_exposure()


def test_tls_kafka_protocols_need_the_certificate(tmp_path: Path) -> None:
    s = settings(tmp_path, kafka_listener="127.0.0.1:9092", kafka_security_protocol="SASL_SSL")
    with pytest.raises(ValueError, match="ssl_certfile"):
        s.check_network_exposure()


def test_a_sasl_kafka_listener_may_face_the_network(tmp_path: Path) -> None:
    s = settings(
        tmp_path,
        kafka_listener="0.0.0.0:9092",
        kafka_security_protocol="SASL_PLAINTEXT",
        authentication="basic",
    )
    s.check_network_exposure()
    with pytest.raises(ValidationError, match="kafka_sasl_mechanisms"):
        settings(tmp_path, kafka_sasl_mechanisms="PLAIN,GSSAPI")
    assert settings(tmp_path, kafka_sasl_mechanisms="plain").kafka_sasl_mechanism_list == ["PLAIN"]


def test_a_network_kafka_listener_needs_the_explicit_opt_in(tmp_path: Path) -> None:
    s = settings(tmp_path, kafka_listener="0.0.0.0:9092")
    with pytest.raises(ValueError, match="allow-unauthenticated-network"):
        s.check_network_exposure()
    ok = settings(tmp_path, kafka_listener="0.0.0.0:9092", allow_unauthenticated_network=True)
    ok.check_network_exposure()


def test_a_cluster_brokers_kafka_listener_needs_a_fixed_port(tmp_path: Path) -> None:
    # Its port is published in ZooKeeper when the broker registers, before it binds.
    with pytest.raises(ValueError, match="fixed port"):
        settings(tmp_path, zookeeper="127.0.0.1:2181", kafka_listener="127.0.0.1:0")
    assert settings(tmp_path, kafka_listener="127.0.0.1:0").kafka_listener == "127.0.0.1:0"
    advertised = settings(
        tmp_path,
        zookeeper="127.0.0.1:2181",
        kafka_listener="127.0.0.1:0",
        kafka_advertised_listener="kafka.example:9092",
    )
    assert advertised.kafka_advertised == ("kafka.example", 9092)
