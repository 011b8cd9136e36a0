"""TLS against a real ``logbus serve`` process, with a CA and certificates made by trustme.

HTTPS produce and fetch (JSON and binary: the binary answer leaves through the
SSL transport, not sendfile, and its bytes equal the plaintext zero-copy answer
over the same data dir), WSS subscribe, the SDK and the CLI over TLS, a client
that does not trust the CA refused, and mutual TLS refusing a client without a
certificate at the handshake.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from app.client import Admin, Consumer, Producer, TopicPartition, configure_tls
from app.client.errors import BrokerUnavailable
from app.client.ws import subscribe
from app.common import tls

trustme = pytest.importorskip("trustme")

# Imported by path: which conftest module is `conftest` depends on the collection order.
from conftest import REPO, Broker  # noqa: E402

OCTET = {"accept": "application/octet-stream"}
ZEROCOPY = "logbus_zerocopy_bytes_total"
COPIED = "logbus_fetch_copy_bytes_total"


class Pki:
    """A CA, the broker's certificate (for 127.0.0.1 and localhost) and a client's, as PEM files."""

    def __init__(self, root: Path) -> None:
        ca = trustme.CA()
        root.mkdir()
        self.ca = root / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca))
        server = ca.issue_cert("127.0.0.1", "localhost")
        self.cert, self.key = root / "server.pem", root / "server.key"
        server.cert_chain_pems[0].write_to_path(str(self.cert))
        for extra in server.cert_chain_pems[1:]:
            extra.write_to_path(str(self.cert), append=True)
        server.private_key_pem.write_to_path(str(self.key))
        client = ca.issue_cert("client@example.com", common_name="alice")
        self.client_cert, self.client_key = root / "client.pem", root / "client.key"
        client.cert_chain_pems[0].write_to_path(str(self.client_cert))
        client.private_key_pem.write_to_path(str(self.client_key))
        # A second CA nobody configured: its certificates must not be trusted.
        self.stranger_ca = root / "stranger.pem"
        trustme.CA().cert_pem.write_to_path(str(self.stranger_ca))

    def server_env(self, client_auth: str = "none") -> dict[str, str]:
        env = {"LOGBUS_SSL_CERTFILE": str(self.cert), "LOGBUS_SSL_KEYFILE": str(self.key)}
        if client_auth != "none":
            env |= {"LOGBUS_SSL_CA_FILE": str(self.ca), "LOGBUS_SSL_CLIENT_AUTH": client_auth}
        return env

    def context(self, client_cert: bool = False) -> ssl.SSLContext:
        return tls.client_context(
            tls.ClientTls(
                str(self.ca),
                str(self.client_cert) if client_cert else None,
                str(self.client_key) if client_cert else None,
            )
        )


class TlsBroker(Broker):
    """A broker whose URL is https while it serves TLS; its probes and clients trust
    ``verify`` (set it to the test CA's context)."""

    @property
    def url(self) -> str:
        # From the env at each call: a test may serve the same data dir in plaintext next.
        scheme = "https" if "LOGBUS_SSL_CERTFILE" in self.env else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60.0) -> bool:
        return super().wait_ready(timeout)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("tls") / "pki")


@pytest.fixture
def make_broker(tmp_path: Path, pki: Pki) -> Iterator[list[TlsBroker]]:
    made: list[TlsBroker] = []
    yield made
    for b in made:
        if b.running:
            b.stop()


def start(made: list[TlsBroker], tmp_path: Path, pki: Pki, client_auth: str = "none") -> TlsBroker:
    n = len(made)
    b = TlsBroker(tmp_path / f"data{n}", tmp_path / f"broker{n}.log", pki.server_env(client_auth))
    b.verify = pki.context(client_cert=client_auth == "required")
    made.append(b)
    return b.start()


@pytest.fixture(autouse=True)
def _default_tls() -> Iterator[None]:
    """Every test starts and ends with the process's default client TLS options."""
    configure_tls()
    yield
    configure_tls()


def _fetch_binary(client: httpx.Client, topic: str) -> bytes:
    r = client.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0}, headers=OCTET)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/octet-stream"
    assert int(r.headers["content-length"]) == len(r.content) > 0
    return r.content


