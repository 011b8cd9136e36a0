"""app/api/inter_broker.py: a broker's calls to another broker pass a listener that
requires client certificates (ssl_client_auth=required), as its follower fetches do."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.api.inter_broker import inter_broker_client
from app.config import Settings

trustme = pytest.importorskip("trustme")


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pem")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    paths = {"ca": root / "ca.pem", "cert": root / "cert.pem", "key": root / "key.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    cert.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    cert.private_key_pem.write_to_path(str(paths["key"]))
    return paths


@pytest.fixture
def mutual_tls_listener(pem: dict[str, Path]) -> Iterator[str]:
    """A loopback HTTPS listener that requires a client certificate from the test CA and
    answers every request 204 (one connection at a time, until the test ends)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pem["ca"]))
    context.load_cert_chain(str(pem["cert"]), str(pem["key"]))
    context.verify_mode = ssl.CERT_REQUIRED
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed: the test is over
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(65536)
                    tls.sendall(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
            except (ssl.SSLError, OSError):
                pass  # a client without a certificate: refused in the handshake

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{port}/"
    finally:
        sock.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone does not)
        sock.close()
        thread.join(5)
        assert not thread.is_alive()


async def _status(settings: Settings, url: str, *, present_certificate: bool = True) -> int:
    async with inter_broker_client(settings, present_certificate=present_certificate) as client:
        return (await client.get(url, timeout=10)).status_code


def test_the_listener_certificate_is_presented(
    tmp_path: Path, pem: dict[str, Path], mutual_tls_listener: str
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        ssl_certfile=pem["cert"],
        ssl_keyfile=pem["key"],
        inter_broker_ca_file=pem["ca"],
    )
    assert asyncio.run(_status(settings, mutual_tls_listener)) == 204


def test_without_a_certificate_the_listener_refuses(
    tmp_path: Path, pem: dict[str, Path], mutual_tls_listener: str
) -> None:
    # The control: the same CA trusted, no certificate to present.
    settings = Settings(data_dir=tmp_path, inter_broker_ca_file=pem["ca"])
    # TLS 1.3 refuses after the client's handshake is done: the alert surfaces on the
    # read, as httpx's error or (at times) the ssl module's own.
    with pytest.raises((httpx.HTTPError, ssl.SSLError)):
        asyncio.run(_status(settings, mutual_tls_listener))


def test_a_call_on_a_clients_behalf_presents_no_certificate(
    tmp_path: Path, pem: dict[str, Path], mutual_tls_listener: str
) -> None:
    # The registry forwarder's client (app/api/registry_forward.py): the leader would take
    # this broker's certificate for the forwarded client's identity, so none is presented
    # although the broker has one.
    settings = Settings(
        data_dir=tmp_path,
        ssl_certfile=pem["cert"],
        ssl_keyfile=pem["key"],
        inter_broker_ca_file=pem["ca"],
    )
    with pytest.raises((httpx.HTTPError, ssl.SSLError)):
        asyncio.run(_status(settings, mutual_tls_listener, present_certificate=False))
