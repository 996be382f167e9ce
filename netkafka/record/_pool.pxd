# Batch memory: the buffer pool, its buffers, and the life cycle of a pooled batch (the
# base of the v2 builder, _batch, and of the legacy one, _legacy).  See _pool.pyx for
# the states and the locking rules.

from cpython.pythread cimport PyThread_type_lock
from libc.stdint cimport int32_t

from netkafka.record._compression cimport Compressor


cdef class PooledBuffer
cdef class LinePlace


cdef enum:
    # Most size classes a pool can have: the smallest class doubled until the largest
    # (buffer_size_bytes <= INT32_MAX, so 32 doublings of even 1 byte reach it).
    MAX_SIZE_CLASSES = 33


cdef class BufferPool:
    # Shared by the accumulator (acquire, on user threads) and the I/O threads
    # (release).  The mutable fields are guarded by _mutex.
    cdef readonly Py_ssize_t buffer_size_bytes  # capacity of the largest size class
    cdef readonly Py_ssize_t min_buffer_bytes   # capacity of the smallest size class
    cdef readonly Py_ssize_t total_bytes        # bound on all buffers allocated, in use or cached
    cdef readonly Py_ssize_t largest_bytes      # the most one request can ever get: total_bytes
                                                # less the compression reserve; immutable
    cdef int _class_count                       # size classes: min_buffer_bytes doubled,
                                                # the last one buffer_size_bytes; immutable
    cdef Py_ssize_t _class_bytes[MAX_SIZE_CLASSES]  # capacity of each class; immutable
    cdef unsigned char *_free[MAX_SIZE_CLASSES] # per class, cached buffers ready for reuse: a
                                                # list linked through their first bytes (_mutex)
    cdef Py_ssize_t _cached_bytes               # capacity of all cached buffers (_mutex)
    cdef PyThread_type_lock _mutex              # guards the fields marked so; held for a few C lines
    cdef Py_ssize_t _in_use_bytes               # capacity of buffers handed out, pooled or one-off (_mutex)
    cdef int _waiters                           # threads sleeping in acquire() (_mutex)
    cdef object _line                           # deque of the waiters' LinePlaces, oldest
                                                # first (_lock)
    cdef Py_ssize_t _line_bytes                 # capacity all of _line waits for, 0: none;
                                                # written with _lock and _mutex held, read
                                                # with either
    cdef object _lock                           # threading.RLock guarding _line and _sleepers
    cdef list _sleepers                         # the locks of acquire()s that may sleep, each
                                                # held until _wake_locked releases it (_lock)
    cdef readonly bint has_compression_reserve  # a buffer is set aside for compressed copies
    cdef unsigned char *_reserve                # that buffer, counted in _in_use_bytes for good;
                                                # NULL while lent (held with _reserve_lock)
    cdef PyThread_type_lock _reserve_lock       # held by the sealing thread the reserve is lent to
    cdef readonly Py_ssize_t reserve_lends      # times the reserve was lent (written with
                                                # _reserve_lock held; a statistic)

    # The smallest class holding size_bytes, -1 if none does (a one-off buffer).
    cdef int _class_for(self, Py_ssize_t size_bytes) noexcept
    # Thread-safe: a buffer of the smallest class holding size_bytes (0: the smallest
    # class), a one-off buffer of size_bytes above the largest class, or None if no room.
    # ahead_bytes: what the waiters ahead of the asker in line wait for, which it must
    # leave them; -1 (not in line): all of _line.
    cdef PooledBuffer _try_acquire(self, Py_ssize_t size_bytes, Py_ssize_t ahead_bytes=*)
    cdef void _give_back(self, unsigned char *data, Py_ssize_t capacity_bytes,
                         int size_class) noexcept
    cdef void _add_waiter(self, int change) noexcept
    # With _lock held: the line of waiters (see BufferPool's docstring).
    cdef LinePlace _join_line_locked(self, Py_ssize_t size_bytes)
    cdef int _leave_line_locked(self, LinePlace place) except -1
    cdef PooledBuffer _try_acquire_in_line_locked(self, LinePlace place)
    cdef int _add_line_bytes_locked(self, Py_ssize_t change) except -1
    cdef int _wake_locked(self) except -1
    # The compression reserve, waited for with the GIL released; give it back with
    # _return_reserve (a PooledBuffer marked reserve does so when given back).
    cdef PooledBuffer _take_reserve(self)
    cdef void _return_reserve(self, unsigned char *data) noexcept


