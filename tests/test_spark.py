"""netkafka.spark with real PySpark (local mode) against the real broker.

One SparkSession serves the module; its JVM is shut down at the end.  The master is
local[2,4]: two task threads, and a task may fail up to 4 times (local mode's way of
setting spark.task.maxFailures), so the injected failures are retried.

What the jobs wrote is read back by the independent reader.  Every value carries the
row's id (b"v-" + 12 digits + filler: 100 bytes), so any record can be regenerated
and compared byte for byte, and a missing or repeated row shows.
"""
import contextlib
import os
import random
import sys
import threading
import time
import tracemalloc
from collections import Counter, defaultdict

# pyspark, pyarrow and pandas are test dependencies: missing, they fail the module
# rather than skip it.
import numpy
import pandas
import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from pyspark import TaskContext, cloudpickle
from pyspark.sql import SparkSession

from netkafka import spark as nks
from netkafka.client.sasl.oauthbearer import OidcClientCredentialsProvider
from netkafka.errors import (IllegalArgumentError, InvalidTopicError, JaasConfigError,
                             KafkaTimeoutError, SslConfigError)
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

MILLION = 1_000_000
SPARK_PARTITIONS = 8
TOPIC_PARTITIONS = 4
KEYS = 997
FILLER = 86  # b"v-" + 12 digits + 86 bytes: 100-byte values
SAMPLE = 2000


@pytest.fixture(scope="module")
def spark():
    session = local_session(sys.modules[__name__], "netkafka-test-spark")
    try:
        yield session
    finally:
        _stop(session)


def local_session(module, app_name, **conf):
    """A local[2,4] session for a test module: two task threads, a task may fail 4 times.
    conf: more Spark conf keys ("spark.jars", ...), the defaults' overridden."""
    # The Python workers must be this interpreter (with netkafka importable), not
    # whatever python3 is first on PATH.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # The workers cannot import the test module (tests/ is not a package on their
    # path): its functions travel by value.
    cloudpickle.register_pickle_by_value(module)
    builder = SparkSession.builder.master("local[2,4]").appName(app_name)
    for key, value in {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4",
                       "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
                       **conf}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _stop(session):
    """Stops the session and the JVM that PySpark started for it: the gateway
    server exits when its stdin closes."""
    from pyspark import SparkContext
    gateway = SparkContext._gateway
    session.stop()
    if gateway is None:
        return
    process = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = SparkContext._jvm = None
    if process is not None:
        process.stdin.close()
        try:
            process.wait(30)
        except Exception:  # noqa: BLE001 -- a JVM that does not leave is killed
            process.kill()
            process.wait(30)


def config(kafka_broker, **extra):
    return {"bootstrap_servers": kafka_broker.bootstrap, "max_block_ms": 30000, **extra}


def rows_frame(spark, count, partitions=SPARK_PARTITIONS):
    """id, key (b"k<id % KEYS>") and value (100 bytes naming the id), binary."""
    return spark.range(0, count, numPartitions=partitions).selectExpr(
        "id",
        f"cast(concat('k', cast(id % {KEYS} as string)) as binary) as key",
        f"cast(concat('v-', lpad(cast(id as string), 12, '0'), repeat('x', {FILLER})) "
        f"as binary) as value")


def expected_value(row_id):
    return b"v-%012d" % row_id + b"x" * FILLER


def row_id(record):
    return int(record.value[2:14])


