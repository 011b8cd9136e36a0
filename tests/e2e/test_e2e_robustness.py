"""Issue 12's reproducers against a real ``logbus serve``: each gets its documented answer,
and after each the broker serves and every record acknowledged so far reads back intact
(checked against a model of what was acknowledged), across a kill -9 and a clean restart.

A hostile or careless client: a topic of 7,000 partitions, a backtracking regex, integers
of any size, topic names past the file-name limit, bodies of the wrong media type, a
repeated parameter, acks=0 with a 1 ms timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from conftest import Broker, BrokerFactory

LEDGER = "ledger"
JSON = {"content-type": "application/json"}


class Acknowledged:
    """The model: what each partition of LEDGER must hold, in order."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.values: dict[int, list[str]] = {0: [], 1: []}

    def produce(self, partition: int, values: list[str]) -> None:
        r = self.client.post(
            f"/topics/{LEDGER}/partitions/{partition}/records",
            json={"records": [{"value": v} for v in values], "value_format": "string"},
        )
        assert r.status_code == 200, r.text
        offsets = [o["offset"] for o in r.json()["offsets"]]
        start = len(self.values[partition])
        assert offsets == list(range(start, start + len(values)))
        self.values[partition].extend(values)

    def check(self, client: httpx.Client | None = None) -> None:
        """The broker serves, and every acknowledged record reads back, nothing else."""
        c = client or self.client
        assert c.get("/healthz").status_code == 200
        for partition, expected in self.values.items():
            got: list[str] = []
            offset = 0
            while True:
                r = c.get(
                    f"/topics/{LEDGER}/partitions/{partition}/records",
                    params={"offset": offset, "value_format": "string", "max_wait_ms": 0},
                )
                assert r.status_code == 200, r.text
                body = r.json()
                got.extend(rec["value"] for rec in body["records"])
                if body["next_offset"] >= body["high_watermark"]:
                    break
                offset = body["next_offset"]
            assert got == expected, (partition, len(got), len(expected))


def _error(r: httpx.Response, status: int, code: str, **fields: Any) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body: dict[str, Any] = r.json()
    assert body["error_code"] == code, body
    for name, value in fields.items():
        assert body[name] == value, (name, body)
    return body


def _bomb(c: httpx.Client, broker: Broker) -> None:
    # Before: 500 after 8 s, descriptors leaked to the limit, topics/bomb.json left behind
    # so that every restart failed with "Too many open files".
    body = _error(
        c.post("/topics", json={"name": "bomb", "partitions": 7000}), 400, "INVALID_PARTITIONS"
    )
    assert body["setting"] in ("max_partitions", "reserved_file_descriptors")
    assert not (broker.data_dir / "topics" / "bomb.json").exists()
    assert not list(broker.data_dir.glob("bomb-*"))


def _regex(c: httpx.Client, broker: Broker) -> None:
    # Before: Python's re on the client's pattern, ~2**40 steps against this name, holding
    # the event loop (and the GIL): the answer never came (client timeout: 30 s).
    victim = "a" * 40
    assert c.post("/topics", json={"name": victim, "partitions": 1}).status_code == 201
    r = c.post("/groups/rx/heartbeat", json={"subscribed_topic_regex": "(a+)+b"})
    assert r.status_code == 200, r.text
    r = c.post("/groups/rx/heartbeat", json={"subscribed_topic_regex": r"(a)\1"})
    _error(r, 400, "INVALID_REQUEST")
    assert c.delete(f"/topics/{victim}").status_code == 204


def _integers(c: httpx.Client, broker: Broker) -> None:
    # Before: 500 (TypeError, OverflowError) for each of these.
    huge = "99999999999999999999999"
    fetch = f"/topics/{LEDGER}/partitions/0/records"
    _error(
        c.get(fetch, params={"offset": "-9223372036854775809"}),
        400,
        "INVALID_REQUEST",
        fields=["query.offset"],
    )
    _error(
        c.get(
            f"/topics/{LEDGER}/partitions/-47892589513138356879360/records", params={"offset": 0}
        ),
        400,
        "INVALID_REQUEST",
        fields=["path.partition"],
    )
    _error(
        c.post(
            f"/topics/{LEDGER}/partitions/-3912932587805666738962432/batches",
            content=b"\0" * 61,
            headers={"content-type": "application/octet-stream"},
        ),
        400,
        "INVALID_REQUEST",
        fields=["path.partition"],
    )
    for field, record in [
        ("partition", f'{{"value": 1, "partition": {huge}}}'),
        ("timestamp", f'{{"value": 1, "timestamp": {huge}}}'),
    ]:
        body = f'{{"records": [{record}]}}'.encode()
        _error(
            c.post(f"/topics/{LEDGER}/records", content=body, headers=JSON),
            400,
            "INVALID_REQUEST",
            fields=[f"body.records.0.{field}"],
        )
    body = f'{{"producer_id": {huge}, "producer_epoch": 0}}'.encode()
    _error(
        c.post("/producers", content=body, headers=JSON),
        400,
        "INVALID_REQUEST",
        fields=["body.producer_id"],
    )


