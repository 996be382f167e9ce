"""What send() returns: a light per-record future over one shared per-batch result.

A record future holds its batch's result, its index in the batch and the sizes
RecordMetadata reports -- nothing else; waiting, state and callbacks live in the
BatchResult, one per batch.  So a record costs one small object (created by the
accumulator's hot path without an __init__ call), and completing a batch costs one
native lock round trip however many records it carries: record callbacks, when
someone registered them, are the only per-record work at completion.  (kafka-python
splits FutureRecordMetadata over FutureProduceResult the same way, but registers a
callback per record.)  A threading.Event is made only for a batch someone waits for
while it is pending -- most batches at a high rate are done before anyone looks.

Threads: a BatchResult is completed once, by whichever thread learns the outcome (an
I/O thread, the linger thread, a sending thread that could not hand the batch over);
its outcome fields are written under _lock before _done is set and read only by a
thread that saw _done.  Callbacks run on the completing thread, or on the
registering thread when the batch is done already; waiters (_event) are woken once
the callbacks have run.
"""
cimport cython
from cpython.pythread cimport PyThread_get_thread_ident

from netkafka.producer._mutex cimport Mutex

import logging
import numbers
import threading
from collections import namedtuple

from netkafka.client.own_threads import callback_error_is_contained, on_own_thread
from netkafka.errors import KafkaError, KafkaTimeoutError

_log = logging.getLogger("netkafka.futures")
# The longest wait threading.Event takes; a longer timeout waits without bound.
_TIMEOUT_MAX_S = threading.TIMEOUT_MAX

TopicPartition = namedtuple("TopicPartition", ["topic", "partition"])


class RecordMetadata(namedtuple("RecordMetadata", [
        "topic", "partition", "topic_partition", "offset", "timestamp", "checksum",
        "serialized_key_size", "serialized_value_size", "serialized_header_size"])):
    """Where an acknowledged record landed: kafka-python 3's fields in its order, so
    that positional access means the same.

    offset is -1 with acks=0 (the broker says nothing).  timestamp is the record's
    CreateTime, or the broker's LogAppendTime when the topic uses that.  checksum
    is None: RecordBatch v2 records have no CRC of their own (kafka-python 3 says
    None for them too).  The sizes are of the serialized key, value and headers;
    -1 for a null key or value and for no headers (kafka-python's conventions).
    """

    __slots__ = ()


cdef class BatchResult:
    """The outcome of one batch: its base offset and log-append time, or an error."""

    def __cinit__(self, topic, int partition):
        self.topic = topic
        self.partition = partition
        self.topic_partition = TopicPartition(topic, partition)
        self.base_offset = -1
        self.log_append_time_ms = -1
        self._lock = Mutex()

    cdef bint _is_done(self) noexcept:
        cdef bint done
        self._lock.take()
        done = self._done
        self._lock.give()
        return done

    @property
    def done(self):
        return self._is_done()

    def wait(self, timeout_s=None):
        """True once completed and its callbacks have run (flush() and a send_batch()
        result wait so: a count its callbacks keep is whole when they return, as in
        kafka-python and the Java client); False if timeout_s passed first.  On the
        thread running the callbacks, True once completed: one of them may wait
        for its own batch.

        Raises:
            TypeError: timeout_s is not a number or None.
        """
        # Compared before the lock is taken: a timeout that is not a number raises
        # here, and must not leave _lock held (the thread completing the batch would
        # wait for it forever, and with it every batch of its broker).
        cdef bint poll = timeout_s is not None and timeout_s <= 0
        if timeout_s is not None and timeout_s >= _TIMEOUT_MAX_S:
            # Longer than threading can wait (math.inf among them), which raised
            # OverflowError: no bound.
            timeout_s = None
        self._lock.take()
        if self._settled or (self._done
                             and self._completer == PyThread_get_thread_ident()):
            self._lock.give()
            return True
        if poll:
            self._lock.give()
            return False  # a poll: no Event needed
        try:
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        finally:
            self._lock.give()
        return event.wait(timeout_s)

    def succeed(self, int64_t base_offset, int64_t log_append_time_ms):
        self._complete(base_offset, log_append_time_ms, None)

    def fail(self, error):
        self._complete(-1, -1, error)

    def complete_parts(self, parts):
        """The outcome of a batch the producer split (a broker refused it as too
        large) and sent as parts: parts is ((first record index, base offset,
        log-append time, error or None), ...), by index, the first at index 0.  Each
        record takes its part's outcome.

        Raises:
            ValueError: parts do not start at index 0 in increasing order.
        """
        parts = tuple(parts)
        previous = -1
        for part in parts:
            if part[0] <= previous or (previous < 0 and part[0] != 0):
                raise ValueError(f"parts {parts!r} do not cover the batch from index 0")
            previous = part[0]
        if not parts:
            raise ValueError("no parts")
        error = next((part[3] for part in parts if part[3] is not None), None)
        self._lock.take()
        if self._done:
            self._lock.give()
            return  # completed already: the first outcome stands
        self.parts = parts
        self._lock.give()
        self._complete(parts[0][1], parts[0][2], error)

    def pieces(self, Py_ssize_t first, Py_ssize_t count):
        """Once done: the outcome of records first..first+count-1 as ((start, count,
        offset of the piece's first record or -1, error or None), ...) with start
        counted from first: one piece, or one per part the records fell in."""
        cdef Py_ssize_t end = first + count, start, stop
        if self.parts is None:
            return ((0, count, -1 if self.base_offset < 0 else self.base_offset + first,
                     self.error),)
        pieces = []
        for index, (part_first, base_offset, _, error) in enumerate(self.parts):
            stop = end if index + 1 == len(self.parts) else min(end, self.parts[index + 1][0])
            start = max(first, part_first)
            if start < stop:
                pieces.append((start - first, stop - start,
                               -1 if base_offset < 0 else base_offset + start - part_first,
                               error))
        return tuple(pieces)

    cdef int _complete(self, int64_t base_offset, int64_t log_append_time_ms,
                       object error) except -1:
        cdef list callbacks
        self._lock.take()
        if self._done:
            self._lock.give()
            return 0  # completed already: the first outcome stands
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self.error = error
        self._done = True
        callbacks, self._callbacks = self._callbacks, None
        if callbacks is None:
            self._settled = True
            event = self._event
        else:
            self._completer = PyThread_get_thread_ident()
        self._lock.give()
        if callbacks is not None:
            try:
                for record, fn, is_errback in callbacks:
                    _run_callback(record, fn, is_errback)
            finally:
                self._lock.take()
                self._settled = True
                event = self._event
                self._lock.give()
        if event is not None:
            event.set()
        return 0

    def fail_after_fork(self, error):
        """In a forked child only: fails a batch the parent still owns (the parent
        delivers it).  A fresh _lock first, and no Event: a parent thread may have
        held them at the fork, and would hold them here forever; no thread of the
        child waits on the old Event (the child has one thread)."""
        if self._done:  # the child runs alone: nothing can change it meanwhile
            return
        self._lock = Mutex()
        self._event = None
        self._complete(-1, -1, error)

    def add_callback(self, FutureRecordMetadata record, fn, bint is_errback):
        """Runs fn for record once the batch is done (now if it is)."""
        self._lock.take()
        if not self._done:
            try:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append((record, fn, is_errback))
            finally:
                self._lock.give()
            return
        self._lock.give()
        _run_callback(record, fn, is_errback)