def test_https_produce_and_fetch_json_and_binary_equal_the_plaintext_answer(
    tmp_path: Path, pki: Pki, make_broker: list[TlsBroker]
) -> None:
    b = start(make_broker, tmp_path, pki)
    assert b.url.startswith("https://")
    with b.client() as client:
        assert client.post("/topics", json={"name": "t", "partitions": 1}).status_code == 201
        records = [{"key": f"k{i}", "value": {"n": i, "pad": "x" * 200}} for i in range(2000)]
        for i in range(0, len(records), 500):
            r = client.post("/topics/t/records", json={"records": records[i : i + 500]})
            assert r.status_code == 200, r.text
        r = client.get("/topics/t/partitions/0/records", params={"offset": 1990})
        assert r.status_code == 200, r.text
        assert [rec["value"]["n"] for rec in r.json()["records"]] == list(range(1990, 2000))
        # /metadata advertises the https URL clients must use.
        meta = client.get("/metadata").json()
        assert all(br["url"].startswith("https://") for br in meta["brokers"]), meta
        zero_before, copied_before = b.metric(ZEROCOPY), b.metric(COPIED)
        over_tls = _fetch_binary(client, "t")
        # sendfile cannot encrypt: the bytes went through the SSL transport.
        assert b.metric(ZEROCOPY) == zero_before
        assert b.metric(COPIED) - copied_before == len(over_tls)
    b.stop()

    # The same data dir served in plaintext: the zero-copy answer is the same bytes.
    b.env = {}
    b.start()
    assert b.url.startswith("http://")
    with httpx.Client(base_url=b.url, timeout=30) as client:
        zero_before = b.metric(ZEROCOPY)
        plain = _fetch_binary(client, "t")
        assert b.metric(ZEROCOPY) - zero_before == len(plain)
    assert over_tls == plain


def test_wss_subscribe_receives_records(
    tmp_path: Path, pki: Pki, make_broker: list[TlsBroker]
) -> None:
    b = start(make_broker, tmp_path, pki)
    with b.client() as client:
        r = client.post("/topics/w/records", json={"records": [{"value": i} for i in range(5)]})
        assert r.status_code == 200, r.text

    async def main() -> list[int]:
        url = b.url.replace("https://", "wss://") + "/ws/subscribe"
        async with connect(url, ssl=pki.context(), open_timeout=30) as ws:
            hello = {
                "type": "subscribe",
                "topics": ["w"],
                "start": "earliest",
                "credit": {"records": 100},
            }
            await ws.send(orjson.dumps(hello).decode())
            got: list[int] = []
            while len(got) < 5:
                frame = orjson.loads(await asyncio.wait_for(ws.recv(), 30))
                if frame["type"] == "records":
                    got += [rec["value"] for rec in frame["records"]]
                else:
                    assert frame["type"] == "subscribed", frame
            return got

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]

    # The SDK's subscription over wss://, trusting the CA through configure_tls.
    configure_tls(ca_file=pki.ca)

    async def sdk() -> list[int]:
        got: list[int] = []
        async with subscribe(b.url, topics=["w"], start="earliest") as sub:
            async for record in sub:
                got.append(record.value)
                if len(got) == 5:
                    break
        return got

    assert asyncio.run(asyncio.wait_for(sdk(), 30)) == [0, 1, 2, 3, 4]


def test_sdk_producer_and_consumer_over_tls_and_refused_without_the_ca(
    tmp_path: Path, pki: Pki, make_broker: list[TlsBroker]
) -> None:
    b = start(make_broker, tmp_path, pki)
    # No CA configured: public roots do not know the test CA; verification is on.
    with Admin(b.url, request_timeout_ms=5000) as admin, pytest.raises(BrokerUnavailable) as err:
        admin.list_topics()
    assert "CERTIFICATE_VERIFY_FAILED" in str(err.value) or "certificate" in str(err.value)
    configure_tls(ca_file=pki.stranger_ca)
    with Admin(b.url, request_timeout_ms=5000) as admin, pytest.raises(BrokerUnavailable):
        admin.list_topics()

    configure_tls(ca_file=pki.ca)
    with Admin(b.url) as admin:
        admin.create_topic("sdk", partitions=2)
    with Producer(b.url, linger_ms=1) as producer:
        for i in range(100):
            producer.send("sdk", str(i).encode(), partition=i % 2)
    with Consumer(b.url, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("sdk", p) for p in range(2)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 100 and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(timeout_ms=1000)]
    assert sorted(int(v) for v in got) == list(range(100))


def test_mutual_tls_refuses_a_client_without_a_certificate_at_the_handshake(
    tmp_path: Path, pki: Pki, make_broker: list[TlsBroker]
) -> None:
    b = start(make_broker, tmp_path, pki, client_auth="required")
    with pytest.raises(httpx.TransportError):
        # Trusts the broker, has no certificate: the server ends the handshake.
        httpx.get(f"{b.url}/topics", verify=pki.context(client_cert=False), timeout=5)
    with httpx.Client(base_url=b.url, verify=pki.context(client_cert=True), timeout=10) as c:
        assert c.get("/topics").status_code == 200
    # The SDK presents the configured certificate (the binary fetch path included).
    configure_tls(pki.ca, pki.client_cert, pki.client_key)
    with Producer(b.url) as producer:
        producer.send("m", b"v", partition=0).result(timeout=30)
    with Consumer(b.url, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("m", 0)])
        deadline = time.monotonic() + 30
        got: list[bytes | None] = []
        while not got and time.monotonic() < deadline:
            got = [r.value for r in consumer.poll(timeout_ms=1000)]
    assert got == [b"v"]


