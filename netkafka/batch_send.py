"""send_batch(): many records in one call, one result, no future per record.

The story of a call:

    1. check the arguments (containers, lengths; elements are checked as they are
       encoded, and a bad one fails only its row)
    2. a partition per row, natively: the caller's `partitions`, else murmur2 of the
       key (_partitioner.keyed_partitions, bit-identical to send()) and -1 for a
       row without a key, which the sticky partitioner places
    3. the rows grouped by partition, in row order (_accumulator.group_rows);
       the unkeyed (sticky) rows form a group of their own, sent first, so in a
       partition they precede that call's keyed rows rather than interleave;
       when every row goes to one partition the inputs are used as they are,
       else each group's rows are gathered natively (take_rows for lists,
       pyarrow's take for columns)
    4. each group into its partition's batches (RecordAccumulator.append_rows): a
       batch's first row through the per-record path, the rest in bulk with the
       builder's append_many (lists) or append_column (pyarrow arrays)
    5. a BatchSendResult: where each run of rows went (batch result, first offset
       delta, row indices) and the rows refused, with their errors; per-row
       partitions and offsets are written from the runs natively (fill_rows)

Threads: send_batch() runs on the caller's thread; the BatchSendResult it returns
is filled before it is returned and never written again (its batches' outcomes
are read from their BatchResults, which are thread-safe).
"""
import itertools
import time
from array import array

from netkafka import errors
from netkafka._accumulator import fill_rows, group_rows, take_rows
from netkafka._partitioner import BrokerAwarePartitioner, DefaultPartitioner, keyed_partitions
from netkafka.errors import KafkaTimeoutError

_SEQUENCES = (list, tuple)


class BatchSendResult:
    """The outcome of one send_batch() call: wait for it once, then read every row's.

    Attributes:
        topic: the topic the rows were sent to.
        record_count: how many rows were handed over.

    Rows refused before reaching a batch (an oversize value, a bad element, no
    metadata within max_block_ms) are known at once; the others once their batches
    complete.  get()/wait() wait for those batches; errors, failed_count,
    partitions() and offsets() need the result done (get() first).
    """

    def __init__(self, topic, record_count):
        self.topic = topic
        self.record_count = record_count
        # Written by send_batch() before the result is returned, read-only after:
        self._runs = []     # (BatchResult, offset delta of the run's first row, row indices)
        self._refused = []  # (row indices, error)
        self._batches = None  # the distinct BatchResults of _runs, made on first wait

    # -- filled by RecordAccumulator.append_rows ----------------------------------

    def appended(self, rows, batch_result, first_offset_delta, start, count):
        self._runs.append((batch_result, first_offset_delta, rows.row_ids[start:start + count]))

    def refused(self, rows, start, count, error):
        self._refused.append((rows.row_ids[start:start + count], error))

    # -- the caller's ---------------------------------------------------------------

    def wait(self, timeout=None):
        """True once every row's batch is done; False if timeout seconds passed."""
        if self._batches is None:
            self._batches = list({id(run[0]): run[0] for run in self._runs}.values())
        if timeout is None:
            return all(batch.wait(None) for batch in self._batches)
        deadline = _now() + timeout
        return all(batch.wait(max(0.0, deadline - _now())) for batch in self._batches)

    def get(self, timeout=None):
        """Waits until done and returns self; per-row failures do not raise here
        (read them from errors).

        Raises:
            KafkaTimeoutError: not done within timeout seconds (None: no limit).
        """
        if not self.wait(timeout):
            raise KafkaTimeoutError(
                f"send_batch of {self.record_count} records to {self.topic!r} not done "
                f"after {timeout} s")
        return self

    @property
    def done(self):
        return self.wait(0)

    @property
    def failed_count(self):
        """How many rows failed (refused, or in a batch that failed)."""
        self._require_done("failed_count")
        return (sum(len(rows) for rows, _ in self._refused)
                + sum(len(rows) for batch, _, rows in self._runs if batch.error is not None))

    @property
    def errors(self):
        """[(row index, exception)] of every failed row, by row index."""
        self._require_done("errors")
        failed = [(rows, error) for rows, error in self._refused]
        failed += [(rows, batch.error) for batch, _, rows in self._runs
                   if batch.error is not None]
        return sorted(((row, error) for rows, error in failed for row in rows),
                      key=lambda pair: pair[0])

    def partitions(self):
        """array('i'): each row's partition; -1 for a row refused before a batch."""
        self._require_done("partitions()")
        result = array("i", bytes(4 * self.record_count))
        for batch, _, rows in self._runs:
            fill_rows(result, rows, batch.partition, 0)
        for rows, _ in self._refused:
            fill_rows(result, rows, -1, 0)
        return result

    def offsets(self):
        """array('q'): each row's offset in its partition; -1 for a failed row, and
        for every row with acks=0 (the broker says nothing)."""
        self._require_done("offsets()")
        result = array("q", b"\xff" * (8 * self.record_count))
        for batch, first, rows in self._runs:
            if batch.error is None and batch.base_offset >= 0:
                fill_rows(result, rows, batch.base_offset + first, 1)
        return result

    def _require_done(self, what):
        if not self.done:
            raise errors.KafkaError(f"{what} of a send_batch result not done yet: "
                                    f"call get() first")

    def __repr__(self):
        return (f"<BatchSendResult {self.topic!r} {self.record_count} records "
                f"{'done' if self.done else 'pending'}>")


