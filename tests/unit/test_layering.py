"""The import rules of docs/ARCHITECTURE.md ("Layers"), checked on the source.

Every import counts, those under ``if TYPE_CHECKING:`` included: a type that names
another layer is a dependency on it all the same.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# (importing package, imported package) pairs that must not exist.
FORBIDDEN = {
    "app.common": ("app.core", "app.client", "app.api", "app.spark", "app.groups", "app.config"),
    "app.core": ("app.client", "app.api", "app.spark", "app.groups", "app.cli", "app.config"),
    "app.groups": ("app.client", "app.api", "app.spark", "app.cli", "app.txn"),
    "app.txn": ("app.client", "app.api", "app.spark", "app.cli", "app.config"),
    "app.registry": (
        "app.client",
        "app.api",
        "app.spark",
        "app.cli",
        "app.config",
        "app.groups",
        "app.txn",
    ),
    "app.client": ("app.core", "app.api", "app.groups", "app.spark", "app.config"),
    "app.spark": ("app.core", "app.api", "app.groups", "app.config"),
    "logbus": ("app.core", "app.api", "app.groups", "app.config"),
}


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _violations() -> set[tuple[str, str]]:
    out = set()
    for path in [*REPO.joinpath("app").rglob("*.py"), *REPO.joinpath("logbus").rglob("*.py")]:
        module = _module(path)
        for layer, banned in FORBIDDEN.items():
            if module != layer and not module.startswith(layer + "."):
                continue
            for imported in _imports(path):
                for target in banned:
                    if imported == target or imported.startswith(target + "."):
                        out.add((module, target))
    return out


def test_layers_import_only_downwards() -> None:
    assert _violations() == set()


# The Kafka door (app/kafka) may import what app/api imports minus the web stack, and of
# app/api only its transport-neutral services (state, produce_service, fetch_service,
# longpoll) and the memory budget both doors share; nothing below it, and no other door,
# imports the Kafka door.
KAFKA_MAY_USE_OF_API = {
    "state",
    "produce_service",
    "fetch_service",
    "longpoll",
    "memory",
    "schema_validation",  # broker-side schema validation (issue 18): transport-neutral
    "topic_service",
}
KAFKA_BANNED = (
    "fastapi",
    "starlette",
    "uvicorn",
    "app.api.app",
    "app.api.routers",
    "app.api.ws",
    "app.api.util",
    "app.api.deps",
    "app.api.errors",
    "app.client",
    "app.spark",
    "app.cli",
)
# The services both doors share are transport-neutral too.
NEUTRAL_API_MODULES = (
    "produce_service.py",
    "fetch_service.py",
    "state.py",
    "longpoll.py",
    "schema_validation.py",
    "topic_service.py",
)


def test_the_kafka_door_and_its_services_import_no_web_stack() -> None:
    paths = [*REPO.joinpath("app", "kafka").rglob("*.py")]
    paths += [REPO / "app" / "api" / name for name in NEUTRAL_API_MODULES]
    assert len(paths) > len(NEUTRAL_API_MODULES)
    found = {
        (_module(path), imported)
        for path in paths
        for imported in _imports(path)
        if any(imported == b or imported.startswith(b + ".") for b in KAFKA_BANNED)
    }
    assert found == set()
    of_api = {
        imported.split(".")[2]
        for path in REPO.joinpath("app", "kafka").rglob("*.py")
        for imported in _imports(path)
        if imported.startswith("app.api.")
    }
    assert of_api <= KAFKA_MAY_USE_OF_API


def test_only_the_app_starts_the_kafka_door() -> None:
    users = {
        _module(path)
        for path in [*REPO.joinpath("app").rglob("*.py"), *REPO.joinpath("logbus").rglob("*.py")]
        if not _module(path).startswith("app.kafka")
        and any(i == "app.kafka" or i.startswith("app.kafka.") for i in _imports(path))
    }
    assert users <= {"app.api.app"}


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module file or package (a compiled extension too)."""
    base = REPO.joinpath(*dotted.split("."))
    return (
        base.with_suffix(".py").exists()
        or (base / "__init__.py").exists()
        or any(base.parent.glob(base.name + ".*"))
    )


def _module_graph() -> dict[str, set[str]]:
    """Module -> the modules of app/ and logbus/ it imports (``from pkg import submodule``
    is an edge to the submodule only: importing it runs the package's ``__init__`` in any
    case)."""
    paths = {
        _module(path): path
        for path in [*REPO.joinpath("app").rglob("*.py"), *REPO.joinpath("logbus").rglob("*.py")]
    }
    graph = {}
    for name, path in paths.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named = {f"{node.module}.{alias.name}" for alias in node.names}
                submodules = {n for n in named if _is_module(n)}
                edges |= submodules
                if len(submodules) < len(named):
                    edges.add(node.module)
        graph[name] = {e for e in edges if e in paths and e != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    """Type-only imports count too: a protocol in the imported module's place breaks a
    cycle (``app/core/replication/fetcher.py: FetcherOwner``, ``app/api/metrics.py:
    MetricsState``)."""
    graph = _module_graph()
    assert len(graph) > 100
    assert _cycles(graph) == []
