"""Dockerfile and docker-compose.yml, checked statically (no Docker engine needed): the
brokers' commands parse with `logbus serve`'s own parser and agree with each other, the
compose file builds from our Dockerfile, and the Dockerfile runs `logbus serve`."""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import build_parser
from app.config import Settings

REPO = Path(__file__).resolve().parents[2]
BROKERS = ["broker-1", "broker-2", "broker-3"]


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return loaded


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = _compose()["services"]
    return services


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = (REPO / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _exec_form(instruction: str) -> list[str]:
    """The last ``instruction`` (ENTRYPOINT, CMD), which must be in JSON exec form."""
    found = [rest for word, rest in _instructions() if word == instruction]
    assert found, f"Dockerfile has no {instruction}"
    value = json.loads(found[-1])
    assert isinstance(value, list) and all(isinstance(v, str) for v in value)
    return value


def _argv(service: dict[str, Any]) -> list[str]:
    """The container's full command line: entrypoint + command, as Docker combines them."""
    entrypoint = service.get("entrypoint", _exec_form("ENTRYPOINT"))
    command = service.get("command", _exec_form("CMD"))
    assert isinstance(entrypoint, list) and isinstance(command, list), "use the list form"
    return [*entrypoint, *command]


def _serve_args(name: str) -> argparse.Namespace:
    argv = _argv(_services()[name])
    assert argv[:2] == ["logbus", "serve"], argv
    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"{name}: `logbus serve` rejects {argv[2:]}")
    return args


def test_services_are_zookeeper_and_three_brokers() -> None:
    services = _services()
    assert set(services) == {"zookeeper", *BROKERS}
    assert services["zookeeper"]["image"].startswith("zookeeper:3.8")
    for name in BROKERS:
        assert "image" not in services[name] or "build" in services[name]


def test_brokers_build_from_our_dockerfile() -> None:
    for name in BROKERS:
        build = _services()[name]["build"]
        context = REPO / build["context"]
        assert context.resolve() == REPO
        assert (context / build.get("dockerfile", "Dockerfile")).resolve() == REPO / "Dockerfile"


def test_dockerfile_runs_logbus_serve() -> None:
    instructions = _instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    assert _exec_form("ENTRYPOINT")[:2] == ["logbus", "serve"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["logbus"] == "app.cli:main"
    assert any(w == "RUN" and "pip install" in rest for w, rest in instructions)
    assert ("EXPOSE", "8080") in instructions
    volumes = [json.loads(rest) for w, rest in instructions if w == "VOLUME"]
    assert ["/data"] in volumes
    env = " ".join(rest for w, rest in instructions if w == "ENV")
    assert "LOGBUS_DATA_DIR=/data" in env and "LOGBUS_PORT=8080" in env
    assert "LOGBUS_HOST=0.0.0.0" in env, "a container must listen beyond its loopback"


def test_dockerignore_keeps_what_the_dockerfile_copies() -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ".venv" in patterns and ".git" in patterns
    copied = [
        src
        for word, rest in _instructions()
        if word == "COPY"
        for src in rest.split()[:-1]
        if not src.startswith("--")
    ]
    assert copied
    for src in copied:
        assert (REPO / src).exists(), src
        assert not any(fnmatch.fnmatch(src, p) for p in patterns), f"{src} is dockerignored"


@pytest.mark.parametrize("name", BROKERS)
def test_broker_command_parses_with_logbus_serve(name: str) -> None:
    args = _serve_args(name)
    assert args.command == "serve"
    assert args.host == "0.0.0.0"
    assert args.data_dir is not None and args.port is not None
    assert args.broker_id is not None and args.zookeeper and args.advertised_url


def test_broker_ids_ports_and_urls_are_distinct_and_consistent() -> None:
    services = _services()
    ids, host_ports = [], []
    for name in BROKERS:
        args = _serve_args(name)
        ids.append(args.broker_id)
        assert name == f"broker-{args.broker_id}"
        # Other brokers and in-network clients reach it by its service name.
        assert args.advertised_url == f"http://{name}:{args.port}"
        (mapping,) = services[name]["ports"]
        host, container = str(mapping).rsplit(":", 1)
        assert int(container) == args.port
        host_ports.append(int(host.rsplit(":", 1)[-1]))
    assert ids == [1, 2, 3]
    assert host_ports == [8081, 8082, 8083]


def test_brokers_find_zookeeper_by_service_name() -> None:
    services = _services()
    for name in BROKERS:
        args = _serve_args(name)
        hosts = args.zookeeper.split("/", 1)[0]
        for host_port in hosts.split(","):
            host, port = host_port.rsplit(":", 1)
            assert host in services and services[host]["image"].startswith("zookeeper:")
            assert port == "2181"
        depends = services[name]["depends_on"]
        assert depends["zookeeper"]["condition"] == "service_healthy"


def test_each_broker_keeps_its_data_in_its_own_named_volume() -> None:
    compose = _compose()
    declared = set(compose["volumes"])
    seen = set()
    for name in BROKERS:
        args = _serve_args(name)
        mounts = dict(str(v).split(":")[:2][::-1] for v in _services()[name]["volumes"])
        volume = mounts[args.data_dir]
        assert volume in declared, f"{name}: {volume} is not a named volume"
        seen.add(volume)
    assert len(seen) == len(BROKERS)
    for mount in _services()["zookeeper"]["volumes"]:
        assert str(mount).split(":")[0] in declared


def test_healthchecks_ask_readyz_and_zookeeper() -> None:
    services = _services()
    for name in BROKERS:
        args = _serve_args(name)
        check = " ".join(services[name]["healthcheck"]["test"])
        assert f"127.0.0.1:{args.port}/readyz" in check
    assert services["zookeeper"]["healthcheck"]["test"]
    dockerfile_check = " ".join(rest for w, rest in _instructions() if w == "HEALTHCHECK")
    assert "/readyz" in dockerfile_check


def test_broker_environment_names_real_settings() -> None:
    fields = set(Settings.model_fields)
    for name in BROKERS:
        for key in _services()[name].get("environment", {}):
            assert key.startswith("LOGBUS_"), key
            assert key.removeprefix("LOGBUS_").lower() in fields, f"{name}: unknown setting {key}"