class _ListRows:
    """One group's rows from lists: what append_rows appends in bulk and by row."""

    __slots__ = ("row_ids", "count", "values", "keys", "headers", "timestamps_ms")

    def __init__(self, row_ids, values, keys, headers, timestamps_ms):
        self.row_ids = row_ids  # the rows' indices in the caller's input
        self.count = len(values)
        self.values, self.keys = values, keys
        self.headers, self.timestamps_ms = headers, timestamps_ms

    def append_to(self, builder, start):
        return builder.append_many(self.values, self.keys, self.headers, self.timestamps_ms,
                                   start)

    def record(self, i):
        return (None if self.keys is None else self.keys[i], self.values[i],
                None if self.headers is None else self.headers[i],
                None if self.timestamps_ms is None else self.timestamps_ms[i])


class _ArrowRows:
    """One group's rows from pyarrow arrays (timestamps: a buffer of int64)."""

    __slots__ = ("row_ids", "count", "values", "keys", "timestamps_ms")

    def __init__(self, row_ids, values, keys, timestamps_ms):
        self.row_ids = row_ids
        self.count = len(values)
        self.values, self.keys, self.timestamps_ms = values, keys, timestamps_ms

    def append_to(self, builder, start):
        return builder.append_column(self.values, self.keys, self.timestamps_ms, start)

    def record(self, i):
        # One row as objects: only a batch's first row takes this way.
        return (None if self.keys is None else _arrow_bytes(self.keys[i]),
                _arrow_bytes(self.values[i]), None,
                None if self.timestamps_ms is None else self.timestamps_ms[i])


def send_batch(accumulator, topic, values, keys=None, headers=None, partitions=None,
               timestamps_ms=None):
    """Producer.send_batch() after serialization: see its docstring."""
    if type(topic) is not str:
        raise TypeError(f"topic must be a str, not {type(topic).__name__}")
    pyarrow = _pyarrow_if_array(values)
    if pyarrow is not None:
        count = len(values)
        keys = _arrow_keys(pyarrow, keys, count)
        if headers is not None:
            raise TypeError("headers need values as a list or tuple: a pyarrow column "
                            "is appended without headers")
        timestamps_ms = _int64_timestamps(timestamps_ms, count)
    elif type(values) in _SEQUENCES:  # exact types: what the builder's append_many takes
        count = len(values)
        for name, column in (("keys", keys), ("headers", headers),
                             ("timestamps_ms", timestamps_ms)):
            _check_sequence(name, column, count)
    else:
        raise TypeError(f"values must be a list or tuple of bytes-like or None, or a "
                        f"pyarrow binary or string array, not {type(values).__name__}")
    result = BatchSendResult(topic, count)
    if count == 0:
        return result
    per_row = _partitions_per_row(accumulator, topic, keys, partitions, count)
    if per_row is None:
        groups = [(partitions, range(count))]  # one partition, or all sticky: as given
    else:
        order, slices = group_rows(per_row)
        if len(slices) == 1:
            groups = [(_group_partition(slices[0][0]), range(count))]
        else:
            rows = memoryview(order)
            groups = [(_group_partition(p), rows[start:start + n]) for p, start, n in slices]
    for partition, row_ids in groups:
        whole = isinstance(row_ids, range)
        if pyarrow is not None:
            rows = _ArrowRows(row_ids, *(column if whole or column is None
                                         else _take_arrow(pyarrow, column, row_ids)
                                         for column in (values, keys, timestamps_ms)))
            if not whole and rows.timestamps_ms is not None:
                rows.timestamps_ms = _int64_array(rows.timestamps_ms)
        else:
            rows = _ListRows(row_ids, *(column if whole or column is None
                                        else take_rows(column, row_ids)
                                        for column in (values, keys, headers, timestamps_ms)))
        accumulator.append_rows(topic, partition, rows, result)
    return result


