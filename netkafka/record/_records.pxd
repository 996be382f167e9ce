# RecordBatch v2 encoding over pooled buffers.  See _records.pyx for the wire layout,
# the batch life cycle and the locking rules.

cimport cython
from cpython.pythread cimport PyThread_type_lock
from libc.stdint cimport int16_t, int32_t, int64_t

from netkafka.record._compression cimport Compressor
from netkafka.csrc cimport nk_clock_cache


# timestamp (an int, not a bool, >= 0) as int64; errors name the argument `name`
# (and its element `index` when index >= 0).
cdef int64_t checked_timestamp_ms(object timestamp, str name, Py_ssize_t index) except -1


cdef class PooledBuffer
cdef class Rows


cdef enum:
    # Bytes of the RecordBatch v2 header, before the records (layout: _records.pyx).
    HEADER_SIZE_BYTES = 61


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


cdef enum:
    # Life-cycle states of a PooledBatch, in order.
    BATCH_OPEN = 0          # takes appends
    BATCH_SEALED = 1        # bytes final and exported read-only; may be on their way out
    BATCH_DONE = 2          # acknowledged or failed: nothing will send the bytes again
    BATCH_RELEASED = 3      # memory back in the pool


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


cdef class RecordBatchBuilder(PooledBatch):
    # Ownership and thread rules: PooledBatch's.
    cdef int16_t _attributes                    # timestamp type, transactional, control bits (no codec)
    cdef int64_t _first_timestamp_ms            # of the first record: the base of the deltas
    cdef int64_t _max_timestamp_ms              # largest timestamp appended
    cdef int64_t _producer_id                   # idempotence state, -1 when unused
    cdef int16_t _producer_epoch
    cdef int32_t _base_sequence
    cdef nk_clock_cache _clock                  # "now" for records appended without a timestamp

    cdef Py_ssize_t _append_raw(self, const unsigned char *key, Py_ssize_t key_len,
                                const unsigned char *value, Py_ssize_t value_len,
                                object headers, int64_t timestamp_ms) except -2
    cdef Py_ssize_t _append_objects(self, object key, object value, object headers,
                                    int64_t timestamp_ms, Py_ssize_t index) except -2
    cdef int _make_room_for_first(self, Py_ssize_t record_bytes) except -1
    cdef int _compress(self) except -1
    cdef int _write_header(self, unsigned char *batch, Py_ssize_t size_bytes) except -1
    cdef Py_ssize_t _append_rows(self, Rows rows, object row_ids, Py_ssize_t start) except -1


# -- the bulk paths' rows: one reader of lists, buffers and Arrow columns ------------------
# Shared by the encoder (RecordBatchBuilder.append_rows) and the partitioner
# (murmur2 of keys and the sticky plan of send_batch).  Semantics: _records.pyx.

@cython.final
cdef class BinaryColumn:
    # Immutable once built; its buffers are held for its life.
    cdef Py_buffer _data          # the values' bytes
    cdef Py_buffer _offsets       # int32 or int64 offsets into _data
    cdef Py_buffer _validity      # Arrow validity bitmap, if _has_validity
    cdef bint _has_data
    cdef bint _has_offsets
    cdef bint _has_validity
    cdef int _offset_width_bytes  # 4 or 8
    cdef Py_ssize_t _data_len     # bytes of _data; 0 without data
    cdef readonly Py_ssize_t length
    cdef Py_ssize_t _first        # index of element 0 in _offsets / _validity
    cdef object _source           # the Arrow array the buffers belong to, kept alive

    cdef void _bounds(self, Py_ssize_t j, int64_t *lo, int64_t *hi) noexcept
    # Element i (0 <= i < length): pointer and length (-1: null); False when its
    # offsets are not a range within _data (then _bad_range raises, naming it).
    cdef bint _element(self, Py_ssize_t i, const unsigned char **ptr,
                       Py_ssize_t *length) noexcept
    cdef int _bad_range(self, Py_ssize_t i, str name) except -1


@cython.final
cdef class BinarySource:
    # Fields set once by _binary_source(), except the current chunk (CHUNKS), which
    # the thread reading moves: a BinarySource is read by one thread at a time.
    cdef int _kind                # _SOURCE_*
    cdef object _sequence         # SEQUENCE: the exact list or tuple
    cdef BinaryColumn _column     # COLUMN: the column; CHUNKS: the current chunk
    cdef list _chunks             # CHUNKS: a BinaryColumn per chunk
    cdef list _chunk_starts       # CHUNKS: each chunk's first row, then length
    cdef Py_ssize_t _chunk_first  # rows of _column: _chunk_first <= i < _chunk_end
    cdef Py_ssize_t _chunk_end
    cdef bint _bytes_only         # items must be bytes or None (header values)
    cdef readonly Py_ssize_t length
    cdef readonly str name        # how errors name it: "values", "keys", ...

    # Row i (0 <= i < length, the caller's check): 1 when a view was taken that
    # the caller releases, else 0.  Raises naming name[i] for a bad item.
    cdef int get(self, Py_ssize_t i, const unsigned char **data, Py_ssize_t *length,
                 Py_buffer *view) except -1
    cdef int _seek(self, Py_ssize_t i) except -1
    cpdef object item(self, Py_ssize_t i)


cdef BinarySource _binary_source(object obj, str name, Py_ssize_t expected_length,
                                 bint bytes_only)


@cython.final
cdef class _HeaderColumns:
    cdef list names               # header keys as UTF-8 bytes, in order
    cdef list values              # a BinarySource per name (bytes or None items)
    cdef Py_ssize_t row           # the row being encoded (the appending thread's)

    cdef Py_ssize_t _size(self) except -1
    cdef unsigned char *_write(self, unsigned char *p, const unsigned char *end) except NULL


@cython.final
cdef class Rows:
    # Immutable once built but for _header_columns.row; used by one thread at a time.
    cdef readonly Py_ssize_t length
    cdef readonly BinarySource values
    cdef readonly BinarySource keys           # None: every key null
    cdef object _header_rows                  # per-row headers (list or tuple), or None
    cdef _HeaderColumns _header_columns       # headers by column, or None
    cdef int _ts_kind                         # _TS_*
    cdef object _ts_sequence                  # _TS_SEQUENCE: the list or tuple
    cdef Py_buffer _ts_view                   # _TS_INT64: the int64 buffer, held

    cdef int64_t _timestamp(self, Py_ssize_t i, int64_t now_ms) except -1
    cdef object _headers(self, Py_ssize_t i)
    cdef Py_ssize_t record_bytes(self, Py_ssize_t i, int32_t offset_delta,
                                 int64_t first_timestamp_ms, int64_t now_ms) except -1
    cdef int _check_row(self, Py_ssize_t i) except -1
