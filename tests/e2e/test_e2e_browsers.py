"""Browsers against a real broker (issue #15 item 5): a page in Debian's headless Chromium,
served from an origin the broker does not allow, can neither create topics, produce, nor
read over a WebSocket, whether it asks with a CORS request (refused at the preflight or
by the Origin check) or with a simple request that needs no preflight (``no-cors``
``text/plain`` and form POSTs: refused 403 by the Origin check, and 415 besides). From an
allowed origin (``cors_allowed_origins``) the same page can do all three.

The page reports what it saw to the server it came from (same origin, nothing to allow);
the test then checks the broker itself: topics, and the records in the log.

Chromium is installed by ``make test`` (apt, as root). Without it the test skips, except
under ``CI=true``, where it fails.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Broker, BrokerFactory

from app.core.security.users import UsersFile

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGE_TIMEOUT_SECONDS = 60

PAGE = """<!doctype html>
<html><body><script>
const B = "http://127.0.0.1:%(broker)d";
const json = {"content-type": "application/json"};
const out = {};
async function attempt(name, fn) {
  try { out[name] = await fn(); } catch (e) { out[name] = "error: " + e; }
}
function subscribe() {
  return new Promise((resolve) => {
    const ws = new WebSocket(B.replace("http", "ws") + "/ws/subscribe");
    ws.onopen = () => ws.send(JSON.stringify({type: "subscribe", topics: ["web"],
      start: "earliest", format: "json", value_format: "string", credit: {records: 100}}));
    ws.onmessage = (m) => {
      const d = JSON.parse(m.data);
      if (d.type === "records") { resolve("records:" + d.records.map((r) => r.value)); ws.close(); }
    };
    ws.onerror = () => resolve("refused");
    setTimeout(() => resolve("timeout"), 10000);
  });
}
(async () => {
  await attempt("create", async () => (await fetch(B + "/topics", {method: "POST",
    headers: json, body: JSON.stringify({name: "web-created", partitions: 1})})).status);
  await attempt("produce", async () => (await fetch(B + "/topics/web/records", {method: "POST",
    headers: json, body: JSON.stringify({value_format: "string",
      records: [{value: "from-page"}]})})).status);
  // Simple requests: no preflight, the page cannot read the answer, but they are sent.
  await attempt("create_no_cors", async () => { await fetch(B + "/topics", {method: "POST",
    mode: "no-cors", headers: {"content-type": "text/plain"},
    body: JSON.stringify({name: "web-no-cors", partitions: 1})}); return "sent"; });
  await attempt("produce_no_cors", async () => { await fetch(B + "/topics/web/records", {
    method: "POST", mode: "no-cors", headers: {"content-type": "text/plain"},
    body: JSON.stringify({value_format: "string", records: [{value: "no-cors"}]})});
    return "sent"; });
  await attempt("produce_form", async () => { const form = new URLSearchParams();
    form.set("records", "x"); await fetch(B + "/topics/web/records", {method: "POST",
    mode: "no-cors", body: form}); return "sent"; });
  await attempt("metadata_create", async () => { await fetch(B +
    "/metadata?topics=web-meta&allow_auto_topic_creation=true", {mode: "no-cors"});
    return "sent"; });
  await attempt("ws", subscribe);
  await fetch("/report", {method: "POST", body: JSON.stringify(out)});
})();
</script></body></html>
"""


# The same three things with credentials, against a broker with authentication and ACLs:
# fetch with Basic (a header that needs a preflight, allowed by cors_allowed_headers), one
# WebSocket carrying a JWT as the `bearer.<token>` subprotocol, another authenticating
# with a first `auth` message; and, for contrast, each without credentials.
CREDENTIALED_PAGE = """<!doctype html>
<html><body><script>
const B = "http://127.0.0.1:%(broker)d";
const basic = {"content-type": "application/json", "authorization": "Basic %(basic)s"};
const out = {};
async function attempt(name, fn) {
  try { out[name] = await fn(); } catch (e) { out[name] = "error: " + e; }
}
function subscribe(protocols, first) {
  return new Promise((resolve) => {
    const ws = new WebSocket(B.replace("http", "ws") + "/ws/subscribe", protocols);
    ws.onopen = () => {
      if (first) ws.send(JSON.stringify(first));
      ws.send(JSON.stringify({type: "subscribe", topics: ["web"], start: "earliest",
        format: "json", value_format: "string", credit: {records: 100}}));
    };
    ws.onmessage = (m) => {
      const d = JSON.parse(m.data);
      if (d.type === "records") { resolve("records:" + d.records.map((r) => r.value)); ws.close(); }
    };
    ws.onclose = (e) => resolve("closed:" + e.code);
    setTimeout(() => resolve("timeout"), 15000);
  });
}
(async () => {
  await attempt("create", async () => (await fetch(B + "/topics", {method: "POST",
    headers: basic, body: JSON.stringify({name: "web-created", partitions: 1})})).status);
  await attempt("produce", async () => (await fetch(B + "/topics/web/records", {method: "POST",
    headers: basic, body: JSON.stringify({value_format: "string",
      records: [{value: "from-page"}]})})).status);
  await attempt("produce_anonymous", async () => (await fetch(B + "/topics/web/records", {
    method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify({records: [{value: "anonymous"}]})})).status);
  await attempt("ws_bearer", () => subscribe(["logbus", "bearer.%(token)s"], null));
  await attempt("ws_auth_message", () => subscribe([], {type: "auth", username: "%(user)s",
    password: "%(password)s"}));
  await attempt("ws_anonymous", () => subscribe([], null));
  await fetch("/report", {method: "POST", body: JSON.stringify(out)});
})();
</script></body></html>
"""


class PageServer:
    """Serves ``page`` (PAGE unless set; ``params`` fill it besides the broker's port) from
    its own origin and collects the page's one report."""

    def __init__(self) -> None:
        self.page = PAGE
        self.params: dict[str, Any] = {}
        self.broker_port = 0
        self.report: dict[str, Any] | None = None
        self.reported = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = (outer.page % {"broker": outer.broker_port, **outer.params}).encode()
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers["content-length"])
                outer.report = json.loads(self.rfile.read(length))
                outer.reported.set()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def page_server() -> Iterator[PageServer]:
    server = PageServer()
    yield server
    server.close()


