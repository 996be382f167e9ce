"""Writing a Spark DataFrame to Kafka: netkafka's Spark paths vs Spark's own Kafka sink.

One DataFrame, written by each sink in turn to the same local broker (BROKER_JVM_OPTIONS) in
one run, through one Spark session (local[2]: two task threads, two Python workers):

    spark kafka sink          df.write.format("kafka"): Spark's JVM sink (spark-sql-kafka-0-10,
                              fetched by `make spark-kafka`), the Java producer in the executor
    netkafka data source      df.write.format("netkafka"): the data source, at-least-once (the
                              same options as Spark's sink)
    netkafka data source      the same with exactlyOnce=true (a writeId per round): a
      exactly-once            transaction and a commit marker per Spark partition
    netkafka arrow emitter    df.mapInArrow(netkafka.spark.arrow_emitter(...)) with one report
                              per Arrow batch, summed by Spark (the job's result)
    netkafka partition sink   df.foreachPartition(netkafka.spark.partition_sink(...))
    confluent-kafka sink      df.foreachPartition(spark_confluent.partition_sink(...)): one
                              librdkafka producer per Python worker, as netkafka's
    netkafka stage: consume   the data source cut short (bench/spark_stages.py, acks=1 only):
    netkafka stage: columns   its Arrow writer only reads the batches (JVM -> Arrow -> Python
                              worker), or also builds their send_batch() columns; the full
                              data source's time and CPU beyond them are the encoder, the
                              send and the broker's

The DataFrame: ROWS rows (NETKAFKA_SPARK_BENCH_ROWS; 10,000,000 by default, SMOKE_ROWS under
--benchmark-disable) in SPARK_PARTITIONS partitions, one binary column `value` of VALUE_BYTES
bytes, each row's own (its id, left-padded), no key.  It is cached in memory and counted
before the first round, so generating it is not measured.

Every sink: acks=1 or all (ACKS_LEVELS; Spark's sink and the data source at both, the
exactly-once data source at all, which transactions need, the other sinks at 1), batch
size 1 MiB, linger 5 ms, no compression, no idempotence (acks=1 turns it off in each
client; at acks=all each client's default), one producer per process
reused across tasks (the exactly-once data source: one per task).  Each round
writes to a new topic of TOPIC_PARTITIONS partitions.  A round is timed from the action's
start to its return, i.e. the job's end, which each sink reaches only once the broker has
acknowledged every record (the Spark sink closes its writer per task, netkafka and
confluent-kafka flush at the end of the partition).  After each round the topic's end
offsets (ListOffsets, by confluent-kafka's admin client) must add up to ROWS (exactly-once:
ROWS plus at most one transaction marker per Spark and topic partition), so a sink that
loses or duplicates records fails; with ROWS up to CONTENT_CHECK_ROWS the topic is also
read back (netkafka.testing.reader, read_committed) and compared value for value.

extra_info: rows, acks, rows_per_s (from the minimum time), ratio_to_spark_sink (same acks),
executor_cpu_ns_per_row (the median round's CPU of the Spark JVM and its Python workers --
in local mode the executor, with the driver's small share -- per row), of which
python_worker_cpu_ns_per_row is the Python workers' (all but the JVM's own threads), the Spark and
connector versions and the load average.  A table of the same is printed at the end.

    NETKAFKA_SPARK_BENCH_ROWS=10000000 .venv/bin/python -m pytest bench/test_bench_spark.py \\
        --benchmark-only --benchmark-columns=min,median,rounds
    .venv/bin/python -m pytest bench/test_bench_spark.py --benchmark-disable   # smoke
"""
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

import spark_confluent  # noqa: E402  (bench/, on the executors' PYTHONPATH too)
import spark_kafka  # noqa: E402
import spark_stages  # noqa: E402  (bench/, on the executors' PYTHONPATH too)
from rounds import process_cpu_s, process_tree_cpu_s  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import OffsetSpec  # noqa: E402

from netkafka.testing.admin import admin_client, create_topic  # noqa: E402
from netkafka.testing.reader import read_topic  # noqa: E402

