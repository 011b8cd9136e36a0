"""The edge middleware (app/api/edge.py) dispatches produce and fetch itself, with the
answers FastAPI's own stack gives: errors, fallbacks, metrics and the request rules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_helpers import make_settings
from starlette.testclient import TestClient

from app.api import create_app
from app.api.lean_route import HotRoutes
from app.config import Settings

JSON = {"content-type": "application/json"}
ONE = b'{"records": [{"key": "k", "value": 1}]}'


@pytest.fixture
def edge_client(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The app with FastAPI's router unable to serve a hot route: only the edge can."""

    async def refuse(self: HotRoutes, scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError(f"the router served {scope['path']}, not the edge")

    monkeypatch.setattr(HotRoutes, "handle", refuse)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.post("/topics", json={"name": "t", "partitions": 1}).raise_for_status()
        yield client


def test_produce_and_fetch_are_answered_by_the_edge(edge_client: TestClient) -> None:
    r = edge_client.post("/topics/t/records?acks=1", content=ONE, headers=JSON)
    assert r.status_code == 200, r.text
    assert [(o["partition"], o["offset"]) for o in r.json()["offsets"]] == [(0, 0)]
    r = edge_client.get("/topics/t/partitions/0/records?offset=0&max_wait_ms=0")
    assert r.status_code == 200, r.text
    assert [rec["value"] for rec in r.json()["records"]] == [1]
    assert edge_client.get("/healthz").status_code == 200  # not hot: FastAPI's router


def test_errors_raised_past_the_edge_are_the_apps_answers(edge_client: TestClient) -> None:
    r = edge_client.post("/topics/t/partitions/7/records", content=ONE, headers=JSON)
    assert (r.status_code, r.json()["error_code"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    r = edge_client.get("/topics/t/partitions/0/records?offset=5&max_wait_ms=0")
    assert (r.status_code, r.json()["error_code"]) == (416, "OFFSET_OUT_OF_RANGE")
    r = edge_client.post("/topics/t/records?acks=2", content=ONE, headers=JSON)
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUIRED_ACKS")
    r = edge_client.post("/topics/t/records", content=b'{"records": 1}', headers=JSON)
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")


def test_the_request_rules_run_before_the_dispatch(edge_client: TestClient) -> None:
    r = edge_client.post("/topics/t/records", content=ONE, headers={"content-type": "text/plain"})
    assert (r.status_code, r.json()["error_code"]) == (415, "INVALID_REQUEST")
    r = edge_client.post("/topics/t/records?acks=1&acks=0", content=ONE, headers=JSON)
    assert r.status_code == 400 and "query.acks" in r.json()["message"]
    # Nothing of either refused request was written.
    r = edge_client.get("/topics/t/partitions/0/records?offset=0&max_wait_ms=0")
    assert r.json()["records"] == []


def test_a_value_the_lean_reader_leaves_to_fastapi_reaches_fastapi(settings: Settings) -> None:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.post("/topics", json={"name": "t", "partitions": 1}).raise_for_status()
        # "000": a spelling only FastAPI judges (it accepts it, as it always did).
        r = client.post("/topics/t/partitions/000/records", content=ONE, headers=JSON)
        assert r.status_code == 200, r.text
        r = client.get("/topics/t/partitions/x/records?offset=0")
        assert r.status_code == 400 and r.json()["fields"] == ["path.partition"]


def test_hot_requests_are_counted_by_route_template(edge_client: TestClient) -> None:
    edge_client.post("/topics/t/records", content=ONE, headers=JSON).raise_for_status()
    edge_client.post("/topics/t/records", content=b"{", headers=JSON)
    metrics = edge_client.get("/metrics").text
    template = 'route="/topics/{topic}/records"'
    assert f'logbus_http_requests_total{{method="POST",{template},status="200"}}' in metrics
    assert f'logbus_http_requests_total{{method="POST",{template},status="400"}}' in metrics


def test_before_the_broker_serves_a_hot_route_answers_503(settings: Settings) -> None:
    # Without the lifespan the app has no log manager: the state dependency refuses.
    client = TestClient(create_app(settings), raise_server_exceptions=False)
    r = client.post("/topics/t/records", content=ONE, headers=JSON)
    assert (r.status_code, r.json()["error_code"]) == (503, "BROKER_NOT_AVAILABLE")


def _outer_layer_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths of the requests that passed FastAPI's own outer layers."""
    from fastapi.telemetry._asgi import ExceptionTelemetryMiddleware

    seen: list[str] = []
    original = ExceptionTelemetryMiddleware.__call__

    async def spy(self: Any, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append(scope["path"])
        await original(self, scope, receive, send)

    monkeypatch.setattr(ExceptionTelemetryMiddleware, "__call__", spy)
    return seen


def test_hot_requests_skip_fastapis_outer_layers_unless_cors_is_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _outer_layer_calls(monkeypatch)
    with TestClient(create_app(make_settings(tmp_path / "a")), raise_server_exceptions=False) as c:
        c.post("/topics/t/records", content=ONE, headers=JSON).raise_for_status()
        c.get("/healthz").raise_for_status()
    assert seen == ["/healthz"]
    seen.clear()
    page = "http://page.example"
    settings = make_settings(tmp_path / "b", cors_allowed_origins=[page])
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = c.post("/topics/t/records", content=ONE, headers={**JSON, "origin": page})
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == page
    assert seen == ["/topics/t/records"]


def test_an_unhandled_error_in_a_hot_route_answers_the_apps_500(
    edge_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.api.routers import records

    def broken(*args: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(records, "parse_produce_body", broken)
    r = edge_client.post("/topics/t/records", content=ONE, headers=JSON)
    assert r.status_code == 500
    assert r.json()["error_code"] == "UNKNOWN_SERVER_ERROR"
    assert r.json()["message"] == "internal error: RuntimeError"
