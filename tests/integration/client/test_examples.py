"""The SDK's documented example runs as written against a real broker."""

from __future__ import annotations

import contextlib
import io
import re
import textwrap

import app.client


def test_package_example_runs(broker_url: str) -> None:
    doc = app.client.__doc__ or ""
    block = doc.split("Example (", 1)[1].split("::\n", 1)[1]
    code = textwrap.dedent(
        "\n".join(line for line in block.splitlines() if line.strip() or line == "")
    )
    code = code.replace("http://127.0.0.1:8080", broker_url)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "app.client example", "exec"), {})
    lines = out.getvalue().splitlines()
    assert re.match(
        r"RecordMetadata\(topic='orders', partition=\d, offset=0, timestamp=\d+\)", lines[0]
    )
    assert len(lines) == 6
    assert any("b'customer-7'" in line for line in lines[1:5])
    assert lines[5] == "assigned [0, 1, 2]"
