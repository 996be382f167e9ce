"""Emission from Spark executors: a foreachPartition sink and Arrow / pandas emitters.

Every path ends in Producer.send_batch() in the executor's Python worker:

    partition_sink   Rows (or dicts, tuples) -> lists, a chunk of rows at a time
    arrow_emitter    pyarrow RecordBatches -> their binary/string columns (header
                     columns too), read in place by the native encoder, and
                     provenance headers made as Arrow arrays (no Python object
                     per row)
    pandas_emitter   pandas DataFrames -> pyarrow arrays -> the arrow_emitter's way

Each Python worker process keeps one producer per configuration (worker_producer):
PySpark reuses a worker for task after task, so connections, metadata and the
idempotent producer id are set up once, not per task.  A forked child keeps the
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
"""
import collections
import hashlib
import itertools
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter

try:
    from pyspark import TaskContext, cloudpickle
except ImportError as exc:  # pragma: no cover -- depends on the environment
    raise ImportError("netkafka.spark needs PySpark: pip install pyspark") from exc

from netkafka.errors import DeliveryFailedError
from netkafka.config import SECURITY_OPTIONS, TRANSACTION_OPTIONS, ProducerConfig
from netkafka.producer.producer import Producer

CONF_PREFIX = "spark.netkafka.producer."
STAGE_HEADER = "netkafka.spark.stage"
PARTITION_HEADER = "netkafka.spark.partition"
ATTEMPT_HEADER = "netkafka.spark.attempt"
TASK_HEADER = "netkafka.spark.task"
ROW_HEADER = "netkafka.spark.row"
PROVENANCE_HEADERS = (STAGE_HEADER, PARTITION_HEADER, ATTEMPT_HEADER, TASK_HEADER, ROW_HEADER)

# Executors send in bulk: librdkafka's batch size and linger unless the
# configuration says otherwise (kafka-python's 16 KiB and 0 ms are several times
# slower here).
SPARK_DEFAULTS = {"batch_size": 1024 * 1024, "linger_ms": 5}
# Rows of a partition sink gathered into one send_batch() call.
SINK_CHUNK_ROWS = 10_000
# Errors a DeliveryFailedError names (its count is exact).
FIRST_ERRORS_KEPT = 5

ROW_REPORT_SCHEMA = "partition INT, offset BIGINT, error STRING"
BATCH_REPORT_SCHEMA = "rows BIGINT, delivered BIGINT, failed BIGINT, error STRING, producer STRING"
_REPORTS = {"row": ROW_REPORT_SCHEMA, "batch": BATCH_REPORT_SCHEMA}
_ON_ERROR = ("report", "raise")


# ----------------------------------------------------------------------------------
# Configuration (driver side)


@dataclass(frozen=True)
class ProducerSettings:
    """Producer keyword arguments, checked, and a digest naming them.

    Made on the driver by producer_settings(); pickled into the sink or emitter.
    The digest is the key of a worker's producer cache: computed once, it stays
    the same in every task even when a setting is a function."""

    kwargs: dict
    digest: str


