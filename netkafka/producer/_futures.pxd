# The futures send() returns.  See _futures.pyx for the per-batch / per-record split
# and the threads that touch them.

from libc.stdint cimport int64_t

from netkafka.producer._mutex cimport Mutex


cdef class BatchResult:
    # Completed once; the outcome fields are written under _lock before _done is
    # set, and read only by a thread that saw _done set (under _lock, or through
    # _event, which is set after the callbacks have run: _settled).
    cdef readonly object topic                 # immutable
    cdef readonly int partition                # immutable
    cdef readonly object topic_partition       # TopicPartition(topic, partition); immutable
    cdef readonly int64_t base_offset          # offset of the batch's first record; -1: unknown (acks=0)
    cdef readonly int64_t log_append_time_ms   # the broker's LogAppendTime, -1 for CreateTime topics
    cdef readonly object error                 # the exception that failed the batch, or None
    # None, or a batch split after a MESSAGE_TOO_LARGE refusal: ((first record index,
    # base offset, log-append time, error or None), ...) by index, one per part sent;
    # error is then the first part's error that failed, or None.
    cdef readonly tuple parts
    cdef Mutex _lock                           # guards _done, _event, _callbacks and completion
    cdef bint _done                            # _lock: completed
    cdef bint _settled                         # _lock: completed and its callbacks have run
    cdef unsigned long _completer              # _lock: the thread running its callbacks
    cdef object _event                         # _lock: threading.Event of the first waiter, or None
    cdef list _callbacks                       # [(record future, fn, is_errback)] (_lock), None when none

    cdef bint _is_done(self) noexcept
    cdef int _complete(self, int64_t base_offset, int64_t log_append_time_ms,
                       object error) except -1


cdef class FutureRecordMetadata:
    # One record's future: immutable after creation (by the accumulator's hot path).
    cdef BatchResult _batch                    # the batch the record is in
    cdef int _index                            # its offset delta in the batch
    cdef int64_t _timestamp_ms                 # its CreateTime
    cdef int _key_size                         # serialized sizes, -1 for null / none
    cdef int _value_size
    cdef int _header_size

    cdef object _metadata(self)
    cdef object _error(self)


# A record future over batch, as the hot path creates it (no __init__ call).
cdef FutureRecordMetadata new_record_future(BatchResult batch, int index, int64_t timestamp_ms,
                                            int key_size, int value_size, int header_size)