cdef _run_callback(FutureRecordMetadata record, fn, bint is_errback):
    cdef BatchResult batch = record._batch
    error = record._error()
    cdef bint failed = error is not None
    if failed != is_errback:
        return
    try:
        fn(error if failed else record._metadata())
    except BaseException as exc:  # noqa: BLE001 -- must not stop the completing thread
        # A SystemExit or KeyboardInterrupt raised on an I/O thread ended it for good,
        # and every record after it waited forever (close() too).
        if not callback_error_is_contained(exc):
            raise
        _log.exception("callback %r for a record of %s-%d raised", fn, batch.topic,
                       batch.partition)


cdef FutureRecordMetadata new_record_future(BatchResult batch, int index, int64_t timestamp_ms,
                                            int key_size, int value_size, int header_size):
    cdef FutureRecordMetadata future = FutureRecordMetadata.__new__(FutureRecordMetadata)
    future._batch = batch
    future._index = index
    future._timestamp_ms = timestamp_ms
    future._key_size = key_size
    future._value_size = value_size
    future._header_size = header_size
    return future


# Futures come and go by the million: a freelist spares the allocator most of them.
@cython.freelist(1024)
cdef class FutureRecordMetadata:
    """The future of one record: resolves to its RecordMetadata, or fails with the
    error that failed its batch.  kafka-python's interface: get(timeout), is_done,
    succeeded(), failed(), retriable(), value, exception, add_callback(fn, *args,
    **kwargs), add_errback(fn, *args, **kwargs), add_both(fn, *args, **kwargs),
    chain(future).  Not its success() and failure(): only the producer completes
    a record's future."""

    def get(self, timeout=None):
        """The record's RecordMetadata once its batch is acknowledged.

        Raises:
            KafkaTimeoutError: not done within timeout seconds (None: wait forever).
            the error that failed the record's batch (a KafkaError).
        """
        cdef BatchResult batch = self._batch
        if timeout is not None and not isinstance(timeout, numbers.Real):
            raise TypeError(f"timeout must be a number of seconds or None, got {timeout!r}")
        # Not waiting for the batch's other callbacks once it is done, as kafka-python's
        # get(): a callback may get() its own record.
        cdef bint done = batch._is_done()  # one lock round, as before the check below
        if not done and (timeout is None or timeout > 0) and on_own_thread():
            # A callback waiting: the thread that would complete the record may be this
            # one (it waited for itself, and delivery_timeout_ms never came), and
            # netkafka's other threads stop their work for everyone while they wait.
            raise KafkaError(
                f"get() on the pending record for {batch.topic}-{batch.partition} in a "
                f"callback: callbacks run on netkafka's own threads, which must not wait "
                f"for a record (the thread that delivers it may be this one); chain or "
                f"add a callback instead")
        if not done and not batch.wait(timeout):
            raise KafkaTimeoutError(
                f"record for {batch.topic}-{batch.partition} not done after waiting "
                f"{timeout} s")
        error = self._error()
        if error is not None:
            # Every record of the batch raises the one error object: a raise adds its
            # frames to the traceback the object already has, so without the reset
            # each get() grew it (100,000 failed records: 100,000 entries, each
            # keeping a frame alive).
            raise error.with_traceback(None)
        return self._metadata()

    @property
    def is_done(self):
        return self._batch._is_done()

    @property
    def topic_partition(self):
        """The TopicPartition the record went to (known before it is done)."""
        return self._batch.topic_partition

    def succeeded(self):
        return self._batch._is_done() and self._error() is None

    def failed(self):
        return self._batch._is_done() and self._error() is not None

    def retriable(self):
        """True once failed with an error that sending again may cure (its retriable
        flag: kafka-python's RetriableError); False while pending or succeeded."""
        return self.failed() and bool(getattr(self._error(), "retriable", False))

    @property
    def value(self):
        """RecordMetadata once succeeded, else None."""
        return self._metadata() if self.succeeded() else None

    @property
    def exception(self):
        """The error once failed, else None."""
        return self._error() if self._batch._is_done() else None

    def add_callback(self, fn, *args, **kwargs):
        """fn(*args, metadata, **kwargs) on success, on the thread that completes the
        batch (an I/O thread), or here if done already.  Returns self."""
        self._batch.add_callback(self, _bind(fn, args, kwargs), False)
        return self

    def add_errback(self, fn, *args, **kwargs):
        """fn(*args, error, **kwargs) on failure; otherwise as add_callback."""
        self._batch.add_callback(self, _bind(fn, args, kwargs), True)
        return self

    def add_both(self, fn, *args, **kwargs):
        self.add_callback(fn, *args, **kwargs)
        return self.add_errback(fn, *args, **kwargs)

    def chain(self, future):
        """Completes future with this record's outcome: future.success(metadata) or
        future.failure(error), as add_callback / add_errback run them (on the
        thread completing the batch, or here if done already).  kafka-python's
        chain(); future is any object with those two methods (a kafka.future.Future).
        Returns self.

        Raises:
            TypeError: future has no success() or failure() method.
        """
        success = getattr(future, "success", None)
        failure = getattr(future, "failure", None)
        if not (callable(success) and callable(failure)):
            raise TypeError(f"chain() needs a future with success(value) and "
                            f"failure(error) methods, got {future!r}")
        self._batch.add_callback(self, success, False)
        self._batch.add_callback(self, failure, True)
        return self

    cdef object _error(self):
        # The error that failed the record: its batch's, or its part's.
        cdef BatchResult batch = self._batch
        if batch.parts is None:
            return batch.error
        return part_of(batch.parts, self._index)[3]

    cdef object _metadata(self):
        cdef BatchResult batch = self._batch
        cdef int64_t base_offset = batch.base_offset, first = 0
        cdef int64_t log_append_time_ms = batch.log_append_time_ms
        if batch.parts is not None:
            first, base_offset, log_append_time_ms, _ = part_of(batch.parts, self._index)
        cdef int64_t offset = -1 if base_offset < 0 else base_offset + self._index - first
        cdef int64_t timestamp = (log_append_time_ms if log_append_time_ms >= 0
                                  else self._timestamp_ms)
        return RecordMetadata(batch.topic, batch.partition, batch.topic_partition, offset,
                              timestamp, None, self._key_size, self._value_size,
                              self._header_size)

    def __repr__(self):
        cdef BatchResult batch = self._batch
        state = ("pending" if not batch._is_done() else
                 "failed" if self._error() is not None else "succeeded")
        return f"<FutureRecordMetadata {batch.topic}-{batch.partition} {state}>"


cpdef tuple part_of(tuple parts, Py_ssize_t index):
    """The outcome of the part holding record index, of a split batch's parts
    (BatchResult.parts: by first index, the first at 0; a few).

    Raises:
        ValueError: no part holds it.
    """
    cdef Py_ssize_t k = len(parts) - 1
    while k >= 0 and parts[k][0] > index:
        k -= 1
    if k < 0:
        raise ValueError(f"no part holds record {index}: {parts!r}")
    return parts[k]


def _bind(fn, tuple args, dict kwargs):
    if not callable(fn):
        raise TypeError(f"callback must be callable, got {fn!r}")
    if not args and not kwargs:
        return fn
    return lambda outcome: fn(*args, outcome, **kwargs)