def producer_settings(config=None):
    """The producer settings a sink or emitter made now would use.

    Args:
        config: None, a ProducerSettings (returned as is), or a dict of Producer
            keyword arguments; a Java-style dotted name (``bootstrap.servers``,
            ``linger.ms``) stands for its kafka-python name (``bootstrap_servers``,
            ``linger_ms``).  Strings are read as the setting's type ("5", "true").

    The active Spark session's conf keys under CONF_PREFIX come first (names and
    values as above), then config overrides them, then SPARK_DEFAULTS fill in
    batch_size and linger_ms.

    Raises:
        TypeError: an unknown setting (named, with where it came from).
        ValueError: a bad value, or no bootstrap servers at all.
        NotImplementedError: TLS, SASL or transaction settings.
    """
    if isinstance(config, ProducerSettings):
        return config
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"config must be None, a dict of producer settings or a "
                        f"ProducerSettings, not {type(config).__name__}")
    kwargs, origin = {}, {}
    for key, value in _spark_conf_items():
        name = _setting_name(key[len(CONF_PREFIX):], key)
        kwargs[name], origin[name] = value, key
    for key, value in (config or {}).items():
        if not isinstance(key, str):
            raise TypeError(f"config keys must be str, got {key!r}")
        name = _setting_name(key, key)
        kwargs[name], origin[name] = value, key
    for name, value in kwargs.items():
        kwargs[name] = _typed(name, value, origin[name])
    if "bootstrap_servers" not in kwargs:
        raise ValueError(f"no bootstrap servers for netkafka.spark: pass "
                         f"config={{'bootstrap_servers': 'host:port'}} or set "
                         f"{CONF_PREFIX}bootstrap.servers in the Spark conf")
    for name, value in SPARK_DEFAULTS.items():
        kwargs.setdefault(name, value)
    if "batch_size" not in (config or {}) and "max_request_size" in kwargs:
        kwargs["batch_size"] = min(kwargs["batch_size"], kwargs["max_request_size"])
    ProducerConfig.from_kwargs(kwargs)  # every check of Producer(), now, on the driver
    digest = hashlib.sha256(cloudpickle.dumps(sorted(kwargs.items()))).hexdigest()
    return ProducerSettings(kwargs, digest)


def _spark_conf_items():
    """(key, value) of the active session's conf under CONF_PREFIX; none without one
    (on an executor, or before a session exists)."""
    from pyspark.sql import SparkSession
    session = SparkSession.getActiveSession()
    if session is None:
        return []
    return [(key, value) for key, value in session.conf.getAll.items()
            if key.startswith(CONF_PREFIX)]


_FIELDS = ProducerConfig.__dataclass_fields__


def _setting_name(key, origin):
    name = key.replace(".", "_")
    if name not in _FIELDS and name not in SECURITY_OPTIONS and name not in TRANSACTION_OPTIONS:
        raise TypeError(f"unknown producer setting {origin!r} (read as {name!r}): "
                        f"netkafka.spark takes netkafka.Producer's keyword arguments")
    return name


def _typed(name, value, origin):
    """A string value as the setting's type: Spark conf values are all strings."""
    if not isinstance(value, str):
        return value
    field = _FIELDS.get(name)
    default = None if field is None else field.default
    if isinstance(default, bool):
        if value.lower() not in ("true", "false"):
            raise ValueError(f"{origin}={value!r}: must be true or false")
        return value.lower() == "true"
    numeric = value.strip().lstrip("-").isdigit()
    if name == "acks" or (field is not None and field.type is int) \
            or name in ("retries", "send_buffer_bytes", "receive_buffer_bytes"):
        if numeric:
            return int(value)
        if name != "acks":
            raise ValueError(f"{origin}={value!r}: must be an integer")
    if name == "compression_type" and value.lower() == "none":
        return None
    return value


# ----------------------------------------------------------------------------------
# The worker's producers (executor side)

# This process's producers by ProducerSettings.digest.  Guarded by _producers_lock;
# a forked child keeps them (each Producer restarts its own stack there) but takes a
# new lock, since a parent thread may have held the old one at the fork.
_producers = {}
_producers_lock = threading.Lock()


def _new_lock_after_fork():
    global _producers_lock
    _producers_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_after_fork)


def worker_producer(config=None):
    """This process's producer for config (as producer_settings takes it), made on
    first use and shared by every task the process runs afterwards."""
    settings = producer_settings(config)
    with _producers_lock:
        producer = _producers.get(settings.digest)
        if producer is None:
            producer = _producers[settings.digest] = Producer(**settings.kwargs)
        return producer


def producer_label(producer):
    """host:pid:client_id -- which worker process's which producer."""
    return f"{socket.gethostname()}:{os.getpid()}:{producer.config.client_id}"


