"""mapInArrow / mapInPandas: the Arrow and pandas emitters.

They send each input batch's columns through the worker's producer as they are
(sink.worker_producer) and yield delivery reports, per input batch or per row; see
the package's docstring.
"""
import time
from collections.abc import Mapping
from typing import Any, Optional

from netkafka import BatchSendResult, KafkaError
from netkafka._validate import check_choice
from netkafka.spark.sink import (ROW_HEADER, Emission, Pending, leased_producer,
                                 producer_label, raise_if_failed, with_provenance)

ROW_REPORT_SCHEMA = "partition INT, offset BIGINT, error STRING"
BATCH_REPORT_SCHEMA = "rows BIGINT, delivered BIGINT, failed BIGINT, error STRING, producer STRING"
_REPORTS = {"row": ROW_REPORT_SCHEMA, "batch": BATCH_REPORT_SCHEMA}
_ON_ERROR = ("report", "raise")


def arrow_emitter(topic: str, config: Optional[Mapping[str, Any]] = None, *, key: Any = None,
                  value: Any = "value", headers: Any = None, partition: Any = None,
                  timestamp: Any = None, provenance: bool = False, report: str = "batch",
                  on_error: str = "report") -> "_ArrowEmitter":
    """A function for df.mapInArrow(fn, fn.schema) that sends every row to topic
    and yields delivery reports.

    Args:
        topic, config, provenance: as partition_sink.
        key, value: a column name or index of binary or string type, or a function
            of the RecordBatch returning such an array (or a list of bytes).  They
            are read in place by the native encoder.
        partition: None, or a column (or function) of ints; a null leaves the
            row's partition to the partitioner.
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
    return _ArrowEmitter(Emission(topic, config, key, value, headers, partition,
                                   timestamp, provenance), report, on_error, pandas=False)


def pandas_emitter(topic: str, config: Optional[Mapping[str, Any]] = None, *, key: Any = None,
                   value: Any = "value", headers: Any = None, partition: Any = None,
                   timestamp: Any = None, provenance: bool = False, report: str = "batch",
                   on_error: str = "report") -> "_ArrowEmitter":
    """arrow_emitter for df.mapInPandas(fn, fn.schema): pandas DataFrames in and
    out.  Columns are converted to pyarrow arrays (natively, by pyarrow); functions
    get the DataFrame and return a Series, array or list.  Partition and timestamp
    columns of whole floats are read as ints, NaN as null: pandas's form of an int
    column with nulls.  Naive timestamps are wall times of the Spark session's time
    zone (spark.sql.session.timeZone, read now), as mapInPandas hands them."""
    return _ArrowEmitter(Emission(topic, config, key, value, headers, partition,
                                   timestamp, provenance), report, on_error, pandas=True)


class _ArrowEmitter:
    def __init__(self, emission, report, on_error, pandas):
        check_choice("report", report, tuple(_REPORTS))
        check_choice("on_error", on_error, _ON_ERROR)
        self.emission = emission
        self.report = report
        self.on_error = on_error
        self.pandas = pandas
        # mapInPandas turns timestamps into naive wall times of the session's zone.
        self.time_zone = _session_time_zone() if pandas else None
        self.schema = _REPORTS[report]

    def __call__(self, frames):
        with leased_producer(self.emission.settings) as producer:
            yield from self._emit(producer, frames)

    def _emit(self, producer, frames):
        import pyarrow
        emission = self.emission
        label = producer_label(producer)
        task_headers = emission.task_headers() if emission.provenance else None
        pending = Pending()
        first_row = 0
        for frame in frames:
            columns = FrameColumns(pyarrow, frame, self.pandas, self.time_zone)
            count = columns.count
            if count:
                try:
                    result = columns.send(producer, emission, task_headers, first_row)
                except KafkaError as exc:
                    # Refused as a whole (no metadata within max_block_ms, the topic
                    # refused): reported as a failure after the call would be, not raised
                    # past on_error="report".
                    if self.on_error == "raise":
                        raise
                    result = BatchSendResult.every_row_refused(emission.topic, count, exc)
                pending.add(count, result)
                first_row += count
            yield from self._reports(pyarrow, pending.done(), label)
        producer.flush()
        yield from self._reports(pyarrow, pending.done(wait=True), label)

    def _reports(self, pyarrow, done, label):
        for count, result in done:
            if self.on_error == "raise":
                raise_if_failed(self.emission.topic, result)
            batch = (_row_report(pyarrow, result, count) if self.report == "row"
                     else _batch_report(pyarrow, result, count, label))
            yield batch.to_pandas() if self.pandas else batch


class FrameColumns:
    """One input RecordBatch (or pandas DataFrame) as send_batch's pyarrow columns.

    time_zone: the zone whose wall times a frame's naive timestamps are (None: UTC)."""

    def __init__(self, pyarrow, frame, is_pandas, time_zone=None):
        self.pyarrow = pyarrow
        self.frame = frame
        self.is_pandas = is_pandas
        self.time_zone = time_zone
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
        if self.time_zone is not None and _naive_datetimes(column):
            # Read back as PySpark reads a naive pandas timestamp (an hour that occurs
            # twice as its second occurrence), so any zone PySpark took is taken here.
            column = column.dt.tz_localize(self.time_zone, ambiguous=False)
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

    def columns(self, emission, task_headers, first_row):
        """send_batch()'s (values, keys, headers, partitions, timestamps) of this
        batch by the emission's specs, provenance headers added (row indices from
        first_row)."""
        values = self.binary("value", emission.value)
        keys = self.binary("key", emission.key)
        partitions = self.partitions(emission.partition)
        timestamps = self.epoch_ms(emission.timestamp)
        headers = self.headers(emission.headers)
        if task_headers is not None:
            headers = with_provenance(headers, task_headers, first_row, self.count,
                                       _provenance_arrays)
        return values, keys, headers, partitions, timestamps

    def send(self, producer, emission, task_headers, first_row):
        return producer.send_batch(emission.topic,
                                   *self.columns(emission, task_headers, first_row))

    def integers(self, what, spec):
        """The spec's column as array() gives it, but a pandas column of floats as
        int64: pandas makes an int column with nulls float64, its nulls NaN (which
        pyarrow reads as nulls)."""
        pa = self.pyarrow
        column = self.array(what, spec)
        if column is None or not (self.is_pandas and pa.types.is_floating(column.type)):
            return column
        try:
            return column.cast(pa.int64())  # a safe cast: a fraction is refused
        except pa.ArrowInvalid:
            raise TypeError(f"{what}: a column of {column.type} with a fraction is not "
                            f"ints") from None

    def partitions(self, spec):
        column = self.integers("partition", spec)
        if column is None:
            return None
        if not self.pyarrow.types.is_integer(column.type):
            raise TypeError(f"partition: a column of {column.type} is not ints")
        # Partition ids are small ints, which CPython keeps one object of each.  A
        # null is None: the partitioner chooses that row's partition, as Spark's
        # Kafka sink leaves a null partition to its producer's partitioner.
        return column.to_pylist()

    def epoch_ms(self, spec):
        """The timestamp column as send_batch() takes it, nulls now: an Arrow
        timestamp column (send_batch floors it to ms, so an instant before the
        epoch is negative and its row refused) or int64 epoch ms."""
        pa = self.pyarrow
        column = self.integers("timestamp", spec)
        if column is None:
            return None
        now_ms = int(time.time() * 1000)
        if pa.types.is_timestamp(column.type):
            if column.null_count:
                # Now in the column's unit (in whole seconds for a column of seconds).
                now = pa.scalar(now_ms, pa.timestamp("ms", column.type.tz))
                column = column.fill_null(now.cast(column.type, safe=False))
            return column
        if not pa.types.is_integer(column.type):
            raise TypeError(f"timestamp: a column of {column.type} is not epoch ms or "
                            f"timestamps")
        column = column.cast(pa.int64())
        return column.fill_null(now_ms) if column.null_count else column

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


def _naive_datetimes(column):
    """True for a pandas Series of timestamps without a time zone."""
    import pandas
    return isinstance(column, pandas.Series) and pandas.api.types.is_datetime64_dtype(column)


def _session_time_zone():
    """The active Spark session's time zone; None without a session (UTC)."""
    from pyspark.sql import SparkSession
    session = SparkSession.getActiveSession()
    return None if session is None else session.conf.get("spark.sql.session.timeZone")


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
