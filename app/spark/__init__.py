"""PySpark data source for Logbus: ``spark.read.format("logbus")`` and friends.

Needs the ``spark`` extra (``pip install 'logbus[spark]'``: pyspark, pyarrow, numba) and Java 17.

>>> from logbus.spark import register                                 # doctest: +SKIP
>>> register(spark)
>>> df = (spark.read.format("logbus").option("logbus.url", "http://127.0.0.1:8080")
...       .option("subscribe", "clicks").load())

Spark runs the source's read and write tasks in Python worker processes started with
the session's Python (``spark.pyspark.python``, else ``PYSPARK_PYTHON``, else ``python3``
on PATH), fixed when the session starts. A job started with a virtualenv's Python
without activating it gets workers that cannot import this package or pyarrow, and
would fail only when a task runs, with ``No module named 'pyarrow'``. :func:`register`
checks the workers' Python first and says what to set.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from app.spark.source import LogbusDataSource

# What a task imports: this package's decoders and the libraries under them.
WORKER_MODULES = ("pyarrow", "numpy", "numba", "app.spark.source")


class WorkerPythonError(RuntimeError):
    """Spark's Python workers cannot import what the Logbus source needs."""


def check_worker_python(python: str) -> None:
    """Raise :class:`WorkerPythonError` unless ``python`` can import the source's modules."""
    if python == sys.executable:
        return  # this very interpreter has just imported them
    code = f"import {', '.join(WORKER_MODULES)}"
    try:
        done = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=120, check=False
        )
    except OSError as exc:
        failure = str(exc)
    else:
        if done.returncode == 0:
            return
        lines = done.stderr.strip().splitlines()
        failure = lines[-1] if lines else f"exit status {done.returncode}"
    raise WorkerPythonError(
        f"Spark's Python workers run {python!r}, which cannot import the Logbus source "
        f"({failure}). Start the session with the Python that has Logbus installed: "
        f".config('spark.pyspark.python', {sys.executable!r}) on the builder, or "
        f"PYSPARK_PYTHON={sys.executable} in the environment"
    )


def register(spark: Any) -> None:
    """Make the ``logbus`` format known to ``spark`` (a SparkSession), after checking that
    its Python workers can run it (:func:`check_worker_python`)."""
    check_worker_python(str(spark.sparkContext.pythonExec))
    spark.dataSource.register(LogbusDataSource)


__all__ = ["LogbusDataSource", "WorkerPythonError", "check_worker_python", "register"]
