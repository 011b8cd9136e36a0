"""Every file the code or the docs cite by path exists in the repository.

The design lives in the repo (docs/ARCHITECTURE.md); a docstring citing a document that is
not here sends a reader nowhere, as the old references to an outside design note did.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What people cite: a repository path (``docs/ARCHITECTURE.md``, ``app/core/log/log.py``)
# or a bare document name (``RESULTS.md``).
CITED = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.(?:md|json|yaml|py)|[\w-]+\.md)(?![\w(])")
SOURCES = [
    *sorted((REPO / "app").rglob("*.py")),
    *sorted((REPO / "logbus").rglob("*.py")),
    REPO / "README.md",
    REPO / "docs" / "ARCHITECTURE.md",
]


def _resolves(cited: str, source: Path) -> bool:
    if "/" not in cited:
        # A bare name ("RESULTS.md" in a listing of bench/): some file of the repo has it.
        return any(REPO.glob(f"**/{cited}"))
    return (REPO / cited).exists() or (source.parent / cited).exists()


def test_cited_files_exist() -> None:
    missing = []
    for source in SOURCES:
        for match in CITED.finditer(source.read_text()):
            cited = match.group(1)
            if cited.startswith(("http", "www")) or not _resolves(cited, source):
                missing.append(f"{source.relative_to(REPO)}: {cited}")
    assert missing == []


def test_architecture_names_every_package() -> None:
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    for package in sorted(p.parent for p in (REPO / "app").rglob("__init__.py")):
        assert f"{package.relative_to(REPO)}/" in text, package
