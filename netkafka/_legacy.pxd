# Legacy message sets (message format v0 and v1) over pooled buffers.  See _legacy.pyx
# for the wire layout, the codec rules and the batch life cycle.

from libc.stdint cimport int64_t

from netkafka._compression cimport Compressor
from netkafka._records cimport PooledBuffer


cdef class LegacyMessageSetBuilder:
    # Not thread-safe: owned by the thread that holds the set -- the accumulator,
    # under its lock for the partition, until sealed; then the sender.  Ownership
    # moves with the object; the fields are never touched by two threads at once.
    cdef readonly int magic                     # 0 or 1: the message format version
    cdef readonly int codec                     # CODEC_* asked for
    cdef readonly int sealed_codec              # CODEC_* written: NONE when compressing did not pay
    cdef readonly Py_ssize_t batch_size_bytes   # a set stops taking records past this size
    cdef readonly Py_ssize_t max_request_size_bytes  # no set, even of one record, is larger
    cdef Compressor _compressor                 # shared, thread-safe; None without a codec
    cdef PooledBuffer _records_buf              # the entries as appended (inner set when compressed)
    cdef PooledBuffer _sealed_buf               # holds the sealed set: _records_buf or the wrapper's copy
    cdef unsigned char *_data                   # _records_buf.data, cached for the hot path
    cdef Py_ssize_t _pos_bytes                  # bytes of _records_buf written
    cdef Py_ssize_t _limit_bytes                # a non-first entry must end at or below this
    cdef Py_ssize_t _head_bytes                 # entry bytes before the key length: 18 (v0), 26 (v1)
    cdef Py_ssize_t _wrapper_bytes              # the wrapper entry's own bytes; 0 without a codec
    cdef Py_ssize_t _record_count               # entries appended; the next one's offset
    cdef int64_t _max_timestamp_ms              # largest timestamp appended (v1): the wrapper's
    cdef bint _full                             # an append was refused for lack of room
    cdef int _state                             # _OPEN, _SEALED, _DONE or _RELEASED
    cdef Py_ssize_t _sealed_size_bytes          # wire size of the sealed set
    cdef int _view_count                        # exported buffer views still alive

    cdef int _make_room_for_first(self, Py_ssize_t entry_bytes) except -1
    cdef int _seal(self) except -1
    cdef int _compress(self) except -1
