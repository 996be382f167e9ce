"""The `netkafka` data source: df.write.format("netkafka") and writeStream.format("netkafka").

A drop-in for Spark's Kafka sink (format("kafka")): the same columns and options, so
switching is one word.

    columns   value (binary or string, required), key (binary or string), topic
              (string: each row's topic, unless the `topic` option is set), headers
              (array<struct<key: string, value: binary>>), partition (int; null:
              the partitioner's choice, as Spark's sink).  Other columns are ignored,
              as Spark's sink ignores them (a `timestamp` column too: records are
              stamped when sent), but the one netkafka.timestampColumn names.
    options   topic; kafka.<Java producer setting> (kafka.bootstrap.servers,
              kafka.acks, kafka.linger.ms, ...); netkafka's own under `netkafka.`:
              netkafka.producer.<Producer keyword> (netkafka.producer.io_threads),
              netkafka.provenance (true: the provenance headers of the package's
              docstring), netkafka.timestampColumn (a timestamp, timestamp_ntz or
              long epoch ms column whose values stamp the records); exactlyOnce,
              writeId, netkafka.markerTopic (below).  The
              options are all: Spark hands a Python data source nothing of the
              session's conf, so the CONF_PREFIX keys of the sink and emitters
              do not apply here.

Options and the input's schema are checked where Spark makes the writer (a Python
worker of the driver), before any task runs: an unknown option, a setting the
producer refuses or a column of the wrong type fails the write at once, naming it.

Each task's Arrow batches go to Producer.send_batch() as they come (FrameColumns,
shared with the Arrow emitter): key and value columns are read in place by the
native encoder, no Python object per row.  Spark's headers column is the exception:
its per-row lists of (key, value) become Python pairs, as send_batch takes them.

At least once (the default, as Spark's sink): each task sends through its worker's
shared producer (worker_producer), flushes and fails if a row failed, and Spark
retries it; a retried task sends its rows again.

Exactly once (exactlyOnce=true, writeId=<id the caller keeps stable>): each Spark
partition is written in one Kafka transaction by a producer whose transactional id is
netkafka-spark.<writeId>.<partition id>.  The task first calls init_transactions(),
which fences an older attempt of the same partition (a retried or speculative task,
a zombie worker) and aborts what it left open; then it reads its commit marker: the
offset its marker group, netkafka-spark.<writeId>.<partition id>, has committed for
partition 0 of the marker topic (the `topic` option, or netkafka.markerTopic, looked
up when the write starts: one that does not exist, nor is auto-created, fails it).  A
marker at or past this write's epoch + 1 means the partition was committed before:
the task reads its input and sends nothing.  Otherwise it sends its rows, commits
the offset epoch + 1 to the marker group with send_offsets_to_transaction(), and
commits the transaction: rows and marker become visible together or not at all.
Batch writes are epoch 0; a streaming query's micro-batch id is the epoch, so each
micro-batch is written once per partition even when a restarted query runs it again
from its checkpoint.  What the caller must keep stable: the writeId across re-runs
of the same write (and a new one for a new write: a reused writeId skips every
partition its earlier write committed, the driver's commit logging a warning that
names it), and the input's partitioning -- partition i of a re-run must hold the rows
partition i held.  Consumers must read with isolation.level=read_committed.  A task's
transaction is open while its input is computed: it may last
EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS unless the options say.
"""
import bisect
import logging
import re
import time
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType,
                               StructType, TimestampNTZType, TimestampType)

from netkafka.client.io_pool import IOPool
from netkafka.client.metadata import Metadata, check_topic_name
from netkafka.config import ProducerConfig, producer_setting
from netkafka.errors import (InvalidTopicError, InvalidTransactionTimeoutError,
                             KafkaConfigurationError, KafkaError, KafkaTimeoutError,
                             UnknownTopicOrPartitionError)
from netkafka.producer.producer import Producer
from netkafka.spark.emitters import FrameColumns
from netkafka.spark.settings import producer_settings
from netkafka.spark.sink import Emission, Pending, leased_producer, raise_if_failed