# ----------------------------------------------------------------------------------
# What a task sends: topic, settings, and where key, value... come from


class _Emission:
    """The driver-side choices every path shares; pickled to the executors."""

    def __init__(self, topic, config, key, value, headers, partition, timestamp, provenance):
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        for what, spec in (("key", key), ("value", value), ("partition", partition),
                           ("timestamp", timestamp)):
            _check_spec(what, spec, required=what == "value")
        if not (headers is None or callable(headers) or (
                isinstance(headers, (list, tuple))
                and all(isinstance(name, str) for name in headers))):
            raise TypeError(f"headers must be None, a list of column names or a function, "
                            f"got {headers!r}")
        # Header columns go to send_batch as {name: column}: one column per name.
        if isinstance(headers, (list, tuple)):
            if len(set(headers)) != len(headers):
                raise ValueError(f"headers names a column twice: {list(headers)}")
            clash = set(headers) & set(PROVENANCE_HEADERS) if provenance else None
            if clash:
                raise ValueError(f"headers {sorted(clash)} have a provenance header's name")
        self.topic = topic
        self.settings = producer_settings(config)
        self.key, self.value, self.headers = key, value, headers
        self.partition, self.timestamp = partition, timestamp
        self.provenance = bool(provenance)

    def task_headers(self):
        """The provenance headers every row of this task shares (row index apart)."""
        task = TaskContext.get()
        if task is None:
            raise RuntimeError("provenance=True needs a Spark task: TaskContext.get() is None "
                               "outside one")
        return [(STAGE_HEADER, b"%d" % task.stageId()),
                (PARTITION_HEADER, b"%d" % task.partitionId()),
                (ATTEMPT_HEADER, b"%d" % task.attemptNumber()),
                (TASK_HEADER, b"%d" % task.taskAttemptId())]


def _check_spec(what, spec, required=False):
    if spec is None and not required:
        return
    if isinstance(spec, str) or callable(spec) or (
            isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0):
        return
    raise TypeError(f"{what} must be a column name, a column index or a function"
                    f"{'' if required else ', or None'}, got {spec!r}")


def _raise_if_failed(topic, result):
    if result.failed_count:
        raise DeliveryFailedError(topic, result.failed_count,
                                  [error for _, error in result.errors[:FIRST_ERRORS_KEPT]])


class _Pending:
    """The BatchSendResults of one task, checked in order as they complete."""

    def __init__(self, topic):
        self.topic = topic
        self._queue = collections.deque()  # (payload, BatchSendResult); the task's thread only

    def add(self, payload, result):
        self._queue.append((payload, result))

    def done(self, wait=False):
        """(payload, result) of the oldest results that are done (all, waiting, if
        wait)."""
        while self._queue and (wait or self._queue[0][1].done):
            payload, result = self._queue.popleft()
            yield payload, result.get()



# ----------------------------------------------------------------------------------
# foreachPartition


def partition_sink(topic, config=None, *, key=None, value="value", headers=None,
                   partition=None, timestamp=None, provenance=False):
    """A function for df.foreachPartition(...) or rdd.foreachPartition(...) that
    sends every row to topic.

    Args:
        topic: the topic.
        config: the producer settings (see producer_settings); resolved now, on the
            driver, with the Spark session's CONF_PREFIX keys.
        key, value, partition, timestamp: each a column name (rows that are
            pyspark Rows or dicts), a column index (Rows, tuples), or a function of
            the row.  Keys and values: bytes, str (sent as UTF-8) or None;
            partition: int or None (the partitioner's choice); timestamp: epoch
            ms as int, a datetime, or None (now).
        headers: None, a list of column names (each becomes a header of that name;
            values bytes or str), or a function of the row returning a list of
            (str, bytes) pairs.
        provenance: add the task's provenance headers (see the module's doc).

    The returned function sends through this worker's producer (worker_producer),
    flushes at the end of the partition, and raises DeliveryFailedError if any row
    failed (at once if a failure is already known), so Spark retries the task.
    """
    return _PartitionSink(_Emission(topic, config, key, value, headers, partition,
                                    timestamp, provenance))


