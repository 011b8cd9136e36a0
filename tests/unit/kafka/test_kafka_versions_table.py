"""The README's table of Kafka APIs is what ApiVersions advertises (``versions.py``)."""

from __future__ import annotations

import re
from pathlib import Path

from app.kafka.versions import NAMES, SUPPORTED

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_table_is_the_advertised_ranges() -> None:
    text = README.read_text()
    section = text[text.index("## Kafka clients") :]
    section = section[: section.index("\n## ", 1)]
    rows = re.findall(r"^\| (\w+) \((\d+)\) \| (\d+)-(\d+) \|", section, re.M)
    table = {int(key): (name, int(lo), int(hi)) for name, key, lo, hi in rows}
    assert table == {key: (NAMES[key], lo, hi) for key, (lo, hi) in SUPPORTED.items()}
