"""As in Kafka, a wildcard bind address is never advertised: /metadata names a reachable host."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from api_helpers import make_settings
from starlette.testclient import TestClient

from app.api import create_app


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_metadata_never_advertises_a_wildcard_bind(tmp_path: Path, host: str) -> None:
    settings = make_settings(
        tmp_path, host=host, advertised_url=None, allow_unauthenticated_network=True
    )
    with TestClient(create_app(settings)) as client:
        brokers = client.get("/metadata").json()["brokers"]
    assert [b["url"] for b in brokers] == [f"http://{socket.gethostname()}:8080"]
