"""A consume-transform-produce copier over Logbus's plain HTTP API (Kafka's
TransactionalMessageCopier, the app of its exactly-once system test), with httpx only.

    python tests/e2e/copier/http_copier.py --url URL[,URL2,...] --input IN --output OUT \
        --group G --transactional-id TID [--max-batch 200]

Loops until killed. Each round:

1. ``POST /producers`` with the transactional id (InitProducerId) when it has no producer
   yet: that fences its previous incarnation and aborts what it left open, so the
   group's committed offsets read next are the last committed transaction's;
2. finds the group's coordinator (``POST /coordinator``) and reads the group's committed
   positions there (``GET /groups/G/offsets`` with ``require_stable``: KIP-447's
   UNSTABLE_OFFSET_COMMIT, retried, while a transaction's offsets are pending), then IN
   from them
   with ``isolation_level=read_committed`` (keys and values as base64: bytes unchanged);
3. in one transaction: adds the output partitions (AddPartitionsToTxn), produces each
   record to the same partition number of OUT (JSON produce inside the transaction, one
   request per partition numbered with ``base_sequence``, so that a retry of a request
   whose answer was lost is written once), commits the group's new positions
   (AddOffsetsToTxn + TxnOffsetCommit), commits.

On an error it aborts (or, fenced, initializes again), and rewinds to the committed
positions: what a read_committed reader of OUT sees is each input record exactly once.

With several URLs (a cluster) requests follow the brokers' hints: 307/421
NOT_LEADER_OR_FOLLOWER names a partition's leader (``leader_url``), 421 NOT_COORDINATOR
the coordinator of the group or of the transactional id (``coordinator_url``); a broker
that does not answer is replaced by the next URL of the list.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any

import httpx

RETRY_SLEEP_SECONDS = 0.1
HOPS = 4  # hints followed per request before trying again from the start


class Retry(Exception):
    """Retriable: the request is tried again after a pause (same transaction)."""


class Failed(Exception):
    """The transaction cannot go on: abort it and rewind."""

    def __init__(self, response: httpx.Response | None, what: str) -> None:
        self.code = _code(response) if response is not None else "TRANSPORT"
        text = response.text[:300] if response is not None else ""
        super().__init__(f"{what}: {self.code} {text}")


def _code(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error_code", response.status_code))
    except ValueError:
        return str(response.status_code)


class Brokers:
    """Requests routed by a key (a partition, a coordinator) to the broker that serves it,
    learnt from the brokers' hints; any broker of ``urls`` to begin with."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.http = httpx.Client(timeout=30)
        self.where: dict[tuple[Any, ...], str] = {}
        self._next = 0

    def _any(self) -> str:
        url = self.urls[self._next % len(self.urls)]
        self._next += 1
        return url

    def call(self, key: tuple[Any, ...], method: str, path: str, **kw: Any) -> httpx.Response:
        """The answer of the broker serving ``key`` (status < 300, or an error that is not
        a routing hint); Retry on transport errors and retriable answers."""
        url = self.where.get(key) or self._any()
        for _ in range(HOPS):
            try:
                r = self.http.request(method, url.rstrip("/") + path, **kw)
            except httpx.TransportError:
                self.where.pop(key, None)
                raise Retry(f"{url} did not answer") from None
            if r.status_code < 300:
                self.where[key] = url
                return r
            body = _json(r)
            hint = body.get("leader_url") or body.get("coordinator_url")
            if r.status_code in (307, 421) and hint:
                url = hint
                continue
            if body.get("retriable") or r.status_code in (307, 421, 502, 503, 504):
                self.where.pop(key, None)
                raise Retry(f"{method} {path}: {r.status_code} {r.text[:200]}")
            return r
        raise Retry(f"{method} {path}: no broker serves it yet")


def _json(r: httpx.Response) -> dict[str, Any]:
    try:
        body = r.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def retried(call: Any, deadline_s: float = 60.0) -> httpx.Response:
    """``call()`` again while it raises Retry (a broker restarting, a leader moving)."""
    deadline = time.monotonic() + deadline_s
    said = 0.0
    while True:
        try:
            r: httpx.Response = call()
            return r
        except Retry as exc:
            now = time.monotonic()
            if now > deadline:
                raise
            if now - said > 1:  # what it waits for, once a second
                print(f"retrying: {exc}", flush=True)
                said = now
            time.sleep(RETRY_SLEEP_SECONDS)