SOURCE_NAME = "netkafka"
# Java producer settings, named as Spark's Kafka sink takes them.
KAFKA_PREFIX = "kafka."
# netkafka's own options, and its Producer keywords under PRODUCER_OPTION_PREFIX.
NETKAFKA_PREFIX = "netkafka."
PRODUCER_OPTION_PREFIX = "netkafka.producer."
PROVENANCE_OPTION = "netkafka.provenance"
MARKER_TOPIC_OPTION = "netkafka.markerTopic"
# Opt-in, as Spark's sink reads no timestamp column: a frame read from Kafka has one
# (the source records' times), and records stamped with it may be past the topic's
# retention as they land.
TIMESTAMP_COLUMN_OPTION = "netkafka.timestampColumn"
EXACTLY_ONCE_OPTION = "exactlyOnce"
WRITE_ID_OPTION = "writeId"
TOPIC_OPTION = "topic"
# Options Spark itself passes to every sink: not the data source's to refuse.
_SPARK_OPTIONS = frozenset(("path", "checkpointlocation", "queryname"))
# Spark's sink refuses these too: keys and values are the columns' bytes, and a
# transactional id is the data source's own (exactlyOnce).
_REFUSED_KAFKA = {"key.serializer": "keys are sent as the key column's bytes",
                  "value.serializer": "values are sent as the value column's bytes",
                  "transactional.id": "exactlyOnce=true makes one per Spark partition"}
# The id prefix of transactional ids and marker groups.
ID_PREFIX = "netkafka-spark"
# Exactly once, unless kafka.transaction.timeout.ms says otherwise: a task's
# transaction is open while Spark computes its input, which often takes longer than
# the producer's 60 s (then the coordinator aborts it and the task fails, every
# attempt); 15 min is the broker's default transaction.max.timeout.ms.
EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS = 900_000
# How long the driver waits for the marker topic in metadata (at most max_block_ms):
# an existing topic shows in one round trip, an auto-created one within a second or two.
MARKER_TOPIC_WAIT_MS = 10_000
# The local property Spark's micro-batch execution sets on a streaming query's tasks.
_BATCH_ID_PROPERTY = "streaming.sql.batchId"

_BOOLEANS = {"true": True, "false": False}
# What producer_settings raises for a setting it refuses (NotImplementedError: a
# kafka-python setting netkafka does not support, such as metric.reporters).
_REFUSALS = (TypeError, ValueError, NotImplementedError)
_TEXT = (BinaryType, StringType)

_log = logging.getLogger("netkafka.spark.datasource")


class NetkafkaDataSource(DataSource):
    """format("netkafka"): writes to Kafka (see the module's docstring)."""

    @classmethod
    def name(cls):
        return SOURCE_NAME

    def writer(self, schema, overwrite):
        if overwrite:
            # Records are only appended to a topic, and Spark's sink refuses it too.
            raise ValueError(f"mode('overwrite') is not supported by format({SOURCE_NAME!r}): "
                             f"records are appended to the topic; use mode('append')")
        return NetkafkaArrowWriter(SinkPlan(self.options, schema))

    def streamWriter(self, schema, overwrite):
        return NetkafkaStreamWriter(SinkPlan(self.options, schema))


@dataclass
class TaskCommit(WriterCommitMessage):
    """What a task reports to the driver."""

    partition: int  # the Spark partition id
    rows: int  # rows sent (0 when skipped)
    skipped: bool  # exactly once: the partition was committed before, nothing sent


class NetkafkaArrowWriter(DataSourceArrowWriter):
    """Batch writes: one task per Spark partition, epoch 0."""

    def __init__(self, plan):
        self.plan = plan

    def write(self, iterator):
        return self.plan.write_task(iterator, epoch=0)

    def commit(self, messages):
        self.plan.warn_if_skipped(messages, epoch=0)

    def abort(self, messages):
        self.plan.fence_unfinished(messages)


class NetkafkaStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writes: each micro-batch's tasks, the batch id their epoch."""

    def __init__(self, plan):
        self.plan = plan

    def write(self, iterator):
        task = TaskContext.get()
        batch_id = None if task is None else task.getLocalProperty(_BATCH_ID_PROPERTY)
        if batch_id is None:
            raise RuntimeError(f"a streaming write task without the {_BATCH_ID_PROPERTY} "
                               f"local property: the micro-batch id is the epoch")
        return self.plan.write_task(iterator, epoch=int(batch_id))

    def commit(self, messages, batchId):
        """Each task committed its own transaction: only says which were skipped."""
        self.plan.warn_if_skipped(messages, epoch=batchId)

    def abort(self, messages, batchId):
        self.plan.fence_unfinished(messages)


class SinkPlan:
    """The options and columns of one write, checked where Spark makes the writer;
    pickled to the tasks."""

    def __init__(self, options, schema):
        options = dict(options)  # keys lowercased by Spark's CaseInsensitiveDict
        settings = {}
        origins = {}  # Producer keyword -> the option that set it
        flags = {}
        for name, value in options.items():
            if name.startswith(KAFKA_PREFIX):
                java = name[len(KAFKA_PREFIX):]
                if java in _REFUSED_KAFKA:
                    raise ValueError(f"option {name!r} is not supported: {_REFUSED_KAFKA[java]}")
                setting = producer_setting(java, value, f"option {name!r}")
            elif name.startswith(PRODUCER_OPTION_PREFIX):
                keyword = name[len(PRODUCER_OPTION_PREFIX):]
                setting = producer_setting(keyword, value, f"option {name!r}")
            else:
                setting = None
            if setting is not None:
                # kafka.linger.ms and netkafka.producer.linger_ms, say: which one won
                # would be the order of Spark's options, which says nothing.
                for keyword in setting.keys() & origins.keys():
                    first, second = sorted((origins[keyword], name))
                    raise ValueError(f"options {first!r} and {second!r} both set {keyword}: "
                                     f"give one")
                settings.update(setting)
                origins.update(dict.fromkeys(setting, name))
                continue
            if name in (PROVENANCE_OPTION.lower(), EXACTLY_ONCE_OPTION.lower()):
                flags[name] = _boolean(name, value)
            elif name not in (TOPIC_OPTION, WRITE_ID_OPTION.lower(), MARKER_TOPIC_OPTION.lower(),
                              TIMESTAMP_COLUMN_OPTION.lower(), *_SPARK_OPTIONS):
                raise ValueError(
                    f"unknown option {name!r} for format({SOURCE_NAME!r}): producer settings "
                    f"go as {KAFKA_PREFIX}<Java name> or {PRODUCER_OPTION_PREFIX}<keyword>; "
                    f"the others are {TOPIC_OPTION}, {EXACTLY_ONCE_OPTION}, "
                    f"{WRITE_ID_OPTION}, {PROVENANCE_OPTION}, {MARKER_TOPIC_OPTION}, "
                    f"{TIMESTAMP_COLUMN_OPTION}")
        if "bootstrap_servers" not in settings:
            raise ValueError(f"option '{KAFKA_PREFIX}bootstrap.servers' is required")
        self.settings = _checked_settings(settings, origins)
        self.exactly_once = flags.get(EXACTLY_ONCE_OPTION.lower(), False)
        self.write_id = options.get(WRITE_ID_OPTION.lower())
        topic = options.get(TOPIC_OPTION)
        marker_topic = options.get(MARKER_TOPIC_OPTION.lower())
        for name, value in ((TOPIC_OPTION, topic), (MARKER_TOPIC_OPTION, marker_topic)):
            if value is not None:
                try:
                    check_topic_name(value)
                except InvalidTopicError as exc:
                    raise ValueError(f"option {name!r}: {exc}") from None
        self.marker_topic = topic if marker_topic is None else marker_topic
        if self.exactly_once:
            if not self.write_id or not self.write_id.strip():
                raise ValueError(f"option {EXACTLY_ONCE_OPTION}=true needs option "
                                 f"{WRITE_ID_OPTION}: an id kept the same when the write "
                                 f"is run again")
            if self.marker_topic is None:
                raise ValueError(f"option {EXACTLY_ONCE_OPTION}=true with a topic column "
                                 f"needs option {MARKER_TOPIC_OPTION} (an existing topic "
                                 f"whose partition 0 carries the commit markers)")
            # The settings of each task's transactional producer.
            self.transaction_settings = {
                "transaction_timeout_ms": EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS,
                **self.settings.kwargs}
            try:
                ProducerConfig.from_kwargs({**self.transaction_settings, "transactional_id":
                                            transactional_id(self.write_id, 0)})
            except (KafkaConfigurationError, TypeError, ValueError) as exc:
                raise ValueError(f"option {EXACTLY_ONCE_OPTION}=true: {exc}") from exc
        else:
            self.transaction_settings = None
            # Options of exactly-once writes only: given without it, a caller who
            # believes the write is exactly once learns otherwise now.  The
            # transaction timeout too: only exactly-once tasks run transactions
            # (kafka.transaction.timeout.ms or netkafka.producer.transaction_timeout_ms,
            # whichever set it; a Spark conf key is session-wide, not this write's).
            for name in (WRITE_ID_OPTION if self.write_id is not None else None,
                         MARKER_TOPIC_OPTION if marker_topic is not None else None,
                         origins.get("transaction_timeout_ms")):
                if name is not None:
                    raise ValueError(f"option {name} means nothing without "
                                     f"{EXACTLY_ONCE_OPTION}=true")
        fields = {field.name.lower(): field for field in schema.fields}
        _check_column(fields, "value", _TEXT, required=True)
        present = {name: _check_column(fields, name, types) for name, types in (
            ("key", _TEXT), ("partition", (IntegerType,)))}
        timestamp_column = options.get(TIMESTAMP_COLUMN_OPTION.lower())
        if timestamp_column is not None:
            present["timestamp"] = _check_column(
                fields, timestamp_column.lower(), (TimestampType, TimestampNTZType, LongType),
                required=True, hint=f" (the option {TIMESTAMP_COLUMN_OPTION!r})")
        else:
            present["timestamp"] = None
        self.topic_column = None
        if topic is None:
            self.topic_column = _check_column(fields, "topic", (StringType,), required=True,
                                               hint=f" or the option {TOPIC_OPTION!r}")
        headers = _check_headers(fields)
        self.emission = Emission(
            topic, self.settings, key=present["key"], value=fields["value"].name,
            headers=None if headers is None else SparkHeaders(headers),
            partition=present["partition"], timestamp=present["timestamp"],
            provenance=flags.get(PROVENANCE_OPTION.lower(), False),
            topic_per_row=topic is None)
        if self.exactly_once:  # last: the checks above need no broker
            _check_marker_topic(self.settings, self.marker_topic,
                                TOPIC_OPTION if marker_topic is None else MARKER_TOPIC_OPTION)

    # -- a task (executor side) ----------------------------------------------------

    def write_task(self, frames, epoch):
        """Sends this task's rows; returns its TaskCommit."""
        partition = TaskContext.get().partitionId()
        if not self.exactly_once:
            with leased_producer(self.settings) as producer:
                rows = self._send(producer, frames)
            return TaskCommit(partition, rows, skipped=False)
        producer = self.transactional_producer(partition)
        try:
            # Fences an older attempt of this partition and ends what it left open:
            # only then does the marker say for good whether it committed.
            _init_transactions(producer)
            group = marker_group(self.write_id, partition)
            marker = (self.marker_topic, 0)
            committed = producer.committed_offsets(group, [marker])[marker]
            if committed is not None and committed > epoch:
                for _ in frames:  # Spark's worker expects its input read to the end
                    pass
                return TaskCommit(partition, 0, skipped=True)
            producer.begin_transaction()
            began_s = time.monotonic()
            try:
                rows = self._send(producer, frames)
                producer.send_offsets_to_transaction({marker: epoch + 1}, group)
                producer.commit_transaction()
            except BaseException as exc:
                _abort_quietly(producer)
                _raise_if_timed_out(exc, producer, partition, time.monotonic() - began_s)
                raise
            return TaskCommit(partition, rows, skipped=False)
        finally:
            producer.close()

    def transactional_producer(self, partition):
        """Exactly once: the producer of a Spark partition's transactions."""
        return Producer(**self.transaction_settings,
                        transactional_id=transactional_id(self.write_id, partition))

    def _send(self, producer, frames):
        """Every frame's rows through producer, flushed, failures raised (the task
        fails, so Spark retries it); returns how many rows."""
        import pyarrow
        emission = self.emission
        task_headers = emission.task_headers() if emission.provenance else None
        pending = Pending()
        first_row = 0
        for frame in frames:
            columns = FrameColumns(pyarrow, frame, False)
            count = columns.count
            if not count:
                continue
            parts = columns.columns(emission, task_headers, first_row)
            if self.topic_column is None:
                pending.add(emission.topic, producer.send_batch(emission.topic, *parts))
            else:
                for topic, topic_parts in _by_topic(pyarrow, frame, self.topic_column, parts):
                    pending.add(topic, producer.send_batch(topic, *topic_parts))
            first_row += count
            for topic, result in pending.done():
                raise_if_failed(topic, result)
        producer.flush()
        for topic, result in pending.done(wait=True):
            raise_if_failed(topic, result)
        return first_row

    # -- the driver, after the tasks ------------------------------------------------

    def warn_if_skipped(self, messages, epoch):
        """Exactly once: logs a warning when tasks skipped their partition as committed
        before.  A retried write's skip is what makes it exactly once; a new write
        reusing the writeId is skipped the same way and would otherwise "succeed"
        having sent nothing."""
        skipped = sum(1 for message in messages if message is not None and message.skipped)
        if skipped:
            _log.warning("%s %r, epoch %d: %d of %d partitions skipped, committed before by "
                         "a write with this %s (nothing sent for them); right for a re-run of "
                         "the same write, a new write needs a new %s", WRITE_ID_OPTION,
                         self.write_id, epoch, skipped, len(messages), WRITE_ID_OPTION,
                         WRITE_ID_OPTION)

    # -- the driver, after a failed write ------------------------------------------

    def fence_unfinished(self, messages):
        """Exactly once: ends the transactions the failed tasks of this write may have
        left open (a worker killed mid-write), so that read_committed consumers of
        their partitions are not held up until the transactions time out."""
        if not self.exactly_once:
            return
        for partition, message in enumerate(messages):
            if message is not None:
                continue
            with self.transactional_producer(partition) as fence:
                _init_transactions(fence)