cdef class LinePlace:
    # A waiter's place in a BufferPool's line; written once, under the pool's _lock.
    cdef Py_ssize_t size_bytes                  # what the waiter asks for
    cdef Py_ssize_t capacity_bytes              # what that is given (BufferPool.capacity_for)


cdef class PooledBuffer:
    # Memory handed out by a BufferPool.  Owned by one thread at a time (the one that
    # holds the batch using it); release() or garbage collection gives it back.
    cdef unsigned char *data                    # the memory; NULL once given back
    cdef readonly Py_ssize_t capacity_bytes     # usable bytes at data
    cdef readonly int size_class                # the pool's class it returns to; -1: one-off
    cdef readonly bint claimed                  # True once a builder owns it (no second owner)
    cdef readonly bint reserve                  # True: the pool's compression reserve, lent to the
                                                # thread sealing one batch; goes back to the reserve
                                                # before that seal returns
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
    cdef Py_ssize_t _limit_bytes                # a non-first record must end at or below this
                                                # (batch_size_bytes, less a legacy wrapper)
    cdef Py_ssize_t _end_bytes                  # min(_limit_bytes, _records_buf's capacity): an
                                                # append ending past it takes the cold path
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
    cdef list _held                             # values appended without a copy, in order:
                                                # [offset, bytes, ...], each one's place at that
                                                # offset of _records_buf left unwritten until
                                                # _fill_held(); None: none held (only
                                                # RecordBatchBuilder holds, see its
                                                # hold_values_from_bytes)
    cdef bint _raw_export                       # the next __getbuffer__ leaves the held values'
                                                # places unwritten (_raw_view)

    # Takes buffer (a subclass's __cinit__ calls this first); limit_bytes: _limit_bytes.
    cdef int _claim(self, PooledBuffer buffer, str kind, Py_ssize_t limit_bytes) except -1
    # Raises BatchStateError: "cannot <action> a <state> <kind>".
    cdef int _state_error(self, str action) except -1
    # Moves the records (still OPEN: no view exported) to a buffer of at least needed_bytes
    # of the next size class up.  1 if moved; 0 if the pool has no room now -- or, for a
    # first record (first=True), raises BufferPoolExhausted.
    cdef int _grow(self, Py_ssize_t needed_bytes, Py_ssize_t wanted_bytes,
                   bint first) except -1
    # Copies the bytes written so far to dest, skipping the held values' places.
    cdef int _copy_written(self, unsigned char *dest) except -1
    # Writes the held values into their places, once: every contiguous export is whole.
    cdef int _fill_held(self) except -1
    # A read-only memoryview of the sealed bytes with the held values' places unwritten.
    cdef object _raw_view(self)
    # The cold path of an append of record_bytes (not the first record) past _end_bytes:
    # 1 once there is room (grown), 0 when the batch is full (past _limit_bytes, or no
    # memory to grow into now: it is sent as it is, as Kafka's own full batches).
    cdef int _make_room(self, Py_ssize_t record_bytes) except -1
    # A buffer of size_bytes for the compressed copy (the pool's reserve when it has no
    # other room), or None.
    cdef PooledBuffer _compression_output(self, Py_ssize_t size_bytes)
    # The compressed copy in out (size_bytes of it) becomes the sealed bytes (moved into
    # _records_buf when out is the pool's reserve).
    cdef void _use_compressed(self, PooledBuffer out, Py_ssize_t size_bytes) noexcept
    # Subclass: make the bytes final (compress, header, CRC); _state stays BATCH_OPEN.
    cdef int _seal(self) except -1
