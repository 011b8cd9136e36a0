"""openapi/asyncapi.yaml is kept in step with the code: every message type the endpoints
handle or send is documented, every close code too, and real frames match the
documented payload schemas."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import jsonschema
import orjson
import pytest
import yaml
from websockets.asyncio.client import connect
from ws_helpers import LiveBroker, recv, send, subscribe

from app.api.openapi_dump import spec
from app.api.ws import ASYNCAPI_PATH
from app.api.ws.protocol import (
    CLOSE_CODES,
    PRODUCE_CLIENT,
    PRODUCE_SERVER,
    SUBSCRIBE_CLIENT,
    SUBSCRIBE_SERVER,
)

DOC: dict[str, Any] = yaml.safe_load(ASYNCAPI_PATH.read_text())


def resolve(ref: str) -> Any:
    node: Any = DOC
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def operation_messages(channel: str, action: str) -> list[dict[str, Any]]:
    found = []
    for op in DOC["operations"].values():
        if op["channel"]["$ref"] == f"#/channels/{channel}" and op["action"] == action:
            for ref in op["messages"]:
                message = resolve(ref["$ref"])
                found.append(resolve(message["$ref"]) if "$ref" in message else message)
    return found


def names(channel: str, action: str) -> set[str]:
    return {m["name"] for m in operation_messages(channel, action)}


def test_document_shape() -> None:
    assert DOC["asyncapi"].startswith("3.")
    assert {c["address"] for c in DOC["channels"].values()} == {"/ws/subscribe", "/ws/produce"}
    text = ASYNCAPI_PATH.read_text()
    for ref in {part.split("'")[0] for part in text.split("$ref: '")[1:]}:
        resolve(ref)  # every $ref resolves


def test_every_message_type_is_documented() -> None:
    assert names("subscribe", "receive") == set(SUBSCRIBE_CLIENT)
    assert names("subscribe", "send") == set(SUBSCRIBE_SERVER)
    assert names("produce", "receive") == set(PRODUCE_CLIENT)
    assert names("produce", "send") == set(PRODUCE_SERVER)


def test_every_close_code_is_documented() -> None:
    documented = set(DOC["info"]["x-close-codes"])
    assert set(CLOSE_CODES) <= documented
    for code in CLOSE_CODES:
        assert f"| {code} |" in DOC["info"]["description"]


def test_openapi_links_to_it(broker: LiveBroker) -> None:
    assert "/asyncapi.yaml" in spec()["info"]["description"]
    r = httpx.get(f"{broker.url}/asyncapi.yaml")
    assert r.status_code == 200 and yaml.safe_load(r.text) == DOC


def check(channel: str, action: str, frame: dict[str, Any]) -> None:
    """The frame matches the schema of the documented message with its type."""
    candidates = [
        m
        for m in operation_messages(channel, action)
        if m["name"] == frame.get("type", "produce") and m["contentType"] == "application/json"
    ]
    assert candidates, frame
    root = {**candidates[0]["payload"], "components": DOC["components"]}
    jsonschema.Draft202012Validator(root).validate(frame)


def test_real_frames_match_the_schemas(broker: LiveBroker) -> None:
    broker.create_topic("doc", 2)
    broker.produce("doc", [{"key": "k", "value": {"n": 1}, "headers": {"h": "v"}}])

    async def main() -> None:
        url = broker.ws_url("/ws/subscribe")
        client_messages: list[dict[str, Any]] = [
            {"type": "credit", "records": 5},
            {"type": "pause", "partitions": [{"topic": "doc", "partition": 1}]},
            {"type": "resume", "partitions": [{"topic": "doc", "partition": 1}]},
            {"type": "seek", "topic": "doc", "partition": 0, "offset": "earliest"},
            {"type": "commit", "offsets": []},
            {"type": "ping", "id": 3},
        ]
        sub = {"topics": ["doc"], "start": "earliest", "credit": {"records": 10}}
        check("subscribe", "receive", {"type": "subscribe", **sub})
        ws, subscribed = await subscribe(url, **sub)
        check("subscribe", "send", subscribed)
        check("subscribe", "send", await recv(ws))  # records
        for message in client_messages:
            check("subscribe", "receive", message)
            await send(ws, message)
        seen = set()
        # The seek sends record 0 again; the pump may send it before or after the pong.
        while not {"pong", "records"} <= seen:
            frame = await recv(ws)
            check("subscribe", "send", frame)
            seen.add(frame["type"])
        assert seen >= {"records", "error", "pong"}
        await ws.close()

        ws = await connect(broker.ws_url("/ws/produce"))
        for message in (
            {"id": 1, "topic": "doc", "records": [{"value": 1}]},
            {"id": "x", "topic": "doc", "partition": 7, "records": [{"value": 1}]},
            {"type": "ping"},
        ):
            check("produce", "receive", message)
            await ws.send(orjson.dumps(message).decode())
            check("produce", "send", await recv(ws))
        await ws.close()

    asyncio.run(main())


@pytest.mark.parametrize("name", sorted(DOC["components"]["messages"]))
def test_examples_match_their_schemas(name: str) -> None:
    message = DOC["components"]["messages"][name]
    for example in message.get("examples", []):
        root = {**message["payload"], "components": DOC["components"]}
        jsonschema.Draft202012Validator(root).validate(example["payload"])
