"""A real LogManager in a temp dir behind the real app, driven through Starlette's TestClient."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from api_helpers import make_settings
from starlette.testclient import TestClient

from app.api import create_app
from app.config import Settings

# The log engine's test helpers (a read_committed reader's view) live beside its unit tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "core" / "log"))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    # raise_server_exceptions=False: a 500 must show up as a status, which tests assert on.
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c
