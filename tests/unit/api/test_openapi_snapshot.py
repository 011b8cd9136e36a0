"""openapi/openapi.json must equal what the server serves; `make openapi` refreshes it."""

from __future__ import annotations

import json
from pathlib import Path

from openapi_spec_validator import validate

from app.api.openapi_dump import render, spec

SNAPSHOT = Path(__file__).resolve().parents[3] / "openapi" / "openapi.json"

EXPECTED_OPERATIONS = {
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/metadata"),
    ("get", "/topics"),
    ("post", "/topics"),
    ("get", "/topics/{topic}"),
    ("delete", "/topics/{topic}"),
    ("post", "/topics/{topic}/records"),
    ("post", "/topics/{topic}/partitions/{partition}/records"),
    ("post", "/topics/{topic}/partitions/{partition}/batches"),
    ("get", "/topics/{topic}/partitions/{partition}/records"),
    ("get", "/topics/{topic}/partitions/{partition}/offsets"),
    ("post", "/producers"),
}


def test_committed_spec_matches_the_app() -> None:
    assert SNAPSHOT.exists(), "run `make openapi` to write openapi/openapi.json"
    committed = SNAPSHOT.read_text()
    assert json.loads(committed) == spec(), "the API changed: run `make openapi` and commit it"
    assert committed == render()


def test_every_operation_is_documented() -> None:
    doc = spec()
    ops = {(m, p) for p, item in doc["paths"].items() for m in item}
    assert ops >= EXPECTED_OPERATIONS
    for path, item in doc["paths"].items():
        for method, op in item.items():
            assert op.get("summary"), (method, path)
            assert op.get("description"), (method, path)
            # The schema registry answers Confluent's error bodies (422s included),
            # except where the broker's door answers first (400, 401, 403, 415).
            registry = "schema-registry" in op.get("tags", ())
            # Elsewhere a 422 is only a produce's INVALID_RECORD (a typed JSON produce, or
            # broker-side schema validation; an ErrorBody, checked below), never FastAPI's
            # validation error.
            typed_produce = method == "post" and path.endswith(("/records", "/batches"))
            assert registry or typed_produce or "422" not in op["responses"], (method, path)
            if typed_produce and "422" in op["responses"]:
                assert "INVALID_RECORD" in str(op["responses"]["422"]), (method, path)
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")):
                    schema = response["content"]["application/json"]["schema"]
                    name = "ErrorBody"
                    if registry and status not in ("400", "401", "403", "415"):
                        name = "RegistryErrorBody"
                    assert schema == {"$ref": f"#/components/schemas/{name}"}, (path, status)


def test_binary_content_types_are_declared() -> None:
    paths = spec()["paths"]
    batches = paths["/topics/{topic}/partitions/{partition}/batches"]["post"]
    assert "application/octet-stream" in batches["requestBody"]["content"]
    fetch = paths["/topics/{topic}/partitions/{partition}/records"]["get"]
    assert set(fetch["responses"]["200"]["content"]) == {
        "application/json",
        "application/octet-stream",
    }
    produce = paths["/topics/{topic}/records"]["post"]
    ref = produce["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.rsplit("/", 1)[1] in spec()["components"]["schemas"]


def test_refs_resolve() -> None:
    doc = spec()
    schemas = doc["components"]["schemas"]
    text = json.dumps(doc)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "')[1:]}:
        assert ref.startswith("#/components/schemas/")
        assert ref.rsplit("/", 1)[1] in schemas, ref


def test_spec_is_valid_openapi() -> None:
    validate(spec())


def test_operation_ids_are_short_unique_verbs() -> None:
    """Generated clients name their methods after these: short, camelCase, no path in them."""
    ids = [op["operationId"] for item in spec()["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids)), ids
    for op_id in ids:
        assert op_id.isalnum() and op_id[0].islower(), op_id
        assert "topics" not in op_id.lower() or op_id == "listTopics", op_id
    named = {
        (m, p): op["operationId"] for p, item in spec()["paths"].items() for m, op in item.items()
    }
    assert named[("post", "/topics/{topic}/records")] == "produce"
    assert named[("get", "/topics/{topic}/partitions/{partition}/records")] == "fetchRecords"
    assert named[("post", "/topics")] == "createTopic"
    assert named[("post", "/groups/{group}/offsets")] == "commitOffsets"
