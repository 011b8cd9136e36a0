"""librdkafka through the Kafka door over SASL_SSL (SCRAM-SHA-512) against PLAINTEXT.

``python -m bench.kafka_door_tls [records] [rounds]`` prints the figures as JSON. Two
``logbus serve`` brokers, started together and measured round-robin in the same run: one
with a PLAINTEXT Kafka listener, one with ``kafka_security_protocol=SASL_SSL`` (a
``trustme`` test CA's certificate, a user with SCRAM credentials). Per round and broker: a
fresh 4-partition topic (CreateTopics through the door), ``bench.kafka_door``'s
librdkafka produce (acks=1, 100-byte values) then consume from offset 0; medians over the
rounds in records per second, and ``*_ratio`` = SASL_SSL over PLAINTEXT, same round,
median. Over TLS the fetch's records are read and written through TLS (no sendfile), so
consume shows the cost of encryption plus the lost zero-copy; produce shows TLS alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.common import free_port
from bench.kafka_door import PARTITIONS, rdkafka_consume, rdkafka_produce

PASSWORD = "bench-password-1"


@contextlib.contextmanager
def _broker(env: dict[str, str], ca: Path | None) -> Iterator[str]:
    """A broker with a Kafka listener; yields its bootstrap address."""
    data = tempfile.mkdtemp(prefix="logbus-bench-")
    port, kafka_port = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "serve",
            "--data-dir",
            data,
            "--port",
            str(port),
            "--kafka-listener",
            f"127.0.0.1:{kafka_port}",
        ],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    scheme = "https" if ca else "http"
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca)) if ca else True
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{scheme}://127.0.0.1:{port}/readyz", verify=verify).is_success:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("broker did not start")
            time.sleep(0.1)
        yield f"127.0.0.1:{kafka_port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


def _create(bootstrap: str, conf: dict[str, Any]) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"kt-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({**conf, "bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    return name


def run(records: int = 200_000, rounds: int = 3) -> dict[str, Any]:
    import trustme

    from app.core.security.users import UsersFile

    tmp = Path(tempfile.mkdtemp(prefix="logbus-bench-tls-"))
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    with (tmp / "cert.pem").open("wb") as f:
        for pem in cert.cert_chain_pems:
            f.write(pem.bytes())
    cert.private_key_pem.write_to_path(str(tmp / "key.pem"))
    UsersFile(tmp / "users.json").add("bench", PASSWORD, n=2**14)
    secure_env = {
        "LOGBUS_USERS_FILE": str(tmp / "users.json"),
        "LOGBUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "LOGBUS_SSL_CERTFILE": str(tmp / "cert.pem"),
        "LOGBUS_SSL_KEYFILE": str(tmp / "key.pem"),
    }
    secure_conf = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bench",
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(tmp / "ca.pem"),
    }
    samples: dict[str, list[float]] = {
        k: [] for k in ("plain_produce", "plain_consume", "sasl_ssl_produce", "sasl_ssl_consume")
    }
    try:
        with _broker({}, None) as plain, _broker(secure_env, tmp / "ca.pem") as secure:
            for _ in range(rounds):
                for label, bootstrap, conf in (
                    ("plain", plain, {}),
                    ("sasl_ssl", secure, secure_conf),
                ):
                    topic = _create(bootstrap, conf)
                    samples[f"{label}_produce"].append(
                        rdkafka_produce(bootstrap, topic, records, conf)
                    )
                    samples[f"{label}_consume"].append(
                        rdkafka_consume(bootstrap, topic, records, conf)
                    )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result: dict[str, Any] = {"records": records, "rounds": rounds}
    for name, values in samples.items():
        result[name] = round(statistics.median(values))
    for what in ("produce", "consume"):
        result[f"{what}_ratio"] = round(
            statistics.median(
                s / p
                for s, p in zip(samples[f"sasl_ssl_{what}"], samples[f"plain_{what}"], strict=True)
            ),
            2,
        )
    return result


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    print(json.dumps(run(*args), indent=2))
