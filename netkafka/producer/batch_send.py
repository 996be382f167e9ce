"""send_batch(): many records in one call, one result, no future per record.

The story of a call:

    1. the arguments as one _columns.Rows: each column (a list, a BinaryColumn, a
       pyarrow Array or ChunkedArray) read in place, its kind and length checked
       here; its elements are checked as they are encoded, and a bad one fails
       only its row
    2. a partition per row, natively: the caller's `partitions`, else murmur2 of
       the key (_batch_send.keyed_partitions, bit-identical to send()); the rows
       without a key then get the sticky partition send() would give them, batch
       by batch (_batch_send.place_unkeyed_rows plans the batches)
    3. the rows grouped by partition, in row order (_batch_send.group_rows): so
       a partition's records are in row order whatever mix of keyed, unkeyed and
       explicitly placed rows the call holds.  When every row goes one way (one
       partition, or no keys at all) the rows stay as given and the unkeyed ones
       are placed as they are appended, a full batch moving them on as it moves
       send()'s records
    4. each group into its partition's batches (RecordAccumulator.append_rows): a
       batch's first row through the per-record path, the rest in bulk with the
       builder's append_rows, reading the group's rows by index (no copy)
    5. a BatchSendResult: where each run of rows went (batch result, first offset
       delta, row indices) and the rows refused, with their errors; per-row
       partitions and offsets are written from the runs natively (fill_rows)

The loops over rows are native, in _batch_send (one module with this one: the bulk
path and nothing else); send()'s per-record path does not share them.

Threads: send_batch() runs on the caller's thread; the BatchSendResult it returns
is filled before it is returned and never written again (its batches' outcomes
are read from their BatchResults, which are thread-safe).
"""
import operator
import time
from array import array
from typing import Optional

from netkafka import errors
from netkafka.producer._accumulator import topic_arg
from netkafka.producer._batch_send import (fill_rows, group_rows, keyed_partitions,
                                           partitions_array, place_unkeyed_rows)
from netkafka.producer._partitioner import BrokerAwarePartitioner, DefaultPartitioner
from netkafka.record._columns import Rows
from netkafka.client.metadata import check_topic_name
from netkafka.client.own_threads import on_own_thread
from netkafka.errors import KafkaTimeoutError


