"""``logbus schemas list|get|register|check|delete|config`` against a real broker's
registry (the SDK session's broker subprocess), through :func:`app.cli.main`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.cli import main

V1 = {"type": "record", "name": "Click", "fields": [{"name": "page", "type": "string"}]}
V2_BAD = {**V1, "fields": [*V1["fields"], {"name": "user", "type": "string"}]}
V2_OK = {**V1, "fields": [*V1["fields"], {"name": "user", "type": "string", "default": ""}]}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # main reports failures as SystemExit(code)
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_schemas_commands(
    broker_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--url", broker_url]
    subject = f"cli-{os.getpid()}-clicks-value"
    v1, bad, ok = (tmp_path / n for n in ("v1.avsc", "bad.avsc", "ok.avsc"))
    v1.write_text(json.dumps(V1))
    bad.write_text(json.dumps(V2_BAD))
    ok.write_text(json.dumps(V2_OK))

    code, out, _ = run(capsys, "schemas", "register", subject, "--file", str(v1), *url)
    assert code == 0
    first_id = int(out)
    code, out, _ = run(capsys, "schemas", "list", *url, "--prefix", f"cli-{os.getpid()}")
    assert (code, out.split()) == (0, [subject])
    code, out, _ = run(capsys, "schemas", "get", subject, "--json", *url)
    got = json.loads(out)
    assert (got["id"], got["version"], got["schemaType"]) == (first_id, 1, "AVRO")
    code, out, _ = run(capsys, "schemas", "get", "--id", str(first_id), *url)
    assert json.loads(out) == V1

    # check: exit 1 with the reasons for an incompatible schema, 0 for a compatible one.
    code, out, err = run(capsys, "schemas", "check", subject, "--file", str(bad), *url)
    assert code == 1 and err.startswith("incompatible") and "user" in err
    code, out, _ = run(capsys, "schemas", "check", subject, "--file", str(ok), *url)
    assert (code, out.strip()) == (0, "compatible")
    code, _, err = run(capsys, "schemas", "register", subject, "--file", str(bad), *url)
    assert code == 1 and "INCOMPATIBLE_SCHEMA (40901)" in err

    # config: the subject's own level, then the change goes in.
    code, _, err = run(capsys, "schemas", "config", subject, *url)
    assert code == 1 and "40408" in err  # no level of its own yet
    code, out, _ = run(capsys, "schemas", "config", subject, "--effective", *url)
    assert (code, out.strip()) == (0, "BACKWARD")
    code, out, _ = run(capsys, "schemas", "config", subject, "--set", "none", *url)
    assert (code, out.strip()) == (0, "NONE")
    code, out, _ = run(capsys, "schemas", "register", subject, "--file", str(bad), *url)
    assert code == 0 and int(out) > first_id

    # delete: a version, then the subject (soft, then permanent).
    code, out, _ = run(capsys, "schemas", "delete", subject, "--version", "2", *url)
    assert (code, out.strip()) == (0, "2")
    code, out, _ = run(capsys, "schemas", "delete", subject, *url)
    assert (code, out.strip()) == (0, "1")
    code, out, _ = run(capsys, "schemas", "delete", subject, "--permanent", *url)
    assert code == 0
    code, _, err = run(capsys, "schemas", "get", subject, *url)
    assert code == 1 and "SUBJECT_NOT_FOUND (40401)" in err

    # Bad input: an invalid schema (42201, the parser's message), a missing file, bad flags.
    broken = tmp_path / "broken.json"
    broken.write_text('{"type": 7}')
    code, _, err = run(capsys, "schemas", "register", subject, "--file", str(broken), *url)
    assert code == 1 and "42201" in err
    code, _, err = run(capsys, "schemas", "register", subject, "--file", str(tmp_path / "no"), *url)
    assert code == 2 and "cannot read --file" in err
    code, _, err = run(capsys, "schemas", "get", subject, "--version", "zero", *url)
    assert code == 2
    code, _, _ = run(capsys, "schemas", "config", "--set", "SIDEWAYS", *url)
    assert code == 2  # argparse refuses the level
