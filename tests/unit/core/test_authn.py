"""Authenticators (app/core/security/authn.py) and the users file: what a bearer JWT must
prove, that Basic checks scrypt hashes and forgets a changed user, and that nothing a
client could replay is stored."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from app.common.errors import SaslAuthenticationFailed
from app.core.security import authn
from app.core.security.authn import BasicAuthenticator, JwtAuthenticator
from app.core.security.users import InvalidUser, UsersFile

ISS, AUD = "https://issuer.test", "logbus"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def token(key: Any = KEY, alg: str = "RS256", kid: str = "k1", **claims: Any) -> str:
    body = {"sub": "alice", "iss": ISS, "aud": AUD, "exp": int(time.time()) + 300, **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm=alg,
                      headers={"kid": kid})  # fmt: skip


@pytest.fixture
def jwks(tmp_path: Path) -> Path:
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key(), as_dict=True)
    jwk.update(kid="k1", alg="RS256")
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    return path


def authenticator(jwks: Path, **kw: Any) -> JwtAuthenticator:
    args: dict[str, Any] = {"issuer": ISS, "audience": AUD, "leeway_s": 0}
    args.update(kw)
    return JwtAuthenticator(jwks, None, **args)


def test_a_valid_token_names_its_principal(jwks: Path) -> None:
    identity = authenticator(jwks).authenticate(token())
    assert identity.principal == "User:alice" and identity.expires_at is not None
    other = authenticator(jwks, principal_claim="preferred_username")
    assert other.authenticate(token(preferred_username="bob")).principal == "User:bob"


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda: token(exp=int(time.time()) - 10), id="expired"),
        pytest.param(lambda: token(exp=None), id="no exp"),
        pytest.param(lambda: token(iss="https://evil.test"), id="issuer"),
        pytest.param(lambda: token(aud="other"), id="audience"),
        pytest.param(
            lambda: token(key=rsa.generate_private_key(public_exponent=65537, key_size=2048)),
            id="wrong key",
        ),
        pytest.param(lambda: token(kid="k2"), id="unknown kid"),
        pytest.param(lambda: token(key="s" * 32, alg="HS256"), id="HS256 with a guessed key"),
        pytest.param(
            lambda: jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, None, "none"),
            id="alg none",
        ),
        pytest.param(lambda: token(sub="User:x"), id="colon in the name"),
        pytest.param(lambda: "not.a.jwt", id="garbage"),
    ],
)
def test_refused_tokens(jwks: Path, bad: Any) -> None:
    with pytest.raises(SaslAuthenticationFailed):
        authenticator(jwks).authenticate(bad())


def test_a_cached_token_expires(jwks: Path) -> None:
    now = [time.time()]
    auth = authenticator(jwks, clock=lambda: now[0])
    t = token(exp=int(now[0]) + 5)
    assert auth.authenticate(t).principal == "User:alice"
    assert auth.cached(t) is not None
    now[0] += 10
    assert auth.cached(t) is None
    with pytest.raises(SaslAuthenticationFailed):
        auth.authenticate(t)


def test_a_key_added_to_the_jwks_file_is_picked_up(jwks: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(authn, "RELOAD_CHECK_S", 0.0)
    auth = authenticator(jwks, algorithms=["RS256", "ES256"])
    ec_key = ec.generate_private_key(ec.SECP256R1())
    t = token(key=ec_key, alg="ES256", kid="k2")
    with pytest.raises(SaslAuthenticationFailed):
        auth.authenticate(t)
    doc = json.loads(jwks.read_text())
    jwk = jwt.algorithms.ECAlgorithm.to_jwk(ec_key.public_key(), as_dict=True)
    jwk.update(kid="k2")
    doc["keys"].append(jwk)
    jwks.write_text(json.dumps(doc))
    os.utime(jwks, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert auth.authenticate(t).principal == "User:alice"


def test_basic_against_scrypt_hashes(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(authn, "RELOAD_CHECK_S", 0.0)
    path = tmp_path / "users.json"
    users = UsersFile(path)
    users.add("alice", "correct horse", n=2**10)
    assert "correct horse" not in path.read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(InvalidUser):
        users.add("alice", "again", n=2**10)
    with pytest.raises(InvalidUser):
        users.add("bad:name", "x", n=2**10)
    auth = BasicAuthenticator(path)
    assert auth.verify("alice", "correct horse").principal == "User:alice"
    assert auth.cached("alice", "correct horse") is not None
    for name, password in (("alice", "wrong"), ("nobody", "correct horse"), ("alice", "")):
        with pytest.raises(SaslAuthenticationFailed) as refused:
            auth.verify(name, password)
        assert refused.value.message == "Basic: unknown user or wrong password"
    # A changed password forgets what was cached for the old one.
    users.passwd("alice", "battery staple", n=2**10)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert auth.cached("alice", "correct horse") is None
    with pytest.raises(SaslAuthenticationFailed):
        auth.verify("alice", "correct horse")
    users.remove("alice")
    with pytest.raises(SaslAuthenticationFailed):
        auth.verify("alice", "battery staple")


def test_keys_from_a_jwks_url(jwks: Path) -> None:
    """``jwt_jwks_url``: the keys are fetched over HTTP (a loopback server here)."""
    import http.server
    import threading

    body = jwks.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
        auth = JwtAuthenticator(None, url, issuer=ISS, audience=AUD)
        assert auth.needs_io
        assert auth.authenticate(token()).principal == "User:alice"
        wrong = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        with pytest.raises(SaslAuthenticationFailed):
            auth.authenticate(token(key=wrong))
    finally:
        server.shutdown()


def test_a_scram_upsertion_is_the_credential_of_its_salted_password(tmp_path: Path) -> None:
    """AlterUserScramCredentials sends PBKDF2(password, salt, iterations): the credential
    stored from it verifies the password as one ``logbus users add`` made would."""
    import hashlib

    import scramp

    from app.core.security.users import ScramCredential

    salt = b"0123456789abcdef"
    salted = hashlib.pbkdf2_hmac("sha512", b"s3cret", salt, 4096)
    got = ScramCredential.from_salted("SCRAM-SHA-512", salt, 4096, salted)
    _, stored, server, _ = scramp.ScramMechanism("SCRAM-SHA-512").make_auth_info(
        "s3cret", iteration_count=4096, salt=salt
    )
    assert (got.stored_key, got.server_key) == (stored, server)