@pytest.fixture
def chromium() -> str:
    if CHROMIUM is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("chromium is not installed (make test installs Debian's chromium)")
        pytest.skip("chromium is not installed: run make test as root, or apt-get install chromium")
    return CHROMIUM


def run_page(chromium: str, page: PageServer, broker: Broker, profile: Path) -> dict[str, Any]:
    """Load the page in a fresh headless Chromium; the page's report."""
    page.broker_port = broker.port
    page.report = None
    page.reported.clear()
    proc = subprocess.Popen(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", page.origin + "/"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: renderers end with it
    )
    try:
        assert page.reported.wait(PAGE_TIMEOUT_SECONDS), "the page did not report"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert page.report is not None
    return page.report


def seeded(broker: Broker, auth: tuple[str, str] | None = None) -> Broker:
    with broker.client(auth=auth) as client:
        assert client.post("/topics", json={"name": "web", "partitions": 1}).status_code == 201
        r = client.post(
            "/topics/web/records", json={"value_format": "string", "records": [{"value": "seed"}]}
        )
        assert r.status_code == 200
    return broker


def values(broker: Broker, auth: tuple[str, str] | None = None) -> list[str]:
    r = httpx.get(
        f"{broker.url}/topics/web/partitions/0/records?offset=0&value_format=string", auth=auth
    )
    assert r.status_code == 200
    return [record["value"] for record in r.json()["records"]]


def topics(broker: Broker, auth: tuple[str, str] | None = None) -> set[str]:
    r = httpx.get(f"{broker.url}/topics", auth=auth)
    assert r.status_code == 200
    listed = r.json()
    items = listed["topics"] if isinstance(listed, dict) else listed
    return {t if isinstance(t, str) else t["name"] for t in items}


@pytest.mark.slow
def test_a_page_from_an_origin_not_allowed_can_do_nothing(
    new_broker: BrokerFactory, page_server: PageServer, chromium: str, tmp_path: Path
) -> None:
    broker = seeded(new_broker().start())  # CORS off: the default
    report = run_page(chromium, page_server, broker, tmp_path / "profile")
    # CORS requests fail in the browser (no Access-Control-Allow-Origin on the preflight).
    assert str(report["create"]).startswith("error"), report
    assert str(report["produce"]).startswith("error"), report
    assert report["ws"] in ("refused", "timeout"), report
    # And the broker took nothing, from the simple requests either.
    assert values(broker) == ["seed"]
    assert topics(broker) == {"web"}