ROWS_VARIABLE = "NETKAFKA_SPARK_BENCH_ROWS"
ROUNDS_VARIABLE = "NETKAFKA_SPARK_BENCH_ROUNDS"
DEFAULT_ROWS = 10_000_000
SMOKE_ROWS = 20_000
DEFAULT_ROUNDS = 3
WARMUP_ROUNDS = 1
VALUE_BYTES = 100
SPARK_PARTITIONS = 4
TOPIC_PARTITIONS = 6
CONTENT_CHECK_ROWS = 200_000
# The cached DataFrame lives in the driver's heap in local mode: 10M rows of 100 B take
# about 1.1 GB of it.
DRIVER_MEMORY = "4g"
ADMIN_TIMEOUT_S = 30.0

ACKS_LEVELS = (1, "all")
# The sinks measured at acks=all; the others at acks=1 only.  Exactly-once runs at acks=all
# only: transactions need it (netkafka refuses acks=1 with a transactional id, as Java does).
AT_ACKS_ALL = ("spark kafka sink", "netkafka data source", "netkafka data source exactly-once")
AT_ACKS_ALL_ONLY = ("netkafka data source exactly-once",)
BATCH_BYTES = 1 << 20
LINGER_MS = 5

SPARK_SINK = "spark kafka sink"


def _rows(config) -> int:
    if os.environ.get(ROWS_VARIABLE):
        rows = int(os.environ[ROWS_VARIABLE])
        if rows < 1:
            raise ValueError(f"{ROWS_VARIABLE} must be at least 1, got {rows}")
        return rows
    return SMOKE_ROWS if config.getoption("benchmark_disable") else DEFAULT_ROWS


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    bench_dir = Path(__file__).resolve().parent
    netkafka_root = Path(sys.modules["netkafka"].__file__).resolve().parent.parent
    with pytest.MonkeyPatch.context() as patch:
        # The workers run this interpreter (PySpark reads only the environment for it) and
        # import this checkout's netkafka and bench/spark_confluent.py by name.
        patch.setenv("PYSPARK_PYTHON", sys.executable)
        session = (SparkSession.builder.master("local[2]").appName("netkafka-bench-spark")
                   .config("spark.jars", ",".join(spark_kafka.connector_jars()))
                   .config("spark.driver.memory", DRIVER_MEMORY)
                   .config("spark.ui.enabled", "false")
                   .config("spark.executorEnv.PYTHONPATH",
                           os.pathsep.join([str(bench_dir), str(netkafka_root)]))
                   .getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        for source in spark_stages.STAGE_SOURCES:
            session.dataSource.register(source)
        try:
            yield session
        finally:
            session.stop()


@pytest.fixture(scope="module")
def rows(request):
    return _rows(request.config)


@pytest.fixture(scope="module")
def frame(spark, rows):
    """The DataFrame every sink writes, cached in memory and fully computed."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    df = (spark.range(rows, numPartitions=SPARK_PARTITIONS)
          .select(F.lpad(F.col("id").cast("string"), VALUE_BYTES, ".").cast("binary")
                  .alias("value"))
          .persist(StorageLevel.MEMORY_ONLY))
    assert df.count() == rows
    cached = [info for info in spark.sparkContext._jsc.sc().getRDDStorageInfo()
              if info.numCachedPartitions() > 0]
    if sum(info.numCachedPartitions() for info in cached) != SPARK_PARTITIONS:
        raise RuntimeError(f"the DataFrame does not fit in memory ({DRIVER_MEMORY} driver): "
                           f"lower {ROWS_VARIABLE}")
    yield df
    df.unpersist()


@pytest.fixture(scope="module")
def results(request):
    """rows/s of each sink in this run (for the ratios), printed as a table at the end."""
    measured = {}
    yield measured
    if not measured:
        return
    plugins = request.config.pluginmanager
    reporter = plugins.get_plugin("terminalreporter")
    # A fixture's teardown runs under output capture, which would swallow the table.
    with plugins.get_plugin("capturemanager").global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line(f"Spark -> Kafka, {_rows(request.config):,} rows x {VALUE_BYTES} "
                            f"B (rows/s from the minimum time; executor CPU per row, median)")
        for (acks, sink), (rate, cpu_ns, python_ns) in measured.items():
            spark_rate = measured.get((acks, SPARK_SINK), (None,))[0]
            ratio = f"{rate / spark_rate:5.2f}x Spark's sink" if spark_rate else ""
            reporter.write_line(f"  acks={acks:<4} {sink:<34} {rate:>12,.0f} rows/s "
                                f"{cpu_ns:>8,.0f} ns/row ({python_ns:,.0f} Python)  {ratio}")


def _format_writer(source, **extra):
    """A sink writing df with format(source) and Spark's Kafka sink options (the same for
    Spark's sink and netkafka's data source); extra: more options, each a function of the
    round's topic."""

    def sink(df, bootstrap, acks):
        def write(topic):
            w = (df.write.format(source)
                 .option("kafka.bootstrap.servers", bootstrap)
                 .option("kafka.acks", str(acks))
                 .option("kafka.batch.size", str(BATCH_BYTES))
                 .option("kafka.linger.ms", str(LINGER_MS))
                 .option("topic", topic))
            for name, value in extra.items():
                w = w.option(name, value(topic))
            w.mode("append").save()

        return write

    return sink


