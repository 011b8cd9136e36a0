"""What every ``logbus`` client command shares: the broker session, the error the
command line reports, and the small parsers of options more than one command takes.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias

from app.client import Admin, TopicPartition
from app.client.auth import Auth, BasicAuth, BearerAuth
from app.client.errors import BrokerUnavailable, ClientError, NetworkTimeout, ServerError
from app.common.errors import LogbusError


class CliError(Exception):
    """A failure to report as ``logbus: <message>`` with exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Api:
    """The broker at ``--url``, through the SDK: :class:`app.client.Admin` for topics,
    groups and offsets; ``produce`` and ``consume`` open a :class:`app.client.Producer`
    or :class:`app.client.Consumer` on ``url`` with ``timeout`` as their request timeout.

    Failures are the SDK's errors (:mod:`app.client.errors`); :func:`main` prints them.
    """

    def __init__(self, url: str, timeout: float = 30.0, auth: Auth = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.auth = auth
        self.admin = Admin(self.url, request_timeout_ms=int(timeout * 1000), auth=auth)

    def close(self) -> None:
        self.admin.close()


def cli_auth() -> Auth:
    """Credentials for a secured broker, from the environment (never from flags, which
    ``ps`` shows): ``LOGBUS_TOKEN`` (a bearer JWT), or ``LOGBUS_USER`` with
    ``LOGBUS_PASSWORD``."""
    token = os.environ.get("LOGBUS_TOKEN")
    if token:
        return BearerAuth(token.strip())
    user = os.environ.get("LOGBUS_USER")
    if user:
        return BasicAuth(user, os.environ.get("LOGBUS_PASSWORD", ""))
    return None


def error_message(exc: LogbusError) -> str:
    """``ERROR_CODE: message [(retriable)]`` for a broker's answer; the SDK's own message
    when no broker answered (unreachable, timed out) or the answer was not an error body."""
    if isinstance(exc, BrokerUnavailable | NetworkTimeout | ClientError) or (
        isinstance(exc, ServerError) and exc.message.startswith("HTTP ")
    ):
        return exc.message
    message = f"{exc.error_code}: {exc.message}"
    if exc.retriable:
        message += " (retriable)"
    return message


def separator(raw: str | None) -> str | None:
    """``--key-separator`` as text: TAB, SPACE, COMMA, ``\\t``, ``\\n`` or itself."""
    if raw is None:
        return None
    named = {"TAB": "\t", "\\t": "\t", "SPACE": " ", "COMMA": ",", "\\n": "\n"}
    sep = named.get(raw, raw)
    if not sep:
        raise CliError("--key-separator must not be empty", code=2)
    return sep


def start_offset(
    api: Api, topic: str, partition: int, start: str, isolation_level: str = "read_uncommitted"
) -> int:
    """``--from``: earliest, latest (looked up at the partition's leader; under
    ``read_committed`` the last stable offset) or an offset."""
    if start in ("earliest", "latest"):
        tp = TopicPartition(topic, partition)
        found = api.admin.list_offsets([tp], start, isolation_level=isolation_level)[tp]
        # earliest and latest always name an offset (the log start, the high watermark).
        assert found is not None
        return found.offset
    try:
        offset = int(start)
    except ValueError as exc:
        raise CliError(f"--from expects earliest, latest or an offset, got {start!r}", 2) from exc
    if offset < 0:
        raise CliError("--from offset must be >= 0", code=2)
    return offset


def print_json(value: Any) -> None:
    import json

    print(json.dumps(value, indent=2, sort_keys=True))


# ``logbus``'s (or a command group's) subcommands, as each module's ``register`` gets them.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def command_group(commands: Commands, name: str, help: str) -> Commands:
    """``logbus NAME ACTION ...``: a command whose actions are subcommands (the chosen
    one in ``args.<name>_command``)."""
    group = commands.add_parser(name, help=help)
    actions: Commands = group.add_subparsers(
        dest=f"{name}_command", required=True, metavar="ACTION"
    )
    return actions


def client_actions(
    commands: Commands,
    name: str,
    help: str,
    client: argparse.ArgumentParser,
    actions: Sequence[tuple[str, str]],
    handler: Callable[[Api, argparse.Namespace], int],
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """A :func:`command_group` whose ``(action, help)`` subcommands all talk to the broker
    (``client``'s options) through one ``handler``; yields each action's parser for its
    own options."""
    sub = command_group(commands, name, help)
    for action, text in actions:
        p = sub.add_parser(action, parents=[client], help=text)
        p.set_defaults(client_handler=handler)
        yield action, p
