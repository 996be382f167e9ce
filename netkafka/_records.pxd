# RecordBatch v2 encoding over pooled buffers.  See _records.pyx for the wire layout,
# the batch life cycle and the locking rules.

from cpython.pythread cimport PyThread_type_lock
from libc.stdint cimport int16_t, int32_t, int64_t

from netkafka._compression cimport Compressor
from netkafka.csrc cimport nk_clock_cache


cdef class PooledBuffer


cdef class BufferPool:
    # Shared by the accumulator (acquire, on user threads) and the I/O threads
    # (release).  The mutable fields are guarded by _mutex.
    cdef readonly Py_ssize_t buffer_size_bytes  # capacity of every pooled buffer
    cdef readonly Py_ssize_t total_bytes        # bound on all buffers allocated, in use or cached
    cdef PyThread_type_lock _mutex              # guards the fields below; held for a few C lines
    cdef unsigned char **_free                  # cached pooled buffers, ready for reuse (_mutex)
    cdef Py_ssize_t _free_count                 # entries of _free in use (_mutex)
    cdef Py_ssize_t _free_slots                 # length of _free: total_bytes // buffer_size_bytes
    cdef Py_ssize_t _in_use_bytes               # capacity of buffers handed out, pooled or one-off (_mutex)
    cdef int _waiters                           # threads sleeping in acquire() (_mutex)
    cdef object _lock                           # threading.Condition blocked acquires sleep on;
                                                # guards no field

    # Thread-safe: a buffer of max(size_bytes, buffer_size_bytes), or None if no room.
    cdef PooledBuffer _try_acquire(self, Py_ssize_t size_bytes)
    cdef void _give_back(self, unsigned char *data, Py_ssize_t capacity_bytes, bint pooled) noexcept
    cdef void _add_waiter(self, int change) noexcept


cdef class PooledBuffer:
    # Memory handed out by a BufferPool.  Owned by one thread at a time (the one that
    # holds the batch using it); release() or garbage collection gives it back.
    cdef unsigned char *data                    # the memory; NULL once given back
    cdef readonly Py_ssize_t capacity_bytes     # usable bytes at data
    cdef readonly bint pooled                   # True: returns to the free list; False: one-off
    cdef readonly bint claimed                  # True once a builder owns it (no second owner)
    cdef BufferPool pool                        # where data goes back to

    cdef void _give_back(self) noexcept


cdef class RecordBatchBuilder:
    # Not thread-safe: owned by the thread that holds the batch -- the accumulator,
    # under its lock for the partition, until sealed; then the sender.  Ownership
    # moves with the object; the fields are never touched by two threads at once.
    cdef PooledBuffer _records_buf              # header slot + records, as appended; given
                                                # back at seal if a compressed copy replaces it
    cdef PooledBuffer _sealed_buf               # holds the sealed batch: _records_buf or the compressed copy
    cdef unsigned char *_data                   # _records_buf.data, cached for the hot path;
                                                # NULL once that buffer is given back
    cdef Py_ssize_t _pos_bytes                  # bytes of _records_buf written (header slot included)
    cdef readonly Py_ssize_t batch_size_bytes   # a non-first record must end at or below this
    cdef readonly Py_ssize_t max_request_size_bytes  # no batch, even of one record, is larger
    cdef Compressor _compressor                 # codec of the records, None: uncompressed
    cdef readonly int codec                     # CODEC_* asked for
    cdef readonly int sealed_codec              # CODEC_* written: NONE when compressing did not pay
    cdef int16_t _attributes                    # timestamp type, transactional, control bits (no codec)
    cdef int32_t _record_count                  # records appended; the next one's offset delta
    cdef int64_t _first_timestamp_ms            # of the first record: the base of the deltas
    cdef int64_t _max_timestamp_ms              # largest timestamp appended
    cdef int64_t _producer_id                   # idempotence state, -1 when unused
    cdef int16_t _producer_epoch
    cdef int32_t _base_sequence
    cdef bint _full                             # an append was refused for lack of room
    cdef int _state                             # _OPEN, _SEALED, _DONE or _RELEASED
    cdef Py_ssize_t _sealed_size_bytes          # wire size of the sealed batch
    cdef int _view_count                        # exported buffer views still alive
    cdef nk_clock_cache _clock                  # "now" for records appended without a timestamp

    cdef Py_ssize_t _append_raw(self, const unsigned char *key, Py_ssize_t key_len,
                                const unsigned char *value, Py_ssize_t value_len,
                                object headers, int64_t timestamp_ms) except -2
    cdef Py_ssize_t _append_objects(self, object key, object value, object headers,
                                    int64_t timestamp_ms, Py_ssize_t index) except -2
    cdef int _make_room_for_first(self, Py_ssize_t record_bytes) except -1
    cdef int _seal(self) except -1
    cdef int _compress(self) except -1
    cdef int _write_header(self, unsigned char *batch, Py_ssize_t size_bytes) except -1
