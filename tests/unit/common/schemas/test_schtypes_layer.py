"""The schema package's shape: importing it loads no schema library, the levels and types
are Confluent's, and compatibility levels pick the versions they should."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.common import schemas

HEAVY = ("fastavro", "avro", "jsonschema_rs", "jsonschema", "google", "grpc_tools")


def test_importing_the_package_loads_no_schema_library() -> None:
    code = (
        "import sys, app.common.schemas, app.common.schemas.wire; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


def test_unknown_type_and_level() -> None:
    with pytest.raises(schemas.InvalidSchema, match="unknown schema type"):
        schemas.parse("XML", "<a/>")
    s = schemas.parse("AVRO", '"string"')
    with pytest.raises(ValueError, match="unknown compatibility level"):
        schemas.check_compatibility(s, [s], "SIDEWAYS")


def _record(*fields: str) -> schemas.ParsedSchema:
    body = ",".join(f'{{"name":"{f}","type":"int"}}' for f in fields)
    return schemas.parse("AVRO", f'{{"type":"record","name":"R","fields":[{body}]}}')


def test_transitive_levels_check_every_version_the_others_only_the_last() -> None:
    # v1 {a}; v2 {a, b with default}... written without defaults so each step is visible:
    # v1 {a}, v2 {} (a removed), v3 {a} (a back, no default): v3 reads v2's data? No: a
    # is missing from v2's data and has no default. v3 reads v1's data: yes.
    v1, v2, v3 = _record("a"), _record(), _record("a")
    assert schemas.check_compatibility(v3, [v1], "BACKWARD") == []
    assert schemas.check_compatibility(v3, [v2, v1], "BACKWARD") == []
    assert schemas.check_compatibility(v3, [v1, v2], "BACKWARD") != []
    assert schemas.check_compatibility(v2, [v1], "BACKWARD") == []
    assert schemas.check_compatibility(v2, [v1], "FORWARD") != []
    assert schemas.check_compatibility(v2, [v1], "FULL") != []
    assert schemas.check_compatibility(v1, [v1, v2], "BACKWARD_TRANSITIVE") != []
    assert schemas.check_compatibility(v1, [v2, v1], "BACKWARD") == []
    assert schemas.check_compatibility(v1, [v2, v1], "BACKWARD_TRANSITIVE") != []
    assert schemas.check_compatibility(v1, [v2, v1], "NONE") == []
    assert schemas.check_compatibility(v1, [], "FULL_TRANSITIVE") == []


def test_another_type_is_incompatible() -> None:
    avro = schemas.parse("AVRO", '"string"')
    other = schemas.parse("JSON", '{"type": "string"}')
    (reason,) = schemas.check_compatibility(other, [avro], "BACKWARD")
    assert "AVRO" in reason and "JSON" in reason
