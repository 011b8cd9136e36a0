"""The Kafka door's test harness: a real ``logbus serve`` with its Kafka listener on free
loopback ports, and the protocol spoken directly with kio (a module of its own name:
test directories are not packages, so ``conftest`` names collide across them)."""

from __future__ import annotations

import io
import os
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from ports import free_port

from app.core.security.users import UsersFile

REPO = Path(__file__).resolve().parents[3]
# Every user's password on a sasl_acl_broker (HTTP Basic and SASL alike).
SASL_PASSWORD = "correct horse battery"


@dataclass
class KafkaBroker:
    proc: subprocess.Popen[bytes]
    http_port: int
    kafka_port: int
    log_path: Path
    tls_ca: Path | None = None
    # What it was started with: a restart (start_broker's ``like``) reuses them.
    data_dir: Path | None = None
    env_pairs: tuple[tuple[str, str], ...] = ()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls_ca is not None else "http"
        return f"{scheme}://127.0.0.1:{self.http_port}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_broker(
    tmp: Path,
    *env_pairs: tuple[str, str],
    tls_ca: Path | None = None,
    like: KafkaBroker | None = None,
) -> KafkaBroker:
    """Start one broker; retried on a port taken between choosing and binding it.
    ``tls_ca``: the broker serves TLS (its ssl_* settings among ``env_pairs``) with a
    certificate this CA signed; its readiness is asked over HTTPS. ``like``: a stopped
    broker to start again, on its ports and data dir (retried while its old process's
    ports are not free yet)."""
    for attempt in range(3):
        http_port, kafka_port = free_port(), free_port()
        log_path = tmp / f"broker-{attempt}.log"
        data_dir = tmp / f"data-{attempt}"
        if like is not None:
            http_port, kafka_port, data_dir = like.http_port, like.kafka_port, like.data_dir
            log_path = like.log_path.with_name(f"{like.log_path.stem}-r{attempt}.log")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **dict(env_pairs)}
        env.pop("LOGBUS_CONFIG", None)
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "app.cli",
                    "serve",
                    "--data-dir",
                    str(data_dir),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(http_port),
                    "--kafka-listener",
                    f"127.0.0.1:{kafka_port}",
                ],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                broker = KafkaBroker(
                    proc, http_port, kafka_port, log_path, tls_ca, data_dir, env_pairs
                )
                verify: ssl.SSLContext | bool = (
                    ssl.create_default_context(cafile=str(tls_ca)) if tls_ca is not None else True
                )
                if httpx.get(f"{broker.url}/readyz", timeout=1, verify=verify).status_code == 200:
                    return broker
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        proc.kill()
        proc.wait()
    raise AssertionError(f"broker did not start:\n{log_path.read_text(errors='replace')}")


def restart_broker(broker: KafkaBroker) -> None:
    """Stop it (SIGTERM) and start it again on its data dir, ports and settings: clients
    reconnect to the address they knew. ``broker`` is the new process from then on."""
    stop_broker(broker)
    again = start_broker(
        broker.log_path.parent, *broker.env_pairs, tls_ca=broker.tls_ca, like=broker
    )
    broker.proc, broker.log_path = again.proc, again.log_path


def stop_broker(broker: KafkaBroker) -> None:
    broker.proc.send_signal(signal.SIGTERM)
    try:
        code = broker.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        broker.proc.kill()
        broker.proc.wait()
        raise AssertionError(f"broker ignored SIGTERM:\n{broker.log()}") from None
    assert code == 0, broker.log()


def sasl_acl_broker(
    tmp: Path, *env_pairs: tuple[str, str], users: tuple[str, ...] = ("admin", "reader")
) -> Iterator[KafkaBroker]:
    """A module fixture's body (``yield from``): one broker serving SASL_PLAINTEXT beside
    HTTP Basic, ``authorizer=acl``, ``User:admin`` super, its ``users`` all with
    SASL_PASSWORD, ``env_pairs`` set besides; stopped at the fixture's teardown."""
    users_file = UsersFile(tmp / "users.json")
    for name in users:
        users_file.add(name, SASL_PASSWORD, n=2**14)
    broker = start_broker(
        tmp,
        ("LOGBUS_USERS_FILE", str(tmp / "users.json")),
        ("LOGBUS_AUTHENTICATION", "basic"),
        ("LOGBUS_AUTHORIZER", "acl"),
        ("LOGBUS_SUPER_USERS", "User:admin"),
        ("LOGBUS_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT"),
        *env_pairs,
    )
    yield broker
    stop_broker(broker)


def admin_http(broker: KafkaBroker) -> httpx.Client:
    """HTTP as the super user ``admin`` of a sasl_acl_broker."""
    return httpx.Client(base_url=broker.url, auth=("admin", SASL_PASSWORD), timeout=30)


def kafka_conf(broker: KafkaBroker, user: str) -> dict[str, Any]:
    """librdkafka's settings to log in to a sasl_acl_broker as ``user`` (SCRAM-SHA-256)."""
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": SASL_PASSWORD,
    }


def scram_admin(
    broker: KafkaBroker, user: str, password: str = SASL_PASSWORD, **options: Any
) -> Any:
    """kafka-python's admin client logged in to a sasl_acl_broker as ``user``
    (SCRAM-SHA-256); ``options``: its other settings."""
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(
        bootstrap_servers=broker.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username=user,
        sasl_plain_password=password,
        **options,
    )


def login(broker: KafkaBroker, user: str) -> Any:
    """A kio connection (test_kafka_sasl.Wire) to a sasl_acl_broker, authenticated as
    ``user`` with PLAIN."""
    from kio.schema.errors import ErrorCode
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
    from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
    from test_kafka_sasl import Wire

    wire = Wire(broker)
    handshake = wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse)
    assert handshake.error_code == ErrorCode.none
    done = wire.call(
        SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{SASL_PASSWORD}".encode()),
        SaslAuthenticateResponse,
    )
    assert done.error_code == ErrorCode.none
    return wire


def kio_call(broker: KafkaBroker, request: Any, response_type: type) -> Any:
    """Send one kio request (its API and version from its class) on a new connection and
    decode the answer: the protocol spoken directly, for what clients do not expose."""
    from kio.serial import entity_reader, entity_writer

    out = io.BytesIO()
    header_type = request.__header_schema__
    entity_writer(header_type)(
        out,
        header_type(
            request_api_key=request.__api_key__,
            request_api_version=request.__version__,
            correlation_id=9,
            client_id="test",
        ),
    )
    entity_writer(type(request))(out, request)
    payload = out.getvalue()
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=30) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(1 << 20)
            assert chunk, "connection closed"
            data += chunk
    header, size = entity_reader(response_type.__header_schema__)(data, 4)
    assert header.correlation_id == 9
    response, _ = entity_reader(response_type)(data, 4 + size)
    return response


def wait_for(what: str, done: Callable[[], bool], timeout: float = 60) -> None:
    """Poll ``done`` every 50 ms until it holds; AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
