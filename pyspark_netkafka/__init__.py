"""PySpark's entry to the `netkafka` data source.

PySpark's data source lookup (pyspark.sql.worker.lookup_data_sources, run when a
session first meets a Python data source) imports every top-level module whose name
starts with ``pyspark_`` and registers its ``DefaultSource`` under the source's
name(): installing netkafka is enough for df.write.format("netkafka").  The source
itself is netkafka.spark.datasource's.
"""
from netkafka.spark.datasource import NetkafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
