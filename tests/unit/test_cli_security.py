"""``logbus users`` (a local file, no broker) and ``logbus acls`` argument checks."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from app.cli import main
from app.core.security.users import UsersFile


def test_users_add_list_passwd_remove(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--data-dir", str(tmp_path)]
    monkeypatch.setattr("sys.stdin", io.StringIO("first-secret\n"))
    assert main(["users", "add", "alice", "--password-stdin", *where]) == 0
    assert main(["users", "list", *where]) == 0
    assert capsys.readouterr().out.split() == ["alice"]
    stored = UsersFile(tmp_path / "users.json").read()["alice"]
    assert stored.verify("first-secret") and not stored.verify("other")

    monkeypatch.setattr("sys.stdin", io.StringIO("second-secret\n"))
    assert main(["users", "passwd", "alice", "--password-stdin", *where]) == 0
    assert UsersFile(tmp_path / "users.json").read()["alice"].verify("second-secret")

    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    with pytest.raises(SystemExit) as refused:
        main(["users", "add", "bob", "--password-stdin", *where])
    assert refused.value.code == 2 and "8 characters" in capsys.readouterr().err

    assert main(["users", "remove", "alice", *where]) == 0
    with pytest.raises(SystemExit) as missing:
        main(["users", "remove", "alice", *where])
    assert missing.value.code == 1 and "no user 'alice'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["acls", "add", "--allow-principal", "User:a", "--operation", "Read"],  # no resource
        ["acls", "add", "--topic", "t", "--operation", "Read"],  # no principal
        ["acls", "list", "--topic", "t", "--group", "g"],  # two resources
    ],
)
def test_acls_argument_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--url", "http://127.0.0.1:9"])
    assert refused.value.code == 2, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["quotas", "set", "--producer-byte-rate", "1"], "--user and/or --client-id"),
        (["quotas", "set", "--user", "alice"], "--producer-byte-rate"),
        (["quotas", "remove"], "--user and/or --client-id"),
    ],
)
def test_quotas_argument_errors(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--url", "http://127.0.0.1:9"])
    assert refused.value.code == 2
    assert says in capsys.readouterr().err


def test_the_sdk_sends_its_client_id(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.client import _http

    monkeypatch.delenv(_http.CLIENT_ID_ENV, raising=False)
    with _http.sync_client("http://127.0.0.1:9", 1000) as plain:
        assert _http.CLIENT_ID_HEADER not in plain.headers
    monkeypatch.setenv(_http.CLIENT_ID_ENV, "etl-7")
    with _http.sync_client("http://127.0.0.1:9", 1000) as named:
        assert named.headers[_http.CLIENT_ID_HEADER] == "etl-7"