class BatchSendResult:
    """The outcome of one send_batch() call: wait for it once, then read every row's.

    Attributes:
        topic: the topic the rows were sent to.
        record_count: how many rows were handed over.

    Rows refused before reaching a batch (an oversize value, a bad element) are
    known at once; the others once their batches
    complete.  get()/wait() wait for those batches; errors, failed_count,
    partitions() and offsets() need the result done (get() first).
    """

    def __init__(self, topic: str, record_count: int) -> None:
        self.topic = topic
        self.record_count = record_count
        # Written by send_batch() before the result is returned, read-only after:
        self._runs = []     # (BatchResult, offset delta of the run's first row, row indices)
        self._refused = []  # (row indices, error)
        self._batches = None  # the distinct BatchResults of _runs, made on first wait

    @classmethod
    def every_row_refused(cls, topic: str, record_count: int,
                          error: BaseException) -> "BatchSendResult":
        """A result whose rows all failed with error: a call refused as a whole (no
        metadata within max_block_ms, the topic refused), for a caller that reports
        failures rather than raising them (the Spark emitters' report mode)."""
        result = cls(topic, record_count)
        result._refused.append((range(record_count), error.with_traceback(None)))
        return result

    # -- filled by RecordAccumulator.append_rows ----------------------------------

    def appended(self, rows, batch_result, first_offset_delta, start, count):
        self._runs.append((batch_result, first_offset_delta, rows.row_ids[start:start + count]))

    def any_appended(self):
        return bool(self._runs)

    def refused(self, rows, start, count, error):
        # Kept without its traceback (nor, when suppressed, the error it replaced):
        # their frames made each of a call's many bad rows (str values not encoded)
        # hold 2 KB and cost the collector, 37 us a row; its message names the row.
        if error.__suppress_context__:
            error.__context__ = None
        self._refused.append((rows.row_ids[start:start + count],
                              error.with_traceback(None)))

    # -- the caller's ---------------------------------------------------------------

    def wait(self, timeout: Optional[float] = None) -> bool:
        """True once every row's batch is done; False if timeout seconds passed.

        Raises:
            KafkaError: a wait (not a poll, timeout 0) in a callback for batches not
                done: the thread that would complete them may be this one.
        """
        if self._batches is None:
            self._batches = list({id(run[0]): run[0] for run in self._runs}.values())
        if ((timeout is None or timeout > 0) and on_own_thread()
                and not all(batch.done for batch in self._batches)):
            raise errors.KafkaError(
                f"send_batch() result of {self.record_count} records to {self.topic!r} "
                f"waited for in a callback: callbacks run on netkafka's own threads, which "
                f"must not wait for records (the thread that delivers them may be this "
                f"one); read it from another thread")
        if timeout is None:
            return all(batch.wait(None) for batch in self._batches)
        deadline = _now() + timeout
        return all(batch.wait(max(0.0, deadline - _now())) for batch in self._batches)

    def get(self, timeout: Optional[float] = None) -> "BatchSendResult":
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
    def done(self) -> bool:
        return self.wait(0)

    @property
    def failed_count(self) -> int:
        """How many rows failed (refused, or in a batch that failed)."""
        self._require_done("failed_count")
        return (sum(len(rows) for rows, _ in self._refused)
                + sum(len(rows) for rows, _, error in self._pieces() if error is not None))

    @property
    def errors(self) -> list[tuple[int, BaseException]]:
        """[(row index, exception)] of every failed row, by row index."""
        self._require_done("errors")
        failed = [(rows, error) for rows, error in self._refused]
        failed += [(rows, error) for rows, _, error in self._pieces() if error is not None]
        return sorted(((row, error) for rows, error in failed for row in rows),
                      key=lambda pair: pair[0])

    def partitions(self) -> "array[int]":
        """array('i'): each row's partition; -1 for a row refused before a batch."""
        self._require_done("partitions()")
        result = array("i", bytes(4 * self.record_count))
        for batch, _, rows in self._runs:
            fill_rows(result, rows, batch.partition, 0)
        for rows, _ in self._refused:
            fill_rows(result, rows, -1, 0)
        return result

    def offsets(self) -> "array[int]":
        """array('q'): each row's offset in its partition; -1 for a failed row, and
        for every row with acks=0 (the broker says nothing)."""
        self._require_done("offsets()")
        result = array("q", b"\xff" * (8 * self.record_count))
        for rows, offset, error in self._pieces():
            if error is None and offset >= 0:
                fill_rows(result, rows, offset, 1)
        return result

    def _pieces(self):
        """(rows, offset of the first or -1, error or None) of every run of rows; a
        run in a batch the sender split comes in pieces, one per part
        (BatchResult.pieces)."""
        for batch, first, rows in self._runs:
            for start, count, offset, error in batch.pieces(first, len(rows)):
                yield rows[start:start + count], offset, error

    def _require_done(self, what):
        if not self.done:
            raise errors.KafkaError(f"{what} of a send_batch result not done yet: "
                                    f"call get() first")

    def __repr__(self):
        return (f"<BatchSendResult {self.topic!r} {self.record_count} records "
                f"{'done' if self.done else 'pending'}>")


class _Group:
    """One partition's rows of a call, as RecordAccumulator.append_rows takes them."""

    __slots__ = ("rows", "row_ids", "count", "_ids")

    def __init__(self, rows, ids):
        self.rows = rows  # the call's Rows
        self._ids = ids  # None (every row, in order) or a buffer of int64 row indices
        self.row_ids = range(rows.length) if ids is None else ids
        self.count = len(self.row_ids)

    def append_to(self, builder, start):
        return builder.append_rows(self.rows, self._ids, start)

    def record(self, i):
        return self.rows.record(self.row_ids[i])


