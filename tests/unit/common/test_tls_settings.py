"""TLS and safe-default settings: what reaches uvicorn, what is advertised, what is refused,
and the client contexts (verification on, the configured CA only)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.api.app import replica_config
from app.api.server import build_config, tls_options
from app.common import tls
from app.config import Settings
from app.config.addresses import is_loopback
from app.core.replication.fetcher import inter_broker_tls
from app.spark.options import OptionError, apply_tls

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


@pytest.fixture(autouse=True)
def _default_tls() -> Iterator[None]:
    tls.configure()
    yield
    tls.configure()


def test_plaintext_by_default_and_tls_options_reach_uvicorn(
    tmp_path: Path, pem: dict[str, Path]
) -> None:
    plain = Settings(data_dir=tmp_path)
    assert tls_options(plain) == {} and plain.url == "http://127.0.0.1:8080"
    s = Settings(
        data_dir=tmp_path,
        ssl_certfile=pem["cert"],
        ssl_keyfile=pem["key"],
        ssl_ca_file=pem["ca"],
        ssl_client_auth="required",
    )
    assert s.url == "https://127.0.0.1:8080"
    config = build_config(s, zerocopy=True)
    assert config.ssl_certfile == str(pem["cert"]) and config.ssl_keyfile == str(pem["key"])
    assert config.ssl_ca_certs == str(pem["ca"]) and config.ssl_cert_reqs == ssl.CERT_REQUIRED
    assert tls_options(s.model_copy(update={"ssl_client_auth": "requested"}))["ssl_cert_reqs"] == (
        ssl.CERT_OPTIONAL
    )


def test_incomplete_tls_settings_are_refused(tmp_path: Path, pem: dict[str, Path]) -> None:
    with pytest.raises(ValidationError, match="go together"):
        Settings(data_dir=tmp_path, ssl_certfile=pem["cert"])
    with pytest.raises(ValidationError, match="ssl_client_auth needs"):
        Settings(
            data_dir=tmp_path,
            ssl_certfile=pem["cert"],
            ssl_keyfile=pem["key"],
            ssl_client_auth="required",
        )
    with pytest.raises(ValidationError):
        Settings(data_dir=tmp_path, ssl_client_auth="sometimes")


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_wildcard_bind_is_never_advertised(tmp_path: Path, host: str) -> None:
    s = Settings(data_dir=tmp_path, host=host, allow_unauthenticated_network=True)
    assert s.url == f"http://{socket.gethostname()}:8080"
    assert "0.0.0.0" not in s.url and "[::]" not in s.url
    explicit = s.model_copy(update={"advertised_url": "https://bus.example.com:443"})
    assert explicit.url == "https://bus.example.com:443"


def test_a_network_bind_without_authentication_is_refused_unless_allowed(
    tmp_path: Path, pem: dict[str, Path]
) -> None:
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        assert is_loopback(host)
        Settings(data_dir=tmp_path, host=host).check_network_exposure()
    for host in ("0.0.0.0", "::", "10.1.2.3", "bus.example.com"):
        assert not is_loopback(host)
        s = Settings(data_dir=tmp_path, host=host)
        with pytest.raises(ValueError, match="--allow-unauthenticated-network"):
            s.check_network_exposure()
        with pytest.raises(ValueError, match="no authentication"):
            build_config(s)
        s.model_copy(update={"allow_unauthenticated_network": True}).check_network_exposure()
    # Mutual TLS with a required certificate authenticates every client.
    Settings(
        data_dir=tmp_path,
        host="0.0.0.0",
        ssl_certfile=pem["cert"],
        ssl_keyfile=pem["key"],
        ssl_ca_file=pem["ca"],
        ssl_client_auth="required",
    ).check_network_exposure()


def test_client_contexts_verify_and_trust_only_the_configured_ca(pem: dict[str, Path]) -> None:
    ctx = tls.client_context(tls.ClientTls(str(pem["ca"])))
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert len(ctx.get_ca_certs()) == 1
    assert tls.client_context(tls.ClientTls(str(pem["ca"]))) is ctx  # built once
    assert tls.default_tls() == tls.ClientTls()
    tls.configure(pem["ca"], pem["cert"], pem["key"])
    assert tls.default_tls() == tls.ClientTls(str(pem["ca"]), str(pem["cert"]), str(pem["key"]))
    with pytest.raises(OSError):
        tls.configure("/nonexistent/ca.pem")
    with pytest.raises(ValueError, match="needs its certificate"):
        tls.ClientTls(key_file=str(pem["key"]))


def test_client_tls_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, pem: dict[str, Path]
) -> None:
    monkeypatch.setenv("LOGBUS_CLIENT_CA_FILE", str(pem["ca"]))
    assert tls.default_tls() == tls.ClientTls(str(pem["ca"]))
    assert tls.default_context().verify_mode == ssl.CERT_REQUIRED


def test_spark_ssl_options_set_the_default(pem: dict[str, Path]) -> None:
    apply_tls({"logbus.url": "https://x:1"})
    assert tls.default_tls() == tls.ClientTls()
    apply_tls({"logbus.ssl.ca.location": str(pem["ca"])})
    assert tls.default_tls() == tls.ClientTls(str(pem["ca"]))
    with pytest.raises(OptionError, match=r"logbus\.ssl\.ca\.location"):
        apply_tls({"logbus.ssl.ca.location": "/nonexistent.pem"})


def test_followers_verify_the_leader_and_present_their_certificate(
    tmp_path: Path, pem: dict[str, Path]
) -> None:
    assert inter_broker_tls(replica_config(Settings(data_dir=tmp_path))) is None
    s = Settings(
        data_dir=tmp_path,
        ssl_certfile=pem["cert"],
        ssl_keyfile=pem["key"],
        inter_broker_tls=True,
        inter_broker_ca_file=pem["ca"],
    )
    assert inter_broker_tls(replica_config(s)) == tls.ClientTls(
        str(pem["ca"]), str(pem["cert"]), str(pem["key"])
    )


def test_serve_flags_reach_the_settings_and_a_lone_certificate_is_refused(
    tmp_path: Path, pem: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import build_parser, main

    args = build_parser().parse_args(
        [
            "serve",
            "--ssl-certfile",
            str(pem["cert"]),
            "--ssl-keyfile",
            str(pem["key"]),
            "--ssl-ca-file",
            str(pem["ca"]),
            "--ssl-client-auth",
            "required",
            "--allow-unauthenticated-network",
        ]
    )
    assert (args.ssl_certfile, args.ssl_keyfile) == (str(pem["cert"]), str(pem["key"]))
    assert args.ssl_client_auth == "required" and args.allow_unauthenticated_network is True
    client = build_parser().parse_args(
        ["topics", "list", "--ca-file", "ca.pem", "--cert", "c.pem", "--key", "k.pem"]
    )
    assert (client.ca_file, client.cert, client.key) == ("ca.pem", "c.pem", "k.pem")
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--data-dir", str(tmp_path), "--ssl-certfile", str(pem["cert"])])
    assert exit_.value.code == 2
    assert "ssl_certfile and ssl_keyfile go together" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["topics", "list", "--url", "https://127.0.0.1:1", "--ca-file", "/nonexistent.pem"])
    assert exit_.value.code == 2
    assert "TLS options" in capsys.readouterr().err
