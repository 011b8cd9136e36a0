"""register() checks that Spark's Python workers can import the source before any task runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.spark import WorkerPythonError, check_worker_python


def test_the_running_interpreter_passes() -> None:
    check_worker_python(sys.executable)


def test_a_python_without_the_dependencies_fails_at_once_saying_what_to_set(
    tmp_path: Path,
) -> None:
    # A bare virtualenv: the situation of workers started with `python3` on PATH.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True
    )
    bare = str(tmp_path / "bare" / "bin" / "python")
    with pytest.raises(WorkerPythonError) as raised:
        check_worker_python(bare)
    message = str(raised.value)
    assert "No module named" in message
    assert "spark.pyspark.python" in message and sys.executable in message


def test_a_missing_interpreter_fails_the_same_way(tmp_path: Path) -> None:
    with pytest.raises(WorkerPythonError, match="PYSPARK_PYTHON="):
        check_worker_python(str(tmp_path / "no-such-python"))