def _check_marker_topic(settings, topic, option):
    """Fails the write now, naming the option, unless the marker topic exists (or is
    auto-created, as a send to it would create it): otherwise every task would send
    its rows, then wait max_block_ms in send_offsets_to_transaction() and fail, the
    broker answering UNKNOWN_TOPIC_OR_PARTITION to its TxnOffsetCommit until then
    (that request creates no topic, whatever auto.create.topics.enable says).

    Spark makes the writer again for each streaming micro-batch's commit or abort, so
    this runs there too: only an answer that the topic is missing fails it."""
    config = ProducerConfig.from_kwargs(settings.kwargs)
    wait_ms = min(config.max_block_ms, MARKER_TOPIC_WAIT_MS)
    pool = IOPool(config.connection_config())
    try:
        metadata = Metadata(pool, config.bootstrap_servers,
                            retry_backoff_ms=config.retry_backoff_ms,
                            retry_backoff_max_ms=config.retry_backoff_max_ms,
                            allow_auto_topic_creation=config.allow_auto_create_topics)
        try:
            metadata.wait_for_topic(topic, wait_ms / 1000)
        except KafkaTimeoutError as exc:
            snapshot = metadata.snapshot()
            info = None if snapshot is None else snapshot.topics.get(topic)
            if info is None or info.error_code != UnknownTopicOrPartitionError.code:
                # No answer about it (no broker reachable now): the tasks wait for the
                # cluster as they always do, and a passing outage does not fail the
                # commit of a micro-batch whose tasks committed.
                return
            raise ValueError(
                f"option {option!r}: topic {topic!r} does not exist (the broker says "
                f"UNKNOWN_TOPIC_OR_PARTITION after {wait_ms} ms"
                f"{', and did not create it' if config.allow_auto_create_topics else ''}); "
                f"{EXACTLY_ONCE_OPTION}=true commits its markers to its partition 0: create "
                f"it first") from exc
        finally:
            metadata.close()
    finally:
        pool.close()