class _PartitionSink:
    def __init__(self, emission):
        self.emission = emission

    def __call__(self, rows):
        emission = self.emission
        producer = worker_producer(emission.settings)
        task_headers = emission.task_headers() if emission.provenance else None
        pending = _Pending(emission.topic)
        rows = iter(rows)
        getters = None
        first_row = 0
        while True:
            chunk = list(itertools.islice(rows, SINK_CHUNK_ROWS))
            if not chunk:
                break
            if getters is None:
                getters = _RowColumns(emission, chunk[0])
            values, keys, headers, partitions, timestamps = getters.columns(chunk)
            if task_headers is not None:
                headers = _with_provenance(headers, task_headers, first_row, len(chunk),
                                           _provenance_lists)
            first_row += len(chunk)
            pending.add(None, producer.send_batch(emission.topic, values, keys, headers,
                                                  partitions, timestamps))
            for _, result in pending.done():
                _raise_if_failed(emission.topic, result)
        producer.flush()
        for _, result in pending.done(wait=True):
            _raise_if_failed(emission.topic, result)


class _RowColumns:
    """Turns a chunk of rows into send_batch()'s columns, by the emission's specs,
    resolved once against the partition's first row."""

    def __init__(self, emission, row):
        self.value = _row_getter("value", emission.value, row)
        self.key = _row_getter("key", emission.key, row)
        self.partition = _row_getter("partition", emission.partition, row)
        self.timestamp = _row_getter("timestamp", emission.timestamp, row)
        names = emission.headers
        if names is None or callable(names):
            self.header_names, self.headers = None, names
        else:
            self.header_names = list(names)
            self.headers = [_row_getter(f"headers column {name!r}", name, row)
                            for name in names]

    def columns(self, chunk):
        # Column positions exist only for tuple rows (pyspark Rows are tuples):
        # the chunk is transposed once, natively, rather than indexed row by row
        # through Row.__getitem__.
        transposed = []

        def column(getter):
            if getter is None:
                return None
            if isinstance(getter, int):
                if not transposed:
                    transposed.extend(zip(*chunk))
                return transposed[getter]
            return [getter(row) for row in chunk]

        values = _bytes_column("value", column(self.value))
        keys = _bytes_column("key", column(self.key))
        partitions = column(self.partition)
        if partitions is not None:
            _check_partitions(partitions)
        timestamps = column(self.timestamp)
        if timestamps is not None:
            timestamps = _epoch_ms_column(timestamps)
        if self.header_names is not None:
            headers = {name: _bytes_column(f"header {name!r}", column(getter))
                       for name, getter in zip(self.header_names, self.headers)}
        elif self.headers is not None:
            headers = [self.headers(row) for row in chunk]
        else:
            headers = None
        return values, keys, headers, partitions, timestamps


def _row_getter(what, spec, row):
    """An int (a position in tuple rows), a function of the row, or None."""
    if spec is None or callable(spec):
        return spec
    if isinstance(spec, int):
        if not isinstance(row, tuple):
            raise TypeError(f"{what}={spec} is a column index, but the rows are "
                            f"{type(row).__name__}, not tuples or pyspark Rows")
        if spec >= len(row):
            raise ValueError(f"{what}={spec}: the rows have {len(row)} columns")
        return spec
    fields = getattr(row, "__fields__", None)  # a pyspark Row with names
    if isinstance(row, tuple) and fields is not None:
        if spec not in fields:
            raise ValueError(f"{what}={spec!r}: the rows have no such column; they have "
                             f"{list(fields)}")
        return fields.index(spec)
    if isinstance(row, Mapping):
        if spec not in row:
            raise ValueError(f"{what}={spec!r}: the rows have no such key; they have "
                             f"{list(row)}")
        return itemgetter(spec)
    raise TypeError(f"{what}={spec!r} names a column, but the rows are "
                    f"{type(row).__name__}, not pyspark Rows or dicts: pass a column "
                    f"index or a function of the row")


