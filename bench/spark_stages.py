"""Where the time of df.write.format("netkafka") goes: the data source cut short at each stage.

bench/test_bench_spark.py writes its cached DataFrame through each of these beside the full
data source; the differences between them are the stages' shares (issue 17 item 5):

    netkafka_consume   the Arrow writer reads every batch Spark hands it and drops it:
                       the JVM's rows to Arrow, the batches to the Python worker, the worker
    netkafka_columns   the same, and each batch's send_batch() columns built as the data
                       source builds them (FrameColumns.columns): all but send_batch()
    format("netkafka") the whole write: adds the encoder, the send and the broker's answer

Imported by name on the executors (the benchmark puts bench/ on their PYTHONPATH), so the
classes pickled with the writers are found there.
"""
from pyspark import TaskContext

from netkafka.spark.datasource import NetkafkaArrowWriter, NetkafkaDataSource, SinkPlan, TaskCommit
from netkafka.spark.emitters import FrameColumns


class ConsumeSource(NetkafkaDataSource):
    """format("netkafka_consume"): the options and columns checked as the data source
    checks them, the batches read and dropped."""

    @classmethod
    def name(cls):
        return "netkafka_consume"

    def writer(self, schema, overwrite):
        return ConsumeWriter(SinkPlan(self.options, schema))


class ColumnsSource(NetkafkaDataSource):
    """format("netkafka_columns"): the batches read and their columns built, not sent."""

    @classmethod
    def name(cls):
        return "netkafka_columns"

    def writer(self, schema, overwrite):
        return ColumnsWriter(SinkPlan(self.options, schema))


class ConsumeWriter(NetkafkaArrowWriter):
    def write(self, iterator):
        rows = sum(len(frame) for frame in iterator)
        return TaskCommit(TaskContext.get().partitionId(), rows, skipped=False)


class ColumnsWriter(NetkafkaArrowWriter):
    def write(self, iterator):
        import pyarrow

        emission = self.plan.emission
        rows = 0
        for frame in iterator:
            columns = FrameColumns(pyarrow, frame, False)
            columns.columns(emission, None, rows)
            rows += columns.count
        return TaskCommit(TaskContext.get().partitionId(), rows, skipped=False)


STAGE_SOURCES = (ConsumeSource, ColumnsSource)
