# Legacy message sets (message format v0 and v1) over pooled buffers.  See _legacy.pyx
# for the wire layout, the codec rules and the batch life cycle.

from libc.stdint cimport int64_t

from netkafka.record._pool cimport PooledBatch


cdef class LegacyMessageSetBuilder(PooledBatch):
    # Ownership and thread rules, buffers and life cycle: PooledBatch's.
    cdef readonly int magic                     # 0 or 1: the message format version
    cdef Py_ssize_t _head_bytes                 # entry bytes before the key length: 18 (v0), 26 (v1)
    cdef Py_ssize_t _wrapper_bytes              # the wrapper entry's own bytes; 0 without a codec
    cdef int64_t _max_timestamp_ms              # largest timestamp appended (v1): the wrapper's

    cdef int _make_room_for_first(self, Py_ssize_t entry_bytes) except -1
    cdef int _compress(self) except -1
