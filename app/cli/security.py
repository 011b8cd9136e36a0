"""``logbus users`` and ``logbus acls``: the users of Basic authentication and Kafka ACLs.

``users`` edits ``<data-dir>/users.json`` on the broker's machine (passwords are read
from the terminal or, with ``--password-stdin``, from standard input: never from the
command line, where ``ps`` and shell history would keep them). A running broker picks
the change up within a second.

``acls`` goes through the broker's ``/acls`` (the SDK's Admin), with the credentials of
a principal allowed to ALTER (add, remove) or DESCRIBE (list) the cluster: a super user,
typically. Flags follow ``kafka-acls.sh``: ``--allow-principal User:alice --operation
Read --topic orders``.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

from app.cli.base import Api, CliError, Commands, client_actions, command_group, print_json
from app.core.security.users import USERS_FILE, InvalidUser, UsersFile


def _users_file(args: argparse.Namespace) -> UsersFile:
    if args.users_file:
        return UsersFile(Path(args.users_file))
    data_dir = args.data_dir or os.environ.get("LOGBUS_DATA_DIR") or "./data"
    return UsersFile(Path(data_dir) / USERS_FILE)


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise CliError("the passwords differ", code=2)
    if len(password) < 8:
        raise CliError("a password has at least 8 characters", code=2)
    return password


def cmd_users(args: argparse.Namespace) -> int:
    users = _users_file(args)
    try:
        if args.users_command == "list":
            for name in sorted(users.read()):
                print(name)
        elif args.users_command == "add":
            users.add(args.name, _password(args))
        elif args.users_command == "passwd":
            users.passwd(args.name, _password(args))
        else:
            users.remove(args.name)
    except InvalidUser as exc:
        raise CliError(str(exc), code=1) from None
    return 0


def _resource(args: argparse.Namespace) -> tuple[str | None, str | None]:
    given = [
        (kind, name)
        for kind, name in (
            ("TOPIC", args.topic),
            ("GROUP", args.group),
            ("TRANSACTIONAL_ID", args.transactional_id),
            ("CLUSTER", "kafka-cluster" if args.cluster else None),
        )
        if name is not None
    ]
    if len(given) > 1:
        raise CliError("name one resource: --topic, --group, --transactional-id or --cluster", 2)
    return given[0] if given else (None, None)


def _upper(value: str | None) -> str | None:
    return None if value is None else value.upper().replace("-", "_")


def cmd_acls(api: Api, args: argparse.Namespace) -> int:
    rtype, name = _resource(args)
    pattern = _upper(args.resource_pattern_type)
    if args.acls_command == "add":
        principals = [(p, "ALLOW") for p in args.allow_principal or ()]
        principals += [(p, "DENY") for p in args.deny_principal or ()]
        if rtype is None or name is None or not principals or not args.operation:
            raise CliError(
                "acls add needs a resource, --allow-principal/--deny-principal and --operation",
                code=2,
            )
        acls = [
            {
                "resource_type": rtype,
                "resource_name": name,
                "pattern_type": pattern or "LITERAL",
                "principal": principal,
                "host": args.host,
                "operation": _upper(op) or "",
                "permission": permission,
            }
            for principal, permission in principals
            for op in args.operation
        ]
        print_json(api.admin.create_acls(acls))
        return 0
    # remove: one filter per principal and operation named, all in one DeleteAcls call
    # (kafka-acls.sh --remove does the same); list: one filter.
    names: list[str | None] = list(args.principal or [None])
    operations: list[str | None] = [_upper(op) for op in args.operation or [None]]
    filters: list[dict[str, str | None]] = [
        {
            "resource_type": rtype,
            "resource_name": name,
            "pattern_type": pattern,
            "principal": principal,
            "operation": op,
        }
        for principal in names
        for op in operations
    ]
    if args.acls_command == "list":
        if len(filters) > 1:
            raise CliError("acls list takes one --principal and one --operation", code=2)
        print_json(api.admin.describe_acls(**filters[0]))
    else:
        print_json(api.admin.delete_acls(filters))
    return 0


def register(commands: Commands, client: argparse.ArgumentParser) -> None:
    user_commands = command_group(commands, "users", "users of Basic authentication (users.json)")
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--data-dir", help="the broker's data dir ($LOGBUS_DATA_DIR, ./data)")
    where.add_argument("--users-file", help="the users file (default <data-dir>/users.json)")
    secret = argparse.ArgumentParser(add_help=False)
    secret.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input"
    )
    for action, parents, text in (
        ("list", [where], "list user names"),
        ("add", [where, secret], "add a user"),
        ("passwd", [where, secret], "change a user's password"),
        ("remove", [where], "remove a user"),
    ):
        p = user_commands.add_parser(action, parents=parents, help=text)
        p.set_defaults(handler=cmd_users)
        if action != "list":
            p.add_argument("name")

    for action, p in client_actions(
        commands,
        "acls",
        "add, list and remove ACLs (Kafka's model)",
        client,
        (
            ("add", "add ACLs"),
            ("list", "list the ACLs a filter selects"),
            ("remove", "remove the ACLs a filter selects"),
        ),
        cmd_acls,
    ):
        p.add_argument("--topic")
        p.add_argument("--group")
        p.add_argument("--transactional-id")
        p.add_argument("--cluster", action="store_true", help="the cluster resource")
        p.add_argument(
            "--resource-pattern-type",
            choices=["literal", "prefixed", "match", "any"],
            help="add: literal (default) or prefixed; list/remove: also match, any",
        )
        p.add_argument(
            "--operation",
            action="append",
            help="Read, Write, Create, Delete, Alter, Describe, "
            "DescribeConfigs, AlterConfigs, IdempotentWrite, All (repeatable for add, remove)",
        )
        if action == "add":
            p.add_argument("--allow-principal", action="append", help="e.g. User:alice")
            p.add_argument("--deny-principal", action="append")
            p.add_argument("--host", default="*", help="client address (default: any)")
        else:
            p.add_argument(
                "--principal",
                action="append",
                help="only this principal's ACLs (repeatable for remove)",
            )


QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_rate")


def _quota_entity(args: argparse.Namespace) -> list[dict[str, str | None]]:
    entity: list[dict[str, str | None]] = []
    for kind, name in (("user", args.user), ("client-id", args.client_id)):
        if name is not None:
            entity.append(
                {"entity_type": kind, "entity_name": None if name == "<default>" else name}
            )
    if not entity:
        raise CliError("name --user and/or --client-id (<default> for the default entity)", 2)
    return entity


def cmd_quotas(api: Api, args: argparse.Namespace) -> int:
    if args.quotas_command == "list":
        print_json(api.admin.describe_client_quotas(args.user, args.client_id))
        return 0
    entity = _quota_entity(args)
    if args.quotas_command == "set":
        ops: list[dict[str, object]] = [
            {"key": key, "value": getattr(args, key)}
            for key in QUOTA_KEYS
            if getattr(args, key) is not None
        ]
        if not ops:
            raise CliError(
                "quotas set needs --producer-byte-rate, --consumer-byte-rate or --request-rate", 2
            )
    else:
        ops = [{"key": key, "remove": True} for key in (args.quota or QUOTA_KEYS)]
    print_json(api.admin.alter_client_quotas([{"entity": entity, "ops": ops}]))
    return 0


def register_quotas(commands: Commands, client: argparse.ArgumentParser) -> None:
    for action, p in client_actions(
        commands,
        "quotas",
        "list, set and remove client quotas (Kafka's)",
        client,
        (
            ("list", "list the quotas (of a user and/or client id)"),
            ("set", "set quotas of a user and/or client id"),
            ("remove", "remove quotas of a user and/or client id"),
        ),
        cmd_quotas,
    ):
        p.add_argument("--user", help="a user name (User:alice -> alice), or <default>")
        p.add_argument("--client-id", help="a client id (Logbus-Client-Id), or <default>")
        if action == "set":
            p.add_argument("--producer-byte-rate", type=float, help="produce bytes/s")
            p.add_argument("--consumer-byte-rate", type=float, help="fetch bytes/s")
            p.add_argument("--request-rate", type=float, help="requests/s")
        elif action == "remove":
            p.add_argument(
                "--quota", action="append", choices=QUOTA_KEYS, help="default: every quota"
            )
