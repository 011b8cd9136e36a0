"""Print the OpenAPI spec the server serves (``make openapi`` commits it to openapi/)."""

from __future__ import annotations

import json
import sys
from typing import Any

from app.api.app import create_app
from app.config import Settings


def spec() -> dict[str, Any]:
    # model_construct: defaults only, so the dump never depends on LOGBUS_* variables.
    return create_app(Settings.model_construct()).openapi()


def render() -> str:
    return json.dumps(spec(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
