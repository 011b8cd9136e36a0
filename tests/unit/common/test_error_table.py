"""Every error class's Kafka error name, retriable flag, HTTP status and Confluent code,
held against a snapshot taken before the classes were declared with class keywords
(``class X(Base, error_code=..., retriable=...)``): the compact form changed no
answer. ``error_table.json`` also holds which class answers each code in
``app.common.error_body`` (the class an SDK raises for a broker's body).

A deliberate change to an error's status or code updates the snapshot in the same
commit: regenerate it with ``python tests/unit/common/test_error_table.py``.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("error_table.json")

# The modules declaring LogbusError subclasses outside app/kafka (its errors are the Kafka
# door's own) and app/spark (imports pyspark).
MODULES = (
    "app.common.errors",
    "app.common.group_errors",
    "app.common.schema_errors",
    "app.common.error_body",
    "app.client.errors",
    "app.api.errors",
    "app.api.limits",
    "app.api.codec",
    "app.api.browsers",
    "app.api.memory",
    "app.api.schema_validation",
)


def error_table() -> dict[str, Any]:
    for name in MODULES:
        importlib.import_module(name)
    from app.api.errors import status_for
    from app.api.registry_errors import confluent_code
    from app.common import error_body
    from app.common.errors import LogbusError

    def walk(cls: type[LogbusError]) -> list[type[LogbusError]]:
        return [c for sub in cls.__subclasses__() for c in (sub, *walk(sub))]

    rows: dict[str, list[Any]] = {}
    for cls in walk(LogbusError):
        if cls.__module__ in MODULES:
            exc = cls.__new__(cls)
            rows[f"{cls.__module__}.{cls.__qualname__}"] = [
                cls.error_code,
                cls.retriable,
                list(confluent_code(exc)),
                status_for(exc),
            ]
    by_code = {
        code: f"{cls.__module__}.{cls.__qualname__}"
        for code, cls in sorted(error_body._BY_CODE.items())
    }
    return {"classes": dict(sorted(rows.items())), "by_code": by_code}


def test_every_error_keeps_its_code_status_and_class() -> None:
    expected = json.loads(SNAPSHOT.read_text())
    table = error_table()
    assert len(table["classes"]) >= 100
    assert table == expected


def _dumps(table: dict[str, Any]) -> str:
    """One class (or code) a line, so a change shows as the rows it changes."""
    parts = []
    for section, rows in table.items():
        lines = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in rows.items())
        parts.append(f"{json.dumps(section)}: {{\n{lines}\n}}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


if __name__ == "__main__":
    SNAPSHOT.write_text(_dumps(error_table()))
