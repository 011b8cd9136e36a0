"""Mutual TLS names the principal, as Kafka's SSL listener: ``User:<subject DN>`` in RFC
2253 form (Kafka's ``ssl.principal.mapping.rules=DEFAULT``), so an ACL naming alice's
certificate lets it produce and refuses another certificate of the same CA; the same
holds on a WebSocket, and a client quota names the DN too."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets

trustme = pytest.importorskip("trustme")

from test_e2e_tls import TlsBroker  # noqa: E402

from app.common import tls  # noqa: E402

pytestmark = pytest.mark.slow


class Pki:
    def __init__(self, root: Path) -> None:
        ca = trustme.CA(organization_name="Example")
        root.mkdir()
        self.root = root
        self.ca = root / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca))
        server = ca.issue_cert("127.0.0.1", "localhost")
        self.cert, self.key = root / "server.pem", root / "server.key"
        for i, pem in enumerate(server.cert_chain_pems):
            pem.write_to_path(str(self.cert), append=i > 0)
        server.private_key_pem.write_to_path(str(self.key))
        self.files: dict[str, tuple[Path, Path]] = {}
        for name in ("admin", "alice", "bob"):
            cert = ca.issue_cert(f"{name}@example.com", common_name=name)
            pair = (root / f"{name}.pem", root / f"{name}.key")
            cert.cert_chain_pems[0].write_to_path(str(pair[0]))
            cert.private_key_pem.write_to_path(str(pair[1]))
            self.files[name] = pair

    def context(self, who: str) -> ssl.SSLContext:
        cert, key = self.files[who]
        return tls.client_context(tls.ClientTls(str(self.ca), str(cert), str(key)))

    def dn(self, who: str) -> str:
        from cryptography import x509

        cert = x509.load_pem_x509_certificate(self.files[who][0].read_bytes())
        return cert.subject.rfc4514_string()


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[TlsBroker, Pki]]:
    pki = Pki(tmp_path / "pki")
    env = {
        "LOGBUS_SSL_CERTFILE": str(pki.cert),
        "LOGBUS_SSL_KEYFILE": str(pki.key),
        "LOGBUS_SSL_CA_FILE": str(pki.ca),
        "LOGBUS_SSL_CLIENT_AUTH": "required",
        "LOGBUS_AUTHORIZER": "acl",
        "LOGBUS_SUPER_USERS": f"User:{pki.dn('admin')}",
    }
    broker = TlsBroker(tmp_path / "data", tmp_path / "broker.log", env)
    broker.verify = pki.context("admin")
    broker.start()
    try:
        yield broker, pki
    finally:
        broker.stop()


def test_the_certificate_subject_is_the_principal(secured: tuple[TlsBroker, Pki]) -> None:
    broker, pki = secured
    alice_dn = pki.dn("alice")
    # Kafka's DEFAULT mapping: the most specific part first, no spaces.
    assert alice_dn.startswith("CN=alice,") and ", " not in alice_dn
    with httpx.Client(base_url=broker.url, verify=pki.context("admin"), timeout=30) as admin:
        assert admin.post("/topics", json={"name": "t", "partitions": 1}).status_code == 201
        acl = {
            "resource_type": "TOPIC",
            "resource_name": "t",
            "principal": f"User:{alice_dn}",
            "operation": "WRITE",
        }
        r = admin.post("/acls", json={"acls": [acl]})
        assert r.status_code == 201, r.text
    body = {"records": [{"value": "hello"}]}
    with httpx.Client(base_url=broker.url, verify=pki.context("alice"), timeout=30) as alice:
        r = alice.post("/topics/t/records", json=body)
        assert r.status_code == 200, r.text
    with httpx.Client(base_url=broker.url, verify=pki.context("bob"), timeout=30) as bob:
        r = bob.post("/topics/t/records", json=body)
        assert r.status_code == 403, r.text
        assert r.json()["error_code"] == "TOPIC_AUTHORIZATION_FAILED"
        assert f"User:{pki.dn('bob')}" in r.json()["message"]

    async def ws_produce(who: str) -> dict[str, object]:
        url = broker.url.replace("https://", "wss://") + "/ws/produce"
        async with websockets.connect(url, ssl=pki.context(who)) as ws:
            await ws.send(json.dumps({"id": 1, "topic": "t", "records": [{"value": "ws"}]}))
            answer: dict[str, object] = json.loads(await asyncio.wait_for(ws.recv(), 10))
            return answer

    assert "error_code" not in asyncio.run(ws_produce("alice"))
    refused = asyncio.run(ws_produce("bob"))
    assert refused.get("error_code") == "TOPIC_AUTHORIZATION_FAILED", refused
