# The RecordBatch v2 builder over a pooled batch.  See _batch.pyx for the wire layout
# (its offsets: _batch_layout.pxd) and _pool.pyx for the life cycle and the locking rules.

from libc.stdint cimport int16_t, int32_t, int64_t

from netkafka.csrc cimport nk_clock_cache
from netkafka.record._columns cimport Rows
from netkafka.record._pool cimport PooledBatch


cdef class RecordBatchBuilder(PooledBatch):
    # Ownership and thread rules: PooledBatch's.
    cdef int16_t _attributes                    # timestamp type, transactional, control bits (no codec)
    cdef int64_t _first_timestamp_ms            # of the first record: the base of the deltas
    cdef int64_t _max_timestamp_ms              # largest timestamp appended
    cdef int64_t _producer_id                   # idempotence state, -1 when unused
    cdef int16_t _producer_epoch                # idempotence state, -1 when unused
    cdef int32_t _base_sequence                 # idempotence state, -1 when unused
    cdef nk_clock_cache _clock                  # "now" for records appended without a timestamp
    cdef Py_ssize_t _hold_from_bytes            # bytes values this long or longer are held, not
                                                # copied (PooledBatch._held); 0: none

    cdef Py_ssize_t _append_raw(self, const unsigned char *key, Py_ssize_t key_len,
                                const unsigned char *value, Py_ssize_t value_len,
                                object headers, int64_t timestamp_ms,
                                object held=*) except -2
    cdef Py_ssize_t _append_objects(self, object key, object value, object headers,
                                    int64_t timestamp_ms, Py_ssize_t index) except -2
    cdef Py_ssize_t _append_encoded(self, const unsigned char *record, Py_ssize_t length,
                                    int64_t timestamp_ms) except -2
    cdef void _count_appended(self, Py_ssize_t record_bytes, int32_t offset_delta,
                              int64_t timestamp_ms) noexcept
    cdef int _make_room_for_first(self, Py_ssize_t record_bytes) except -1
    cdef int _compress(self) except -1
    cdef int _write_header(self, unsigned char *batch, Py_ssize_t size_bytes) except -1
    cdef int _store_crc(self, unsigned char *batch, Py_ssize_t size_bytes) except -1
    cdef Py_ssize_t _append_rows(self, Rows rows, object row_ids, Py_ssize_t start) except -1