def _bytes_column(what, column):
    """column with str encoded as UTF-8; bytes-like and None kept."""
    if column is None:
        return None
    kinds = set(map(type, column))
    if kinds <= {bytes, type(None)}:
        return column
    if kinds <= {str, type(None)}:
        return [None if v is None else v.encode() for v in column]
    bad = kinds - {bytes, bytearray, memoryview, str, type(None)}
    if bad:
        raise TypeError(f"{what}: a {sorted(t.__name__ for t in bad)[0]} is not bytes, str "
                        f"or None (convert it with a function of the row)")
    return [v.encode() if type(v) is str else v for v in column]


def _check_partitions(column):
    kinds = set(map(type, column))
    if kinds != {int}:
        raise TypeError(f"partition: every row needs an int, got "
                        f"{sorted(t.__name__ for t in kinds - {int})}")


def _epoch_ms_column(column):
    """Timestamps as epoch ms: ints kept, datetimes converted, None kept (now)."""
    kinds = set(map(type, column))
    if kinds <= {int, type(None)}:
        return column
    return [_epoch_ms(v) for v in column]


def _epoch_ms(value):
    if value is None or type(value) is int:
        return value
    timestamp = getattr(value, "timestamp", None)
    if timestamp is None:
        raise TypeError(f"timestamp: a {type(value).__name__} is not epoch ms (int), a "
                        f"datetime or None")
    # PySpark hands naive local datetimes, which timestamp() reads as local too.
    return round(timestamp() * 1000)


def _with_provenance(headers, task_headers, first_row, count, provenance_columns):
    """headers of rows first_row.. with the provenance headers after the rows' own.

    Headers given by column (or none) stay columns, {name: column}, the provenance
    ones made by provenance_columns(task_headers, first_row, count); per-row lists
    (a headers function's) get them row by row."""
    if headers is None or isinstance(headers, dict):
        return {**(headers or {}), **provenance_columns(task_headers, first_row, count)}
    rows = range(first_row, first_row + count)
    return [(list(own) if own else []) + task_headers + [(ROW_HEADER, b"%d" % row)]
            for own, row in zip(headers, rows)]


def _provenance_lists(task_headers, first_row, count):
    """The provenance header columns as lists (the sink's rows are objects already):
    one bytes object per task header, repeated, and one per row index."""
    columns = {name: [value] * count for name, value in task_headers}
    columns[ROW_HEADER] = [b"%d" % row for row in range(first_row, first_row + count)]
    return columns


def _provenance_arrays(task_headers, first_row, count):
    """The provenance header columns as pyarrow arrays, made natively: no Python
    object per row."""
    import pyarrow as pa
    import pyarrow.compute as pc
    columns = {name: pa.repeat(pa.scalar(value, pa.binary()), count)
               for name, value in task_headers}
    # first_row, first_row + 1, ...: a running sum of ones (pyarrow.arange is newer
    # than the pyarrow this package accepts), as ASCII decimal.
    ones = pa.repeat(pa.scalar(1, pa.int64()), count)
    columns[ROW_HEADER] = pc.cumulative_sum(ones, start=first_row - 1).cast(pa.string())
    return columns


# ----------------------------------------------------------------------------------
# mapInArrow / mapInPandas


