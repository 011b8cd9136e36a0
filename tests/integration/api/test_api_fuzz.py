"""Whatever arrives, the answer is never a 5xx and always the one error shape."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from api_helpers import create_topic, make_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from app.api import create_app
from app.common.batch import build_batch

FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
produce_like = st.fixed_dictionaries(
    {},
    optional={
        "records": st.lists(
            st.dictionaries(
                st.sampled_from(["key", "value", "headers", "partition", "timestamp", "x"]),
                json_values,
                max_size=5,
            ),
            max_size=4,
        )
        | json_values,
        "key_format": st.sampled_from(["json", "string", "binary", "x"]) | json_values,
        "value_format": st.sampled_from(["json", "string", "binary"]) | json_values,
    },
)
GOOD = build_batch([(b"k", b"v")])
# Bodies go as their endpoint's media type, so the fuzzing reaches the parsers (415 otherwise).
JSON = {"content-type": "application/json"}
BINARY = {"content-type": "application/octet-stream"}


@pytest.fixture(scope="module")
def fuzz_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings_ = make_settings(
        Path(tmp_path_factory.mktemp("fuzz")), auto_create_topics_enable=False
    )
    with TestClient(create_app(settings_), raise_server_exceptions=False) as client:
        create_topic(client, "f", partitions=3)
        yield client


def _check(r: Any) -> None:
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        body = r.json()
        assert isinstance(body["error_code"], str)
        assert isinstance(body["message"], str)
        assert isinstance(body["retriable"], bool)


@FUZZ
@given(body=produce_like)
def test_json_produce(fuzz_client: TestClient, body: Any) -> None:
    _check(fuzz_client.post("/topics/f/records", content=orjson.dumps(body), headers=JSON))


@FUZZ
@given(body=st.binary(max_size=200))
def test_json_produce_bytes(fuzz_client: TestClient, body: bytes) -> None:
    _check(fuzz_client.post("/topics/f/records", content=body, headers=JSON))


@FUZZ
@given(
    prefix=st.binary(max_size=80),
    flip=st.integers(0, len(GOOD) - 1),
    cut=st.integers(0, len(GOOD)),
)
def test_binary_produce(fuzz_client: TestClient, prefix: bytes, flip: int, cut: int) -> None:
    mangled = bytearray(GOOD)
    mangled[flip] ^= 0x5A
    for body in (prefix, bytes(mangled), GOOD[:cut], GOOD + prefix):
        _check(fuzz_client.post("/topics/f/partitions/1/batches", content=body, headers=BINARY))


@FUZZ
@given(
    params=st.dictionaries(
        st.sampled_from(
            ["offset", "max_bytes", "min_bytes", "max_wait_ms", "key_format", "value_format", "z"]
        ),
        st.integers(-(2**70), 2**70).map(str) | st.text(max_size=6),
        max_size=6,
    ),
    partition=st.sampled_from(["0", "2", "3", "-1", "x", "99999999999999999999"]),
    accept=st.sampled_from(["", "*/*", "application/octet-stream", "text/plain", "a;q=x"]),
)
def test_fetch(
    fuzz_client: TestClient, params: dict[str, str], partition: str, accept: str
) -> None:
    # Keep the run short: a valid long wait would just wait (waiting is tested elsewhere).
    params["max_wait_ms"] = "0" if "max_wait_ms" not in params else params["max_wait_ms"] + "x"
    headers = {"accept": accept} if accept else {}
    _check(
        fuzz_client.get(f"/topics/f/partitions/{partition}/records", params=params, headers=headers)
    )
    _check(
        fuzz_client.get(
            f"/topics/f/partitions/{partition}/offsets", params={"at": params.get("offset", "x")}
        )
    )


@FUZZ
@given(
    body=st.dictionaries(
        st.sampled_from(["name", "partitions", "replication_factor", "configs", "x"]),
        json_values,
        max_size=5,
    )
)
def test_create_topic(fuzz_client: TestClient, body: Any) -> None:
    r = fuzz_client.post("/topics", content=orjson.dumps(body), headers=JSON)
    _check(r)
    if r.status_code == 201:
        assert fuzz_client.delete(f"/topics/{r.json()['name']}").status_code == 204
