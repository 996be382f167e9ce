# Batch memory: the buffer pool, its buffers, and the life cycle of a pooled batch (the
# base of the v2 builder, _batch, and of the legacy one, _legacy).  See _pool.pyx for
# the states and the locking rules.

from cpython.pythread cimport PyThread_type_lock
from libc.stdint cimport int32_t

from netkafka.record._compression cimport Compressor


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
    cdef readonly bint has_compression_reserve  # a buffer is set aside for compressed copies
    cdef unsigned char *_reserve                # that buffer, counted in _in_use_bytes for good;
                                                # NULL while lent (held with _reserve_lock)
    cdef PyThread_type_lock _reserve_lock       # held by the sealing thread the reserve is lent to
    cdef readonly Py_ssize_t reserve_lends      # times the reserve was lent (written with
                                                # _reserve_lock held; a statistic)

    # Thread-safe: a buffer of max(size_bytes, buffer_size_bytes), or None if no room.
    cdef PooledBuffer _try_acquire(self, Py_ssize_t size_bytes)
    cdef void _give_back(self, unsigned char *data, Py_ssize_t capacity_bytes, bint pooled) noexcept
    cdef void _add_waiter(self, int change) noexcept
    # The compression reserve, waited for with the GIL released; give it back with
    # _return_reserve (a PooledBuffer marked reserve does so when given back).
    cdef PooledBuffer _take_reserve(self)
    cdef void _return_reserve(self, unsigned char *data) noexcept


cdef class PooledBuffer:
    # Memory handed out by a BufferPool.  Owned by one thread at a time (the one that
    # holds the batch using it); release() or garbage collection gives it back.
    cdef unsigned char *data                    # the memory; NULL once given back
    cdef readonly Py_ssize_t capacity_bytes     # usable bytes at data
    cdef readonly bint pooled                   # True: returns to the free list; False: one-off
    cdef readonly bint claimed                  # True once a builder owns it (no second owner)
    cdef readonly bint reserve                  # True: the pool's compression reserve, lent to the
                                                # thread sealing one batch; goes back to the reserve
    cdef BufferPool pool                        # where data goes back to

    cdef void _give_back(self) noexcept


cdef enum:
    # Life-cycle states of a PooledBatch, in order.
    BATCH_OPEN = 0          # takes appends
    BATCH_SEALED = 1        # bytes final and exported read-only; may be on their way out
    BATCH_DONE = 2          # acknowledged or failed: nothing will send the bytes again
    BATCH_RELEASED = 3      # memory back in the pool


# Raises ValueError unless batch_size_bytes <= max_request_size_bytes <= INT32_MAX: the
# rule every builder's constructor applies to its two size settings.
cdef int check_max_request_size(Py_ssize_t batch_size_bytes,
                                Py_ssize_t max_request_size_bytes) except -1


cdef class PooledBatch:
    # The life cycle and memory of one batch, shared by RecordBatchBuilder and
    # _legacy.LegacyMessageSetBuilder so the accumulator drives either through one
    # interface.  Not thread-safe: owned by the thread that holds the batch -- the
    # accumulator, under its lock for the partition, until sealed; then the sender.
    # Ownership moves with the object; the fields are never touched by two threads at once.
    cdef PooledBuffer _records_buf              # records as appended (header slot first for v2);
                                                # given back at seal if a compressed copy replaces it
    cdef PooledBuffer _sealed_buf               # holds the sealed bytes: _records_buf or the compressed copy
    cdef unsigned char *_data                   # _records_buf.data, cached for the hot path;
                                                # NULL once that buffer is given back
    cdef Py_ssize_t _pos_bytes                  # bytes of _records_buf written
    cdef int32_t _record_count                  # records appended; the next one's offset (delta)
    cdef readonly Py_ssize_t batch_size_bytes   # a non-first record must end at or below this
    cdef readonly Py_ssize_t max_request_size_bytes  # no batch, even of one record, is larger
    cdef Compressor _compressor                 # shared, thread-safe; None: uncompressed
    cdef readonly int codec                     # CODEC_* asked for
    cdef readonly int sealed_codec              # CODEC_* written: NONE when compressing did not
                                                # pay or the pool had no room for the copy
    cdef bint _full                             # an append was refused for lack of room
    cdef int _state                             # BATCH_*
    cdef Py_ssize_t _sealed_size_bytes          # wire size of the sealed bytes
    cdef int _view_count                        # exported buffer views still alive
    cdef str _kind                              # "batch" or "set": the noun of error messages

    # Takes buffer (a subclass's __cinit__ calls this first).
    cdef int _claim(self, PooledBuffer buffer, str kind) except -1
    # Raises BatchStateError: "cannot <action> a <state> <kind>".
    cdef int _state_error(self, str action) except -1
    # Swaps the (still empty) records buffer for one of size_bytes, or raises
    # BufferPoolExhausted.
    cdef int _swap_for_larger(self, Py_ssize_t size_bytes) except -1
    # A buffer of size_bytes for the compressed copy, or None if the pool has no room.
    cdef PooledBuffer _compression_output(self, Py_ssize_t size_bytes)
    # The compressed copy in out (size_bytes of it) becomes the sealed bytes.
    cdef void _use_compressed(self, PooledBuffer out, Py_ssize_t size_bytes) noexcept
    # Subclass: make the bytes final (compress, header, CRC); _state stays BATCH_OPEN.
    cdef int _seal(self) except -1