def _netkafka_config(bootstrap, acks):
    return {"bootstrap_servers": bootstrap, "acks": acks, "batch_size": BATCH_BYTES,
            "linger_ms": LINGER_MS}


def _netkafka_arrow_emitter(df, bootstrap, acks):
    from pyspark.sql import functions as F

    from netkafka.spark import arrow_emitter

    def write(topic):
        emit = arrow_emitter(topic, _netkafka_config(bootstrap, acks), value="value",
                             report="batch")
        totals = (df.mapInArrow(emit, emit.schema)
                  .agg(F.sum("rows").alias("rows"), F.sum("delivered").alias("delivered"),
                       F.sum("failed").alias("failed"), F.first("error", True).alias("error"))
                  .collect()[0])
        if totals.failed or totals.delivered != totals.rows:
            raise AssertionError(f"netkafka's arrow emitter reported {totals}")

    return write


def _netkafka_partition_sink(df, bootstrap, acks):
    from netkafka.spark import partition_sink

    def write(topic):
        df.foreachPartition(partition_sink(topic, _netkafka_config(bootstrap, acks),
                                           value="value"))

    return write


def _confluent_sink(df, bootstrap, acks):
    config = {"bootstrap.servers": bootstrap, "acks": acks, "batch.size": BATCH_BYTES,
              "linger.ms": LINGER_MS, "enable.idempotence": False}

    def write(topic):
        df.foreachPartition(spark_confluent.partition_sink(topic, config, value="value"))

    return write


SINKS = {
    SPARK_SINK: _format_writer("kafka"),
    "netkafka data source": _format_writer("netkafka"),
    # A new write id per round: each round is a new write (the same id would skip it all).
    "netkafka data source exactly-once": _format_writer(
        "netkafka", exactlyOnce=lambda topic: "true", writeId=lambda topic: topic),
    "netkafka arrow emitter": _netkafka_arrow_emitter,
    "netkafka partition sink": _netkafka_partition_sink,
    "confluent-kafka sink": _confluent_sink,
    "netkafka stage: consume": _format_writer("netkafka_consume"),
    "netkafka stage: columns": _format_writer("netkafka_columns"),
}
# The data source cut short: nothing reaches the topic.
STAGES = ("netkafka stage: consume", "netkafka stage: columns")


class _TopicPerRound:
    """A new topic for each round (setup), the previous one checked and deleted first."""

    def __init__(self, bootstrap, base, rows, expected_values, transactional):
        self.bootstrap = bootstrap
        self.transactional = transactional  # the end offsets count transaction markers too
        self.base = base
        self.rows = rows
        self.expected_values = expected_values  # sorted values, or None: count only
        self.admin = admin_client(bootstrap)
        self.made = 0
        self.current = None

    def setup(self):
        self.finish(check=True)
        self.made += 1
        self.current = f"{self.base}-{self.made}"
        create_topic(self.bootstrap, self.current, partitions=TOPIC_PARTITIONS)
        return (self.current,), {}

    def finish(self, check):
        """Check the last round's topic, then delete it (ten rounds of 10M rows are 10 GB)."""
        topic, self.current = self.current, None
        if topic is None:
            return
        try:
            if check:
                self._check(topic)
        finally:
            self.admin.delete_topics([topic])[topic].result(timeout=ADMIN_TIMEOUT_S)

    def _check(self, topic):
        partitions = {TopicPartition(topic, p): OffsetSpec.latest()
                      for p in range(TOPIC_PARTITIONS)}
        answers = self.admin.list_offsets(partitions, request_timeout=ADMIN_TIMEOUT_S)
        written = sum(future.result().offset for future in answers.values())
        markers = SPARK_PARTITIONS * TOPIC_PARTITIONS if self.transactional else 0
        assert self.rows <= written <= self.rows + markers, (
            f"{topic}: {written} offsets, expected {self.rows} records (+ up to {markers} "
            f"transaction markers)")
        if self.expected_values is not None:
            records = read_topic(self.bootstrap, topic, expected_count=self.rows,
                                 isolation_level="read_committed")
            assert len(records) == self.rows
            assert sorted(record.value for record in records) == self.expected_values