def transactional_id(write_id, partition):
    """The transactional id of a Spark partition of a write."""
    return f"{ID_PREFIX}.{write_id}.{partition}"


def marker_group(write_id, partition):
    """The consumer group whose committed offset is a Spark partition's commit marker."""
    return f"{ID_PREFIX}.{write_id}.{partition}"


class SparkHeaders:
    """The headers function of the data source: Spark's headers column
    (array<struct<key: string, value: binary>>) as per-row lists of (key, value)."""

    def __init__(self, column):
        self.column = column

    def __call__(self, frame):
        column = frame.column(self.column)
        pairs = column.values
        keys = pairs.field("key").to_pylist()
        values = pairs.field("value").to_pylist()
        offsets = column.offsets.to_pylist()
        if pairs.null_count or None in keys:
            # Spark's sink fails on a header without a key; without this check its
            # record failed in send_batch() unnamed, or a null header (with keys that
            # Arrow left under it) went out as one with an empty key.
            nulls = pairs.is_null().to_pylist()
            element = next(i for i, key in enumerate(keys) if key is None or nulls[i])
            raise ValueError(f"column {self.column!r} holds a null header (row "
                             f"{bisect.bisect_right(offsets, element) - 1} of a batch): "
                             f"each header needs a key")
        valid = column.is_valid().to_pylist() if column.null_count else None
        return [list(zip(keys[offsets[i]:offsets[i + 1]], values[offsets[i]:offsets[i + 1]]))
                if valid is None or valid[i] else []
                for i in range(len(column))]


