"""The foreachPartition sink, and what the emitters (emitters.py) share with it.

    Emission         the driver-side choices, pickled to the executors: topic,
                     settings, where key, value, headers, partition and timestamp
                     come from, provenance
    worker_producer  this worker process's producer per configuration (the cache,
                     a few configurations; leased_producer holds one while used)
    Pending          a task's send_batch() results, checked in order
    partition_sink   Rows (or dicts, tuples) -> lists, a chunk of rows at a time

The package's docstring tells the whole story: one producer per worker, when a task
is done, the provenance headers.
"""
import collections
import contextlib
import itertools
import os
import socket
import threading
from collections.abc import Mapping
from operator import itemgetter
from typing import Any, Optional

from pyspark import TaskContext

from netkafka.client.metadata import check_topic_name
from netkafka.errors import DeliveryFailedError, IllegalArgumentError
from netkafka.producer.producer import Producer
from netkafka.record._columns import integer_arg
from netkafka.spark.settings import producer_settings

STAGE_HEADER = "netkafka.spark.stage"
PARTITION_HEADER = "netkafka.spark.partition"
ATTEMPT_HEADER = "netkafka.spark.attempt"
TASK_HEADER = "netkafka.spark.task"
ROW_HEADER = "netkafka.spark.row"
PROVENANCE_HEADERS = (STAGE_HEADER, PARTITION_HEADER, ATTEMPT_HEADER, TASK_HEADER, ROW_HEADER)
# Rows of a partition sink gathered into one send_batch() call.
SINK_CHUNK_ROWS = 10_000
# Errors a DeliveryFailedError names (its count is exact).
FIRST_ERRORS_KEPT = 5


# ----------------------------------------------------------------------------------
# The worker's producers (executor side)

# Configurations whose producers a worker process keeps, the least recently used
# closed first: a long-lived executor running jobs with ever-new settings would
# otherwise keep a producer (threads, connections, buffer memory) for each of them.
WORKER_PRODUCERS_KEPT = 4


class _Cached:
    """A cached producer and who holds it (leased_producer)."""

    def __init__(self, producer):
        self.producer = producer  # immutable
        # Guarded by _producers_lock: a token per lease -> the ident of the thread
        # that took it (a forked child keeps its own thread's, see _after_fork_in_child).
        self.leases = {}


# This process's producers by ProducerSettings.digest, least recently used first.
# Guarded by _producers_lock; a forked child keeps them (each Producer restarts its
# own stack there) but takes a new lock, since a parent thread may have held the old
# one at the fork.
_producers = collections.OrderedDict()
_producers_lock = threading.Lock()


def _after_fork_in_child():
    global _producers_lock
    _producers_lock = threading.Lock()
    # Only the forking thread came along: the other threads' leases ended with them.
    forking_thread = threading.get_ident()
    for cached in _producers.values():
        cached.leases = {token: ident for token, ident in cached.leases.items()
                         if ident == forking_thread}


os.register_at_fork(after_in_child=_after_fork_in_child)


def worker_producer(config=None):
    """This process's producer for config (as producer_settings takes it), made on
    first use and shared by every task the process runs afterwards, until
    WORKER_PRODUCERS_KEPT other configurations have been used since: then it is
    flushed and closed, once nothing holds it.  Code that sends through it should
    hold it with leased_producer(), which the sink, emitters and data source do."""
    with leased_producer(config) as producer:
        return producer


@contextlib.contextmanager
def leased_producer(config=None):
    """worker_producer(config), held for the with block: the cache closes no producer
    a block holds, in any thread of the process."""
    settings = producer_settings(config)
    token = object()
    with _producers_lock:
        cached = _producers.get(settings.digest)
        if cached is None:
            cached = _producers[settings.digest] = _Cached(Producer(**settings.kwargs))
        _producers.move_to_end(settings.digest)
        cached.leases[token] = threading.get_ident()
        evicted = _evict_locked()
    _close_all(evicted)
    try:
        yield cached.producer
    finally:
        with _producers_lock:
            # Absent in a forked child when another thread of the parent took it.
            cached.leases.pop(token, None)
            # Not this one: worker_producer() returns it, released, to be used.
            evicted = _evict_locked(spared=settings.digest)
        _close_all(evicted)


def _evict_locked(spared=None):
    """Takes the least recently used producers nothing holds (nor the one of digest
    spared) out of the cache while it has more than WORKER_PRODUCERS_KEPT; returns
    them, to be closed outside the lock (close() flushes; a held one waits for a
    later call)."""
    excess = max(len(_producers) - WORKER_PRODUCERS_KEPT, 0)
    idle = [digest for digest, cached in _producers.items()
            if not cached.leases and digest != spared][:excess]
    return [_producers.pop(digest).producer for digest in idle]


def _close_all(producers):
    for producer in producers:
        producer.close()


def producer_label(producer):
    """host:pid:client_id -- which worker process's which producer."""
    return f"{socket.gethostname()}:{os.getpid()}:{producer.config.client_id}"


# ----------------------------------------------------------------------------------
# What a task sends: topic, settings, and where key, value... come from


