# The caller's data as the encoders read it: one key or value object, a column of them
# (list, buffers, Arrow), headers (pairs or columns), timestamps -- each read in place
# and checked as it is read.  Shared by the builder (_batch: append and the bulk
# appends) and send_batch()'s native helpers (producer/_batch_send: murmur2 of keys,
# the sticky plan).  Semantics: _columns.pyx.

cimport cython
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM
from libc.stdint cimport int32_t, int64_t


# timestamp (an int, or an integer with __index__ such as numpy's; not a bool; >= 0)
# as int64; errors name the argument `name` (and its element `index` when index >= 0).
cdef int64_t checked_timestamp_ms(object timestamp, str name, Py_ssize_t index) except -1
# Cold: number, not an int, as the int its __index__ gives (not for a bool), or a
# TypeError "<name>[<index>] must be <allowed>, not <type>".  cpdef: the Spark sink
# checks its row functions' partitions and timestamps by the same rule.
cpdef object integer_arg(object number, str allowed, str name, Py_ssize_t index)

# The encoded size of a record's headers, count included (a list or tuple of
# (key, value) pairs, or _HeaderColumns at its row); validates every header.
cdef Py_ssize_t _headers_size(object headers) except -1
# Writes headers sized by _headers_size at p, never past end; returns the end of
# what it wrote.  Raises if they changed in between (user code can change a list).
cdef unsigned char *_write_headers(unsigned char *p, const unsigned char *end,
                                   object headers) except NULL

# Cold path of _borrow: a view of a bytes-like obj that is not bytes, or a TypeError
# naming name (and element index when index >= 0).  Returns 1: a view to release.
cdef int _borrow_buffer(object obj, Py_buffer *view, str name, Py_ssize_t index) except -1


cdef extern from "Python.h":
    # The bytes macros on borrowed pointers: no reference counting in the hot loops.
    bint _bytes_check_exact "PyBytes_CheckExact"(PyObject *obj) noexcept
    char *_bytes_as_string "PyBytes_AS_STRING"(PyObject *obj) noexcept
    Py_ssize_t _bytes_get_size "PyBytes_GET_SIZE"(PyObject *obj) noexcept


# Inline here, not called across modules: the builder's per-record path runs them.

cdef inline bint _plain_bytes(PyObject *obj, const unsigned char **data,
                              Py_ssize_t *length) noexcept:
    # The fast path of keys and values: exact bytes (pointer into the object) or
    # None (length -1).  False for anything else, which takes the general path.
    if _bytes_check_exact(obj):
        data[0] = <const unsigned char *>_bytes_as_string(obj)
        length[0] = _bytes_get_size(obj)
        return True
    if obj == <PyObject *>None:
        data[0] = NULL
        length[0] = -1
        return True
    return False


cdef inline int _borrow(object obj, const unsigned char **data, Py_ssize_t *length,
                        Py_buffer *view, str name, Py_ssize_t index) except -1:
    # Points data/length at obj's bytes (length -1 for None).  Returns 1 when a view
    # was taken that the caller must release, 0 otherwise.
    if _plain_bytes(<PyObject *>obj, data, length):
        return 0
    _borrow_buffer(obj, view, name, index)
    data[0] = <const unsigned char *>view.buf
    length[0] = view.len
    return 1


# -- the bulk paths' rows: one reader of lists, buffers and Arrow columns ------------------

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


# A pyarrow binary or string array as a BinaryColumn, a BinaryColumn as it is, or a
# TypeError naming name.
cdef BinaryColumn _as_column(object obj, str name)


cdef enum:
    # Where a BinarySource reads its rows from.
    _SOURCE_SEQUENCE = 0    # an exact list (read from a snapshot) or tuple of bytes-like or None
    _SOURCE_COLUMN = 1      # one BinaryColumn
    _SOURCE_CHUNKS = 2      # BinaryColumns end to end (a pyarrow ChunkedArray)


@cython.final
cdef class BinarySource:
    # Fields set once by _binary_source(), except the current chunk (CHUNKS), which
    # the thread reading moves: a BinarySource is read by one thread at a time.
    cdef int _kind                # _SOURCE_*
    cdef tuple _sequence          # SEQUENCE: the caller's tuple, or a snapshot of its list
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


cdef inline bint _read_fast(BinarySource source, Py_ssize_t i, const unsigned char **data,
                            Py_ssize_t *length) noexcept:
    # The common cases of BinarySource.get, inlined into the bulk loop (0 <= i <
    # length, the caller's check): a column element with sound offsets, or bytes /
    # None in a sequence.  False for anything else (chunks, another bytes-like, an
    # error): then get() decides.
    if source._kind == _SOURCE_COLUMN:
        return source._column._element(i, data, length)
    if source._kind == _SOURCE_SEQUENCE:
        return _plain_bytes(PyTuple_GET_ITEM(source._sequence, i), data, length)
    return False


@cython.final
cdef class _HeaderColumns:
    cdef list names               # header keys as UTF-8 bytes, in order
    cdef list values              # a BinarySource per name (bytes or None items)
    cdef Py_ssize_t row           # the row being encoded (the appending thread's)

    cdef Py_ssize_t _size(self) except -1
    cdef unsigned char *_write(self, unsigned char *p, const unsigned char *end) except NULL


cdef enum:
    # Where Rows takes each row's timestamp from.
    _TS_NOW = 0         # none given: the builder's clock, read once per bulk call
    _TS_SEQUENCE = 1    # a list or tuple of int or None (None: now)
    _TS_INT64 = 2       # a buffer of int64


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