def test_cli_speaks_tls_with_ca_file_and_refuses_without(
    tmp_path: Path, pki: Pki, make_broker: list[TlsBroker]
) -> None:
    b = start(make_broker, tmp_path, pki)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGBUS_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    ok = cli("topics", "create", "c", "--url", b.url, "--ca-file", str(pki.ca))
    assert ok.returncode == 0, ok.stderr
    refused = cli("topics", "list", "--url", b.url)
    assert refused.returncode != 0
    assert "certificate" in refused.stderr.lower(), refused.stderr
    env["LOGBUS_CLIENT_CA_FILE"] = str(pki.ca)
    listed = cli("topics", "list", "--url", b.url)
    assert listed.returncode == 0 and "c" in listed.stdout.split(), listed


def test_serve_refuses_a_network_bind_without_authentication(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGBUS_")}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "serve",
            "--data-dir",
            str(tmp_path),
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r
    assert "--allow-unauthenticated-network" in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("trusted", [True, False], ids=["leader-trusted", "leader-untrusted"])
def test_two_brokers_replicate_over_mutual_tls_and_survive_the_leader_s_death(
    tmp_path: Path, pki: Pki, make_broker: list[TlsBroker], zookeeper: Any, trusted: bool
) -> None:
    """inter_broker_tls with ssl_client_auth=required on both: the follower verifies the
    leader and presents its own certificate, or acks=all with min.insync.replicas=2 fails
    (it does when the followers trust another CA than the leader's)."""
    env = {
        **({} if trusted else {"LOGBUS_INTER_BROKER_CA_FILE": str(pki.stranger_ca)}),
        **pki.server_env("required"),
        "LOGBUS_INTER_BROKER_TLS": "true",
        "LOGBUS_ZOOKEEPER_SESSION_TIMEOUT_MS": "2000",
        "LOGBUS_REPLICA_LAG_TIME_MAX_MS": "2000",
    }
    brokers: dict[int, TlsBroker] = {}
    for broker_id in (1, 2):

        def args(port: int, broker_id: int = broker_id) -> list[str]:
            return [
                "--broker-id", str(broker_id),
                "--zookeeper", zookeeper.connect_string + "/tls",
                "--advertised-url", f"https://127.0.0.1:{port}",
            ]  # fmt: skip

        b = TlsBroker(tmp_path / f"b{broker_id}", tmp_path / f"b{broker_id}.log", env, args=args)
        b.verify = pki.context(client_cert=True)
        make_broker.append(b)
        brokers[broker_id] = b.start()
    ctx = pki.context(client_cert=True)

    def call(broker_id: int, method: str, path: str, **kw: Any) -> httpx.Response:
        return httpx.request(method, brokers[broker_id].url + path, verify=ctx, timeout=30, **kw)

    deadline = time.monotonic() + 30
    while len(call(1, "GET", "/metadata").json()["brokers"]) < 2:
        assert time.monotonic() < deadline, "the brokers never saw each other"
        time.sleep(0.2)
    body = {
        "name": "r",
        "partitions": 1,
        "replication_factor": 2,
        "configs": {"min.insync.replicas": "2"},
    }
    assert call(1, "POST", "/topics", json=body).status_code == 201
    leader = int(call(1, "GET", "/topics/r").json()["partitions"][0]["leader"])
    deadline = time.monotonic() + 30
    while True:
        r = call(
            leader,
            "POST",
            "/topics/r/partitions/0/records",
            params={"acks": "all", "timeout_ms": 10_000},
            json={"records": [{"value": i} for i in range(10)]},
        )
        if r.status_code == 200:
            break
        if not trusted and time.monotonic() > deadline - 22:
            # 8 s of refusals: the follower cannot fetch from a leader it does not trust.
            assert r.status_code != 200 and "NOT_ENOUGH_REPLICAS" in r.text, r.text
            return
        assert time.monotonic() < deadline, r.text
        time.sleep(0.5)  # the follower joins the ISR after its first fetch
    assert trusted, "acks=all succeeded with a follower that does not trust the leader"
    brokers[leader].kill()
    other = 3 - leader
    deadline = time.monotonic() + 60
    while True:
        r = call(other, "GET", "/topics/r/partitions/0/records", params={"offset": 0})
        if r.status_code == 200 and r.json()["records"]:
            break
        assert time.monotonic() < deadline, r.text
        time.sleep(0.5)
    assert [rec["value"] for rec in r.json()["records"]] == list(range(10))
