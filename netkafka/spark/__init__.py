"""Emission from Spark executors: the `netkafka` data source, a foreachPartition sink and
Arrow / pandas emitters.

Every path ends in Producer.send_batch() in the executor's Python worker:

    NetkafkaDataSource  df.write.format("netkafka") / writeStream: Spark's Kafka
                     sink's columns and options, the tasks' Arrow batches sent as
                     the arrow_emitter sends them; exactly once by per-partition
                     transactions and commit markers (datasource.py's story)
    partition_sink   Rows (or dicts, tuples) -> lists, a chunk of rows at a time
    arrow_emitter    pyarrow RecordBatches -> their binary/string columns (header
                     columns too), read in place by the native encoder, and
                     provenance headers made as Arrow arrays (no Python object
                     per row)
    pandas_emitter   pandas DataFrames -> pyarrow arrays -> the arrow_emitter's way

Each Python worker process keeps one producer per configuration (worker_producer):
PySpark reuses a worker for task after task, so connections, metadata and the
idempotent producer id are set up once, not per task.  It keeps those of the last
WORKER_PRODUCERS_KEPT configurations used; an older one is flushed and closed once
no task holds it (leased_producer), so that an executor running job after job with
new settings does not pile up producers.  A forked child keeps the
producers it inherits; Producer restarts its own threads there on first use.

A task is done only when its records are: the sink flushes at the end of the
partition and raises if any record failed, so that Spark retries the task
(at-least-once).  The emitters yield delivery reports instead (per row or per
input batch), or raise as the sink does with on_error="raise".

Configuration is resolved on the driver, where the sink or emitter is made, and
travels to the executors inside it: the `config` dict (kafka-python's keyword
names, or the Java client's dotted names) over the Spark conf keys under
CONF_PREFIX, e.g. spark.netkafka.producer.bootstrap.servers.

Provenance headers (provenance=True), values in ASCII decimal:

    netkafka.spark.stage      the task's stage id
    netkafka.spark.partition  the task's partition id
    netkafka.spark.attempt    the task's attempt number (0 for the first)
    netkafka.spark.task       the task attempt id (unique in the application)
    netkafka.spark.row        the row's index in its Spark partition, from 0

(stage, partition, row) names a row across attempts, so a consumer can drop the
copies a retried task sent again.

Modules, by role:

    settings  the producer settings, resolved and checked on the driver
    sink      the foreachPartition sink, the worker's producer cache and what a
              task sends (shared with the emitters)
    emitters  the Arrow and pandas emitters
    datasource  the data source (pyspark_netkafka makes PySpark find it)
"""

try:
    import pyspark  # noqa: F401 -- here, so that its absence is said clearly
except ImportError as exc:  # pragma: no cover -- depends on the environment
    raise ImportError("netkafka.spark needs PySpark: pip install pyspark") from exc

from netkafka.errors import DeliveryFailedError
from netkafka.spark.datasource import NetkafkaDataSource
from netkafka.spark.emitters import (BATCH_REPORT_SCHEMA, ROW_REPORT_SCHEMA, arrow_emitter,
                                     pandas_emitter)
from netkafka.spark.settings import CONF_PREFIX, SPARK_DEFAULTS, ProducerSettings, producer_settings
from netkafka.spark.sink import (ATTEMPT_HEADER, FIRST_ERRORS_KEPT, PARTITION_HEADER,
                                 PROVENANCE_HEADERS, ROW_HEADER, SINK_CHUNK_ROWS, STAGE_HEADER,
                                 TASK_HEADER, WORKER_PRODUCERS_KEPT, leased_producer,
                                 partition_sink, producer_label, worker_producer)

__all__ = [
    "ATTEMPT_HEADER",
    "BATCH_REPORT_SCHEMA",
    "CONF_PREFIX",
    "DeliveryFailedError",
    "FIRST_ERRORS_KEPT",
    "NetkafkaDataSource",
    "PARTITION_HEADER",
    "PROVENANCE_HEADERS",
    "ProducerSettings",
    "ROW_HEADER",
    "ROW_REPORT_SCHEMA",
    "SINK_CHUNK_ROWS",
    "SPARK_DEFAULTS",
    "STAGE_HEADER",
    "TASK_HEADER",
    "WORKER_PRODUCERS_KEPT",
    "arrow_emitter",
    "leased_producer",
    "pandas_emitter",
    "partition_sink",
    "producer_label",
    "producer_settings",
    "worker_producer",
]
