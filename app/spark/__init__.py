"""PySpark data source for Logbus: ``spark.read.format("logbus")`` and friends.

Needs the ``spark`` extra (``pip install 'logbus[spark]'``: pyspark, pyarrow, numba) and Java 17.

>>> from app.spark import register                                    # doctest: +SKIP
>>> register(spark)
>>> df = (spark.read.format("logbus").option("logbus.url", "http://127.0.0.1:8080")
...       .option("subscribe", "clicks").load())
"""

from __future__ import annotations

from typing import Any

from app.spark.source import LogbusDataSource


def register(spark: Any) -> None:
    """Make the ``logbus`` format known to ``spark`` (a SparkSession)."""
    spark.dataSource.register(LogbusDataSource)


__all__ = ["LogbusDataSource", "register"]