class Emission:
    """The driver-side choices every path shares; pickled to the executors."""

    def __init__(self, topic, config, key, value, headers, partition, timestamp, provenance,
                 topic_per_row=False):
        # topic_per_row: the data source's topic column names each row's topic; then
        # topic is None and send_batch() is called per topic (datasource.py).
        if topic_per_row:
            if topic is not None:
                raise TypeError(f"topic must be None with topic_per_row, got {topic!r}")
        elif not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        else:
            check_topic_name(topic)  # here, on the driver, not in every task attempt
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


def raise_if_failed(topic, result):
    if result.failed_count:
        raise DeliveryFailedError(topic, result.failed_count,
                                  [error for _, error in result.errors[:FIRST_ERRORS_KEPT]])


class Pending:
    """The BatchSendResults of one task, checked in order as they complete."""

    def __init__(self):
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


def partition_sink(topic: str, config: Optional[Mapping[str, Any]] = None, *, key: Any = None,
                    value: Any = "value", headers: Any = None, partition: Any = None,
                    timestamp: Any = None, provenance: bool = False) -> "_PartitionSink":
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
            ms as int, a datetime, or None (now); an integer with __index__
            (numpy's) counts as its int, as in send_batch().  A name is checked against the
            partition's first row; a later dict row without that key raises
            IllegalArgumentError naming the key and the row, before its chunk
            (SINK_CHUNK_ROWS rows) is sent.
        headers: None, a list of column names (each becomes a header of that name;
            values bytes or str), or a function of the row returning a list of
            (str, bytes) pairs.
        provenance: add the task's provenance headers (see the package's docstring).

    The returned function sends through this worker's producer (worker_producer),
    flushes at the end of the partition, and raises DeliveryFailedError if any row
    failed (at once if a failure is already known), so Spark retries the task.
    """
    return _PartitionSink(Emission(topic, config, key, value, headers, partition,
                                    timestamp, provenance))


class _PartitionSink:
    def __init__(self, emission):
        self.emission = emission

    def __call__(self, rows):
        with leased_producer(self.emission.settings) as producer:
            self._send(producer, rows)

    def _send(self, producer, rows):
        emission = self.emission
        task_headers = emission.task_headers() if emission.provenance else None
        pending = Pending()
        rows = iter(rows)
        getters = None
        first_row = 0
        while True:
            chunk = list(itertools.islice(rows, SINK_CHUNK_ROWS))
            if not chunk:
                break
            if getters is None:
                getters = _RowColumns(emission, chunk[0])
            values, keys, headers, partitions, timestamps = getters.columns(chunk, first_row)
            if task_headers is not None:
                headers = with_provenance(headers, task_headers, first_row, len(chunk),
                                           _provenance_lists)
            first_row += len(chunk)
            pending.add(None, producer.send_batch(emission.topic, values, keys, headers,
                                                  partitions, timestamps))
            for _, result in pending.done():
                raise_if_failed(emission.topic, result)
        producer.flush()
        for _, result in pending.done(wait=True):
            raise_if_failed(emission.topic, result)


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

    def columns(self, chunk, first_row):
        # Column positions exist only for tuple rows (pyspark Rows are tuples):
        # the chunk is transposed once, natively, rather than indexed row by row
        # through Row.__getitem__.  first_row: the chunk's first row's index in
        # the partition, for the errors.
        transposed = []

        def column(getter):
            if getter is None:
                return None
            if isinstance(getter, int):
                if not transposed:
                    transposed.extend(zip(*chunk))
                return transposed[getter]
            if isinstance(getter, _Field):
                return getter.column(chunk, first_row)
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
        return _Field(what, spec)
    raise TypeError(f"{what}={spec!r} names a column, but the rows are "
                    f"{type(row).__name__}, not pyspark Rows or dicts: pass a column "
                    f"index or a function of the row")


class _Field:
    """A key of dict rows, found in the partition's first row: read from each row
    of a chunk at C speed (itemgetter), and a row without it named."""

    __slots__ = ("what", "name", "_get")

    def __init__(self, what, name):
        self.what = what
        self.name = name
        self._get = itemgetter(name)

    def column(self, chunk, first_row):
        try:
            return list(map(self._get, chunk))
        except (KeyError, TypeError):
            # Cold: find the row (a dict without the key, or a row of another kind);
            # itemgetter's bare KeyError named neither it nor the option.
            for index, row in enumerate(chunk, first_row):
                if not isinstance(row, Mapping) or self.name not in row:
                    break
            else:
                raise
        kind = (f"has keys {list(row)}" if isinstance(row, Mapping)
                else f"is a {type(row).__name__}, not a dict")
        raise IllegalArgumentError(
            f"{self.what}={self.name!r}: row {index} of the partition has no key "
            f"{self.name!r} (the partition's first row had it); it {kind}")


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
    """None is the partitioner's choice (send_batch's).  An integer of another type
    (numpy's, from a row function) counts as its int, a bool does not: send_batch()'s
    rule (integer_arg), checked here to name the option."""
    if set(map(type, column)) <= {int, type(None)}:
        return
    for partition in column:
        if partition is not None:
            integer_arg(partition, "an int or None", "partition", -1)


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
        # An integer of another type (numpy's) is epoch ms too, by send_batch()'s rule.
        return integer_arg(value, "epoch ms (an int), a datetime or None", "timestamp", -1)
    # PySpark hands naive local datetimes, which timestamp() reads as local too.
    return round(timestamp() * 1000)


def with_provenance(headers, task_headers, first_row, count, provenance_columns):
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
