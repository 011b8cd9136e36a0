"""A client generated from openapi/openapi.json works against a real broker, method names and all.

`openapi-python-client` (a widely used generator) writes one module per operation, named
after its ``operationId``: the short verbs (``produce``, ``fetch_records``, ``create_topic``,
``commit_offsets``) a user of the generated client calls. The client is generated from the
committed spec, imported, and used for a produce / fetch / commit round trip.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Broker

REPO = Path(__file__).resolve().parents[2]
GENERATOR = Path(sys.executable).with_name("openapi-python-client")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("generated")
    subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(REPO / "openapi" / "openapi.json"),
            "--meta",
            "none",
            "--output-path",
            str(out / "logbus_generated"),
        ],
        check=True,
        capture_output=True,
        cwd=out,
    )
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module("logbus_generated")
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m.split(".")[0] == "logbus_generated"]:
            del sys.modules[name]


def test_operation_modules_are_named_after_short_verbs(generated: Any) -> None:
    api = Path(generated.__file__).parent / "api"
    modules = {p.stem for p in api.rglob("*.py") if p.stem != "__init__"}
    assert {"produce", "fetch_records", "create_topic", "commit_offsets", "heartbeat"} <= modules
    assert not [m for m in modules if m.endswith(("_get", "_post", "_delete"))], modules


def test_round_trip_through_the_generated_client(generated: Any, broker: Broker) -> None:
    topics = importlib.import_module("logbus_generated.api.topics.create_topic")
    produce = importlib.import_module("logbus_generated.api.produce.produce_to_partition")
    fetch = importlib.import_module("logbus_generated.api.fetch.fetch_records")
    commit = importlib.import_module("logbus_generated.api.groups.commit_offsets")
    offsets = importlib.import_module("logbus_generated.api.groups.fetch_offsets")
    models = importlib.import_module("logbus_generated.models")

    client = generated.Client(base_url=broker.url)
    created = topics.sync_detailed(
        client=client, body=models.CreateTopicRequest(name="gen", partitions=1)
    )
    assert created.status_code == 201, created.content
    body = models.ProduceRequest.from_dict(
        {"value_format": "string", "records": [{"value": "a"}, {"value": "b"}]}
    )
    produced = produce.sync(topic="gen", partition=0, client=client, body=body)
    assert [o.offset for o in produced.offsets] == [0, 1]
    fetched = fetch.sync(
        topic="gen",
        partition=0,
        client=client,
        offset=0,
        value_format=models.FetchRecordsValueFormat.STRING,
    )
    assert [r.value for r in fetched.records] == ["a", "b"]
    assert fetched.high_watermark == 2
    committed = commit.sync_detailed(
        group="gen-app",
        client=client,
        body=models.OffsetCommitBody.from_dict(
            {"offsets": [{"topic": "gen", "partition": 0, "offset": 2}]}
        ),
    )
    assert committed.status_code == 200, committed.content
    read = offsets.sync_detailed(group="gen-app", client=client)
    assert read.status_code == 200, read.content
    assert b'"offset":2' in read.content.replace(b" ", b"")
