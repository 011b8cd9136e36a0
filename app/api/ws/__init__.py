"""WebSocket endpoints: ``/ws/subscribe`` (push consumer) and ``/ws/produce``.

The protocol (messages, close codes, the binary frame) is in
:mod:`app.api.ws.protocol` and ``openapi/asyncapi.yaml``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from starlette.responses import FileResponse

from app.api.state import AppState
from app.api.ws import frames, produce, subscribe
from app.api.ws.stats import WsCollector, WsStats

ASYNCAPI_PATH = Path(__file__).resolve().parents[3] / "openapi" / "asyncapi.yaml"

router = APIRouter()
router.add_api_websocket_route("/ws/subscribe", subscribe.endpoint)
router.add_api_websocket_route("/ws/produce", produce.endpoint)


@router.get("/asyncapi.yaml", include_in_schema=False)
async def asyncapi() -> FileResponse:
    return FileResponse(ASYNCAPI_PATH, media_type="application/yaml")


def install(app: FastAPI, state: AppState) -> None:
    """Add the WebSocket routes, their per-app counters and the AsyncAPI document."""
    stats = WsStats()
    app.state.logbus_ws = stats
    app.state.logbus_ws_frames = frames.FrameCache()
    state.registry.register(WsCollector(stats))
    app.include_router(router)


__all__ = ["ASYNCAPI_PATH", "install", "router"]