def check_delivered(bootstrap, topic, count, partitions=SPARK_PARTITIONS):
    """Every row exactly once, byte-exact, where Java's partitioner puts its key, and
    in order within its key and Spark partition.  Returns the records."""
    records = read_topic(bootstrap, topic, count, timeout_s=120)
    ids = [row_id(r) for r in records]
    assert len(records) == count
    assert sorted(ids) == list(range(count))
    for record in random.Random(7).sample(records, SAMPLE):
        rid = row_id(record)
        assert record.value == expected_value(rid)
        assert record.key == b"k%d" % (rid % KEYS)
    placement = {}
    for key_number in range(KEYS):
        key = b"k%d" % key_number
        placement[key] = (kafka_python_murmur2(key) & 0x7FFFFFFF) % TOPIC_PARTITIONS
    last = {}  # (key, Spark partition) -> last id met, in each Kafka partition's order
    per_slice = count // partitions  # spark.range splits evenly
    for record, rid in zip(records, ids):
        assert record.partition == placement[record.key]
        where = (record.key, rid // per_slice)
        assert last.get(where, -1) < rid, f"{where}: {rid} after {last[where]}"
        last[where] = rid
    return records


# ----------------------------------------------------------------------------------
# A million rows through each path


def test_partition_sink_sends_a_million_rows(spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    sink = nks.partition_sink(topic_name, config(kafka_broker), key="key", value="value")
    rows_frame(spark, MILLION).foreachPartition(sink)
    check_delivered(kafka_broker.bootstrap, topic_name, MILLION)


def test_arrow_emitter_sends_a_million_rows_with_one_producer_per_worker(
        spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    emit = nks.arrow_emitter(topic_name, config(kafka_broker), key="key", value="value")
    assert emit.schema == nks.BATCH_REPORT_SCHEMA
    reports = rows_frame(spark, MILLION).mapInArrow(emit, emit.schema).collect()
    assert sum(r.rows for r in reports) == MILLION
    assert sum(r.delivered for r in reports) == MILLION
    assert [r for r in reports if r.failed or r.error is not None] == []
    # One report per input batch of at most 20,000 rows, each from the producer of
    # the worker process that ran the task: fewer producers than tasks, one per pid.
    assert len(reports) >= MILLION // 20000
    producers = {r.producer for r in reports}
    pids = {label.split(":")[1] for label in producers}
    assert len(producers) == len(pids) < SPARK_PARTITIONS
    check_delivered(kafka_broker.bootstrap, topic_name, MILLION)


def test_pandas_emitter_sends_a_million_rows_with_row_reports(spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    emit = nks.pandas_emitter(topic_name, config(kafka_broker), key="key", value="value",
                              report="row")
    reports = rows_frame(spark, MILLION).mapInPandas(emit, emit.schema)
    reported = reports.toPandas()
    assert len(reported) == MILLION
    assert reported["error"].isna().all()
    records = check_delivered(kafka_broker.bootstrap, topic_name, MILLION)
    # The reports name exactly the positions the records were read from.
    assert set(zip(reported["partition"].tolist(), reported["offset"].tolist())) == {
        (r.partition, r.offset) for r in records}


# ----------------------------------------------------------------------------------
# One producer per worker, not per task; fork


def test_partition_sink_uses_one_producer_per_worker_process(spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    settings = nks.producer_settings(config(kafka_broker))
    sink = nks.partition_sink(topic_name, settings, value=lambda row: b"%d" % row)
    tasks = 16

    def run(rows):
        sink(rows)
        producer = nks.worker_producer(settings)
        yield (os.getpid(), id(producer), producer.metrics()["netkafka"]["records_acknowledged"])

    seen = spark.sparkContext.parallelize(range(1600), tasks).mapPartitions(run).collect()
    assert len(seen) == tasks
    pids = {pid for pid, _, _ in seen}
    producers = {(pid, producer) for pid, producer, _ in seen}
    assert len(producers) == len(pids) < tasks
    # Each worker's producer kept counting across the tasks it ran.
    assert max(acked for _, _, acked in seen) > 100
    assert len(read_topic(kafka_broker.bootstrap, topic_name, 1600)) == 1600


def test_a_worker_keeps_the_producers_of_a_few_configurations(spark, kafka_broker, topic_name):
    """Tasks with ever-new settings: each worker process keeps the producers of at most
    WORKER_PRODUCERS_KEPT configurations (counted by their I/O threads, one each), the
    older ones closed, and every record of every configuration is delivered."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    kept = nks.WORKER_PRODUCERS_KEPT
    configurations = 3 * kept + 2
    rows_each = 50
    sinks = [nks.partition_sink(topic_name, config(kafka_broker, client_id=f"config-{i}"),
                                value=lambda row: b"%d" % row)
             for i in range(configurations)]

    def run(index, rows):
        sinks[index](rows)  # Spark partition i: configuration i
        yield os.getpid(), sum(thread.name.startswith("netkafka-io-")
                               for thread in threading.enumerate())

    seen = spark.sparkContext.parallelize(range(configurations * rows_each),
                                          configurations).mapPartitionsWithIndex(run).collect()
    # A worker ran more configurations than it keeps, yet held no more producers.
    assert max(Counter(pid for pid, _ in seen).values()) > kept
    assert max(io_threads for _, io_threads in seen) <= kept
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name,
                                          configurations * rows_each)]
    assert sorted(map(int, values)) == list(range(configurations * rows_each))


def test_the_cache_closes_no_producer_a_task_holds(kafka_broker, topic_name):
    """An emitter part-way through its partition holds its producer: the
    configurations another task of the process uses meanwhile close only idle
    producers, and the held one delivers the rest of its partition."""
    create_topic(kafka_broker.bootstrap, topic_name)
    held_settings = nks.producer_settings(config(kafka_broker, client_id="held"))
    others = [nks.partition_sink(topic_name, config(kafka_broker, client_id=f"other-{i}"),
                                 value=0)
              for i in range(nks.WORKER_PRODUCERS_KEPT + 2)]

    def frames():
        yield pa.record_batch({"value": [b"held-a-%d" % i for i in range(100)]})
        for i, sink in enumerate(others):  # another task, while this one holds its producer
            sink([(b"other-%d-%d" % (i, j),) for j in range(10)])
        yield pa.record_batch({"value": [b"held-b-%d" % i for i in range(100)]})

    producer = nks.worker_producer(held_settings)
    reports = list(nks.arrow_emitter(topic_name, held_settings, value="value",
                                     on_error="raise")(frames()))
    assert sum(report.num_rows for report in reports) == 2
    assert nks.worker_producer(held_settings) is producer  # kept throughout
    expected = ([b"held-%s-%d" % (part, i) for part in (b"a", b"b") for i in range(100)]
                + [b"other-%d-%d" % (i, j) for i in range(len(others)) for j in range(10)])
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, len(expected))]
    assert sorted(values) == sorted(expected)


def test_worker_producer_returns_a_live_producer_when_held_ones_fill_the_cache(
        kafka_broker, topic_name):
    """Every kept configuration's producer held by a task: worker_producer() of one
    more gives a producer that sends (the cache is over its bound until one is
    released), not one it closed on the way out."""
    create_topic(kafka_broker.bootstrap, topic_name)
    with contextlib.ExitStack() as held:
        for i in range(nks.WORKER_PRODUCERS_KEPT):
            held.enter_context(nks.leased_producer(config(kafka_broker, client_id=f"held-{i}")))
        producer = nks.worker_producer(config(kafka_broker, client_id="one-more"))
        producer.send(topic_name, b"sent").get(30)
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [b"sent"]


def test_a_forked_worker_keeps_its_producer_and_delivers(kafka_broker, topic_name):
    """PySpark's daemon forks workers: a child keeps the cached producer, which
    restarts its own threads there."""
    create_topic(kafka_broker.bootstrap, topic_name)
    settings = nks.producer_settings(config(kafka_broker))
    sink = nks.partition_sink(topic_name, settings, value=0)
    sink([(b"parent-%d" % i,) for i in range(100)])
    parent_producer = nks.worker_producer(settings)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            sink([(b"child-%d" % i,) for i in range(100)])
            same = nks.worker_producer(settings) is parent_producer
            os.write(write_end, b"same" if same else b"other")
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    answer = os.read(read_end, 16)
    os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0
    assert answer == b"same"
    sink([(b"parent-again-%d" % i,) for i in range(100)])
    values = sorted(r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 300))
    assert values == sorted([b"parent-%d" % i for i in range(100)]
                            + [b"child-%d" % i for i in range(100)]
                            + [b"parent-again-%d" % i for i in range(100)])


# ----------------------------------------------------------------------------------
# Retried tasks: at least once, and provenance tells the copies apart


def inject_failure(settings, what):
    """Raises in a task's first attempt, after what the worker's producer holds is
    delivered: the rows the failed attempt sent are surely in the topic."""
    nks.worker_producer(settings).flush()
    raise RuntimeError(f"injected failure at {what}")


def fail_once_at(settings, row_to_fail):
    """A value function for the partition sink that fails at one row in a task's
    first attempt only."""

    def value(row):
        if row.id == row_to_fail and TaskContext.get().attemptNumber() == 0:
            inject_failure(settings, f"row {row_to_fail}")
        return row.value

    return value


def check_at_least_once_with_provenance(bootstrap, topic, count, failed_partition):
    records = read_topic(bootstrap, topic, count, timeout_s=120)
    ids = [row_id(r) for r in records]
    assert set(ids) == set(range(count))
    assert len(ids) > count  # the failed attempt's first rows arrived too
    copies = defaultdict(list)
    for record, rid in zip(records, ids):
        headers = dict(record.headers)
        assert record.value == expected_value(rid)
        provenance = (int(headers[nks.STAGE_HEADER]), int(headers[nks.PARTITION_HEADER]),
                      int(headers[nks.ROW_HEADER]))
        copies[provenance].append((rid, int(headers[nks.ATTEMPT_HEADER]),
                                   int(headers[nks.TASK_HEADER])))
    # (stage, partition, row) names a row: de-duplicating by it leaves every row once.
    assert len(copies) == count
    assert all(len({rid for rid, _, _ in c}) == 1 for c in copies.values())
    repeated = [(p, c) for p, c in copies.items() if len(c) > 1]
    assert repeated
    for (_, partition, _), c in repeated:
        assert partition == failed_partition
        assert sorted(attempt for _, attempt, _ in c) == [0, 1]
        assert len({task for _, _, task in c}) == 2


def test_partition_sink_task_failing_midway_is_retried_at_least_once(
        spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    count, partitions = 100_000, 4
    # Row 35,000 sits in the middle of Spark partition 1 (25,000..49,999), after a
    # whole chunk of that partition was sent.
    settings = nks.producer_settings(config(kafka_broker))
    sink = nks.partition_sink(topic_name, settings, key="key",
                              value=fail_once_at(settings, 35_000), provenance=True)
    rows_frame(spark, count, partitions).foreachPartition(sink)
    check_at_least_once_with_provenance(kafka_broker.bootstrap, topic_name, count, 1)


def test_arrow_emitter_task_failing_midway_is_retried_at_least_once(
        spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    count, partitions = 100_000, 2
    settings = nks.producer_settings(config(kafka_broker))

    def value(batch):
        # Fails at the batch holding row 75,000 (in partition 1: 50,000..99,999),
        # after 20,000-row batches of that partition went out, in attempt 0 only.
        ids = batch.column("id")
        if TaskContext.get().attemptNumber() == 0 and ids[0].as_py() <= 75_000 <= ids[-1].as_py():
            inject_failure(settings, "row 75000")
        return batch.column("value")

    emit = nks.arrow_emitter(topic_name, settings, key="key", value=value, provenance=True)
    reports = rows_frame(spark, count, partitions).mapInArrow(emit, emit.schema).collect()
    # The reports are the successful attempts': every row once.
    assert sum(r.delivered for r in reports) == count
    check_at_least_once_with_provenance(kafka_broker.bootstrap, topic_name, count, 1)


# ----------------------------------------------------------------------------------
# Mapping rows: column names and indices, functions, headers, partitions, timestamps


def test_rdd_sink_maps_dicts_tuples_and_functions(spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    base_ms = 1_700_000_000_000
    dicts = spark.sparkContext.parallelize(
        [{"k": "key-%d" % i, "v": "värde-%d" % i, "p": i % 3, "ts": base_ms + i,
          "trace": b"t%d" % i, "source": "rdd"} for i in range(300)], 3)
    dicts.foreachPartition(nks.partition_sink(
        topic_name, config(kafka_broker), key="k", value="v", partition="p",
        timestamp="ts", headers=["trace", "source"]))
    tuples = spark.sparkContext.parallelize([(i, b"tuple-%d" % i) for i in range(300)], 2)
    tuples.foreachPartition(nks.partition_sink(
        topic_name, config(kafka_broker), value=1,
        # None: the partitioner's choice (sticky: these rows have no key).
        partition=lambda row: None if row[0] % 10 == 7 else row[0] % 3,
        headers=lambda row: [("n", b"%d" % row[0])], provenance=True))
    records = read_topic(kafka_broker.bootstrap, topic_name, 600)
    assert len(records) == 600
    by_value = {r.value: r for r in records}
    for i in range(300):
        record = by_value[("värde-%d" % i).encode()]
        assert (record.key, record.partition, record.timestamp_ms) == (
            b"key-%d" % i, i % 3, base_ms + i)
        assert record.headers == [("trace", b"t%d" % i), ("source", b"rdd")]
        record = by_value[b"tuple-%d" % i]
        assert record.key is None
        if i % 10 != 7:
            assert record.partition == i % 3
        # The function's headers, then the provenance ones: 150 rows a partition.
        assert [name for name, _ in record.headers] == ["n", *nks.PROVENANCE_HEADERS]
        headers = dict(record.headers)
        assert (headers["n"], headers[nks.PARTITION_HEADER], headers[nks.ROW_HEADER]) == (
            b"%d" % i, b"%d" % (i // 150), b"%d" % (i % 150))


def test_arrow_emitter_reads_string_columns_partitions_and_timestamps(
        spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    frame = spark.range(0, 3000, numPartitions=2).selectExpr(
        "concat('key-', cast(id as string)) as k",
        "concat('value-', cast(id as string)) as v",
        "cast(id % 3 as int) as p",
        "timestamp_millis(1700000000000 + id) as ts",
        "id")
    emit = nks.arrow_emitter(topic_name, config(kafka_broker), key="k", value="v",
                             partition="p", timestamp="ts", report="row")
    assert emit.schema == nks.ROW_REPORT_SCHEMA
    reports = frame.mapInArrow(emit, emit.schema).collect()
    assert len(reports) == 3000 and all(r.error is None for r in reports)
    records = read_topic(kafka_broker.bootstrap, topic_name, 3000)
    assert {(r.partition, r.offset) for r in reports} == {(r.partition, r.offset)
                                                         for r in records}
    for record in records:
        i = int(record.value[len(b"value-"):])
        assert (record.key, record.partition, record.timestamp_ms) == (
            b"key-%d" % i, i % 3, 1_700_000_000_000 + i)


def test_pandas_emitter_reads_int_columns_with_nulls_that_pandas_made_floats(
        spark, kafka_broker, topic_name):
    # mapInPandas hands an int column with nulls as float64 with NaN: still the
    # partition (null: the partitioner's) and the epoch ms (null: now).
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    before_ms = int(time.time() * 1000)
    frame = spark.range(0, 30, numPartitions=1).selectExpr(
        "cast(cast(id as string) as binary) as value",
        "if(id % 3 = 0, null, cast(id % 2 as int)) as p",
        "if(id % 4 = 0, null, 1700000000000 + id) as ts")
    emit = nks.pandas_emitter(topic_name, config(kafka_broker), partition="p", timestamp="ts",
                              on_error="raise")
    assert sum(r.delivered for r in frame.mapInPandas(emit, emit.schema).collect()) == 30
    for record in read_topic(kafka_broker.bootstrap, topic_name, 30):
        i = int(record.value)
        if i % 3:
            assert record.partition == i % 2
        if i % 4:
            assert record.timestamp_ms == 1_700_000_000_000 + i
        else:
            assert record.timestamp_ms >= before_ms
    fractions = pandas.DataFrame({"value": [b"v"], "p": [0.5]})
    emit = nks.pandas_emitter(topic_name, config(kafka_broker), partition="p")
    with pytest.raises(TypeError, match="partition: a column of double with a fraction"):
        list(emit(iter([fractions])))


def test_pandas_emitter_timestamps_are_instants_in_any_session_time_zone(
        spark, kafka_broker, topic_name):
    # mapInPandas hands timestamps as naive wall times of the session's time zone;
    # they were sent as if UTC, off by the zone's offset.
    create_topic(kafka_broker.bootstrap, topic_name)
    zone = "spark.sql.session.timeZone"
    before = spark.conf.get(zone)
    spark.conf.set(zone, "America/New_York")
    try:
        frame = spark.range(0, 10, numPartitions=1).selectExpr(
            "cast(cast(id as string) as binary) as value",
            "timestamp_millis(1700000000000 + id * 3600000) as ts")
        emit = nks.pandas_emitter(topic_name, config(kafka_broker), timestamp="ts",
                                  on_error="raise")
        assert sum(r.delivered for r in frame.mapInPandas(emit, emit.schema).collect()) == 10
    finally:
        spark.conf.set(zone, before)
    records = read_topic(kafka_broker.bootstrap, topic_name, 10)
    assert sorted((int(r.value), r.timestamp_ms) for r in records) == [
        (i, 1_700_000_000_000 + i * 3_600_000) for i in range(10)]


# ----------------------------------------------------------------------------------
# Configuration, and what goes wrong


def test_spark_conf_keys_configure_the_executors_producers(spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    spark.conf.set(nks.CONF_PREFIX + "bootstrap.servers", kafka_broker.bootstrap)
    spark.conf.set(nks.CONF_PREFIX + "linger.ms", "20")
    spark.conf.set(nks.CONF_PREFIX + "enable.idempotence", "false")
    spark.conf.set(nks.CONF_PREFIX + "acks", "1")
    try:
        settings = nks.producer_settings({"compression.type": "lz4"})
        assert settings.kwargs == {"bootstrap_servers": kafka_broker.bootstrap,
                                   "linger_ms": 20, "enable_idempotence": False, "acks": 1,
                                   "compression_type": "lz4", "batch_size": 1024 * 1024}
        sink = nks.partition_sink(topic_name, {"compression.type": "lz4"}, value="value")

        def run(rows):
            sink(rows)
            yield nks.worker_producer(settings).config.linger_ms

        lingers = rows_frame(spark, 1000, 2).rdd.mapPartitions(run).collect()
    finally:
        for key in ("bootstrap.servers", "linger.ms", "enable.idempotence", "acks"):
            spark.conf.unset(nks.CONF_PREFIX + key)
    assert lingers == [20, 20]
    assert len(read_topic(kafka_broker.bootstrap, topic_name, 1000)) == 1000


@pytest.mark.parametrize("listener, where", [("SASL_SSL_SCRAM_SHA_512", "conf"),
                                             ("MTLS", "conf"), ("SASL_SSL_SCRAM_SHA_256", "dict")])
def test_java_security_settings_reach_the_secured_broker(spark, secured_broker, topic_name,
                                                         listener, where):
    """A Java client's security settings (PEM stores, sasl.jaas.config) given as Spark conf
    keys or in the settings dict: the executors' producers authenticate as alice (SCRAM or
    her certificate), and bob reads every row back on the same listener."""
    create_topic(secured_broker.listeners["PLAINTEXT"].bootstrap, topic_name,
                 partitions=TOPIC_PARTITIONS)
    java = secured_broker.java_client_config(listener)
    if where == "conf":
        for key, value in java.items():
            spark.conf.set(nks.CONF_PREFIX + key, value)
    try:
        emit = nks.arrow_emitter(topic_name, None if where == "conf" else java,
                                 key="key", value="value")
        frame = rows_frame(spark, 20_000, 4)
        reports = frame.mapInArrow(emit, emit.schema).collect()
    finally:
        for key in java if where == "conf" else ():
            spark.conf.unset(nks.CONF_PREFIX + key)
    assert sum(r.delivered for r in reports) == 20_000 and sum(r.failed for r in reports) == 0
    settings = emit.emission.settings.kwargs
    assert settings["security_protocol"] == java["security.protocol"]
    assert settings["ssl_cafile"] == str(secured_broker.ca_file) and settings["ssl_check_hostname"]
    records = read_topic(secured_broker.listeners[listener].bootstrap, topic_name, 20_000,
                         timeout_s=120, client_config=secured_broker.client_config(listener, "bob"))
    assert sorted(row_id(r) for r in records) == list(range(20_000))
    assert all(r.value == expected_value(row_id(r)) for r in records)


def test_an_oidc_token_provider_travels_to_the_executors(spark, secured_broker, topic_name):
    """OAUTHBEARER has no Java-properties form here: the provider object goes in the
    settings dict, pickled into the emitter; each executor's copy fetches its own token
    from the local OIDC endpoint, which the broker checks against its JWKS."""
    listener = "SASL_SSL_OAUTHBEARER"
    spec = secured_broker.listeners[listener]
    create_topic(secured_broker.listeners["PLAINTEXT"].bootstrap, topic_name,
                 partitions=TOPIC_PARTITIONS)
    provider = OidcClientCredentialsProvider(secured_broker.oauth.token_url, "alice",
                                             secured_broker.oauth.clients["alice"])
    emit = nks.arrow_emitter(topic_name, {
        "bootstrap.servers": spec.bootstrap, "security.protocol": "SASL_SSL",
        "ssl.truststore.location": str(secured_broker.ca_file), "sasl.mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": provider}, key="key", value="value")
    reports = rows_frame(spark, 5000, 2).mapInArrow(emit, emit.schema).collect()
    assert sum(r.delivered for r in reports) == 5000 and sum(r.failed for r in reports) == 0
    records = read_topic(spec.bootstrap, topic_name, 5000, timeout_s=120,
                         client_config=secured_broker.client_config(listener, "bob"))
    assert sorted(row_id(r) for r in records) == list(range(5000))


def test_bad_configuration_is_refused_on_the_driver(kafka_broker):
    with pytest.raises(ValueError, match="no bootstrap servers"):
        nks.partition_sink("t")
    with pytest.raises(ValueError, match="bootstrap_servers entry 'h:1x': port '1x'"):
        nks.arrow_emitter("t", {"bootstrap.servers": "h:1x"})
    with pytest.raises(NotImplementedError, match="transactional_id: .* exactlyOnce=true"):
        nks.arrow_emitter("t", {"bootstrap.servers": "h:1", "transactional.id": "x"})
    with pytest.raises(TypeError, match="unknown producer setting 'linger.msec'"):
        nks.partition_sink("t", {"bootstrap.servers": "h:1", "linger.msec": 5})
    with pytest.raises(ValueError, match=r"linger.ms='soon': must be an integer"):
        nks.arrow_emitter("t", {"bootstrap.servers": "h:1", "linger.ms": "soon"})
    with pytest.raises(ValueError, match="acks must be"):
        nks.pandas_emitter("t", {"bootstrap.servers": "h:1", "acks": "some"})
    with pytest.raises(SslConfigError, match="ssl_cafile is set but security_protocol="
                                             "'PLAINTEXT' does not use TLS"):
        nks.partition_sink("t", {"bootstrap.servers": "h:1", "ssl.truststore.location": "/ca"})
    with pytest.raises(ValueError, match="ssl.keystore.type='JKS': must be 'PEM'"):
        nks.partition_sink("t", {"bootstrap.servers": "h:1", "security.protocol": "SSL",
                                 "ssl.keystore.type": "JKS"})
    scram = {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
             "sasl.mechanism": "SCRAM-SHA-512"}
    with pytest.raises(JaasConfigError, match=r"names .*PlainLoginModule, but "
                                              r"sasl.mechanism='SCRAM-SHA-512' needs "
                                              r"ScramLoginModule") as refused:
        nks.partition_sink("t", {**scram, "sasl.jaas.config":
                                 "org.apache.kafka.common.security.plain.PlainLoginModule "
                                 "required username=a password=hunter2;"})
    assert "hunter2" not in str(refused.value)
    with pytest.raises(TypeError, match=r"'ssl.keystore.password'.*only key password|"
                                        r"'ssl.keystore.password'.*ssl.key.password"):
        nks.partition_sink("t", {**scram, "ssl.keystore.password": "x"})
    with pytest.raises(TypeError, match="config must be None, a dict"):
        nks.partition_sink("t", "bootstrap.servers=h:1")
    with pytest.raises(TypeError, match="key must be a column name"):
        nks.partition_sink("t", config(kafka_broker), key=3.5)
    with pytest.raises(ValueError, match="report must be 'row' or 'batch'"):
        nks.arrow_emitter("t", config(kafka_broker), report="rows")
    with pytest.raises(ValueError, match=r"headers names a column twice: \['h', 'h'\]"):
        nks.partition_sink("t", config(kafka_broker), headers=["h", "h"])
    with pytest.raises(ValueError, match=r"headers \['netkafka.spark.row'\] have a "
                                         r"provenance header's name"):
        nks.arrow_emitter("t", config(kafka_broker), headers=[nks.ROW_HEADER],
                          provenance=True)


def test_a_bad_topic_name_is_refused_on_the_driver(kafka_broker):
    """Not in every attempt of every task, as send_batch() refused it there."""
    for make in (nks.partition_sink, nks.arrow_emitter, nks.pandas_emitter):
        with pytest.raises(InvalidTopicError, match="topic 'orders/2026' is not a valid Kafka "
                                                    "topic name: '/' is not allowed"):
            make("orders/2026", config(kafka_broker))


def test_bad_columns_fail_the_job_naming_them(spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    frame = rows_frame(spark, 100, 1)
    with pytest.raises(Exception, match=r"value='payload': the rows have no such column"):
        frame.foreachPartition(nks.partition_sink(topic_name, config(kafka_broker),
                                                  value="payload"))
    emit = nks.arrow_emitter(topic_name, config(kafka_broker), value="id")
    with pytest.raises(Exception, match=r"value: a column of int64 is not binary or string"):
        frame.mapInArrow(emit, emit.schema).collect()


@pytest.mark.parametrize("unit, per_ms", [("us", 1000), ("ns", 1_000_000)])
def test_arrow_emitter_refuses_instants_just_before_the_epoch(kafka_broker, topic_name,
                                                              unit, per_ms):
    """An instant less than 1 ms before the epoch was cast (truncated) to 0 and sent;
    one 1 ms before was refused as negative.  Both are refused now, as send_batch()
    refuses them: the emitter hands it the timestamp column (nulls now)."""
    create_topic(kafka_broker.bootstrap, topic_name)
    base_ms = 1_700_000_000_000
    frame = pa.record_batch({
        "value": [b"just-before", b"one-ms-before", b"after", b"null"],
        "ts": pa.array([-1, -per_ms, base_ms * per_ms + 1, None], pa.timestamp(unit, "UTC"))})
    emit = nks.arrow_emitter(topic_name, config(kafka_broker), timestamp="ts", report="row")
    reports = pa.Table.from_batches(list(emit([frame]))).to_pylist()
    assert [r["offset"] >= 0 for r in reports] == [False, False, True, True]
    assert all("timestamps_ms[%d]=-1 is negative" % i in reports[i]["error"] for i in (0, 1))
    records = read_topic(kafka_broker.bootstrap, topic_name, 2)
    assert [r.value for r in records] == [b"after", b"null"]
    assert records[0].timestamp_ms == base_ms
    assert records[1].timestamp_ms > base_ms  # stamped now, not 1970


def test_a_dict_row_missing_a_key_of_the_first_row_is_named(kafka_broker, topic_name):
    """The names are checked against the partition's first row; a later dict row
    without one raised itemgetter's bare KeyError('v'), naming neither the option
    nor the row.  Its chunk is refused whole, before it is sent."""
    create_topic(kafka_broker.bootstrap, topic_name)
    rows = [{"k": b"k%d" % i, "v": b"v%d" % i, "h": b"h"} for i in range(8)]
    del rows[5]["v"]
    del rows[6]["h"]
    sink = nks.partition_sink(topic_name, config(kafka_broker), key="k", value="v")
    with pytest.raises(IllegalArgumentError,
                       match=r"value='v': row 5 of the partition has no key 'v' \(the "
                             r"partition's first row had it\); it has keys \['k', 'h'\]"):
        sink(rows)
    sink = nks.partition_sink(topic_name, config(kafka_broker), value="v", headers=["h"])
    with pytest.raises(IllegalArgumentError,
                       match=r"headers column 'h'='h': row 5 of the partition has no key 'h'"):
        sink(rows[:5] + rows[6:])
    with pytest.raises(IllegalArgumentError, match=r"row 2 of the partition has no key 'v'.* "
                                                   r"it is a tuple, not a dict"):
        nks.partition_sink(topic_name, config(kafka_broker), value="v")(
            rows[:2] + [(b"x",)])
    nks.partition_sink(topic_name, config(kafka_broker), value="v")(rows[:5])
    assert sorted(r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 5)) == [
        b"v%d" % i for i in range(5)]


def test_partition_sink_takes_numpy_integers_as_send_batch_does(kafka_broker, topic_name):
    """A row function giving numpy integers (a pandas or numpy value's) for the
    partition or the timestamp: the sink refused them ("every row needs an int or
    None"; "a int64 is not epoch ms") while send_batch() takes them.  Now they count
    as their ints; a bool is still refused, by the same rule."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    base_ms = 1_700_000_000_000
    rows = [(i, b"v%d" % i) for i in range(6)]
    nks.partition_sink(topic_name, config(kafka_broker), value=1,
                       partition=lambda row: numpy.int32(row[0] % 3),
                       timestamp=lambda row: numpy.int64(base_ms + row[0]))(rows)
    records = read_topic(kafka_broker.bootstrap, topic_name, 6)
    assert sorted((r.value, r.partition, r.timestamp_ms) for r in records) == [
        (b"v%d" % i, i % 3, base_ms + i) for i in range(6)]
    with pytest.raises(TypeError, match=r"partition must be an int or None, not bool"):
        nks.partition_sink(topic_name, config(kafka_broker), value=1,
                           partition=lambda row: numpy.bool_(True))(rows)
    with pytest.raises(TypeError, match=r"timestamp must be epoch ms \(an int\), a "
                                        r"datetime or None, not bool"):
        nks.partition_sink(topic_name, config(kafka_broker), value=1,
                           timestamp=lambda row: True)(rows)


def test_undeliverable_rows_fail_the_sink_task_and_are_reported_by_the_emitter(
        spark, kafka_broker, topic_name):
    # The broker refuses batches above the topic's max.message.bytes.
    create_topic(kafka_broker.bootstrap, topic_name, config={"max.message.bytes": "2000"})
    frame = spark.range(0, 10, numPartitions=1).selectExpr(
        "id", "cast(repeat('x', 5000) as binary) as value")
    with pytest.raises(Exception, match=r"DeliveryFailedError: 10 records to .* failed in "
                                        r"this task.*MESSAGE_TOO_LARGE"):
        frame.foreachPartition(nks.partition_sink(topic_name, config(kafka_broker)))
    emit = nks.arrow_emitter(topic_name, config(kafka_broker), report="row")
    reports = frame.mapInArrow(emit, emit.schema).collect()
    assert len(reports) == 10
    assert all(r.offset == -1 and "MESSAGE_TOO_LARGE" in r.error for r in reports)


@pytest.mark.parametrize("report", ["batch", "row"])
def test_arrow_emitter_reports_a_call_refused_as_a_whole(kafka_broker, topic_name, report):
    """A topic with no metadata within max_block_ms: send_batch() raised for the whole
    frame, and the emitter raised it past on_error="report", its default."""
    missing = config(kafka_broker, max_block_ms=1000, allow_auto_create_topics=False)
    batch = pa.record_batch({"value": [b"a", b"b", b"c"]})
    emit = nks.arrow_emitter(topic_name, missing, report=report)
    [reported] = list(emit(iter([batch])))
    if report == "batch":
        assert reported.column("failed")[0].as_py() == 3
        assert reported.column("delivered")[0].as_py() == 0
        errors = reported.column("error").to_pylist()
    else:
        assert reported.column("offset").to_pylist() == [-1, -1, -1]
        assert reported.column("partition").to_pylist() == [-1, -1, -1]
        errors = reported.column("error").to_pylist()
        assert len(set(errors)) == 1
    assert f"topic {topic_name!r} not available in metadata after 1000 ms" in errors[0]
    with pytest.raises(KafkaTimeoutError, match="not available in metadata"):
        list(nks.arrow_emitter(topic_name, missing, on_error="raise")(iter([batch])))


def test_arrow_emitter_makes_no_python_object_per_row(kafka_broker, topic_name):
    """The emitter called as Spark's worker would, on 200,000-row batches: Python's
    traced allocations peak far below what one bytes object per value would need
    (pyarrow's own buffers live in Arrow's memory pool, which is not traced)."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    count = 200_000
    ids = pa.array(range(count), pa.int64())
    batch = pa.RecordBatch.from_arrays(
        [ids,
         pa.array([b"k%d" % (i % KEYS) for i in range(count)], pa.binary()),
         pa.array([expected_value(i) for i in range(count)], pa.binary())],
        names=["id", "key", "value"])
    emit = nks.arrow_emitter(topic_name, config(kafka_broker), key="key", value="value")
    list(emit(iter([batch])))  # the worker's producer, connected and with metadata
    tracemalloc.start()
    try:
        reports = list(emit(iter([batch, batch])))
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r.column("delivered")[0].as_py() for r in reports] == [count, count]
    # A bytes object per value alone would be 133 bytes a row; the row indices
    # send_batch groups by partition are 8 to 12 bytes a row, per batch in flight.
    assert peak_bytes < 80 * count, f"{peak_bytes / count:.1f} traced bytes a row"
    records = read_topic(kafka_broker.bootstrap, topic_name, 3 * count)
    assert len(records) == 3 * count
    for record in random.Random(3).sample(records, SAMPLE):
        assert record.value == expected_value(row_id(record))


def test_arrow_emitter_with_headers_and_provenance_makes_no_python_object_per_row(
        spark, kafka_broker, topic_name):
    """As above with a header column and the provenance headers, in a Spark task
    (provenance needs its TaskContext): the task gathers its partition into one
    200,000-row batch first, then measures the emitter sending it."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    count = 200_000
    frame = rows_frame(spark, count, 1).selectExpr(
        "key", "value", "cast(concat('t', cast(id as string)) as binary) as trace")
    emit = nks.arrow_emitter(topic_name, config(kafka_broker), key="key", value="value",
                             headers=["trace"], provenance=True)

    def measured(batches):
        [whole] = pa.Table.from_batches(list(batches)).combine_chunks().to_batches()
        list(emit(iter([whole.slice(0, 1)])))  # the producer, connected, with metadata
        tracemalloc.start()
        try:
            [report] = list(emit(iter([whole])))
            _, peak_bytes = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        yield pa.RecordBatch.from_arrays(
            [pa.array([peak_bytes], pa.int64()), report.column("delivered")],
            names=["peak", "delivered"])

    [result] = frame.mapInArrow(measured, "peak BIGINT, delivered BIGINT").collect()
    assert result.delivered == count
    # The old way (header values and row indices as per-row lists, values and keys
    # copied into bytes) peaked at about 409 bytes a row.
    assert result.peak < 80 * count, f"{result.peak / count:.1f} traced bytes a row"
    records = read_topic(kafka_broker.bootstrap, topic_name, count + 1)
    assert len(records) == count + 1
    for record in random.Random(5).sample(records, SAMPLE):
        rid = row_id(record)
        assert record.value == expected_value(rid)
        assert [name for name, _ in record.headers] == ["trace", *nks.PROVENANCE_HEADERS]
        headers = dict(record.headers)
        assert (headers["trace"], headers[nks.PARTITION_HEADER], headers[nks.ATTEMPT_HEADER],
                headers[nks.ROW_HEADER]) == (b"t%d" % rid, b"0", b"0", b"%d" % rid)


@pytest.mark.parametrize("kind", ["arrow", "pandas"])
def test_emitters_send_header_columns_and_provenance_byte_exact(
        spark, kafka_broker, topic_name, kind):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    count, partitions = 3000, 2
    per_slice = count // partitions
    frame = rows_frame(spark, count, partitions).selectExpr(
        "value", "if(id % 7 = 0, null, cast(concat('t', cast(id as string)) as binary)) "
        "as trace", "concat('s-', cast(id as string)) as source")
    make, run = ((nks.arrow_emitter, frame.mapInArrow) if kind == "arrow"
                 else (nks.pandas_emitter, frame.mapInPandas))
    emit = make(topic_name, config(kafka_broker), headers=["trace", "source"],
                provenance=True)
    # 1,000-row batches: row indices continue from one batch to the next.
    batch_rows = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(batch_rows)
    spark.conf.set(batch_rows, "1000")
    try:
        reports = run(emit, emit.schema).collect()
    finally:
        spark.conf.set(batch_rows, before)
    assert len(reports) == 4 and sum(r.delivered for r in reports) == count
    records = read_topic(kafka_broker.bootstrap, topic_name, count)
    assert len(records) == count
    tasks = set()
    for record in records:
        rid = row_id(record)
        assert record.value == expected_value(rid)
        assert [name for name, _ in record.headers] == ["trace", "source",
                                                         *nks.PROVENANCE_HEADERS]
        headers = dict(record.headers)
        assert headers["trace"] == (None if rid % 7 == 0 else b"t%d" % rid)
        assert headers["source"] == b"s-%d" % rid
        assert (headers[nks.PARTITION_HEADER], headers[nks.ATTEMPT_HEADER],
                headers[nks.ROW_HEADER]) == (b"%d" % (rid // per_slice), b"0",
                                             b"%d" % (rid % per_slice))
        tasks.add((int(headers[nks.STAGE_HEADER]), int(headers[nks.PARTITION_HEADER]),
                   int(headers[nks.TASK_HEADER])))
    assert len(tasks) == partitions


def test_emitters_keep_nulls_as_tombstones_and_stamp_null_timestamps_now(
        kafka_broker, topic_name):
    """Both emitters called directly, as Spark's worker calls them."""
    create_topic(kafka_broker.bootstrap, topic_name)
    before_ms = int(time.time() * 1000)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([b"k0", None, b"k2"]), pa.array([b"v0", b"v1", None]),
         pa.array([1_700_000_000_000, None, 1_700_000_000_002], pa.timestamp("ms"))],
        names=["key", "value", "ts"])
    emit = nks.arrow_emitter(topic_name, config(kafka_broker), key="key", timestamp="ts",
                             report="row")
    reports = pa.Table.from_batches(list(emit(iter([batch]))))
    assert reports.column("error").null_count == 3
    frame = pandas.DataFrame({"v": [b"p0", None]})
    emit = nks.pandas_emitter(topic_name, config(kafka_broker), value="v")
    [report] = list(emit(iter([frame])))
    assert (report["rows"][0], report["delivered"][0], report["failed"][0]) == (2, 2, 0)
    records = read_topic(kafka_broker.bootstrap, topic_name, 5)
    assert [(r.key, r.value) for r in records] == [
        (b"k0", b"v0"), (None, b"v1"), (b"k2", None), (None, b"p0"), (None, None)]
    assert records[0].timestamp_ms == 1_700_000_000_000
    assert records[1].timestamp_ms >= before_ms
    assert records[2].timestamp_ms == 1_700_000_000_002
    assert [r.offset for r in records] == list(range(5))
