"""``logbus transactions list|describe|abort``: Kafka's kafka-transactions tool, through
:class:`app.client.Admin` (ListTransactions, DescribeTransactions, an abort as EndTxn).

``list`` and ``describe`` print a table (``--json``: the API's answer); ``abort`` ends a
transactional id's open transaction with the producer id and epoch it names, or the
current ones, and prints the outcome.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from app.cli.base import Api, Commands, client_actions, print_json


def _table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _partitions(desc: dict[str, Any]) -> str:
    return ",".join(f"{t['topic']}-{p}" for t in desc["topics"] for p in t["partitions"]) or "-"


def cmd_transactions(api: Api, args: argparse.Namespace) -> int:
    action = args.transactions_command
    if action == "list":
        listed = api.admin.list_transactions(
            args.state or (), args.producer_id or (), args.duration_ms
        )
        if args.json:
            print_json({"transaction_states": listed})
            return 0
        rows = [("TRANSACTIONAL-ID", "PRODUCER-ID", "STATE")]
        rows += [
            (t["transactional_id"], str(t["producer_id"]), t["transaction_state"]) for t in listed
        ]
        if listed:
            _table(rows)
        return 0
    if action == "describe":
        desc = api.admin.describe_transaction(args.transactional_id)
        if args.json:
            print_json(desc)
            return 0
        header = (
            "TRANSACTIONAL-ID",
            "COORDINATOR",
            "PRODUCER-ID",
            "PRODUCER-EPOCH",
            "STATE",
            "TIMEOUT-MS",
            "START-TIME-MS",
            "PARTITIONS",
        )
        row = (
            desc["transactional_id"],
            str(desc["coordinator"]),
            str(desc["producer_id"]),
            str(desc["producer_epoch"]),
            desc["transaction_state"],
            str(desc["transaction_timeout_ms"]),
            str(desc["transaction_start_time_ms"]),
            _partitions(desc),
        )
        _table([header, row])
        return 0
    ended = api.admin.abort_transaction(
        args.transactional_id, args.producer_id, args.producer_epoch
    )
    print(f"Aborted the transaction of {args.transactional_id}: {ended['transaction_state']}.")
    return 0


def register(commands: Commands, client: argparse.ArgumentParser) -> None:
    for action, p in client_actions(
        commands,
        "transactions",
        "list, describe and abort transactions (Kafka's kafka-transactions)",
        client,
        (
            ("list", "list transactional ids and their states"),
            ("describe", "describe a transactional id's transaction"),
            ("abort", "abort a transactional id's open transaction"),
        ),
        cmd_transactions,
    ):
        if action == "list":
            p.add_argument(
                "--state", action="append", help="only this state (Ongoing...; repeatable)"
            )
            p.add_argument(
                "--producer-id", type=int, action="append", help="only this producer (repeatable)"
            )
            p.add_argument(
                "--duration-ms", type=int, help="only transactions open longer than this"
            )
        else:
            p.add_argument("transactional_id")
        if action == "abort":
            p.add_argument(
                "--producer-id", type=int, help="the transaction's producer (default: current)"
            )
            p.add_argument("--producer-epoch", type=int, help="its epoch (default: current)")
        else:
            p.add_argument("--json", action="store_true", help="print the API's JSON answer")
