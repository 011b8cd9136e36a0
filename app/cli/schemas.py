"""``logbus schemas list|get|register|check|delete|config``: the schema registry
(Confluent's REST API, ``/schema-registry`` on every broker) from the command line,
through the SDK's :class:`~app.client.schema_registry.SchemaRegistryClient`.

The registry is ``--url``'s ``/schema-registry`` unless ``--registry-url`` names another
(any Confluent-compatible registry). A schema comes from ``--file`` (``-``: stdin); its
type is ``--type``, else guessed from the file's extension (``.avsc`` AVRO, ``.json``
JSON, ``.proto`` PROTOBUF), else AVRO. Exit status as every command: 0 success, 1 the
registry refused (its error code, e.g. ``SUBJECT_NOT_FOUND (40401)``) or ``check`` found
the schema incompatible (the reasons on stderr), 2 a bad command line or an unreadable
file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.cli.base import Api, CliError, Commands, client_actions, print_json
from app.client.schema_registry import (
    RegisteredSchema,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
)
from app.common.errors import LogbusError
from app.common.schemas import COMPATIBILITY_LEVELS, SCHEMA_TYPES

_BY_SUFFIX = {".avsc": "AVRO", ".json": "JSON", ".proto": "PROTOBUF"}


def _schema(args: argparse.Namespace) -> Schema:
    """The schema of ``--file`` with ``--type`` and ``--reference``s."""
    if args.file == "-":
        text = sys.stdin.read()
        suffix = ""
    else:
        path = Path(args.file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read --file {args.file}: {exc}", code=2) from exc
        suffix = path.suffix.lower()
    schema_type = (args.type or _BY_SUFFIX.get(suffix, "AVRO")).upper()
    refs = []
    for raw in args.reference or ():
        name, _, where = raw.rpartition("=")
        subject, _, version = where.rpartition(":")
        if not name or not subject or not (version.isascii() and version.isdigit()):
            raise CliError(f"--reference is NAME=SUBJECT:VERSION, got {raw!r}", code=2)
        refs.append(SchemaReference(name, subject, int(version)))
    return Schema(text, schema_type, tuple(refs))


def _version(raw: str) -> int | str:
    if raw == "latest":
        return raw
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise CliError(f"--version is a number >= 1 or latest, got {raw!r}", code=2)
    return int(raw)


def _as_json(found: RegisteredSchema) -> dict[str, object]:
    return {
        "subject": found.subject,
        "version": found.version,
        "id": found.schema_id,
        "schemaType": found.schema.schema_type,
        "schema": found.schema.schema_str,
        "references": [
            {"name": r.name, "subject": r.subject, "version": r.version}
            for r in found.schema.references
        ],
    }


def _registry_error(exc: LogbusError) -> CliError:
    code = getattr(exc, "confluent_code", None)
    where = f" ({code})" if code is not None else ""
    return CliError(f"{exc.error_code}{where}: {exc.message}", code=1)


def cmd_schemas(api: Api, args: argparse.Namespace) -> int:
    url = args.registry_url or f"{api.url}/schema-registry"
    conf = {"url": url, "auth": api.auth, "timeout.ms": int(api.timeout * 1000)}
    with SchemaRegistryClient(conf) as registry:
        try:
            return _run(registry, args)
        except LogbusError as exc:
            if getattr(exc, "confluent_code", None) is None:
                raise  # not the registry's answer (unreachable...): main reports it
            raise _registry_error(exc) from exc


def _run(registry: SchemaRegistryClient, args: argparse.Namespace) -> int:
    action = args.schemas_command
    if action == "list":
        subjects = registry.get_subjects(args.prefix or "", deleted=args.deleted)
        if args.json:
            print_json(subjects)
        else:
            for subject in subjects:
                print(subject)
        return 0
    if action == "get":
        if args.id is not None:
            if args.subject is not None:
                raise CliError("give a SUBJECT or --id, not both", code=2)
            schema = registry.get_schema(args.id)
            if args.json:
                print_json(
                    {"id": args.id, "schemaType": schema.schema_type, "schema": schema.schema_str}
                )
            else:
                print(schema.schema_str)
            return 0
        if args.subject is None:
            raise CliError("give a SUBJECT (with --version) or --id", code=2)
        if args.versions:
            print_json(registry.get_versions(args.subject, deleted=args.deleted))
            return 0
        found = registry.get_version(args.subject, _version(args.version))
        if args.json:
            print_json(_as_json(found))
        else:
            print(found.schema.schema_str)
        return 0
    if action == "register":
        schema_id = registry.register_schema(args.subject, _schema(args), args.normalize)
        print(schema_id)
        return 0
    if action == "check":
        version = None if args.version == "all" else _version(args.version)
        result = registry.check_compatibility(args.subject, _schema(args), version)
        if result.is_compatible:
            print("compatible")
            return 0
        print("incompatible", file=sys.stderr)
        for message in result.messages:
            print(f"  {message}", file=sys.stderr)
        return 1
    if action == "delete":
        if args.version is not None:
            print(registry.delete_version(args.subject, _version(args.version), args.permanent))
        else:
            print(" ".join(str(v) for v in registry.delete_subject(args.subject, args.permanent)))
        return 0
    # config
    if args.set is not None and args.delete:
        raise CliError("--set and --delete exclude each other", code=2)
    if args.set is not None:
        print(registry.set_compatibility(args.subject, args.set))
    elif args.delete:
        if args.subject is None:
            raise CliError("--delete needs a SUBJECT (the global level cannot be removed)", 2)
        print(registry.delete_compatibility(args.subject))
    else:
        print(registry.get_compatibility(args.subject, default_to_global=args.effective))
    return 0


def register(commands: Commands, client: argparse.ArgumentParser) -> None:
    for action, p in client_actions(
        commands,
        "schemas",
        "the schema registry: subjects, versions, compatibility (Confluent's REST API)",
        client,
        (
            ("list", "list subjects"),
            ("get", "print a subject's version, or a schema by --id"),
            ("register", "register --file under SUBJECT; prints its id"),
            ("check", "is --file compatible with SUBJECT's version(s)? (exit 1 if not)"),
            ("delete", "delete a subject, or one --version (soft; --permanent after)"),
            ("config", "print or --set a subject's (or the global) compatibility level"),
        ),
        cmd_schemas,
    ):
        p.add_argument(
            "--registry-url",
            metavar="URL",
            help="another Confluent-compatible registry (default: --url's /schema-registry)",
        )
        if action == "list":
            p.add_argument("--prefix", help="only subjects starting with this")
            p.add_argument("--deleted", action="store_true", help="soft-deleted subjects too")
            p.add_argument("--json", action="store_true", help="print a JSON list")
        elif action == "get":
            p.add_argument("subject", nargs="?")
            p.add_argument("--version", default="latest", help="a number or latest (default)")
            p.add_argument("--id", type=int, help="the schema with this id instead")
            p.add_argument("--versions", action="store_true", help="list SUBJECT's versions")
            p.add_argument("--deleted", action="store_true", help="with --versions: deleted too")
            p.add_argument("--json", action="store_true", help="print the version as JSON")
        elif action in ("register", "check"):
            p.add_argument("subject")
            p.add_argument("--file", required=True, help="the schema's file (- for stdin)")
            p.add_argument(
                "--type",
                type=str.upper,
                choices=SCHEMA_TYPES,
                help="AVRO, JSON or PROTOBUF (default: from the extension, else AVRO)",
            )
            p.add_argument(
                "--reference",
                action="append",
                metavar="NAME=SUBJECT:VERSION",
                help="a schema this one refers to (repeatable)",
            )
            if action == "register":
                p.add_argument("--normalize", action="store_true", help="normalize first")
            else:
                p.add_argument(
                    "--version", default="latest", help="a number, latest (default) or all"
                )
        elif action == "delete":
            p.add_argument("subject")
            p.add_argument("--version", help="only this version (a number or latest)")
            p.add_argument(
                "--permanent", action="store_true", help="hard-delete (after a soft delete)"
            )
        else:
            p.add_argument("subject", nargs="?", help="default: the global level")
            p.add_argument(
                "--set", type=str.upper, choices=COMPATIBILITY_LEVELS, metavar="LEVEL",
                help=f"set the level: {', '.join(COMPATIBILITY_LEVELS)}",
            )  # fmt: skip
            p.add_argument("--delete", action="store_true", help="remove the subject's level")
            p.add_argument(
                "--effective", action="store_true",
                help="the subject's level, else the global one",
            )  # fmt: skip
