"""``logbus transactions list|describe|abort`` and ``logbus consume --isolation-level``
against a real in-process broker, with an open transaction of the SDK's producer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_broker import LiveBroker, live_broker

from app.cli import main
from app.client import Producer
from app.common.errors import LogbusError


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LiveBroker]:
    with live_broker(tmp_path) as b:
        yield b


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_transactions_commands_and_isolated_consume(
    broker: LiveBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--url", broker.url]
    broker.create_topic("cli-orders")
    with Producer(broker.url, transactional_id="cli-tx", linger_ms=1) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("cli-orders", b"pending")
        p.flush()

        listed = run(capsys, "transactions", "list", *url)
        assert listed.splitlines()[0].split() == ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"]
        assert listed.splitlines()[1].split()[::2] == ["cli-tx", "Ongoing"]
        assert run(capsys, "transactions", "list", *url, "--state", "CompleteCommit") == ""
        only = json.loads(run(capsys, "transactions", "list", *url, "--state", "Ongoing", "--json"))
        assert [t["transactional_id"] for t in only["transaction_states"]] == ["cli-tx"]
        described = run(capsys, "transactions", "describe", "cli-tx", *url).splitlines()
        assert described[1].split()[4] == "Ongoing" and described[1].endswith("cli-orders-0")

        # The open transaction holds a read_committed reader at its first offset. (Short
        # long polls: the consumer leaves its prefetch to time out at the broker.)
        consume = ["consume", "cli-orders", *url, "--max-wait-ms", "200"]
        assert run(capsys, *consume) == "pending\n"
        committed = [*consume, "--isolation-level", "read_committed"]
        assert run(capsys, *committed) == ""

        aborted = run(capsys, "transactions", "abort", "cli-tx", *url)
        assert aborted == "Aborted the transaction of cli-tx: CompleteAbort.\n"
        desc = json.loads(run(capsys, "transactions", "describe", "cli-tx", *url, "--json"))
        assert desc["transaction_state"] == "CompleteAbort"
        assert run(capsys, *committed) == ""
        # Its producer finds the transaction gone.
        with pytest.raises(LogbusError):
            p.commit_transaction()

    with pytest.raises(SystemExit) as exited:
        main(["transactions", "describe", "no-such-id", *url])
    assert exited.value.code == 1
    assert "TRANSACTIONAL_ID_NOT_FOUND" in capsys.readouterr().err
