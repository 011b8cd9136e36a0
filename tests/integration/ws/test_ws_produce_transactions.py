"""WS /ws/produce inside a transaction: records invisible to read_committed readers until
the transaction commits, gone for them when it aborts; errors as the socket reports
others (an error frame with the request's id, the socket stays open)."""

from __future__ import annotations

import asyncio
from typing import Any

from websockets.asyncio.client import connect
from ws_helpers import LiveBroker, recv, send


def values(broker: LiveBroker, topic: str, isolation: str) -> list[Any]:
    with broker.http() as h:
        r = h.get(
            f"/topics/{topic}/partitions/0/records",
            params={"offset": 0, "isolation_level": isolation},
        )
        assert r.status_code == 200, r.text
        return [rec["value"] for rec in r.json()["records"]]


def end(broker: LiveBroker, tid: str, pid: int, epoch: int, action: str) -> None:
    with broker.http() as h:
        body = {"producer_id": pid, "producer_epoch": epoch}
        r = h.post(f"/transactions/{tid}/{action}", json=body)
        assert r.status_code == 200, r.text


def test_ws_produce_in_a_transaction(broker: LiveBroker) -> None:
    broker.create_topic("wtx")
    with broker.http() as h:
        r = h.post("/producers", json={"transactional_id": "ws-tx"})
        assert r.status_code == 200, r.text
        pid, epoch = r.json()["producer_id"], r.json()["producer_epoch"]
    txn = {"transactional_id": "ws-tx", "producer_id": pid, "producer_epoch": epoch}

    async def produce(ws: Any, rid: int, records: list[Any], **extra: Any) -> Any:
        await send(ws, {"id": rid, "topic": "wtx", "records": records, **txn, **extra})
        return await recv(ws)

    async def main() -> None:
        async with connect(broker.ws_url("/ws/produce")) as ws:
            ack = await produce(ws, 1, [{"value": "a"}, {"value": "b"}])
            assert ack["type"] == "ack" and [o["offset"] for o in ack["offsets"]] == [0, 1]
            assert values(broker, "wtx", "read_uncommitted") == ["a", "b"]
            assert values(broker, "wtx", "read_committed") == []  # held at the LSO
            end(broker, "ws-tx", pid, epoch, "commit")
            assert values(broker, "wtx", "read_committed") == ["a", "b"]

            ack = await produce(ws, 2, [{"value": "dropped"}], partition=0)
            assert ack["type"] == "ack", ack
            end(broker, "ws-tx", pid, epoch, "abort")
            assert values(broker, "wtx", "read_committed") == ["a", "b"]

            # Errors are frames with the request's id; the socket stays open.
            await send(ws, {"id": 3, "topic": "wtx", "records": [{"value": 1}], "producer_id": 1})
            bad = await recv(ws)
            assert (bad["type"], bad["id"], bad["error_code"]) == ("error", 3, "INVALID_REQUEST")
            with broker.http() as h:  # a new instance fences this epoch
                assert h.post("/producers", json={"transactional_id": "ws-tx"}).status_code == 200
            fenced = await produce(ws, 4, [{"value": "zombie"}])
            assert (fenced["type"], fenced["id"]) == ("error", 4)
            assert fenced["error_code"] == "PRODUCER_FENCED", fenced
            ack = await produce(ws, 5, [{"value": "plain"}], transactional_id=None)
            assert ack["type"] == "error"  # producer id and epoch without an id: refused
            await send(ws, {"id": 6, "topic": "wtx", "records": [{"value": "plain"}]})
            assert (await recv(ws))["type"] == "ack"  # the socket still serves
        assert values(broker, "wtx", "read_committed") == ["a", "b", "plain"]

    asyncio.run(main())


def test_a_resent_ws_message_with_its_sequence_is_written_once(broker: LiveBroker) -> None:
    # A client that lost an ack (its socket dropped, a leader died) resends the message:
    # with base_sequence the transaction holds it once, answered with the first offsets.
    broker.create_topic("wtx-seq")
    with broker.http() as h:
        r = h.post("/producers", json={"transactional_id": "ws-tx-seq"})
        assert r.status_code == 200, r.text
        pid, epoch = r.json()["producer_id"], r.json()["producer_epoch"]
    txn = {"transactional_id": "ws-tx-seq", "producer_id": pid, "producer_epoch": epoch}

    async def produce(ws: Any, rid: int, records: list[Any], **extra: Any) -> Any:
        message = {"id": rid, "topic": "wtx-seq", "partition": 0, "records": records}
        await send(ws, {**message, **txn, **extra})
        return await recv(ws)

    async def main() -> None:
        async with connect(broker.ws_url("/ws/produce")) as ws:
            first = await produce(ws, 1, [{"value": "a"}, {"value": "b"}], base_sequence=0)
            assert first["type"] == "ack", first
        async with connect(broker.ws_url("/ws/produce")) as ws:  # a new socket resends
            again = await produce(ws, 1, [{"value": "a"}, {"value": "b"}], base_sequence=0)
            assert again["type"] == "ack", again
            assert [o["offset"] for o in again["offsets"]] == [
                o["offset"] for o in first["offsets"]
            ]
            gap = await produce(ws, 2, [{"value": "c"}], base_sequence=5)
            assert gap["error_code"] == "OUT_OF_ORDER_SEQUENCE_NUMBER", gap
            # Outside a transaction there is no batch to number: refused, nothing written.
            await send(
                ws, {"id": 3, "topic": "wtx-seq", "records": [{"value": "x"}], "base_sequence": 0}
            )
            refused = await recv(ws)
            assert refused["error_code"] == "INVALID_REQUEST", refused
            assert "inside a transaction only" in refused["message"], refused
        end(broker, "ws-tx-seq", pid, epoch, "commit")
        assert values(broker, "wtx-seq", "read_committed") == ["a", "b"]

    asyncio.run(main())