def _by_topic(pa, frame, topic_column, parts):
    """(topic, send_batch columns) per distinct topic of the frame's topic column,
    rows in their order."""
    import pyarrow.compute as pc
    topics = frame.column(topic_column)
    if topics.null_count:
        raise ValueError(f"the topic column {topic_column!r} is null in "
                         f"{topics.null_count} rows; set the option {TOPIC_OPTION!r} or "
                         f"give every row a topic")
    distinct = pc.unique(topics).to_pylist()
    if len(distinct) == 1:
        yield distinct[0], parts
        return
    for topic in distinct:
        rows = pc.indices_nonzero(pc.equal(topics, topic))
        yield topic, tuple(_take(pa, part, rows) for part in parts)


def _take(pa, part, rows):
    """rows of one send_batch column, whichever form it has."""
    if part is None:
        return None
    if isinstance(part, dict):
        return {name: column.take(rows) for name, column in part.items()}
    if isinstance(part, list):
        return [part[i] for i in rows.to_pylist()]
    return part.take(rows)


def _check_column(fields, name, types, required=False, hint=""):
    """The input's column name (as Spark spells it), None if absent and not required."""
    field = fields.get(name)
    if field is None:
        if required:
            raise ValueError(f"format({SOURCE_NAME!r}) needs a {name!r} column{hint}; the "
                             f"input has {[f.name for f in fields.values()]}")
        return None
    if not isinstance(field.dataType, types):
        allowed = " or ".join(t.typeName() for t in types)
        raise TypeError(f"column {field.name!r} is {field.dataType.simpleString()}, it must be "
                        f"{allowed}")
    return field.name