def arrow_emitter(topic, config=None, *, key=None, value="value", headers=None,
                  partition=None, timestamp=None, provenance=False, report="batch",
                  on_error="report"):
    """A function for df.mapInArrow(fn, fn.schema) that sends every row to topic
    and yields delivery reports.

    Args:
        topic, config, provenance: as partition_sink.
        key, value: a column name or index of binary or string type, or a function
            of the RecordBatch returning such an array (or a list of bytes).  They
            are read in place by the native encoder.
        partition: None, or a column (or function) of ints.
        timestamp: None (now), or a column (or function) of epoch ms ints or of
            Arrow timestamps; null means now.
        headers: None, a list of column names (binary or string; read in place
            like key and value, a null is a header with a null value), or a function
            of the RecordBatch returning per row a list of (str, bytes) pairs (the
            one way that makes Python objects per row: the function's).
        report: "batch" -- one row per input batch: rows, delivered, failed, the
            first error (null if none) and the producer (host:pid:client_id); or
            "row" -- per input row: partition, offset (-1 if failed, and always
            with acks=0) and error (null if delivered).  fn.schema is the DDL.
        on_error: "report" (failures are in the reports) or "raise" (a failure
            raises DeliveryFailedError, so Spark retries the task).

    Reports of a batch are yielded once its records are done, in input order;
    the last ones after a flush at the end of the partition.
    """
    return _ArrowEmitter(_Emission(topic, config, key, value, headers, partition,
                                   timestamp, provenance), report, on_error, pandas=False)


def pandas_emitter(topic, config=None, *, key=None, value="value", headers=None,
                   partition=None, timestamp=None, provenance=False, report="batch",
                   on_error="report"):
    """arrow_emitter for df.mapInPandas(fn, fn.schema): pandas DataFrames in and
    out.  Columns are converted to pyarrow arrays (natively, by pyarrow); functions
    get the DataFrame and return a Series, array or list."""
    return _ArrowEmitter(_Emission(topic, config, key, value, headers, partition,
                                   timestamp, provenance), report, on_error, pandas=True)


class _ArrowEmitter:
    def __init__(self, emission, report, on_error, pandas):
        if report not in _REPORTS:
            raise ValueError(f"report must be 'row' or 'batch', got {report!r}")
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be 'report' or 'raise', got {on_error!r}")
        self.emission = emission
        self.report = report
        self.on_error = on_error
        self.pandas = pandas
        self.schema = _REPORTS[report]

    def __call__(self, frames):
        import pyarrow
        emission = self.emission
        producer = worker_producer(emission.settings)
        label = producer_label(producer)
        task_headers = emission.task_headers() if emission.provenance else None
        pending = _Pending(emission.topic)
        first_row = 0
        for frame in frames:
            columns = _FrameColumns(pyarrow, frame, self.pandas)
            count = columns.count
            if count:
                pending.add(count, columns.send(producer, emission, task_headers, first_row))
                first_row += count
            yield from self._reports(pyarrow, pending.done(), label)
        producer.flush()
        yield from self._reports(pyarrow, pending.done(wait=True), label)

    def _reports(self, pyarrow, done, label):
        for count, result in done:
            if self.on_error == "raise":
                _raise_if_failed(self.emission.topic, result)
            batch = (_row_report(pyarrow, result, count) if self.report == "row"
                     else _batch_report(pyarrow, result, count, label))
            yield batch.to_pandas() if self.pandas else batch


