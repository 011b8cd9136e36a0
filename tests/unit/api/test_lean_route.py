"""LeanRoute and HotRoutes (app/api/lean_route.py) answer exactly as FastAPI's own handler
and router would: same arguments, same errors, the including router's dependencies kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import pytest
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Path, Query, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.responses import JSONResponse, Response
from starlette.testclient import TestClient

from app.api.deps import get_state
from app.api.lean_route import HotRoutes, LeanRoute, lean_reader


async def echo(
    topic: Annotated[str, Path()],
    partition: Annotated[int, Path(ge=-5, le=5)],
    request: Request,
    offset: Annotated[int, Query(ge=-(1 << 63), le=(1 << 63) - 1)],
    n: Annotated[int, Query(ge=0, le=10)] = 3,
    fmt: Annotated[Literal["json", "string"], Query()] = "json",
    epoch: Annotated[int | None, Query(ge=-1, le=100)] = None,
    acks: str = "1",
) -> Response:
    return JSONResponse(
        {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "n": n,
            "fmt": fmt,
            "epoch": epoch,
            "acks": acks,
            "method": request.method,
        }
    )


async def refuse_all() -> None:
    raise HTTPException(401, "refused by the including router")


def _app(route_class: type[APIRoute], *, refuse: str = "", hot: bool = False) -> FastAPI:
    """``refuse``: "include" (a dependency of include_router) or "app" (of the app)."""
    router = APIRouter(route_class=route_class)
    router.add_api_route("/t/{topic}/p/{partition}", echo, methods=["GET"])
    app = FastAPI(dependencies=[Depends(refuse_all)] if refuse == "app" else None)
    app.include_router(router, dependencies=[Depends(refuse_all)] if refuse == "include" else [])
    if hot:
        app.router.routes.insert(0, HotRoutes(app.router))
    return app


QUERIES = [
    "offset=0",
    "offset=-7&n=10&fmt=string&epoch=-1&acks=all",
    "offset=7&n=11",  # out of range
    "offset=7&n=-1",
    "offset=007",  # spellings only FastAPI judges
    "offset=+7",
    "offset=%207",
    "offset=1_0",
    "offset=7.0",
    "offset=",
    "offset=abc",
    "n=3",  # offset missing
    "offset=9223372036854775807",
    "offset=9223372036854775808",
    "offset=-9223372036854775808",
    "offset=1&fmt=JSON",
    "offset=1&fmt=binary",
    "offset=1&epoch=",
    "offset=1&epoch=101",
    "offset=1&acks=a%26b+c",
    "offset=1&unknown=1",
    "offset=1&n=2&n=4",  # the last one, as Starlette
]
PATHS = ["/t/orders/p/0", "/t/orders/p/-5", "/t/orders/p/6", "/t/a%20b/p/1", "/t/x/p/01"]


@pytest.mark.parametrize("hot", [False, True])
def test_lean_answers_equal_fastapis(hot: bool) -> None:
    with (
        TestClient(_app(APIRoute)) as plain,
        TestClient(_app(LeanRoute, hot=hot)) as lean,
    ):
        for path in PATHS:
            for query in QUERIES:
                url = f"{path}?{query}"
                expected, got = plain.get(url), lean.get(url)
                assert (got.status_code, got.json()) == (expected.status_code, expected.json()), url
        # Another method: FastAPI's 405, not the hot route's.
        assert lean.post("/t/x/p/1?offset=1").status_code == 405


def test_routes_with_more_than_plain_parameters_keep_fastapis_handler() -> None:
    class Body(BaseModel):
        x: int

    async def with_body(body: Body) -> Response:
        return JSONResponse({})

    async def with_header(h: Annotated[str, Header()]) -> Response:
        return JSONResponse({})

    async def with_constraint(q: Annotated[str, Query(max_length=3)]) -> Response:
        return JSONResponse({})

    assert lean_reader(APIRoute("/e/{topic}/p/{partition}", echo)) is not None
    for endpoint in (with_body, with_header, with_constraint):
        assert lean_reader(APIRoute("/x", endpoint, methods=["POST"])) is None


@pytest.mark.parametrize("hot", [False, True])
@pytest.mark.parametrize("refuse", ["include", "app"])
def test_the_including_routers_dependencies_still_run(hot: bool, refuse: str) -> None:
    with TestClient(_app(LeanRoute, refuse=refuse, hot=hot)) as client:
        r = client.get("/t/orders/p/0?offset=1")
        assert r.status_code == 401
        assert r.json() == {"detail": "refused by the including router"}


def test_dependency_overrides_are_honoured() -> None:
    async def endpoint(topic: str, state: Annotated[object, Depends(get_state)]) -> Response:
        return JSONResponse({"state": str(state)})

    router = APIRouter(route_class=LeanRoute)
    router.add_api_route("/s/{topic}", endpoint, methods=["GET"])
    app = FastAPI()
    app.include_router(router)

    async def fake_state() -> str:
        return "overridden"

    app.dependency_overrides[get_state] = fake_state
    with TestClient(app) as client:
        assert client.get("/s/x").json() == {"state": "overridden"}


@dataclass(frozen=True, slots=True)
class Window:
    """A parameter list routes share, as a dataclass dependency (as the produce routes'
    ProduceCall): read by the lean reader as the endpoint's own parameters."""

    request: Request
    n: Annotated[int, Query(ge=0, le=10)] = 3


async def windowed(topic: Annotated[str, Path()], window: Annotated[Window, Depends()]) -> Response:
    return JSONResponse({"topic": topic, "n": window.n, "method": window.request.method})


class Point(BaseModel):
    x: int


@dataclass(frozen=True, slots=True)
class WithBody:
    """A dataclass dependency with a body: FastAPI's to read."""

    body: Point


async def bundled_body(bundle: Annotated[WithBody, Depends()]) -> Response:
    return JSONResponse({})


def test_a_dataclass_of_plain_parameters_is_read_lean() -> None:
    assert lean_reader(APIRoute("/w/{topic}", windowed)) is not None
    assert lean_reader(APIRoute("/x", bundled_body, methods=["POST"])) is None
    apps = []
    for route_class in (APIRoute, LeanRoute):
        router = APIRouter(route_class=route_class)
        router.add_api_route("/w/{topic}", windowed, methods=["GET"])
        app = FastAPI()
        app.include_router(router)
        apps.append(app)
    with TestClient(apps[0]) as plain, TestClient(apps[1]) as lean:
        for query in ["", "n=10", "n=11", "n=007", "n=x"]:
            expected, got = plain.get(f"/w/a?{query}"), lean.get(f"/w/a?{query}")
            assert (got.status_code, got.json()) == (expected.status_code, expected.json()), query
