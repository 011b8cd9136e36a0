"""The real app over a real LogManager in a temp dir, driven through Starlette's TestClient."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from groups_api_helpers import make_settings
from starlette.testclient import TestClient

from app.api import create_app
from app.config import Settings


@pytest.fixture
def group_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def gclient(group_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(group_settings), raise_server_exceptions=False) as c:
        yield c