def _cases():
    return [pytest.param(acks, sink, id=f"acks={acks}-{sink}") for acks in ACKS_LEVELS
            for sink in SINKS
            if (acks == 1 and sink not in AT_ACKS_ALL_ONLY)
            or (acks == "all" and sink in AT_ACKS_ALL)]


@pytest.mark.parametrize("acks, sink", _cases())
def test_spark_to_kafka(benchmark, kafka_broker, topic_name, spark, frame, rows, results, acks,
                        sink):
    connector = spark_kafka.connector_version()
    if sink == SPARK_SINK and connector != pyspark.__version__:
        warnings.warn(f"Spark's Kafka sink is spark-sql-kafka-0-10 {connector} in Spark "
                      f"{pyspark.__version__}: the connector of this Spark was not published")
    expected = None
    if rows <= CONTENT_CHECK_ROWS:
        expected = sorted(str(i).rjust(VALUE_BYTES, ".").encode() for i in range(rows))
    if sink in STAGES:
        expected = None
    rounds_topics = _TopicPerRound(kafka_broker.bootstrap, topic_name,
                                   0 if sink in STAGES else rows, expected,
                                   transactional="exactly-once" in sink)
    write = SINKS[sink](frame, kafka_broker.bootstrap, acks)
    # The Spark JVM (the gateway's process, this one's child) and its Python workers.
    executor_pid = spark.sparkContext._gateway.proc.pid
    cpu_s = []  # per round: (executor, its Python workers)

    def measured_write(topic):
        before, jvm_before = process_tree_cpu_s(executor_pid), process_cpu_s(executor_pid)
        write(topic)
        executor = process_tree_cpu_s(executor_pid) - before
        cpu_s.append((executor, executor - (process_cpu_s(executor_pid) - jvm_before)))

    rounds = int(os.environ.get(ROUNDS_VARIABLE) or DEFAULT_ROUNDS)
    benchmark.group = f"Spark -> Kafka, {rows} rows x {VALUE_BYTES} B, acks={acks}"
    # suite and sink: the keys by which bench/report.py puts this run in its Spark table.
    benchmark.extra_info.update(suite="spark", sink=sink, acks=acks, rows=rows,
                                spark=pyspark.__version__, spark_kafka_connector=connector,
                                load_average=[round(x, 2) for x in os.getloadavg()])
    try:
        benchmark.pedantic(measured_write, setup=rounds_topics.setup, rounds=rounds,
                           iterations=1, warmup_rounds=WARMUP_ROUNDS)
    except BaseException:
        rounds_topics.finish(check=False)
        raise
    rounds_topics.finish(check=True)
    if benchmark.disabled:
        return
    rate = rows / benchmark.stats.stats.min
    cpu_ns, python_ns = (statistics.median(each) * 1e9 / rows
                         for each in zip(*cpu_s[WARMUP_ROUNDS:]))
    results[(acks, sink)] = (rate, cpu_ns, python_ns)
    benchmark.extra_info["rows_per_s"] = round(rate)
    benchmark.extra_info["executor_cpu_ns_per_row"] = round(cpu_ns)
    benchmark.extra_info["python_worker_cpu_ns_per_row"] = round(python_ns)
    if (acks, SPARK_SINK) in results:
        benchmark.extra_info["ratio_to_spark_sink"] = round(
            rate / results[(acks, SPARK_SINK)][0], 3)