def _partitions_per_row(accumulator, topic, keys, partitions, count):
    """An array of each row's partition (-1: sticky), or None when every row goes
    the same way: one explicit partition, or no keys with a sticky partitioner."""
    if partitions is not None:
        if isinstance(partitions, int) and not isinstance(partitions, bool):
            if partitions < 0:
                raise ValueError(f"partitions={partitions} is negative")
            return None
        _check_sequence("partitions", partitions, count)
        return partitions
    partitioner = accumulator.partitioner
    if type(partitioner) in (DefaultPartitioner, BrokerAwarePartitioner):
        if keys is None:
            return None
        all_partitions, _ = accumulator.topic_partitions(topic)
        if len(all_partitions) == 1:
            return None  # keyed or not, every row goes to the one partition
        return keyed_partitions(keys, len(all_partitions))
    # Any other partitioner is asked row by row, as send() asks it.
    all_partitions, available = accumulator.topic_partitions(topic)
    key_of = (itertools.repeat(None, count) if keys is None else keys
              if isinstance(keys, _SEQUENCES) else map(_arrow_bytes, keys))
    return array("i", [partitioner.partition(topic, key, all_partitions, available)
                       for key in key_of])


def _group_partition(partition):
    return None if partition < 0 else partition


def _check_sequence(name, column, count):
    if column is None:
        return
    if type(column) not in _SEQUENCES:
        raise TypeError(f"{name} must be None or a list or tuple as long as values, "
                        f"not {type(column).__name__}")
    if len(column) != count:
        raise ValueError(f"{name} has {len(column)} elements, values has {count}")


def _pyarrow_if_array(values):
    """The pyarrow module if values is one of its arrays (pyarrow is optional)."""
    module = type(values).__module__
    if not module.startswith("pyarrow"):
        return None
    import pyarrow
    if isinstance(values, pyarrow.ChunkedArray):
        raise TypeError("values is a pyarrow ChunkedArray: pass its .chunks one by one")
    if not isinstance(values, pyarrow.Array):
        raise TypeError(f"values must be a pyarrow array, not {type(values).__name__}")
    _check_binary(pyarrow, "values", values)
    return pyarrow


def _check_binary(pyarrow, name, column):
    types = pyarrow.types
    kind = column.type
    if not (types.is_binary(kind) or types.is_string(kind) or types.is_large_binary(kind)
            or types.is_large_string(kind)):
        raise TypeError(f"{name}: a pyarrow array of {kind} is not binary or string")


def _arrow_keys(pyarrow, keys, count):
    if keys is None:
        return None
    if isinstance(keys, _SEQUENCES):
        keys = pyarrow.array(keys, pyarrow.binary())  # converted natively by pyarrow
    elif not isinstance(keys, pyarrow.Array):
        raise TypeError(f"keys must be None, a pyarrow array or a list or tuple, not "
                        f"{type(keys).__name__}")
    _check_binary(pyarrow, "keys", keys)
    if len(keys) != count:
        raise ValueError(f"keys has {len(keys)} elements, values has {count}")
    return keys


def _int64_timestamps(timestamps_ms, count):
    """The column path's timestamps as an array('q') (None stays None): the buffer
    append_column reads."""
    if timestamps_ms is None:
        return None
    if isinstance(timestamps_ms, _SEQUENCES):
        try:
            column = array("q", timestamps_ms)
        except TypeError:
            raise TypeError("timestamps_ms with pyarrow values must hold an int for "
                            "every row (no None)") from None
    else:
        try:
            view = memoryview(timestamps_ms)
        except TypeError:
            raise TypeError(f"timestamps_ms must be None, a list or tuple of int, or a "
                            f"buffer of int64, not {type(timestamps_ms).__name__}") from None
        if view.itemsize != 8 or view.format.lstrip("@=") not in ("q", "l"):
            raise TypeError(f"timestamps_ms must be a buffer of int64, not format "
                            f"{view.format!r}")
        column = array("q")
        column.frombytes(view.cast("B"))
    if len(column) != count:
        raise ValueError(f"timestamps_ms has {len(column)} elements, values has {count}")
    return column


def _int64_array(column):
    """A pyarrow int64 array (no nulls) as an array('q'): one native copy."""
    out = array("q")
    data = memoryview(column.buffers()[1]).cast("B")
    out.frombytes(data[column.offset * 8:(column.offset + len(column)) * 8])
    return out


def _take_arrow(pyarrow, column, row_ids):
    """column's elements at row_ids, gathered by pyarrow (timestamps, an
    array('q'), are wrapped into an int64 array first: no copy)."""
    indices = pyarrow.Array.from_buffers(pyarrow.int64(), len(row_ids),
                                         [None, pyarrow.py_buffer(row_ids)])
    if isinstance(column, array):
        column = pyarrow.Array.from_buffers(pyarrow.int64(), len(column),
                                            [None, pyarrow.py_buffer(column)])
    return column.take(indices)


def _arrow_bytes(scalar):
    value = scalar.as_py()
    return value.encode() if isinstance(value, str) else value


def _now():
    return time.monotonic()