class Copier:
    def __init__(self, args: argparse.Namespace) -> None:
        self.brokers = Brokers([u for u in args.url.split(",") if u])
        self.input, self.output = args.input, args.output
        self.group, self.tid = args.group, args.transactional_id
        self.max_batch = args.max_batch
        self.timeout_ms = args.transaction_timeout_ms
        self.producer: dict[str, int] | None = None
        # The next sequence of this producer epoch in each output partition (0 at each
        # epoch, one per record): a produce retried after a lost answer is deduplicated.
        self.sequences: dict[int, int] = {}
        self.positions: dict[int, int] = {}
        self.copied = 0

    # -- coordinator calls -------------------------------------------------------------

    def _txn(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return retried(lambda: self.brokers.call(("txn",), method, path, **kw))

    def init(self) -> None:
        r = self._txn(
            "POST",
            "/producers",
            json={"transactional_id": self.tid, "transaction_timeout_ms": self.timeout_ms},
        )
        if r.status_code != 200:
            raise Failed(r, "init")
        self.producer = {k: r.json()[k] for k in ("producer_id", "producer_epoch")}
        self.sequences = {}
        # FindCoordinator (in a cluster the first call creates __consumer_offsets).
        r = retried(
            lambda: self.brokers.call(("any",), "POST", "/coordinator", json={"key": self.group})
        )
        if r.status_code != 200:
            raise Failed(r, "find coordinator")
        self.brokers.where[("group",)] = r.json()["url"]
        # The previous incarnation's transaction is complete (committed or aborted) once
        # InitProducerId answered; require_stable (KIP-447, as a transactional Kafka
        # consumer) waits for any transaction's offsets still pending on the partitions.
        r = retried(
            lambda: self.brokers.call(
                ("group",),
                "GET",
                f"/groups/{self.group}/offsets",
                params={"topic": self.input, "require_stable": "true"},
            )
        )
        if r.status_code != 200:
            raise Failed(r, "offsets")
        self.positions = {o["partition"]: max(0, o["offset"]) for o in r.json()["offsets"]}
        print(f"init {self.producer} positions {self.positions}", flush=True)

    def end(self, commit: bool) -> None:
        what = "commit" if commit else "abort"
        r = self._txn("POST", f"/transactions/{self.tid}/{what}", json=self.producer)
        if r.status_code != 200:
            raise Failed(r, what)

    # -- one transaction ---------------------------------------------------------------

    def read(self) -> tuple[dict[int, list[dict[str, Any]]], dict[int, int]]:
        """Records from the positions (at most max_batch in all) and the positions after."""
        taken: dict[int, list[dict[str, Any]]] = {}
        after = dict(self.positions)
        budget = self.max_batch
        for p in sorted(self.positions):
            if budget <= 0:
                break
            r = retried(
                lambda p=p: self.brokers.call(
                    ("leader", self.input, p),
                    "GET",
                    f"/topics/{self.input}/partitions/{p}/records",
                    params={
                        "offset": self.positions[p],
                        "isolation_level": "read_committed",
                        "key_format": "binary",
                        "value_format": "binary",
                        "max_wait_ms": 0,
                    },
                )
            )
            if r.status_code != 200:
                raise Failed(r, f"fetch {self.input}-{p}")
            body = r.json()
            records = body["records"][:budget]
            budget -= len(records)
            if len(records) < len(body["records"]):
                after[p] = records[-1]["offset"] + 1
            else:
                after[p] = max(after[p], body["next_offset"])
            if records:
                taken[p] = records
        return taken, after

    def transaction(self) -> int:
        """Copy one batch in one transaction; the records copied (0: nothing to copy)."""
        taken, after = self.read()
        if after == self.positions:
            return 0
        # (Nothing taken but positions moved: only markers or aborted records were
        # passed; the transaction then holds the offsets alone.)
        assert self.producer is not None
        tid = self.tid
        if taken:
            r = self._txn(
                "POST",
                f"/transactions/{tid}/partitions",
                json={
                    **self.producer,
                    "topics": [{"topic": self.output, "partitions": sorted(taken)}],
                },
            )
            if r.status_code != 200:
                raise Failed(r, "add partitions")
        for p, records in sorted(taken.items()):
            body = {
                "key_format": "binary",
                "value_format": "binary",
                "records": [
                    {"key": x["key"], "value": x["value"], "partition": p} for x in records
                ],
            }
            params = {**self.producer, "base_sequence": self.sequences.get(p, 0)}
            tries = [0]

            def produce(
                p: int = p, body: Any = body, params: Any = params, tries: list[int] = tries
            ) -> httpx.Response:
                tries[0] += 1
                return self.brokers.call(
                    ("leader", self.output, p),
                    "POST",
                    f"/transactions/{tid}/topics/{self.output}/records",
                    params=params,
                    json=body,
                )

            r = retried(produce)
            if r.status_code != 200:
                raise Failed(r, f"produce {self.output}-{p}")
            if tries[0] > 1:  # for a failure's report: a retry the sequence deduplicates
                offsets = [o["offset"] for o in r.json()["offsets"]]
                print(
                    f"produce {self.output}-{p} {params} tried {tries[0]} times: "
                    f"offsets {offsets[0]}..{offsets[-1]}",
                    flush=True,
                )
            self.sequences[p] = (params["base_sequence"] + len(records)) & 0x7FFFFFFF
        offsets = [
            {"topic": self.input, "partition": p, "offset": o}
            for p, o in sorted(after.items())
            if o != self.positions.get(p)
        ]
        r = self._txn(
            "POST", f"/transactions/{tid}/groups", json={**self.producer, "group_id": self.group}
        )
        if r.status_code != 200:
            raise Failed(r, "add offsets")
        r = retried(
            lambda: self.brokers.call(
                ("group",),
                "POST",
                f"/transactions/{tid}/offsets",
                json={**self.producer, "group_id": self.group, "offsets": offsets},
            )
        )
        if r.status_code != 200:
            raise Failed(r, "offsets")
        self.end(commit=True)
        self.positions = after
        n = sum(len(v) for v in taken.values())
        self.copied += n
        return max(n, 1)

    def run(self) -> None:
        while True:
            try:
                if self.producer is None:
                    self.init()
                if self.transaction() == 0:
                    time.sleep(0.05)
            except (Failed, Retry) as exc:
                print(f"error: {exc}", flush=True)
                self.recover(exc)

    def recover(self, exc: Exception) -> None:
        """Abort what is open and start over from the committed positions; a fenced or
        unknown producer (or a coordinator that forgot it) initializes again."""
        fenced = isinstance(exc, Failed) and exc.code in (
            "PRODUCER_FENCED",
            "INVALID_PRODUCER_EPOCH",
            "INVALID_PRODUCER_ID_MAPPING",
            "TRANSACTIONAL_ID_NOT_FOUND",
        )
        if self.producer is not None and not fenced:
            try:
                self.end(commit=False)
            except (Failed, Retry) as again:
                print(f"abort failed: {again}", flush=True)
        # Re-reading the committed positions needs a stable view: InitProducerId again
        # (it aborts anything left open by this instance too).
        self.producer = None
        time.sleep(RETRY_SLEEP_SECONDS)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="broker URL(s), comma-separated")
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--max-batch", type=int, default=200, help="records per transaction")
    ap.add_argument("--transaction-timeout-ms", type=int, default=20_000)
    args = ap.parse_args(argv)
    copier = Copier(args)
    # The input's partitions: every one starts at the group's position, or 0.
    r = retried(lambda: copier.brokers.call(("any",), "GET", f"/topics/{args.input}"))
    if r.status_code != 200:
        sys.exit(f"input topic: {r.status_code} {r.text}")
    with contextlib.suppress(KeyboardInterrupt):
        copier.run()


if __name__ == "__main__":
    main()
