"""The PySpark data source: ``logbus.spark.register(spark)``, then ``format("logbus")``.

Needs the ``spark`` extra (``pip install 'logbus[spark]'``) and Java 17.
"""

from app.spark import LogbusDataSource, register

__all__ = ["LogbusDataSource", "register"]
