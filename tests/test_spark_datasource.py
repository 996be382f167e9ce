"""The `netkafka` data source with real PySpark (local mode) against the real broker.

One SparkSession serves the module (with Spark's own Kafka connector on spark.jars,
for the side-by-side test); local[2,4]: two task threads, a task may fail up to 4
times, so the injected failures are retried.  What was written is read back by the
independent reader; exactly-once writes with isolation.level=read_committed.

Failures are injected by a subclass of the data source registered under another name
(netkafka_faulty), whose writer fails in a task's first attempt: before its commit,
after its commit (before the task reports success), or by killing its own Python
worker mid-write.  Every value names its row id, so a lost or repeated row shows.
"""
import logging
import os
import signal
import sys
import time
from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark import TaskContext
from pyspark.sql import functions as F

from netkafka import spark as nks
from netkafka.errors import KafkaConfigurationError
from netkafka.spark.datasource import (NetkafkaArrowWriter, NetkafkaDataSource,
                                       NetkafkaStreamWriter, SinkPlan)
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic
from test_spark import _stop, local_session

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import spark_kafka  # noqa: E402 -- bench/, for the connector's jars

ROWS = 40_000
BATCH_ROWS = 2000  # spark.sql.execution.arrow.maxRecordsPerBatch
SPARK_PARTITIONS = 4
TOPIC_PARTITIONS = 3
FAULT_OPTION = "test.fault"
FAILED_PARTITION = 1  # the Spark partition whose first attempt fails
STAMPS_OPTION = "test.stamps"  # a directory where each injected failure leaves a file
LOG_OPTION = "test.log"  # a file where the driver's commit writes the data source's log


@pytest.fixture(scope="module")
def spark():
    # Small Arrow batches: the injected failures come after a task's third batch.
    session = local_session(sys.modules[__name__], "netkafka-test-spark-datasource", **{
        "spark.jars": ",".join(spark_kafka.connector_jars()),
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(BATCH_ROWS)})
    try:
        session.dataSource.register(FaultySource)
        session.dataSource.register(LoggedSource)
        yield session
    finally:
        _stop(session)


def rows_frame(spark, count=ROWS, partitions=SPARK_PARTITIONS):
    """id, key (string) and value (binary naming the id)."""
    return spark.range(0, count, numPartitions=partitions).selectExpr(
        "id", "concat('k', cast(id % 101 as string)) as key",
        "cast(concat('v-', lpad(cast(id as string), 12, '0')) as binary) as value")


def row_id(record):
    return value_id(record.value)


def value_id(value):
    """The row id a value names."""
    return int(value[2:14])


def writer(frame, kafka_broker, topic, source="netkafka", **options):
    w = frame.write.format(source).option("kafka.bootstrap.servers", kafka_broker.bootstrap)
    if topic is not None:
        w = w.option("topic", topic)
    for name, value in options.items():
        w = w.option(name, str(value))
    return w


def committed_ids(kafka_broker, topic, count):
    records = read_topic(kafka_broker.bootstrap, topic, count, timeout_s=120,
                         isolation_level="read_committed")
    return Counter(row_id(r) for r in records), records


def check_exactly_once(kafka_broker, topic, count=ROWS):
    ids, records = committed_ids(kafka_broker, topic, count)
    assert sorted(ids) == list(range(count))
    assert max(ids.values()) == 1
    return records


