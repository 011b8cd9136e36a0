"""OriginGuard (app/api/browsers.py): which browser requests and WebSocket upgrades pass."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

from app.api.browsers import OriginGuard, normalize_origin

ALLOWED = "https://app.example.com"


async def ok(request: Request) -> Response:
    return PlainTextResponse("ok")


async def echo(ws: WebSocket) -> None:
    await ws.accept()
    await ws.send_text("hello")
    await ws.close()


def client(origins: list[str]) -> TestClient:
    app = Starlette(routes=[Route("/x", ok, methods=["GET", "POST"]), WebSocketRoute("/ws", echo)])
    return TestClient(OriginGuard(app, origins), base_url="http://broker:8080")


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("https://App.Example.com", "https://app.example.com:443"),
        ("http://127.0.0.1:3000", "http://127.0.0.1:3000"),
        ("http://[::1]:80", "http://[::1]:80"),
        ("null", None),
        ("file://", None),
        ("http://x:99999", None),
    ],
)
def test_origins_are_normalized(given: str, normal: str | None) -> None:
    assert normalize_origin(given) == normal


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_foreign_origin_gets_403_whatever_the_method(method: str) -> None:
    answer = client([]).request(method, "/x", headers={"origin": "https://evil.example"})
    assert answer.status_code == 403
    assert answer.json()["error_code"] == "CLUSTER_AUTHORIZATION_FAILED"
    assert answer.json()["origin"] == "https://evil.example"


def test_allowed_same_origin_and_non_browser_requests_pass() -> None:
    c = client([ALLOWED])
    assert c.post("/x", headers={"origin": ALLOWED}).status_code == 200
    assert c.post("/x", headers={"origin": "https://app.example.com:443"}).status_code == 200
    # The broker's own pages (/docs): the origin is the Host the request was sent to.
    assert c.post("/x", headers={"origin": "http://broker:8080"}).status_code == 200
    assert c.post("/x").status_code == 200  # curl, the SDK
    assert client(["*"]).post("/x", headers={"origin": "https://any.example"}).status_code == 200


def test_cross_site_requests_without_origin_pass_only_as_navigations() -> None:
    c = client([])
    img = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors"}
    assert c.get("/x", headers=img).status_code == 403
    link = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"}
    assert c.get("/x", headers=link).status_code == 200
    assert c.post("/x", headers=link).status_code == 403
    assert c.get("/x", headers={"sec-fetch-site": "same-origin"}).status_code == 200


def test_websocket_upgrades_from_a_foreign_origin_are_refused_before_the_handshake() -> None:
    c = client([ALLOWED])
    with c.websocket_connect("/ws", headers={"origin": ALLOWED}) as ws:
        assert ws.receive_text() == "hello"
    with c.websocket_connect("/ws") as ws:  # no Origin: not a browser
        assert ws.receive_text() == "hello"
    evil = {"origin": "https://evil.example"}
    with pytest.raises(WebSocketDisconnect) as refused, c.websocket_connect("/ws", headers=evil):
        pass
    assert refused.value.code == 1008