def _names(c: httpx.Client, broker: Broker) -> None:
    # Before: 247-249 characters passed validation, then 500 "File name too long" on
    # create, auto-create and metadata; DELETE of 214-246 answered 500 and left files.
    _error(c.post("/topics", json={"name": "x" * 247}), 400, "INVALID_TOPIC_EXCEPTION")
    _error(
        c.post(f"/topics/{'y' * 247}/records", json={"records": [{"value": 1}]}),
        400,
        "INVALID_TOPIC_EXCEPTION",
    )
    _error(
        c.get("/metadata", params={"topics": "z" * 248, "allow_auto_topic_creation": True}),
        400,
        "INVALID_TOPIC_EXCEPTION",
    )
    _error(c.delete(f"/topics/{'x' * 247}"), 400, "INVALID_TOPIC_EXCEPTION")
    longest = "n" * 246
    assert c.post("/topics", json={"name": longest, "partitions": 2}).status_code == 201
    r = c.post(f"/topics/{longest}/partitions/1/records", json={"records": [{"value": 1}]})
    assert r.status_code == 200, r.text
    assert c.delete(f"/topics/{longest}").status_code == 204
    assert not list(broker.data_dir.glob(f"{longest}-*"))
    assert "File name too long" not in broker.log()


def _media_types(c: httpx.Client, broker: Broker) -> None:
    # Before: text/plain, form-encoded and missing types were parsed as JSON (so any web
    # page could create topics and produce through a visitor's browser).
    record = b'{"records": [{"value": "not written"}]}'
    for content_type in ("text/plain", "application/x-www-form-urlencoded", ""):
        r = c.post(
            f"/topics/{LEDGER}/partitions/0/records",
            content=record,
            headers={"content-type": content_type},
        )
        _error(r, 415, "INVALID_REQUEST")
    _error(
        c.post("/topics", content=b'{"name": "csrf"}', headers={"content-type": "text/plain"}),
        415,
        "INVALID_REQUEST",
    )
    _error(
        c.post(f"/topics/{LEDGER}/partitions/0/batches", content=b"{}", headers=JSON),
        415,
        "INVALID_REQUEST",
        acceptable=["application/octet-stream"],
    )


def _duplicates(c: httpx.Client, broker: Broker) -> None:
    # Before: the last one won, acks=all&acks=0 meant acks=0.
    r = c.post(
        f"/topics/{LEDGER}/partitions/0/records?acks=all&acks=0",
        json={"records": [{"value": "not written"}]},
    )
    _error(r, 400, "INVALID_REQUEST", fields=["query.acks"])


def _acks_zero(model: Acknowledged) -> Callable[[httpx.Client, Broker], None]:
    def run(c: httpx.Client, broker: Broker) -> None:
        # Before: 504 when the append took over 1 ms, though acks=0 waits for nothing.
        for i in range(20):
            r = c.post(
                f"/topics/{LEDGER}/partitions/1/records",
                params={"acks": "0", "timeout_ms": 1},
                json={"records": [{"value": f"zero-{i}"}], "value_format": "string"},
            )
            assert r.status_code == 204, r.text
            model.values[1].append(f"zero-{i}")  # acks=0: in the log once answered

    return run


@pytest.mark.slow
def test_reproducers_get_their_documented_answers(new_broker: BrokerFactory) -> None:
    # A partition limit below 7,000 whatever this machine's descriptor limit is.
    broker = new_broker(env={"LOGBUS_MAX_PARTITIONS": "2000"}).start()
    with broker.client() as c:
        assert c.post("/topics", json={"name": LEDGER, "partitions": 2}).status_code == 201
        model = Acknowledged(c)
        steps: list[Callable[[httpx.Client, Broker], None]] = [
            _bomb,
            _regex,
            _integers,
            _names,
            _media_types,
            _duplicates,
            _acks_zero(model),
        ]
        for n, step in enumerate(steps):
            model.produce(n % 2, [f"{step.__name__}-{i}" for i in range(50)])
            step(c, broker)
            model.check()
    broker.kill()
    broker.start()
    with broker.client() as c:
        model.client = c
        model.check()
        model.produce(0, ["after kill -9"])
    broker.stop()
    broker.start()
    with broker.client() as c:
        model.client = c
        model.check()