def end_offsets(broker, topic, isolation="read_uncommitted"):
    """Each partition's end offset as a consumer of that isolation level sees it (the
    last stable offset for read_committed)."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-{isolation}",
                         "isolation.level": isolation})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30,
                                               cached=False)[1]
                for p in range(TOPIC_PARTITIONS)]
    finally:
        consumer.close()


def provenance_duplicates(records):
    """Rows that arrived more than once, told apart by the provenance headers
    (stage, partition, row index): {(partition, row index): [attempts]}."""
    copies = defaultdict(list)
    for record in records:
        headers = dict(record.headers)
        copies[(int(headers[nks.PARTITION_HEADER]), int(headers[nks.ROW_HEADER]))].append(
            int(headers[nks.ATTEMPT_HEADER]))
    return {key: attempts for key, attempts in copies.items() if len(attempts) > 1}


# ----------------------------------------------------------------------------------
# Failure injection: the data source under another name, failing in attempt 0


class FaultySource(NetkafkaDataSource):
    @classmethod
    def name(cls):
        return "netkafka_faulty"

    def writer(self, schema, overwrite):
        options = dict(self.options)
        return FaultyWriter(SinkPlan(_without_test_options(options), schema), options[FAULT_OPTION],
                            options[STAMPS_OPTION])

    def streamWriter(self, schema, overwrite):
        options = dict(self.options)
        return FaultyStreamWriter(SinkPlan(_without_test_options(options), schema),
                                  options[FAULT_OPTION])


def _without_test_options(options):
    return {k: v for k, v in options.items()
            if k not in (FAULT_OPTION, STAMPS_OPTION, LOG_OPTION)}


def stamp(directory, what):
    """Leaves evidence that a failure was injected (the test checks it happened)."""
    task = TaskContext.get()
    open(os.path.join(directory, f"{what}-{task.partitionId()}-{task.attemptNumber()}"),
         "w").close()


class FaultyWriter(NetkafkaArrowWriter):
    def __init__(self, plan, fault, stamps):
        super().__init__(plan)
        self.fault = fault
        self.stamps = stamps

    def write(self, iterator):
        task = TaskContext.get()
        every_attempt = self.fault in ("kill_always", "late_always")
        if task.partitionId() != FAILED_PARTITION or (task.attemptNumber() != 0
                                                      and not every_attempt):
            return super().write(iterator)
        if self.fault == "late_always":
            return super().write(_second_batch_late(iterator))
        if self.fault == "after_commit":
            message = super().write(iterator)
            stamp(self.stamps, self.fault)
            raise RuntimeError(f"injected failure after the commit of {message}")
        return super().write(self._failing(iterator))

    def _failing(self, iterator):
        """The input, failing (or killing this worker) after 3 batches -- once they
        are delivered, at least once."""
        for index, batch in enumerate(iterator):
            if index == 3:
                if not self.plan.exactly_once:
                    nks.worker_producer(self.plan.settings).flush()
                stamp(self.stamps, self.fault)
                if self.fault == "kill_always":
                    # Time for linger to send what the open transaction holds, so
                    # the log has records of it for the driver to end.
                    time.sleep(1)
                if self.fault in ("kill", "kill_always"):
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError("injected failure before the commit")
            yield batch


def _second_batch_late(batches):
    """The input, its second batch 15 s after the first."""
    for index, batch in enumerate(batches):
        if index == 1:
            time.sleep(15)
        yield batch


class FaultyStreamWriter(NetkafkaStreamWriter):
    """Fails the driver's commit of micro-batch 1 once: its tasks committed, the
    checkpoint does not record the batch, a restarted query runs it again."""

    def __init__(self, plan, fault):
        super().__init__(plan)
        self.fault = fault

    def commit(self, messages, batchId):
        if batchId == 1 and self.fault.startswith("commit_once:"):
            stamp = self.fault.split(":", 1)[1]
            if not os.path.exists(stamp):
                open(stamp, "w").close()
                raise RuntimeError("injected failure of micro-batch 1's commit")
        super().commit(messages, batchId)


class LoggedSource(NetkafkaDataSource):
    """The data source under another name, its driver-side commit's log in a file: the
    commit runs in a Python worker of Spark's, whose stderr the test cannot read."""

    @classmethod
    def name(cls):
        return "netkafka_logged"

    def writer(self, schema, overwrite):
        options = dict(self.options)
        return LoggedWriter(SinkPlan(_without_test_options(options), schema),
                            options[LOG_OPTION])


class LoggedWriter(NetkafkaArrowWriter):
    def __init__(self, plan, path):
        super().__init__(plan)
        self.path = path

    def commit(self, messages):
        log = logging.getLogger("netkafka.spark.datasource")
        handler = logging.FileHandler(self.path)
        log.addHandler(handler)
        try:
            super().commit(messages)
        finally:
            log.removeHandler(handler)
            handler.close()


