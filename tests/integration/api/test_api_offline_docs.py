"""/docs works offline: Swagger UI's page names only the broker's own assets, which it serves."""

from __future__ import annotations

import re

from starlette.testclient import TestClient


def test_docs_page_loads_every_asset_from_the_broker(client: TestClient) -> None:
    r = client.get("/docs")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    page = r.text
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']|url: ?["']([^"']+)["']""", page)
    linked = [a or b for a, b in urls]
    assert linked, page
    # No CDN, no absolute URL at all: everything comes from this broker.
    assert not re.search(r"https?://", page.replace("http://www.w3.org", "")), page
    for url in linked:
        assert url.startswith("/"), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 100, url
    assert "/docs-assets/swagger-ui-bundle.js" in linked
    assert "/openapi.json" in linked


def test_redoc_is_not_served_from_a_cdn(client: TestClient) -> None:
    assert client.get("/redoc").status_code == 404