def send_batch(accumulator, topic, values, keys=None, headers=None, partitions=None,
               timestamps_ms=None):
    """Producer.send_batch() after serialization: see its docstring."""
    if type(topic) is not str:
        topic = topic_arg(topic)  # as send() takes it
    # Here, not only when the topic's metadata is first waited for: the rows would
    # fail one by one, and send_batch() raises a refusal of every row.
    check_topic_name(topic)
    if not (partitions is None or isinstance(partitions, (int, list, tuple))):
        partitions = _one_partition(partitions)
    rows = Rows(values, keys, headers, timestamps_ms)
    result = BatchSendResult(topic, rows.length)
    if rows.length == 0:
        # No row to refuse, but the call is refused as one with rows would be (a
        # closed producer, a transactional one between transactions).
        accumulator.raise_if_refusing()
        return result
    # The topic's partitions before any row, whichever way the rows go: without
    # metadata within max_block_ms the call raises KafkaTimeoutError, as send() does
    # and as the keyed rows' placement always did -- the rows without a key failed
    # one and all in the result instead, as if the call had started sending.
    topic_partitions = accumulator.topic_partitions(topic)
    per_row = _partitions_per_row(accumulator, topic, rows, partitions, topic_partitions)
    if per_row is None:
        groups = [(partitions, None)]  # one partition, or all sticky: as given
    else:
        order, slices = group_rows(per_row)
        if len(slices) == 1:
            groups = [(slices[0][0], None)]
        else:
            ids = memoryview(order)
            groups = [(p, ids[start:start + n]) for p, start, n in slices]
    for partition, ids in groups:
        accumulator.append_rows(topic, partition, _Group(rows, ids), result)
    if result._refused:
        # Told once every row is in: the transaction failing now would refuse the
        # rows left, and the call would raise with some of its rows sent.
        accumulator.rows_refused(result._refused[0][1])
    return result


def _one_partition(partitions):
    """Cold: partitions as an int when it is one integer of another type (numpy's,
    as send(partition=) takes it: operator.index); else as given -- a column, or a
    mistake that partitions_array() names."""
    try:
        return operator.index(partitions)
    except TypeError:
        return partitions


def _partitions_per_row(accumulator, topic, rows, partitions, topic_partitions):
    """An array of each row's partition, or None when every row goes the same way:
    one explicit partition, or no keys with a sticky partitioner.  topic_partitions:
    accumulator.topic_partitions(topic)."""
    count = rows.length
    explicit = None
    if partitions is not None:
        if isinstance(partitions, int) and not isinstance(partitions, bool):
            if partitions < 0:
                raise ValueError(f"partitions={partitions} is negative")
            return None
        explicit = partitions_array(partitions)
        if len(explicit) != count:
            raise ValueError(f"partitions has {len(explicit)} elements, values has {count}")
        if -1 not in explicit:
            return explicit
    partitioner = accumulator.partitioner
    if type(partitioner) in (DefaultPartitioner, BrokerAwarePartitioner):
        if rows.keys is None and explicit is None:
            return None  # all sticky: placed batch by batch as they are appended
        all_partitions, available = topic_partitions
        if len(all_partitions) == 1 and explicit is None:
            return None  # keyed or not, every row goes to the one partition
        per_row = keyed_partitions(rows.keys, len(all_partitions), explicit)
        if -1 in per_row:
            place_unkeyed_rows(rows, per_row, explicit, partitioner, topic, all_partitions,
                               available, accumulator.batch_size_bytes,
                               lambda p: accumulator.open_batch_state(topic, p))
            accumulator.forget_sticky(topic)  # the plan may have moved the partitioner on
        return per_row
    # Any other partitioner is asked row by row, as send() asks it.
    all_partitions, available = topic_partitions
    # A copy of explicit: it may be the caller's own array('i').
    per_row = array("i", b"\xff" * (4 * count) if explicit is None else explicit)
    keys = rows.keys
    for i in range(count):
        if per_row[i] < 0:
            try:
                key = None if keys is None else keys.item(i)
            except (TypeError, ValueError):
                # Row i's key cannot be read: its append refuses the row alone with
                # this error, as on the default partitioner's path; the partitioner
                # is not asked about a key it would choke on, and any partition will
                # do for a row that is not sent.
                per_row[i] = all_partitions[0]
                continue
            per_row[i] = partitioner.partition(topic, key, all_partitions, available)
    return per_row


def _now():
    return time.monotonic()