# ----------------------------------------------------------------------------------
# The data source as Spark's Kafka sink


def test_found_without_registration_and_writes_every_row(spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    writer(rows_frame(spark), kafka_broker, topic_name).mode("append").save()
    records = read_topic(kafka_broker.bootstrap, topic_name, ROWS, timeout_s=120)
    assert sorted(row_id(r) for r in records) == list(range(ROWS))
    for record in records[:100]:
        assert record.key == b"k%d" % (row_id(record) % 101)


def test_registered_by_class_too(spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    spark.dataSource.register(NetkafkaDataSource)
    writer(rows_frame(spark, 1000, 2), kafka_broker, topic_name).mode("append").save()
    assert len(read_topic(kafka_broker.bootstrap, topic_name, 1000)) == 1000


def sink_frame(spark, count):
    """Every column Spark's Kafka sink reads: string keys (null every 11th row),
    binary values (null every 7th row: a tombstone, never one without a key, so
    every unkeyed record names its row), headers (0 to 2 per row, one with a null
    value) and an explicit partition, null every 5th row (the partitioner's
    choice)."""
    return spark.range(0, count, numPartitions=3).selectExpr(
        "case when id % 11 = 4 and id % 7 != 3 then null else "
        "concat('key-', cast(id % 13 as string)) end as key",
        "case when id % 7 = 3 then null else "
        "cast(concat('v-', lpad(cast(id as string), 12, '0')) as binary) end as value",
        "slice(array(named_struct('key', 'h1', 'value', cast(cast(id as string) as binary)),"
        " named_struct('key', 'h2', 'value', cast(null as binary))), 1, cast(id % 3 as int))"
        " as headers",
        "case when id % 5 = 1 then null else cast(id % 3 as int) end as partition")


def test_same_records_as_spark_kafka_sink_with_the_same_options(spark, kafka_broker, topic_name):
    theirs, ours = f"{topic_name}-kafka", f"{topic_name}-netkafka"
    for topic in (theirs, ours):
        create_topic(kafka_broker.bootstrap, topic, partitions=TOPIC_PARTITIONS)
    count = 5000
    frame = sink_frame(spark, count).cache()
    options = {"kafka.acks": "all", "kafka.linger.ms": "5"}
    writer(frame, kafka_broker, theirs, "kafka", **options).mode("append").save()
    writer(frame, kafka_broker, ours, "netkafka", **options).mode("append").save()

    def seen(topic):
        """Each record with its partition -- but for a row without key nor partition,
        whose partition is the sticky partitioner's (timing-dependent) choice: None."""
        records = Counter()
        for r in read_topic(kafka_broker.bootstrap, topic, count):
            free = r.key is None and row_id(r) % 5 == 1
            records[(None if free else r.partition, r.key, r.value, tuple(r.headers))] += 1
        return records

    spark_records, netkafka_records = seen(theirs), seen(ours)
    assert sum(spark_records.values()) == count
    # Both kinds of null-partition rows are there: keyed (placed by murmur2, compared
    # with their partitions) and unkeyed (compared as a multiset, partitions aside).
    keyed_free = sum(n for (p, k, v, h), n in spark_records.items()
                     if k is not None and v is not None and value_id(v) % 5 == 1)
    unkeyed_free = sum(n for (p, k, v, h), n in spark_records.items() if p is None)
    assert keyed_free > 500 and unkeyed_free > 50
    assert netkafka_records == spark_records
    frame.unpersist()


def test_a_topic_column_sends_each_row_to_its_topic(spark, kafka_broker, topic_name):
    topics = [f"{topic_name}-{i}" for i in range(3)]
    for topic in topics:
        create_topic(kafka_broker.bootstrap, topic)
    frame = rows_frame(spark, 3000, 2).withColumn(
        "topic", F.concat(F.lit(f"{topic_name}-"), (F.col("id") % 3).cast("string")))
    writer(frame, kafka_broker, None, **{"netkafka.provenance": "true"}).mode("append").save()
    for i, topic in enumerate(topics):
        records = read_topic(kafka_broker.bootstrap, topic, 1000)
        assert sorted(row_id(r) for r in records) == list(range(i, 3000, 3))
        # Row indices count the Spark partition's rows, all topics together.
        for record in records:
            headers = dict(record.headers)
            assert int(headers[nks.ROW_HEADER]) == row_id(record) - 1500 * int(
                headers[nks.PARTITION_HEADER])


def test_a_timestamp_column_stamps_records_only_when_the_option_names_it(
        spark, kafka_broker, topic_name):
    """Spark's sink reads no timestamp column: one (a frame read from Kafka has it, with
    its source records' times) stamped netkafka's records, and one of another type failed
    the write.  Now only netkafka.timestampColumn's column does."""
    create_topic(kafka_broker.bootstrap, topic_name)
    frame = rows_frame(spark, 20, 1).selectExpr(
        "key", "value", "cast('2000-01-01 00:00:00 UTC' as timestamp) as timestamp",
        "cast(946684800123 as bigint) as ms", "'not a time' as created")
    started_ms = time.time() * 1000 - 1000
    writer(frame, kafka_broker, topic_name).mode("append").save()
    writer(frame, kafka_broker, topic_name,
           **{"netkafka.timestampColumn": "timestamp"}).mode("append").save()
    writer(frame, kafka_broker, topic_name,
           **{"netkafka.timestampColumn": "MS"}).mode("append").save()
    records = read_topic(kafka_broker.bootstrap, topic_name, 60)
    assert len(records) == 60
    assert all(r.timestamp_ms >= started_ms for r in records[:20])  # stamped when sent
    assert {r.timestamp_ms for r in records[20:40]} == {946684800000}
    assert {r.timestamp_ms for r in records[40:]} == {946684800123}


def test_overwrite_mode_is_refused_as_by_spark_kafka_sink(spark, kafka_broker, topic_name):
    # A topic is only appended to: mode("overwrite") appended, the old records kept.
    create_topic(kafka_broker.bootstrap, topic_name)
    frame = rows_frame(spark, 10, 1)
    with pytest.raises(Exception, match="Save mode Overwrite not allowed for Kafka"):
        writer(frame, kafka_broker, topic_name, "kafka").mode("overwrite").save()
    with pytest.raises(Exception, match=r"mode\('overwrite'\) is not supported"):
        writer(frame, kafka_broker, topic_name).mode("overwrite").save()
    writer(frame, kafka_broker, topic_name).mode("append").save()
    assert len(read_topic(kafka_broker.bootstrap, topic_name, 10)) == 10


def test_a_null_header_in_the_headers_column_fails_the_task_naming_it(
        spark, kafka_broker, topic_name):
    # Spark's sink fails on it too (a NullPointerException); here the row failed in
    # send_batch(), the column unnamed, once the batch's other rows were sent.
    create_topic(kafka_broker.bootstrap, topic_name)
    frame = rows_frame(spark, 10, 1).selectExpr(
        "value", "array(named_struct('key', 'h', 'value', value), "
                 "if(id = 3, null, named_struct('key', 'g', 'value', value))) as headers")
    with pytest.raises(Exception, match=r"column 'headers' holds a null header "
                                         r"\(row 3 of a batch\)"):
        writer(frame, kafka_broker, topic_name).mode("append").save()


@pytest.mark.parametrize("options, columns, message", [
    ({"kafka.bootstrap.servers": None, "tpoic": "x"}, None, "unknown option 'tpoic'"),
    ({"kafka.lingerr.ms": "5"}, None, "kafka.lingerr.ms"),
    ({"kafka.acks": "several"}, None, "kafka.acks"),
    ({"kafka.bootstrap.servers": "broker:abc", "kafka.linger.ms": "5"}, None,
     "option 'kafka.bootstrap.servers': bootstrap_servers entry 'broker:abc': port 'abc'"),
    ({"kafka.key.serializer": "x"}, None, "kafka.key.serializer' is not supported"),
    # The messages show the write's values (batch.size 1 MiB unless set), and name
    # the options that clash.
    ({"kafka.buffer.memory": "1000"}, None,
     r"option 'kafka.buffer.memory': buffer_memory must be an int >= the largest batch \(1048576 "
     r"bytes: batch_size, at most max_request_size\)"),
    # The write's batch.size, not the default the option alone was checked with.
    ({"kafka.buffer.memory": "1000", "kafka.batch.size": "16384"}, None,
     r"option 'kafka.buffer.memory': buffer_memory must be an int >= the largest batch \(16384 "
     r"bytes: batch_size, at most max_request_size\)"),
    ({"kafka.delivery.timeout.ms": "40000", "kafka.request.timeout.ms": "39999",
      "kafka.acks": "1"}, None,
     r"options \['kafka.delivery.timeout.ms', 'kafka.request.timeout.ms'\]: "
     r"delivery_timeout_ms \(40000\) must be at least linger_ms \+ request_timeout_ms "
     r"\(5 \+ 39999\)"),
    ({"kafka.linger.ms": "5", "netkafka.producer.linger_ms": "50"}, None,
     "options 'kafka.linger.ms' and 'netkafka.producer.linger_ms' both set linger_ms"),
    ({"netkafka.producer.transactional_id": "x"}, None,
     "option 'netkafka.producer.transactional_id': transactional_id: .* exactlyOnce=true"),
    ({"kafka.metric.reporters": "com.example.Reporter"}, None,
     "option 'kafka.metric.reporters': metric_reporters='com.example.Reporter'"),
    ({"exactlyOnce": "true"}, None, "needs option writeId"),
    ({"exactlyOnce": "maybe"}, None, "exactlyonce' must be true or false"),
    ({"writeId": "w"}, None, "writeId means nothing without exactlyOnce"),
    ({"netkafka.markerTopic": "markers"}, None,
     "netkafka.markerTopic means nothing without exactlyOnce"),
    ({"kafka.transaction.timeout.ms": "30000"}, None,
     "option kafka.transaction.timeout.ms means nothing without exactlyOnce=true"),
    ({"netkafka.producer.transaction_timeout_ms": "30000"}, None,
     "option netkafka.producer.transaction_timeout_ms means nothing without exactlyOnce=true"),
    ({"exactlyOnce": "true", "writeId": "w", "netkafka.markerTopic": " "}, None,
     "option 'netkafka.markerTopic': .*topic ' ' is not a valid Kafka topic name"),
    ({"topic": "orders/2026"}, None,
     "option 'topic': .*topic 'orders/2026' is not a valid Kafka topic name: '/' is not allowed"),
    ({"exactlyOnce": "true", "writeId": "w", "netkafka.markerTopic": "markers!"}, None,
     "option 'netkafka.markerTopic': .*topic 'markers!' is not a valid Kafka topic name"),
    ({"exactlyOnce": "true", "writeId": "w", "kafka.acks": "1"}, None,
     "exactlyOnce=true: transactional_id needs acks='all'"),
    ({"netkafka.timestampColumn": "when"}, None,
     r"needs a 'when' column \(the option 'netkafka.timestampColumn'\)"),
    ({"netkafka.timestampColumn": "key"}, None, "column 'key' is string, it must be timestamp"),
    ({}, "id as value", "column 'value' is bigint"),
    ({}, "value as v", "needs a 'value' column"),
    ({}, "value, array('x') as headers", "array<struct<key:string,value:binary>>"),
])
def test_bad_options_and_columns_fail_before_any_task_naming_them(
        spark, kafka_broker, topic_name, options, columns, message):
    frame = rows_frame(spark, 10, 1)
    if columns is not None:
        frame = frame.selectExpr(*columns.split(", "))
    w = writer(frame, kafka_broker, topic_name)
    for name, value in options.items():
        if value is not None:
            w = w.option(name, value)
    started = time.monotonic()
    with pytest.raises(Exception, match=message):
        w.mode("append").save()
    assert time.monotonic() - started < 30


# ----------------------------------------------------------------------------------
# Exactly once


def test_exactly_once_write_and_a_rerun_with_the_same_write_id_adds_nothing(
        spark, kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    frame = rows_frame(spark)
    for _ in range(2):
        writer(frame, kafka_broker, topic_name, exactlyOnce="true",
               writeId=topic_name).mode("append").save()
    check_exactly_once(kafka_broker, topic_name)
    # A new write id is a new write.
    writer(frame, kafka_broker, topic_name, exactlyOnce="true",
           writeId=f"{topic_name}-2").mode("append").save()
    ids, _ = committed_ids(kafka_broker, topic_name, 2 * ROWS)
    assert set(ids.values()) == {2} and len(ids) == ROWS


def test_exactly_once_rerun_with_the_same_write_id_warns_of_its_skipped_partitions(
        spark, kafka_broker, topic_name, tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    frame = rows_frame(spark, count=1000)
    log = tmp_path / "commit.log"
    for _ in range(2):
        writer(frame, kafka_broker, topic_name, source="netkafka_logged", exactlyOnce="true",
               writeId=topic_name, **{LOG_OPTION: log}).mode("append").save()
    # The first write sent every partition; the second, none, and says so.
    assert log.read_text().splitlines() == [
        f"writeId {topic_name!r}, epoch 0: {SPARK_PARTITIONS} of {SPARK_PARTITIONS} partitions "
        f"skipped, committed before by a write with this writeId (nothing sent for them); "
        f"right for a re-run of the same write, a new write needs a new writeId"]
    check_exactly_once(kafka_broker, topic_name, count=1000)


def test_exactly_once_with_a_missing_marker_topic_fails_before_any_task_runs(
        spark, broker_without_auto_create, topic_name):
    """A marker topic that does not exist, on a broker that creates no topics: the
    write fails on the driver, naming the option and the topic, and no task sent a
    row (each used to send its rows, then wait max_block_ms for its marker's
    commit, which the broker refused)."""
    broker = broker_without_auto_create
    create_topic(broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    markers = f"{topic_name}-markers"
    with pytest.raises(Exception, match=rf"option 'netkafka.markerTopic': topic '{markers}' "
                                        rf"does not exist"):
        writer(rows_frame(spark, 1000), broker, topic_name, exactlyOnce="true",
               writeId=topic_name, **{"netkafka.markerTopic": markers,
                                      "kafka.max.block.ms": "3000"}).mode("append").save()
    assert end_offsets(broker, topic_name) == [0] * TOPIC_PARTITIONS


def test_exactly_once_with_a_missing_marker_topic_creates_it_where_the_broker_would(
        spark, kafka_broker, topic_name):
    """A marker topic that does not exist, on a broker with auto-creation on: it is
    created when the write starts, as a send to it would create it (the commits of
    the markers create none), and the write and its rerun leave each row once."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    frame = rows_frame(spark)
    for _ in range(2):
        writer(frame, kafka_broker, topic_name, exactlyOnce="true", writeId=topic_name,
               **{"netkafka.markerTopic": f"{topic_name}-markers",
                  "kafka.max.block.ms": "5000"}).mode("append").save()
    check_exactly_once(kafka_broker, topic_name)


@pytest.mark.parametrize("options, timeout_ms", [
    ({}, 900_000), ({"kafka.transaction.timeout.ms": "30000"}, 30_000)])
def test_exactly_once_transactions_may_last_15_minutes_unless_set(
        spark, kafka_broker, topic_name, options, timeout_ms):
    """A task's transaction is open while Spark computes its input: with the
    producer's 60 s, a task taking longer fails in every attempt (INVALID_PRODUCER_EPOCH
    once the coordinator aborts it)."""
    create_topic(kafka_broker.bootstrap, topic_name)
    plan = SinkPlan({"kafka.bootstrap.servers": kafka_broker.bootstrap, "topic": topic_name,
                     "exactlyonce": "true", "writeid": topic_name, **options},
                    rows_frame(spark, 1, 1).schema)
    with plan.transactional_producer(0) as producer:
        assert producer.config.transaction_timeout_ms == timeout_ms


def test_exactly_once_transaction_timeout_above_the_brokers_is_named_as_the_option(
        spark, kafka_broker, topic_name):
    """The broker's INVALID_TRANSACTION_TIMEOUT named nothing, in each task and again in
    the driver's abort (fence_unfinished)."""
    create_topic(kafka_broker.bootstrap, topic_name)
    plan = SinkPlan({"kafka.bootstrap.servers": kafka_broker.bootstrap, "topic": topic_name,
                     "exactlyonce": "true", "writeid": topic_name,
                     "kafka.transaction.timeout.ms": "1000000"},
                    rows_frame(spark, 1, 1).schema)
    with pytest.raises(KafkaConfigurationError,
                       match=r"^option kafka.transaction.timeout.ms: the broker refuses a "
                             r"transaction timeout of 1000000 ms \(exactlyOnce's default is "
                             r"900000\): it is above the broker's transaction.max.timeout.ms"):
        plan.fence_unfinished([None])


def test_exactly_once_transaction_open_past_its_timeout_fails_naming_the_option(
        spark, kafka_broker, topic_name, tmp_path):
    """Spark partition 1's input pauses 15 s after its first batch in every attempt: its
    1 s transaction is aborted by the coordinator (which looks every 10 s) meanwhile.
    The producer hears of that only as its epoch refused, which names no setting; the
    task's error says which option to raise."""
    create_topic(kafka_broker.bootstrap, topic_name)
    with pytest.raises(Exception, match=r"longer than its transaction timeout \(1000 ms\), past "
                                        r"which the coordinator aborts it: set the option "
                                        r"kafka.transaction.timeout.ms higher"):
        faulty_write(spark, kafka_broker, topic_name, tmp_path, "late_always",
                     exactlyOnce="true", writeId=topic_name,
                     **{"kafka.transaction.timeout.ms": "1000"})


def faulty_write(spark, kafka_broker, topic_name, tmp_path, fault, **options):
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    writer(rows_frame(spark), kafka_broker, topic_name, "netkafka_faulty",
           **{FAULT_OPTION: fault, STAMPS_OPTION: str(stamps)}, **options).mode("append").save()
    # The failure happened, once, in the first attempt.
    assert os.listdir(stamps) == [f"{fault}-{FAILED_PARTITION}-0"]


@pytest.mark.parametrize("fault", ["before_commit", "after_commit", "kill"])
def test_exactly_once_survives_a_failed_task(spark, kafka_broker, topic_name, tmp_path, fault):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    faulty_write(spark, kafka_broker, topic_name, tmp_path, fault, exactlyOnce="true",
                 writeId=topic_name)
    check_exactly_once(kafka_broker, topic_name)
    if fault == "after_commit":
        # The retry found the partition's marker and sent nothing: the log holds each
        # row once even for a read_uncommitted reader.  (Before the commit, what the
        # failed attempt sent may or may not have left its producer: not checked.)
        assert len(read_topic(kafka_broker.bootstrap, topic_name, ROWS, timeout_s=120)) == ROWS


@pytest.mark.parametrize("fault", ["before_commit", "after_commit", "kill"])
def test_at_least_once_shows_the_same_failures_duplicates_by_provenance(
        spark, kafka_broker, topic_name, tmp_path, fault):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    faulty_write(spark, kafka_broker, topic_name, tmp_path, fault,
                 **{"netkafka.provenance": "true"})
    records = read_topic(kafka_broker.bootstrap, topic_name, ROWS, timeout_s=120)
    ids = Counter(row_id(r) for r in records)
    assert set(ids) == set(range(ROWS))
    duplicates = provenance_duplicates(records)
    assert sum(ids.values()) - ROWS == sum(len(a) - 1 for a in duplicates.values()) > 0
    # Every copy is of the failed partition: its first attempt and its retry.
    for (partition, _), attempts in duplicates.items():
        assert partition == FAILED_PARTITION
        assert sorted(attempts) == [0, 1]


def test_streaming_query_restarted_from_its_checkpoint_writes_each_batch_once(
        spark, kafka_broker, topic_name, tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    files, per_file = 4, 2000
    for i in range(files):
        ids = range(i * per_file, (i + 1) * per_file)
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                                 "key": [f"k{n % 101}" for n in ids]}),
                       source / f"part-{i}.parquet")
        time.sleep(0.05)  # the file source takes files in order of modification
    schema = "id BIGINT, key STRING"

    def run(fault):
        stream = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
                  .parquet(str(source))
                  .selectExpr("key", "cast(concat('v-', lpad(cast(id as string), 12, '0')) "
                              "as binary) as value")
                  .writeStream.format("netkafka_faulty")
                  .option("kafka.bootstrap.servers", kafka_broker.bootstrap)
                  .option("topic", topic_name).option("exactlyOnce", "true")
                  .option("writeId", topic_name).option(FAULT_OPTION, fault)
                  .option("checkpointLocation", str(checkpoint))
                  .trigger(availableNow=True).start())
        try:
            stream.awaitTermination(180)
        except Exception:  # noqa: BLE001 -- the injected commit failure stops the query
            return False
        return True

    stamp = str(tmp_path / "failed-once")
    assert not run(f"commit_once:{stamp}")  # batches 0 and 1 written, 1 not checkpointed
    assert os.path.exists(stamp)
    assert run(f"commit_once:{stamp}")  # batch 1 again (skipped by its markers), 2, 3
    check_exactly_once(kafka_broker, topic_name, files * per_file)
    # Batch 1's second run sent nothing at all: its markers were found.
    in_log = read_topic(kafka_broker.bootstrap, topic_name, files * per_file, timeout_s=120)
    assert len(in_log) == files * per_file


def test_exactly_once_write_failing_for_good_leaves_no_transaction_open(
        spark, kafka_broker, topic_name, tmp_path):
    """Spark partition 1's worker is killed in every attempt, mid-transaction: the job
    fails, and the driver's abort ends the transactions left open (long before their
    timeout), so read_committed readers are not held up and see none of its rows."""
    from netkafka.producer.producer import Producer
    from netkafka.spark.datasource import transactional_id

    create_topic(kafka_broker.bootstrap, topic_name, partitions=TOPIC_PARTITIONS)
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    with pytest.raises(Exception):
        writer(rows_frame(spark), kafka_broker, topic_name, "netkafka_faulty",
               exactlyOnce="true", writeId=topic_name,
               **{"kafka.transaction.timeout.ms": "600000", FAULT_OPTION: "kill_always",
                  STAMPS_OPTION: str(stamps)}).mode("append").save()
    assert sorted(os.listdir(stamps)) == [f"kill_always-{FAILED_PARTITION}-{attempt}"
                                          for attempt in range(4)]
    per_partition = ROWS // SPARK_PARTITIONS
    failed = range(FAILED_PARTITION * per_partition, (FAILED_PARTITION + 1) * per_partition)
    # The killed attempts' records are in the log...
    in_log = Counter(row_id(r) for r in read_topic(kafka_broker.bootstrap, topic_name,
                                                   ROWS - per_partition, timeout_s=120))
    assert any(i in in_log for i in failed)
    # ... in no open transaction: the last stable offset is each partition's end.
    assert (end_offsets(kafka_broker, topic_name, "read_committed")
            == end_offsets(kafka_broker, topic_name, "read_uncommitted"))
    ids, _ = committed_ids(kafka_broker, topic_name, ROWS - per_partition)
    assert sorted(ids) == sorted(set(range(ROWS)) - set(failed))
    # The partition's transactional id is free at once: a new producer takes it and commits.
    with Producer(bootstrap_servers=kafka_broker.bootstrap, acks="all",
                  transactional_id=transactional_id(topic_name, FAILED_PARTITION)) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic_name, b"v-%012d" % failed[0])
        producer.commit_transaction()
    ids, _ = committed_ids(kafka_broker, topic_name, ROWS - per_partition + 1)
    assert ids[failed[0]] == 1 and sum(ids.values()) == ROWS - per_partition + 1