def _check_headers(fields):
    field = fields.get("headers")
    if field is None:
        return None
    kind = field.dataType
    element = kind.elementType if isinstance(kind, ArrayType) else None
    if not (isinstance(element, StructType) and len(element.fields) == 2
            and element.fields[0].name == "key"
            and isinstance(element.fields[0].dataType, StringType)
            and element.fields[1].name == "value"
            and isinstance(element.fields[1].dataType, BinaryType)):
        raise TypeError(f"column {field.name!r} is {kind.simpleString()}, it must be "
                        f"array<struct<key:string,value:binary>>")
    return field.name


def _checked_settings(settings, origins):
    """producer_settings(settings), a refusal naming the options at fault."""
    try:
        return producer_settings(settings)
    except _REFUSALS as exc:
        error = exc
    # The refusal names Producer keywords.  An option refused alone is at fault, with
    # the write's own values (the Spark defaults too) in its message; the bootstrap
    # servers are checked first, as a bad entry fails beside every other option.
    bootstrap = {"bootstrap_servers": settings["bootstrap_servers"]}
    for keyword, option in sorted(origins.items(),
                                  key=lambda item: item[0] != "bootstrap_servers"):
        try:
            producer_settings({**bootstrap, keyword: settings[keyword]})
        except _REFUSALS as exc:
            # The whole write's refusal when it is about this setting too: its message
            # has the write's values (kafka.buffer.memory against the write's batch.size,
            # not the default's, which the option alone was checked with).
            shown = error if re.search(rf"\b{keyword}\b", str(error)) else exc
            raise type(shown)(f"option {option!r}: {shown}") from shown
    # Options that clash: those whose keywords the message names.
    named = sorted(option for keyword, option in origins.items()
                   if re.search(rf"\b{keyword}\b", str(error))) or sorted(origins.values())
    raise type(error)(f"options {named}: {error}") from error


def _boolean(name, value):
    text = str(value).strip().lower()
    if text not in _BOOLEANS:
        raise ValueError(f"option {name!r} must be true or false, not {value!r}")
    return _BOOLEANS[text]


def _init_transactions(producer):
    """producer.init_transactions(); a transaction timeout the broker refuses is named as
    the option that sets it (the broker's INVALID_TRANSACTION_TIMEOUT names nothing)."""
    try:
        producer.init_transactions()
    except InvalidTransactionTimeoutError as exc:
        raise KafkaConfigurationError(
            f"option {KAFKA_PREFIX}transaction.timeout.ms: the broker refuses a transaction "
            f"timeout of {producer.config.transaction_timeout_ms} ms (exactlyOnce's default "
            f"is {EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS}): it is above the broker's "
            f"transaction.max.timeout.ms; set the option at most that") from exc


def _raise_if_timed_out(exc, producer, partition, open_s):
    """Says why, when a transaction failed after transaction_timeout_ms: the
    coordinator aborts a transaction open longer, and the producer hears of it only
    as its epoch refused (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED), which names no
    setting -- and every attempt of the task fails alike."""
    timeout_ms = producer.config.transaction_timeout_ms
    if isinstance(exc, KafkaError) and open_s * 1000 >= timeout_ms:
        raise KafkaError(
            f"the transaction of Spark partition {partition} failed after {open_s:.0f} s "
            f"open, longer than its transaction timeout ({timeout_ms} ms), past which the "
            f"coordinator aborts it: set the option {KAFKA_PREFIX}transaction.timeout.ms "
            f"higher (at most the broker's transaction.max.timeout.ms)") from exc


def _abort_quietly(producer):
    """Aborts the open transaction after a failure, which stays the error raised;
    a producer that cannot abort (fenced, closed) leaves it to the next attempt's
    init_transactions()."""
    try:
        producer.abort_transaction()
    except Exception:  # noqa: BLE001 -- the task's own failure is the one to raise
        pass