class _FrameColumns:
    """One input RecordBatch (or pandas DataFrame) as send_batch's pyarrow columns."""

    def __init__(self, pyarrow, frame, is_pandas):
        self.pyarrow = pyarrow
        self.frame = frame
        self.is_pandas = is_pandas
        self.count = len(frame)

    def array(self, what, spec):
        """The spec's column as a pyarrow Array (or None)."""
        pa = self.pyarrow
        frame = self.frame
        if spec is None:
            return None
        if callable(spec):
            column = spec(frame)
        elif self.is_pandas:
            names = list(frame.columns)
            if isinstance(spec, int):
                if spec >= len(names):
                    raise ValueError(f"{what}={spec}: the DataFrame has {len(names)} columns")
                spec = names[spec]
            if spec not in names:
                raise ValueError(f"{what}={spec!r}: no such column; the DataFrame has {names}")
            column = frame[spec]
        else:
            names = frame.schema.names
            if isinstance(spec, int):
                if spec >= len(names):
                    raise ValueError(f"{what}={spec}: the batch has {len(names)} columns")
            elif spec not in names:
                raise ValueError(f"{what}={spec!r}: no such column; the batch has {names}")
            column = frame.column(spec)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if not isinstance(column, pa.Array):
            column = pa.array(column, from_pandas=True)
        if len(column) != self.count:
            raise ValueError(f"{what} has {len(column)} rows, the batch has {self.count}")
        return column

    def binary(self, what, spec):
        column = self.array(what, spec)
        if column is None:
            return None
        types = self.pyarrow.types
        kind = column.type
        if types.is_null(kind):
            return column.cast(self.pyarrow.binary())
        if not (types.is_binary(kind) or types.is_string(kind) or types.is_large_binary(kind)
                or types.is_large_string(kind)):
            raise TypeError(f"{what}: a column of {kind} is not binary or string "
                            f"(cast it, or pass a function returning such an array)")
        return column

    def send(self, producer, emission, task_headers, first_row):
        values = self.binary("value", emission.value)
        keys = self.binary("key", emission.key)
        partitions = self.partitions(emission.partition)
        timestamps = self.epoch_ms(emission.timestamp)
        headers = self.headers(emission.headers)
        if task_headers is not None:
            headers = _with_provenance(headers, task_headers, first_row, self.count,
                                       _provenance_arrays)
        return producer.send_batch(emission.topic, values, keys, headers, partitions,
                                   timestamps)

    def partitions(self, spec):
        column = self.array("partition", spec)
        if column is None:
            return None
        if not self.pyarrow.types.is_integer(column.type) or column.null_count:
            raise TypeError(f"partition: a column of {column.type}"
                            f"{' with nulls' if column.null_count else ''} is not ints")
        # Partition ids are small ints, which CPython keeps one object of each.
        return column.to_pylist()

    def epoch_ms(self, spec):
        """The timestamp column as a memoryview of int64 epoch ms, nulls now."""
        pa = self.pyarrow
        column = self.array("timestamp", spec)
        if column is None:
            return None
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.timestamp("ms", column.type.tz), safe=False)
        elif not pa.types.is_integer(column.type):
            raise TypeError(f"timestamp: a column of {column.type} is not epoch ms or "
                            f"timestamps")
        column = column.cast(pa.int64())
        if column.null_count:
            column = column.fill_null(int(time.time() * 1000))
        data = memoryview(column.buffers()[1]).cast("B")
        return data[column.offset * 8:(column.offset + len(column)) * 8].cast("q")

    def headers(self, spec):
        if spec is None:
            return None
        if callable(spec):
            headers = spec(self.frame)
            if len(headers) != self.count:
                raise ValueError(f"headers has {len(headers)} rows, the batch has "
                                 f"{self.count}")
            return list(headers)
        return {name: self.binary(f"header {name!r}", name) for name in spec}


def _row_report(pa, result, count):
    partitions = result.partitions()
    offsets = result.offsets()
    failed = result.errors
    if failed:
        messages = [None] * count
        for row, error in failed:
            messages[row] = repr(error)
        error_column = pa.array(messages, pa.string())
    else:
        error_column = pa.nulls(count, pa.string())
    return pa.RecordBatch.from_arrays(
        [pa.Array.from_buffers(pa.int32(), count, [None, pa.py_buffer(partitions)]),
         pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(offsets)]),
         error_column],
        names=["partition", "offset", "error"])


def _batch_report(pa, result, count, label):
    failed = result.failed_count
    first_error = repr(result.errors[0][1]) if failed else None
    return pa.RecordBatch.from_arrays(
        [pa.array([count], pa.int64()), pa.array([count - failed], pa.int64()),
         pa.array([failed], pa.int64()), pa.array([first_error], pa.string()),
         pa.array([label], pa.string())],
        names=["rows", "delivered", "failed", "error", "producer"])