@pytest.mark.slow
def test_a_page_from_an_allowed_origin_can_create_produce_and_subscribe(
    new_broker: BrokerFactory, page_server: PageServer, chromium: str, tmp_path: Path
) -> None:
    broker = seeded(
        new_broker(env={"LOGBUS_CORS_ALLOWED_ORIGINS": json.dumps([page_server.origin])}).start()
    )
    report = run_page(chromium, page_server, broker, tmp_path / "profile")
    assert report["create"] == 201, report
    assert report["produce"] == 200, report
    assert str(report["ws"]).startswith("records:seed"), report
    # Simple requests still write nothing: a form or text/plain body is not JSON (415).
    assert values(broker) == ["seed", "from-page"]
    assert "web-created" in topics(broker)
    assert "web-no-cors" not in topics(broker)
    # A no-cors GET carries no Origin; cross-site and not a navigation, it is refused.
    assert "web-meta" not in topics(broker)


ADMIN = ("admin", "admin-secret-1")
WEB = ("web", "web-secret-1")
ISSUER, AUDIENCE = "https://issuer.test", "logbus"


@pytest.fixture
def guarded_broker(
    new_broker: BrokerFactory, page_server: PageServer, tmp_path: Path
) -> tuple[Broker, str]:
    """A broker with Basic and JWT authentication and ACLs, whose CORS allows only
    ``page_server``'s origin; ``User:web`` may CREATE topic web-created and READ and WRITE
    topic web. Answers the broker (seeded) and a JWT naming ``web``."""
    jwt = pytest.importorskip("jwt")
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    jwk.update(kid="k1", use="sig", alg="RS256")
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    claims = {"sub": "web", "iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time() + 600)}
    token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
    users = UsersFile(tmp_path / "users.json")
    for name, password in (ADMIN, WEB):
        users.add(name, password, n=2**12)  # a cheap cost: a test, not storage
    broker = new_broker(
        env={
            "LOGBUS_AUTHENTICATION": "basic,jwt",
            "LOGBUS_USERS_FILE": str(tmp_path / "users.json"),
            "LOGBUS_JWT_JWKS_FILE": str(tmp_path / "jwks.json"),
            "LOGBUS_JWT_ISSUER": ISSUER,
            "LOGBUS_JWT_AUDIENCE": AUDIENCE,
            "LOGBUS_AUTHORIZER": "acl",
            "LOGBUS_SUPER_USERS": "User:admin",
            "LOGBUS_CORS_ALLOWED_ORIGINS": json.dumps([page_server.origin]),
        }
    ).start()
    seeded(broker, ADMIN)
    acls = [
        {"resource_type": "TOPIC", "resource_name": name, "principal": "User:web",
         "operation": op}
        for name, op in (("web-created", "CREATE"), ("web", "READ"), ("web", "WRITE"))
    ]  # fmt: skip
    r = httpx.post(f"{broker.url}/acls", json={"acls": acls}, auth=ADMIN)
    assert r.status_code == 201, r.text
    return broker, token


@pytest.mark.slow
def test_with_credentials_an_allowed_origin_can_and_a_foreign_one_cannot(
    guarded_broker: tuple[Broker, str], page_server: PageServer, chromium: str, tmp_path: Path
) -> None:
    broker, token = guarded_broker
    params = {
        "basic": base64.b64encode(":".join(WEB).encode()).decode(),
        "token": token,
        "user": WEB[0],
        "password": WEB[1],
    }
    page_server.page, page_server.params = CREDENTIALED_PAGE, params
    report = run_page(chromium, page_server, broker, tmp_path / "profile")
    assert report["create"] == 201, report
    assert report["produce"] == 200, report
    assert report["produce_anonymous"] == 401, report
    assert str(report["ws_bearer"]).startswith("records:seed,from-page"), report
    assert str(report["ws_auth_message"]).startswith("records:seed,from-page"), report
    assert report["ws_anonymous"] == "closed:4401", report
    assert values(broker, ADMIN) == ["seed", "from-page"]
    assert "web-created" in topics(broker, ADMIN)

    # The same page and credentials from another origin: refused at the preflight or by
    # the Origin check, the WebSockets at the handshake; nothing reaches the log.
    foreign = PageServer()
    try:
        foreign.page, foreign.params = CREDENTIALED_PAGE, params
        httpx.delete(f"{broker.url}/topics/web-created", auth=ADMIN).raise_for_status()
        report = run_page(chromium, foreign, broker, tmp_path / "profile2")
    finally:
        foreign.close()
    assert str(report["create"]).startswith("error"), report
    assert str(report["produce"]).startswith("error"), report
    for name in ("ws_bearer", "ws_auth_message", "ws_anonymous"):
        assert not str(report[name]).startswith("records"), report
    assert values(broker, ADMIN) == ["seed", "from-page"]
    assert "web-created" not in topics(broker, ADMIN)
