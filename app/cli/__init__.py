"""``logbus``: run a broker, manage topics and groups, produce from stdin, consume to stdout.

Every client command talks to the HTTP API (openapi/openapi.json) at ``--url`` (default
``$LOGBUS_URL`` or ``http://127.0.0.1:8080``). A failure prints the server's
``error_code`` and message and exits non-zero:

    0  success
    1  the broker answered with an error, or could not be reached
    2  bad command line or settings

Here: ``serve``, ``topics``, ``produce``, ``groups``, the parser and :func:`main`;
``consume`` is :mod:`app.cli.consume`, ``transactions`` :mod:`app.cli.transactions`,
``schemas`` :mod:`app.cli.schemas`, the broker session (an :class:`app.client.Admin`
for topics, groups and offsets) and error reporting :mod:`app.cli.base`; ``perf`` is
:mod:`app.perf`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import select
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, NoReturn

from app.cli.base import (
    Api,
    CliError,
    cli_auth,
    command_group,
    error_message,
    print_json,
    separator,
)
from app.cli.consume import cmd_consume
from app.client import Producer
from app.client.admin import ResetTo
from app.common import tls
from app.common.errors import LogbusError

__all__ = ["CliError", "build_parser", "main", "read_line_batches"]

DEFAULT_URL = "http://127.0.0.1:8080"
# A pipe of many lines goes out in full requests; a person typing waits this
# long at most before the lines typed so far are sent.
PRODUCE_LINGER_SECONDS = 0.05
STDIN_READ_BYTES = 1 << 20
# The server caps a long poll at 60 s; the client waits a little longer so the
# server, not the socket timeout, decides when an empty poll ends.
HTTP_TIMEOUT_SLACK_SECONDS = 10.0


# ---------------------------------------------------------------- serve


def cmd_serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from app.api.server import run
    from app.config import Settings

    # A serve flag named after a setting overrides it (None: not given), so a setting's
    # flag is declared once, in the parser; the others (--config, --no-zerocopy,
    # --log-level, --access-log) are the command's own.
    overrides = {k: v for k, v in vars(args).items() if k in Settings.model_fields}
    try:
        settings = Settings.load(args.config, **overrides)
    except (ValidationError, LogbusError, OSError, ValueError) as exc:
        raise CliError(f"invalid settings: {exc}", code=2) from exc
    run(
        settings,
        zerocopy=False if args.no_zerocopy else None,
        log_level=args.log_level,
        access_log=args.access_log,
    )
    return 0


# ---------------------------------------------------------------- topics


def _parse_configs(pairs: Sequence[str]) -> dict[str, str]:
    configs: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliError(f"--config expects name=value, got {pair!r}", code=2)
        configs[name.strip()] = value.strip()
    return configs


def cmd_topics_create(api: Api, args: argparse.Namespace) -> int:
    created = api.admin.create_topic(
        args.name,
        args.partitions,
        replication_factor=args.replication_factor,
        configs=_parse_configs(args.config),
    )
    print(f"Created topic {args.name} with {len(created.partitions)} partition(s).")
    return 0


def cmd_topics_list(api: Api, args: argparse.Namespace) -> int:
    topics = api.admin.list_topics()
    if args.json:
        print_json({"topics": [{"name": n, "partitions": c} for n, c in topics.items()]})
        return 0
    for name in topics:
        print(name)
    return 0


def cmd_topics_describe(api: Api, args: argparse.Namespace) -> int:
    topic = api.admin.describe_topic(args.name)
    if args.json:
        print_json(dataclasses.asdict(topic))
        return 0
    overrides = topic.config_overrides
    print(f"Topic: {topic.name}\tPartitions: {len(topic.partitions)}")
    if overrides:
        print("Configs: " + ", ".join(f"{k}={v}" for k, v in sorted(overrides.items())))
    for p in topic.partitions:
        print(
            f"\tPartition: {p.partition}\tLeader: {p.leader}"
            f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
            f"\tLogStartOffset: {p.log_start_offset}"
            f"\tHighWatermark: {p.high_watermark}"
            f"\tLogEndOffset: {p.log_end_offset}"
        )
    return 0


def _ids(ids: Any) -> str:
    return ",".join(str(i) for i in ids) if isinstance(ids, list) else str(ids)


def cmd_topics_delete(api: Api, args: argparse.Namespace) -> int:
    api.admin.delete_topic(args.name)
    print(f"Deleted topic {args.name}.")
    return 0


# ---------------------------------------------------------------- produce


def read_line_batches(
    stream: BinaryIO, max_lines: int, linger: float = PRODUCE_LINGER_SECONDS
) -> Iterator[list[bytes]]:
    """Lines of ``stream`` (without their newline) in lists of at most ``max_lines``.

    A list is handed out early when ``linger`` passes without new input, so
    an interactive producer's lines do not wait for a full request.
    """
    fd = stream.fileno()
    pending = b""
    batch: list[bytes] = []
    eof = False
    while not eof:
        if batch and not select.select([fd], [], [], linger)[0]:
            yield batch
            batch = []
            continue
        chunk = os.read(fd, STDIN_READ_BYTES)
        if not chunk:
            eof = True
            if pending:
                batch.append(pending)
                pending = b""
        else:
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            batch.extend(lines)
        while len(batch) >= max_lines:
            yield batch[:max_lines]
            batch = batch[max_lines:]
    if batch:
        yield batch


def _record(line: bytes, number: int, sep: str | None) -> dict[str, str]:
    """``{"key", "value"}`` of one stdin line: the key before the first ``sep``, if any."""
    if line.endswith(b"\r"):
        line = line[:-1]
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"line {number} is not UTF-8 text: {exc}") from exc
    if sep is not None:
        key, found, value = text.partition(sep)
        if found:
            return {"key": key, "value": value}
    return {"value": text}


@dataclass
class _Span:
    first: int
    last: int
    count: int


def cmd_produce(api: Api, args: argparse.Namespace) -> int:
    """Stdin lines through :class:`app.client.Producer`: each list of lines
    :func:`read_line_batches` hands out is sent and acknowledged before the next is read,
    so ``--batch-size`` bounds a request and a typed line goes out after the linger."""
    sep = separator(args.key_separator)
    config: dict[str, Any] = {
        "linger_ms": 0,
        "request_timeout_ms": int(api.timeout * 1000),
        "auth": api.auth,
    }
    if args.acks is not None:
        config["acks"] = args.acks
    spans: dict[int, _Span] = {}
    total = 0
    try:
        with Producer(api.url, **config) as producer:
            for lines in read_line_batches(sys.stdin.buffer, args.batch_size):
                records = [_record(line, total + i + 1, sep) for i, line in enumerate(lines)]
                futures = [
                    producer.send(
                        args.topic,
                        r["value"].encode(),
                        key=r["key"].encode() if "key" in r else None,
                        partition=args.partition,
                    )
                    for r in records
                ]
                producer.flush()
                for future in futures:
                    meta = future.result()
                    total += 1
                    if meta.offset < 0:
                        continue  # acks=0: the broker does not say where
                    span = spans.get(meta.partition)
                    if span is None:
                        spans[meta.partition] = _Span(meta.offset, meta.offset, 1)
                    else:
                        span.first = min(span.first, meta.offset)
                        span.last = max(span.last, meta.offset)
                        span.count += 1
    finally:
        _produce_summary(args.topic, total, spans)
    return 0


def _produce_summary(topic: str, total: int, spans: dict[int, _Span]) -> None:
    detail = "; ".join(
        f"partition {p}: {s.count} at offsets {s.first}-{s.last}" for p, s in sorted(spans.items())
    )
    line = f"Produced {total} record(s) to {topic}"
    print(line + (f" ({detail})" if detail else ""), file=sys.stderr)


# ---------------------------------------------------------------- groups


def cmd_groups_list(api: Api, args: argparse.Namespace) -> int:
    groups = api.admin.list_groups()
    if args.json:
        print_json({"groups": [dataclasses.asdict(g) for g in groups]})
        return 0
    if groups:
        width = max(5, *(len(g.group) for g in groups))
        print(f"{'GROUP':<{width}}  {'STATE':<12} MEMBERS")
        for g in groups:
            print(f"{g.group:<{width}}  {g.state:<12} {g.members}")
    return 0


def cmd_groups_describe(api: Api, args: argparse.Namespace) -> int:
    desc = api.admin.describe_group(args.group)
    if args.json:
        print_json(desc)
        return 0
    print(
        f"Group: {desc['group']}\tState: {desc['state']}\tEpoch: {desc['group_epoch']}"
        f"\tAssignor: {desc['assignor']}\tMembers: {len(desc['members'])}"
    )
    if args.members:
        _print_members(desc["members"])
        return 0
    owner: dict[tuple[str, int], str] = {}
    for m in desc["members"]:
        for a in m["assignment"]:
            for p in a["partitions"]:
                owner[(a["topic"], p)] = m["member_id"]
    rows = []
    seen = set()
    for o in desc["offsets"]:
        tp = (o["topic"], o["partition"])
        seen.add(tp)
        lag = "-" if o["lag"] is None else o["lag"]
        end = "-" if o["high_watermark"] is None else o["high_watermark"]
        rows.append((o["topic"], o["partition"], o["offset"], end, lag, owner.get(tp, "-")))
    for tp, member in sorted(owner.items()):
        if tp not in seen:
            rows.append((tp[0], tp[1], "-", "-", "-", member))
    rows.sort(key=lambda r: (str(r[0]), int(r[1])))
    header = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID")
    table = [header, *[tuple(str(c) for c in r) for r in rows]]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _print_members(members: list[dict[str, Any]]) -> None:
    header = ("MEMBER-ID", "INSTANCE-ID", "EPOCH", "STATE", "ASSIGNMENT")
    rows = [header]
    for m in members:
        parts = ",".join(f"{a['topic']}-{p}" for a in m["assignment"] for p in a["partitions"])
        rows.append(
            (
                m["member_id"],
                m["instance_id"] or "-",
                str(m["member_epoch"]),
                m["state"],
                parts or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def cmd_groups_delete(api: Api, args: argparse.Namespace) -> int:
    api.admin.delete_group(args.group)
    print(f"Deleted group {args.group}.")
    return 0


def parse_datetime_ms(text: str) -> int:
    """Milliseconds since the epoch from digits or ISO 8601 (no zone given = UTC)."""
    from datetime import UTC, datetime

    if text.isascii() and text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(
            f"--to-datetime expects ISO 8601 (2024-01-31T12:00:00[+01:00]) or ms, got {text!r}",
            code=2,
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def cmd_groups_reset_offsets(api: Api, args: argparse.Namespace) -> int:
    partitions = None
    if args.partitions:
        try:
            partitions = [int(p) for p in args.partitions.split(",") if p.strip()]
        except ValueError:
            raise CliError(f"--partitions expects 0,1,2 got {args.partitions!r}", code=2) from None
    to: ResetTo
    value = None
    if args.to_earliest:
        to = "earliest"
    elif args.to_latest:
        to = "latest"
    elif args.to_datetime is not None:
        to, value = "timestamp", parse_datetime_ms(args.to_datetime)
    else:
        to, value = "offset", args.to_offset
    offsets = api.admin.reset_group_offsets(
        args.group, args.topic, to, value, partitions=partitions
    )
    print("TOPIC  PARTITION  NEW-OFFSET")
    for tp, offset in offsets.items():
        print(f"{tp.topic}  {tp.partition}  {offset}")
    return 0


def _env_url() -> str:
    return os.environ.get("LOGBUS_URL") or DEFAULT_URL


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="logbus", description="Logbus: a Kafka-style commit log over HTTP."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    client = argparse.ArgumentParser(add_help=False)
    client.add_argument(
        "--url",
        default=_env_url(),
        help="broker URL (default: $LOGBUS_URL or %(default)s)",
    )
    client.add_argument(
        "--ca-file",
        metavar="PEM",
        help="CA bundle that signs an https broker's certificate "
        "(default: $LOGBUS_CLIENT_CA_FILE, else public roots); verification is always on",
    )
    client.add_argument(
        "--cert",
        metavar="PEM",
        help="client certificate for mutual TLS (default: $LOGBUS_CLIENT_CERT_FILE)",
    )
    client.add_argument(
        "--key", metavar="PEM", help="its private key (default: $LOGBUS_CLIENT_KEY_FILE)"
    )

    serve = commands.add_parser(
        "serve",
        help="run a broker",
        description="Run a broker. Flags override LOGBUS_* environment variables, "
        "which override the --config file (TOML or JSON).",
    )
    serve.add_argument("--data-dir", help="where the logs live (LOGBUS_DATA_DIR)")
    serve.add_argument("--host", help="address to listen on (LOGBUS_HOST)")
    serve.add_argument("--port", type=int, help="port to listen on (LOGBUS_PORT)")
    serve.add_argument("--broker-id", type=int, help="this broker's id (LOGBUS_BROKER_ID)")
    serve.add_argument(
        "--advertised-url",
        metavar="URL",
        help="URL clients and other brokers use to reach this one (LOGBUS_ADVERTISED_URL)",
    )
    serve.add_argument(
        "--zookeeper",
        metavar="HOSTS[/CHROOT]",
        help="join a cluster coordinated by this ZooKeeper ensemble (LOGBUS_ZOOKEEPER); "
        "without it the broker runs alone",
    )
    serve.add_argument(
        "--ssl-certfile",
        metavar="PEM",
        help="serve https/wss with this certificate chain (LOGBUS_SSL_CERTFILE)",
    )
    serve.add_argument("--ssl-keyfile", metavar="PEM", help="its key (LOGBUS_SSL_KEYFILE)")
    serve.add_argument(
        "--ssl-ca-file", metavar="PEM", help="CA of client certificates (LOGBUS_SSL_CA_FILE)"
    )
    serve.add_argument(
        "--ssl-client-auth",
        choices=["none", "requested", "required"],
        help="ask for client certificates (LOGBUS_SSL_CLIENT_AUTH)",
    )
    serve.add_argument(
        "--allow-unauthenticated-network",
        action="store_true",
        default=None,
        help="serve a non-loopback address with no authentication: anyone who reaches the "
        "port can read, write and delete everything (LOGBUS_ALLOW_UNAUTHENTICATED_NETWORK)",
    )
    serve.add_argument(
        "--kafka-listener",
        metavar="HOST:PORT",
        help="also serve Kafka's binary protocol here (LOGBUS_KAFKA_LISTENER)",
    )
    serve.add_argument(
        "--kafka-advertised-listener",
        metavar="HOST:PORT",
        help="where Kafka clients are told to connect (LOGBUS_KAFKA_ADVERTISED_LISTENER)",
    )
    serve.add_argument(
        "--kafka-security-protocol",
        choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
        help="the Kafka listener's security protocol, as Kafka's listeners "
        "(LOGBUS_KAFKA_SECURITY_PROTOCOL; default PLAINTEXT)",
    )
    serve.add_argument("--config", metavar="FILE", help="settings file (LOGBUS_CONFIG)")
    serve.add_argument(
        "--no-zerocopy",
        action="store_true",
        help="send fetched batches with pread+write instead of sendfile (LOGBUS_ZEROCOPY=0)",
    )
    serve.add_argument("--log-level", default="info", help="uvicorn log level (%(default)s)")
    serve.add_argument("--access-log", action="store_true", help="log every request")
    serve.set_defaults(handler=cmd_serve)

    topic_commands = command_group(commands, "topics", "create, list, describe and delete topics")
    create = topic_commands.add_parser("create", parents=[client], help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, help="partition count (broker default)")
    create.add_argument("--replication-factor", type=int)
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="topic config override, Kafka names (repeatable), e.g. retention.ms=60000",
    )
    create.set_defaults(client_handler=cmd_topics_create)
    listing = topic_commands.add_parser("list", parents=[client], help="list topic names")
    listing.add_argument("--json", action="store_true", help="print the API's JSON answer")
    listing.set_defaults(client_handler=cmd_topics_list)
    describe = topic_commands.add_parser("describe", parents=[client], help="describe a topic")
    describe.add_argument("name")
    describe.add_argument("--json", action="store_true", help="print the API's JSON answer")
    describe.set_defaults(client_handler=cmd_topics_describe)
    delete = topic_commands.add_parser("delete", parents=[client], help="delete a topic")
    delete.add_argument("name")
    delete.set_defaults(client_handler=cmd_topics_delete)

    produce = commands.add_parser(
        "produce",
        parents=[client],
        help="produce stdin lines as records",
        description="Each stdin line is a record value; with --key-separator, the text "
        "before the first separator is the key.",
    )
    produce.add_argument("topic")
    produce.add_argument("--partition", type=int, help="one partition (default: partitioner)")
    produce.add_argument(
        "--key-separator", metavar="SEP", help="split key SEP value (TAB, SPACE, COMMA or text)"
    )
    produce.add_argument(
        "--batch-size", type=int, default=1000, help="lines per request (%(default)s)"
    )
    produce.add_argument("--acks", choices=["0", "1", "all", "-1"], help="broker default if unset")
    produce.set_defaults(client_handler=cmd_produce)

    consume = commands.add_parser(
        "consume", parents=[client], help="print record values, one per line"
    )
    consume.add_argument("topic")
    consume.add_argument("--partition", type=int, help="one partition (default: all)")
    consume.add_argument(
        "--from",
        dest="start",
        default="earliest",
        metavar="earliest|latest|OFFSET",
        help="where to start (%(default)s)",
    )
    consume.add_argument("--follow", "-f", action="store_true", help="wait for new records")
    consume.add_argument("--max-records", type=int, metavar="N", help="stop after N records")
    consume.add_argument("--print-key", action="store_true", help="print key SEP value")
    consume.add_argument("--key-separator", metavar="SEP", help="with --print-key (TAB)")
    consume.add_argument(
        "--max-bytes", type=int, default=1 << 20, help="bytes per fetch (%(default)s)"
    )
    consume.add_argument(
        "--max-wait-ms", type=int, default=30_000, help="long-poll wait with --follow"
    )
    consume.add_argument(
        "--group",
        metavar="GROUP",
        help="consume as a member of GROUP: the group assigns partitions, offsets are committed "
        "(with --ws the socket is the member)",
    )
    consume.add_argument(
        "--ws", action="store_true", help="consume over the WebSocket push API (/ws/subscribe)"
    )
    consume.add_argument(
        "--isolation-level",
        choices=["read_uncommitted", "read_committed"],
        default="read_uncommitted",
        help="read_committed: only committed transactions, up to the last stable offset "
        "(%(default)s)",
    )
    consume.set_defaults(client_handler=cmd_consume)

    group_commands = command_group(
        commands, "groups", "list, describe, delete groups; reset offsets"
    )
    glist = group_commands.add_parser("list", parents=[client], help="list groups")
    glist.add_argument("--json", action="store_true", help="print the API's JSON answer")
    glist.set_defaults(client_handler=cmd_groups_list)
    gdescribe = group_commands.add_parser(
        "describe", parents=[client], help="members, offsets and lag of a group"
    )
    gdescribe.add_argument("group")
    gdescribe.add_argument("--json", action="store_true", help="print the API's JSON answer")
    gdescribe.add_argument(
        "--members", action="store_true", help="members and their assignments, not offsets"
    )
    gdescribe.set_defaults(client_handler=cmd_groups_describe)
    gdelete = group_commands.add_parser("delete", parents=[client], help="delete an empty group")
    gdelete.add_argument("group")
    gdelete.set_defaults(client_handler=cmd_groups_delete)
    reset = group_commands.add_parser(
        "reset-offsets", parents=[client], help="reset an empty group's offsets on a topic"
    )
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    reset.add_argument("--partitions", metavar="0,1,...", help="default: every partition")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument(
        "--to-datetime", metavar="ISO8601|MS", help="first offset at or after this time"
    )
    to.add_argument("--to-offset", type=int, metavar="N", help="clamped to the log's range")
    reset.set_defaults(client_handler=cmd_groups_reset_offsets)

    from app.cli.security import register as register_security
    from app.cli.security import register_quotas
    from app.perf import register as register_perf

    register_security(commands, client)
    register_quotas(commands, client)
    from app.cli.transactions import register as register_transactions

    register_transactions(commands, client)
    from app.cli.schemas import register as register_schemas

    register_schemas(commands, client)

    register_perf(commands, client)
    return parser


def _fail(message: str, code: int) -> NoReturn:
    print(f"logbus: {message}", file=sys.stderr)
    raise SystemExit(code)


def _configure_tls(args: argparse.Namespace) -> None:
    """--ca-file/--cert/--key over the LOGBUS_CLIENT_* environment, for every connection."""
    env = tls.ClientTls.from_env()
    try:
        tls.configure(
            args.ca_file or env.ca_file,
            args.cert or env.cert_file,
            args.key or env.key_file,
        )
    except (OSError, ValueError) as exc:
        raise CliError(f"TLS options: {exc}", code=2) from exc


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "max_records", None) is not None and args.max_records < 1:
        parser.error("--max-records must be >= 1")
    if getattr(args, "batch_size", 1) < 1:
        parser.error("--batch-size must be >= 1")
    try:
        if hasattr(args, "client_handler"):
            timeout = max(30.0, getattr(args, "max_wait_ms", 0) / 1000 + HTTP_TIMEOUT_SLACK_SECONDS)
            _configure_tls(args)
            api = Api(args.url, timeout=timeout, auth=cli_auth())
            try:
                code: int = args.client_handler(api, args)
            finally:
                api.close()
        else:
            code = args.handler(args)
    except CliError as exc:
        _fail(exc.message, exc.code)
    except LogbusError as exc:
        _fail(error_message(exc), 1)
    except BrokenPipeError:
        # `logbus consume ... | head`: the reader left; that is not an error.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 0
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
