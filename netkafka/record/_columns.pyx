"""The caller's data as the record encoders read it: in place, checked as it is read.

One record's parts -- a key or value (bytes, any contiguous bytes-like, None),
headers (a list of (key, value) pairs, or columns of values), a timestamp
(checked_timestamp_ms) -- and the bulk paths' arguments: BinaryColumn (nullable
binaries in Arrow's layout, over any buffers), BinarySource (one bulk argument: a
list or tuple, a BinaryColumn, a pyarrow Array or ChunkedArray) and Rows (a bulk
call's values, keys, headers and timestamps together).  No Python object is made
per row.

The RecordBatch v2 record format is known here only through _batch_layout.pxd:
headers are sized and written here (in either form), and Rows.record_bytes sizes a
row exactly as the builder will write it.  So the builder (_batch) and send_batch()'s
native helpers (producer/_batch_send) both read the caller's data through this
module, and neither depends on the other.

Threads: a BinaryColumn is immutable once built; a BinarySource or a Rows is used by
one thread at a time (the chunk last read, the header row being encoded).
"""
import bisect
import operator
from array import array

cimport cython
from cpython.bool cimport PyBool_Check
from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS, PyBUF_FORMAT, PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_GET_SIZE
from cpython.list cimport (
    PyList_AsTuple, PyList_Check, PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE,
)
from cpython.long cimport PyLong_AsLongLong, PyLong_Check
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_Check, PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_Check, PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint64_t

from netkafka.csrc cimport nk_uvarint64_size, nk_varlong_size, nk_write_varint
from netkafka.record._batch_layout cimport _body_size, _nullable_size, _write_nullable


# ----------------------------------------------------------------------------------
# One record's parts: keys and values, timestamps, headers


cdef str _arg_name(str name, Py_ssize_t index):
    # Error messages name the argument, and the element of a bulk argument.  Built
    # only when raising, so the hot paths create no string.
    return name if index < 0 else f"{name}[{index}]"


cdef int64_t checked_timestamp_ms(object timestamp, str name, Py_ssize_t index) except -1:
    # Java's producer rejects negative timestamps; -1 would read as "no timestamp".
    # A bool is an int to Python, but as a timestamp it can only be a mistake.
    cdef int64_t ts
    if not PyLong_Check(timestamp) or PyBool_Check(timestamp):
        timestamp = integer_arg(timestamp, "an int (milliseconds since the epoch) or None",
                                name, index)
    try:
        ts = PyLong_AsLongLong(timestamp)
    except OverflowError:
        raise ValueError(f"{_arg_name(name, index)}={timestamp} does not fit in 64 bits") from None
    if ts < 0:
        raise ValueError(f"{_arg_name(name, index)}={ts} is negative; timestamps are "
                         f"milliseconds since the epoch")
    return ts


cpdef object integer_arg(object number, str allowed, str name, Py_ssize_t index):
    # Cold: an integer of another type -- numpy's, as a pandas or numpy column's
    # elements are -- stands for its int, as kafka-python takes any number with
    # __index__ (operator.index); a bool, a float or a numpy bool does not.
    if not PyBool_Check(number):
        try:
            return operator.index(number)
        except TypeError:
            pass
    raise TypeError(f"{_arg_name(name, index)} must be {allowed}, not "
                    f"{type(number).__name__}")


cdef int _borrow_buffer(object obj, Py_buffer *view, str name, Py_ssize_t index) except -1:
    # Cold path of _borrow: anything but bytes and None.
    if PyUnicode_Check(obj):
        raise TypeError(f"{_arg_name(name, index)} must be bytes, bytearray, memoryview or "
                        f"None, not str (encode it first)")
    try:
        PyObject_GetBuffer(obj, view, PyBUF_SIMPLE)
    except BufferError as exc:
        raise TypeError(f"{_arg_name(name, index)} must be a contiguous bytes-like object: "
                        f"{exc}") from None
    except TypeError:
        raise TypeError(f"{_arg_name(name, index)} must be bytes, bytearray, memoryview or "
                        f"None, not {type(obj).__name__}") from None
    return 1


cdef inline int _check_utf8(const unsigned char *data, Py_ssize_t length,
                            Py_ssize_t index) except -1:
    # A header key is a Kafka String: consumers decode it as UTF-8 and fail (or
    # mangle it) otherwise.  ASCII is checked here; anything else is left to the
    # strict decoder, a cold path.
    cdef Py_ssize_t i
    for i in range(length):
        if data[i] >= 0x80:
            try:
                PyUnicode_DecodeUTF8(<const char *>data, length, "strict")
            except UnicodeDecodeError as exc:
                raise ValueError(f"headers[{index}] key is not UTF-8: {exc}") from None
            return 0
    return 0


cdef inline int _header_parts(object header, Py_ssize_t index, const unsigned char **key,
                              Py_ssize_t *key_len, const unsigned char **value,
                              Py_ssize_t *value_len) except -1:
    # The (key, value) of headers[index]: key str (sent as UTF-8) or bytes, value
    # bytes or None.  Pointers stay valid while the header objects live: UTF-8 of a
    # str is cached in the str itself.
    cdef object k, v
    # A tuple subclass's pair too (a namedtuple's), which kafka-python takes.
    if PyTuple_Check(header) and PyTuple_GET_SIZE(header) == 2:
        k = <object>PyTuple_GET_ITEM(header, 0)
        v = <object>PyTuple_GET_ITEM(header, 1)
    elif PyList_CheckExact(header) and PyList_GET_SIZE(header) == 2:
        k = <object>PyList_GET_ITEM(header, 0)
        v = <object>PyList_GET_ITEM(header, 1)
    else:
        raise TypeError(f"headers[{index}] must be a (key, value) pair, "
                        f"not {type(header).__name__}")
    if PyUnicode_Check(k):
        try:
            key[0] = <const unsigned char *>PyUnicode_AsUTF8AndSize(k, key_len)
        except UnicodeEncodeError as exc:
            raise ValueError(f"headers[{index}] key cannot be UTF-8 encoded: {exc}") from None
    elif PyBytes_Check(k):
        key[0] = <const unsigned char *>PyBytes_AS_STRING(k)
        key_len[0] = PyBytes_GET_SIZE(k)
        _check_utf8(key[0], key_len[0], index)
    else:
        raise TypeError(f"headers[{index}] key must be str or bytes, not {type(k).__name__}")
    if v is None:
        value[0] = NULL
        value_len[0] = -1
    elif PyBytes_Check(v):
        value[0] = <const unsigned char *>PyBytes_AS_STRING(v)
        value_len[0] = PyBytes_GET_SIZE(v)
    else:
        raise TypeError(f"headers[{index}] value must be bytes or None, not {type(v).__name__}")
    return 0


cdef inline object _sequence_item(object seq, Py_ssize_t i):
    # seq is a list (a subclass too) or an exact tuple (checked by the caller); the
    # length is read again on every access because a list may shrink while we work.
    if PyList_Check(seq):
        if i < PyList_GET_SIZE(seq):
            return <object>PyList_GET_ITEM(seq, i)
    elif i < PyTuple_GET_SIZE(seq):
        return <object>PyTuple_GET_ITEM(seq, i)
    raise IndexError("sequence changed size during append")


cdef Py_ssize_t _headers_size(object headers) except -1:
    # Encoded size of a headers array, count included; validates every header.
    cdef Py_ssize_t count, i, size
    cdef const unsigned char *k
    cdef const unsigned char *v
    cdef Py_ssize_t k_len, v_len
    if type(headers) is _HeaderColumns:
        return (<_HeaderColumns>headers)._size()
    # A list subclass too: kafka-python takes any list.
    if not (PyList_Check(headers) or PyTuple_CheckExact(headers)):
        raise TypeError(f"headers must be a list or tuple of (key, value) pairs or None, "
                        f"not {type(headers).__name__}")
    count = len(headers)
    size = nk_varlong_size(count)
    for i in range(count):
        _header_parts(_sequence_item(headers, i), i, &k, &k_len, &v, &v_len)
        size += nk_varlong_size(k_len) + k_len + _nullable_size(v_len)
    return size


cdef unsigned char *_write_headers(unsigned char *p, const unsigned char *end,
                                   object headers) except NULL:
    # Second pass over headers already sized by _headers_size.  Bounded by end in
    # case another thread changed the list in between (no overrun, an error).
    cdef Py_ssize_t count, i
    cdef const unsigned char *k
    cdef const unsigned char *v
    cdef Py_ssize_t k_len, v_len
    if type(headers) is _HeaderColumns:
        return (<_HeaderColumns>headers)._write(p, end)
    count = len(headers)
    if p + nk_varlong_size(count) > end:
        raise RuntimeError("headers changed during append")
    p = nk_write_varint(p, <int32_t>count)
    for i in range(count):
        _header_parts(_sequence_item(headers, i), i, &k, &k_len, &v, &v_len)
        if p + nk_varlong_size(k_len) + k_len + _nullable_size(v_len) > end:
            raise RuntimeError("headers changed during append")
        p = _write_nullable(p, k, k_len)
        p = _write_nullable(p, v, v_len)
    return p


# ----------------------------------------------------------------------------------
# Binary columns (Arrow layout) and the bulk paths' rows


# Contiguous with its item format: a typed buffer that is a view of another (a cast
# memoryview) exports its format only with its shape.
cdef int _TYPED_CONTIGUOUS = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT


cdef int _get_contiguous(object obj, Py_buffer *view, int flags, str name) except -1:
    # A column's buffers are held for its life: any exporter, one clear error.
    try:
        PyObject_GetBuffer(obj, view, flags)
    except (TypeError, BufferError, ValueError) as exc:
        # ValueError: numpy's refusals ("ndarray is not C-contiguous", a datetime64).
        raise TypeError(f"{name} must be a contiguous buffer: {exc}") from None
    return 0


cdef int _borrow_int64s(object obj, Py_buffer *view, Py_ssize_t count) except -1:
    # A buffer of exactly count native int64 (timestamps in bulk).
    _get_contiguous(obj, view, _TYPED_CONTIGUOUS, "timestamps_ms")
    if view.itemsize != 8 or not _is_native_signed_int(view.format):
        PyBuffer_Release(view)
        raise TypeError("timestamps_ms must be a buffer of int64 (format 'q')")
    if view.len != count * 8:
        PyBuffer_Release(view)
        raise ValueError(f"timestamps_ms has {view.len // 8} elements, values has {count}")
    return 0


cdef object _arrow_timestamps_ms(object column):
    # A pyarrow timestamp (any unit; any time zone, the values being UTC) or integer
    # (milliseconds) Array or ChunkedArray as a buffer of int64 milliseconds: in
    # place for an int64 or timestamp[ms] column of one chunk, else converted.
    # Another pyarrow object (a Buffer) is returned as is, for the buffer path.
    import pyarrow
    if not isinstance(column, (pyarrow.Array, pyarrow.ChunkedArray)):
        return column
    types = pyarrow.types
    kind = column.type
    if not (types.is_timestamp(kind) or types.is_integer(kind)):
        raise TypeError(f"timestamps_ms: a pyarrow array of {kind} is not a timestamp "
                        f"column: expected a timestamp or an integer (milliseconds) type")
    try:
        if types.is_timestamp(kind) and kind.unit != "ms":
            # Sub-millisecond parts dropped, as Kafka keeps milliseconds: floored, as
            # the instant's millisecond -- a cast would truncate toward zero, and an
            # instant less than 1 ms before the epoch would be sent as 0 rather than
            # refused, negative, as every earlier one is.  Then the cast is exact;
            # seconds beyond int64 as milliseconds are refused (safe).
            if kind.unit != "s":
                import pyarrow.compute
                column = pyarrow.compute.floor_temporal(column, unit="millisecond")
            column = column.cast(pyarrow.timestamp("ms", kind.tz))
        column = column.cast(pyarrow.int64())
    except pyarrow.ArrowInvalid as exc:  # that, or a uint64 beyond int64
        raise ValueError(f"timestamps_ms: {exc}") from None
    if column.null_count:
        raise ValueError(f"timestamps_ms has {column.null_count} null(s): fill them "
                         f"(pyarrow.compute.fill_null), or give a list with None for now")
    if isinstance(column, pyarrow.ChunkedArray):
        column = (column.chunk(0) if column.num_chunks == 1
                  else pyarrow.concat_arrays(column.chunks) if column.num_chunks
                  else pyarrow.array([], pyarrow.int64()))
    values = column.buffers()[1]
    if values is None:
        return array("q")  # an empty array may have no buffers at all
    return memoryview(values)[column.offset * 8:(column.offset + len(column)) * 8].cast("q")


cdef bint _is_native_signed_int(const char *fmt):
    # A struct-module format of one native-order signed integer: 'i', 'l', 'q', ...
    if fmt == NULL:
        return False
    f = fmt
    if f[:1] in (b'@', b'='):
        f = f[1:]
    return f in (b'b', b'h', b'i', b'l', b'q', b'n')


# no_gc: the collector neither traverses nor clears a column, so the buffers it holds
# count as referenced from outside any cycle.  Traversed, a caller's memoryview in a
# cycle with the column was garbage the collector cleared while exported: before
# CPython 3.12.7 (gh-77894) that drops the memoryview's memory anyway ("Exception
# ignored in tp_clear of memoryview", then a crash); and a cleared column dropped the
# buffers' owners without releasing them, leaving the caller's arrays locked.  A
# column references nothing that refers back to it; __dealloc__ releases the buffers.
# Same for Rows.
@cython.final
@cython.no_gc
cdef class BinaryColumn:
    """A column of nullable binary values in Arrow's layout, over buffer-protocol
    objects: no copy, no per-element Python object.

    Element i of the column is data[offsets[first + i] : offsets[first + i + 1]],
    null when bit (first + i) of validity (least significant bit first) is 0.

    Args:
        data: the values' bytes, back to back.
        offsets: length + 1 (+ first) integers, int32 or int64, non-decreasing.
        validity: None (no nulls) or the validity bitmap.
        offset_width_bytes: 4 or 8; needed when offsets exports plain bytes (as
            pyarrow.Buffer does), else taken from its item size.
        length: number of elements (default: all that offsets describes).
        first: index of the column's first element in offsets/validity (an Arrow
            array's .offset).
    """

    def __cinit__(self, data, offsets, validity=None, *, offset_width_bytes=None,
                  length=None, Py_ssize_t first=0):
        cdef Py_ssize_t n_offsets
        if first < 0:
            raise ValueError(f"first must be >= 0, got {first}")
        self._first = first
        _get_contiguous(offsets, &self._offsets, _TYPED_CONTIGUOUS, "offsets")
        self._has_offsets = True
        if self._offsets.itemsize == 1:
            # Raw bytes (a pyarrow.Buffer, bytes): the width must be said.
            if offset_width_bytes not in (4, 8):
                raise ValueError("offsets exports plain bytes: give offset_width_bytes=4 "
                                 "(int32 offsets) or 8 (int64)")
            width = offset_width_bytes
        elif (_is_native_signed_int(self._offsets.format)
                and self._offsets.itemsize in (4, 8)):
            width = self._offsets.itemsize
            if offset_width_bytes is not None and offset_width_bytes != width:
                raise ValueError(f"offset_width_bytes={offset_width_bytes} but offsets holds "
                                 f"{width}-byte integers")
        else:
            raise TypeError(f"offsets must hold int32 or int64, not format "
                            f"{self._offsets.format.decode()!r}")
        self._offset_width_bytes = width
        n_offsets = self._offsets.len // width
        if length is None:
            if n_offsets - first < 1:
                raise ValueError(f"offsets holds {n_offsets} entries: none left after first={first}")
            self.length = n_offsets - first - 1
        else:
            self.length = length
            # Compared without adding to length or first: a huge first + length
            # would wrap past the check and let _bounds read outside offsets.
            if self.length < 0 or first >= n_offsets or self.length > n_offsets - 1 - first:
                raise ValueError(f"length={length} with first={first} needs {first + length + 1} "
                                 f"offsets, offsets holds {n_offsets}")
        if data is not None:
            _get_contiguous(data, &self._data, PyBUF_SIMPLE, "data")
            self._has_data = True
            self._data_len = self._data.len
        if validity is not None:
            _get_contiguous(validity, &self._validity, PyBUF_SIMPLE, "validity")
            self._has_validity = True
            if self._validity.len * 8 < first + self.length:
                raise ValueError(f"validity has {self._validity.len * 8} bits, the column "
                                 f"needs {first + self.length}")

    def __dealloc__(self):
        if self._has_data:
            PyBuffer_Release(&self._data)
        if self._has_offsets:
            PyBuffer_Release(&self._offsets)
        if self._has_validity:
            PyBuffer_Release(&self._validity)

    def __len__(self):
        return self.length

    @staticmethod
    def from_arrow(array):
        """A column over a pyarrow Binary, LargeBinary, String or LargeString array
        (no copy: the array's buffers are used in place), or over a copy of a
        BinaryView, StringView, FixedSizeBinary or dictionary-encoded one."""
        import pyarrow
        if isinstance(array, pyarrow.ChunkedArray):
            raise TypeError("a ChunkedArray has several buffers: pass its .chunks one by one")
        if not isinstance(array, pyarrow.Array):
            raise TypeError(f"expected a pyarrow array, got {type(array).__name__}")
        array = _arrow_binary(pyarrow, array, "a pyarrow array")
        width = _offset_width(pyarrow.types, array.type)
        validity, offsets, data = array.buffers()
        if offsets is None:
            # An empty array may have no buffers at all.
            return BinaryColumn(b"", b"\0" * width, offset_width_bytes=width, length=0)
        column = BinaryColumn(data, offsets, validity, offset_width_bytes=width,
                              length=len(array), first=array.offset)
        column._source = array
        return column

    cdef void _bounds(self, Py_ssize_t j, int64_t *lo, int64_t *hi) noexcept:
        # Start and end offsets of entry j of offsets, as stored (unchecked).
        if self._offset_width_bytes == 4:
            lo[0] = (<const int32_t *>self._offsets.buf)[j]
            hi[0] = (<const int32_t *>self._offsets.buf)[j + 1]
        else:
            lo[0] = (<const int64_t *>self._offsets.buf)[j]
            hi[0] = (<const int64_t *>self._offsets.buf)[j + 1]

    cdef bint _element(self, Py_ssize_t i, const unsigned char **ptr,
                       Py_ssize_t *length) noexcept:
        # Element i (0 <= i < length, guaranteed by the caller), bounds-checked
        # against data: offsets come from the user and must not lead us astray.
        # False when they do not; the caller raises (_bad_range), off the hot path.
        cdef Py_ssize_t j = self._first + i
        cdef int64_t lo, hi
        if self._has_validity and not (
                (<const unsigned char *>self._validity.buf)[j >> 3] >> (j & 7)) & 1:
            ptr[0] = NULL
            length[0] = -1
            return True
        self._bounds(j, &lo, &hi)
        if not 0 <= lo <= hi <= self._data_len:
            return False
        ptr[0] = <const unsigned char *>self._data.buf + lo
        length[0] = hi - lo
        return True

    cdef int _bad_range(self, Py_ssize_t i, str name) except -1:
        cdef Py_ssize_t j = self._first + i
        cdef int64_t lo, hi
        self._bounds(j, &lo, &hi)
        raise ValueError(f"{name}[{i}]: offsets {lo}..{hi} are not a range within the "
                         f"{self._data_len} bytes of data")


cdef int _offset_width(object types, object arrow_type):
    # Bytes per offset of the pyarrow types BinaryColumn reads in place; 0 for others.
    if types.is_binary(arrow_type) or types.is_string(arrow_type):
        return 4
    if types.is_large_binary(arrow_type) or types.is_large_string(arrow_type):
        return 8
    return 0


cdef object _arrow_binary(object pyarrow, object column, str what):
    # column (a pyarrow Array or ChunkedArray) in a type BinaryColumn reads in place:
    # as it is, or converted once (a copy) from another binary-like type -- views,
    # fixed-size, or dictionary-encoded ones -- which hold the same bytes per row.
    # Any other type is refused: a cast would turn numbers into their text.
    types = pyarrow.types
    kind = column.type
    if _offset_width(types, kind):
        return column
    inner = kind.value_type if types.is_dictionary(kind) else kind
    if (_offset_width(types, inner) or types.is_fixed_size_binary(inner)
            or _is_view(types, inner)):
        try:
            return column.cast(pyarrow.large_binary())
        except pyarrow.ArrowNotImplementedError as exc:
            raise TypeError(f"{what} of {kind} cannot be read as binary: {exc}") from None
    raise TypeError(f"{what} of {kind} is not a binary column: expected binary, "
                    f"large_binary, string or large_string (read in place), or "
                    f"binary_view, string_view, fixed_size_binary or a dictionary of "
                    f"these (converted)")


cdef bint _is_view(object types, object arrow_type):
    # binary_view / string_view, which pyarrow has from version 16 on.
    for name in ("is_binary_view", "is_string_view"):
        check = getattr(types, name, None)
        if check is not None and check(arrow_type):
            return True
    return False


cdef BinaryColumn _as_column(object obj, str name):
    if isinstance(obj, BinaryColumn):
        return <BinaryColumn>obj
    if _is_pyarrow(obj):
        return BinaryColumn.from_arrow(obj)
    raise TypeError(f"{name} must be a BinaryColumn or a pyarrow binary/string array, "
                    f"not {type(obj).__name__}")


cdef inline bint _is_pyarrow(object obj):
    # pyarrow is optional: its objects are recognised without importing it.
    return type(obj).__module__.startswith("pyarrow")


@cython.final
cdef class BinarySource:
    """One bulk argument of nullable binaries, read in place by row index: an exact
    list or tuple of bytes-like or None, a BinaryColumn, or a pyarrow Binary,
    String, LargeBinary or LargeString Array or ChunkedArray (another binary-like
    one -- views, fixed-size, dictionary-encoded -- converted once to
    LargeBinary, then read in place).  Build it with binary_source().  Used by one thread at a time (the chunk it last read is
    remembered)."""

    cdef int get(self, Py_ssize_t i, const unsigned char **data, Py_ssize_t *length,
                 Py_buffer *view) except -1:
        # Row i (0 <= i < self.length, the caller's check): data/length point at its
        # bytes (length -1: null).  Returns 1 when a view was taken that the caller
        # releases after use (a bytes-like item that is not bytes), else 0.
        cdef PyObject *item
        if self._kind == _SOURCE_SEQUENCE:
            item = PyTuple_GET_ITEM(self._sequence, i)
            # Borrowed from the tuple, which holds it for the call.
            if _plain_bytes(item, data, length):
                return 0
            if self._bytes_only:
                raise TypeError(f"{self.name}[{i}] must be bytes or None, not "
                                f"{type(<object>item).__name__}")
            _borrow_buffer(<object>item, view, self.name, i)
            data[0] = <const unsigned char *>view.buf
            length[0] = view.len
            return 1
        if self._kind == _SOURCE_CHUNKS and not self._chunk_first <= i < self._chunk_end:
            self._seek(i)
        if not self._column._element(i - self._chunk_first, data, length):
            self._column._bad_range(i - self._chunk_first, self.name)
        return 0

    cdef int _seek(self, Py_ssize_t i) except -1:
        # The chunk holding row i becomes the current one (rare: rows come mostly
        # in order, so this runs about once per chunk).
        cdef Py_ssize_t c = bisect.bisect_right(self._chunk_starts, i) - 1
        self._column = self._chunks[c]
        self._chunk_first = self._chunk_starts[c]
        self._chunk_end = self._chunk_starts[c + 1]
        return 0

    cpdef object item(self, Py_ssize_t i):
        """Row i as an object: the item itself for a sequence, bytes (or None) for
        a column -- for the few rows that take a per-record path.  A row that cannot
        be read raises what get() raises (TypeError, ValueError), naming it: an item
        is checked too, before any code of the caller's (a partitioner) sees it."""
        cdef const unsigned char *data
        cdef Py_ssize_t length
        cdef Py_buffer view
        if not 0 <= i < self.length:
            raise IndexError(f"{self.name}[{i}] is outside its {self.length} rows")
        held = self.get(i, &data, &length, &view)
        if self._kind == _SOURCE_SEQUENCE:
            if held:
                PyBuffer_Release(&view)
            return self._sequence[i]
        return None if length < 0 else data[:length]

    def __len__(self):
        return self.length


def binary_source(obj, str name, Py_ssize_t expected_length=-1):
    """obj as a BinarySource (returned as is if it is one), or a TypeError naming
    `name` and what is accepted; with expected_length >= 0, a ValueError when its
    length differs ("<name> has 3 elements, values has 4")."""
    return _binary_source(obj, name, expected_length, False)


cdef BinarySource _binary_source(object obj, str name, Py_ssize_t expected_length,
                                 bint bytes_only):
    cdef BinarySource source
    if type(obj) is BinarySource:
        source = obj
    else:
        source = BinarySource.__new__(BinarySource)
        source.name = name
        source._bytes_only = bytes_only
        if PyList_CheckExact(obj) or PyTuple_CheckExact(obj):
            source._kind = _SOURCE_SEQUENCE
            # A list is read from a snapshot of its items, taken here (a copy of its
            # pointers): Python code that runs during the call (a headers list's
            # __len__; another thread, as the batch grows) may replace or drop a
            # list's items, which freed bytes read in place (the broker then stored
            # whatever reused the memory).  A tuple holds its items.
            source._sequence = PyList_AsTuple(obj) if PyList_CheckExact(obj) else obj
            source.length = len(source._sequence)
        elif isinstance(obj, BinaryColumn):
            source._kind = _SOURCE_COLUMN
            source._column = obj
            source.length = source._chunk_end = (<BinaryColumn>obj).length
        elif _is_pyarrow(obj) and hasattr(obj, "chunks"):
            _chunked_source(source, obj, name)
        elif _is_pyarrow(obj) and hasattr(obj, "buffers"):
            import pyarrow
            source._kind = _SOURCE_COLUMN
            source._column = BinaryColumn.from_arrow(
                _arrow_binary(pyarrow, obj, name + ": a pyarrow array"))
            source.length = source._chunk_end = source._column.length
        else:
            raise TypeError(f"{name} must be a list or tuple of bytes-like or None, a "
                            f"BinaryColumn, or a pyarrow binary or string array, not "
                            f"{type(obj).__name__}")
    if expected_length >= 0 and source.length != expected_length:
        raise ValueError(f"{name} has {source.length} elements, values has {expected_length}")
    return source


cdef int _chunked_source(BinarySource source, object chunked, str name) except -1:
    # A ChunkedArray: its chunks' buffers in place, one BinaryColumn each.
    import pyarrow
    chunked = _arrow_binary(pyarrow, chunked, name + ": a pyarrow array")
    source._kind = _SOURCE_CHUNKS
    source._chunks = [BinaryColumn.from_arrow(chunk) for chunk in chunked.chunks]
    cdef Py_ssize_t total = 0
    starts = [0]
    for column in source._chunks:
        total += (<BinaryColumn>column).length
        starts.append(total)
    source._chunk_starts = starts
    source.length = total
    source._chunk_end = -1  # no chunk current yet
    return 0


@cython.final
cdef class _HeaderColumns:
    """Headers given by column: every row has each name, its value taken from that
    name's column at the row (null: a null value).  The encoder reads it through
    _headers_size / _write_headers with `row` set to the record's row; owned by the
    thread appending (a Rows is used by one call)."""

    cdef Py_ssize_t _size(self) except -1:
        cdef Py_ssize_t count = len(self.names), c, size = nk_varlong_size(count), v_len
        cdef const unsigned char *v
        cdef Py_buffer view
        for c in range(count):
            (<BinarySource>self.values[c]).get(self.row, &v, &v_len, &view)
            size += _nullable_size(PyBytes_GET_SIZE(self.names[c])) + _nullable_size(v_len)
        return size

    cdef unsigned char *_write(self, unsigned char *p, const unsigned char *end) except NULL:
        cdef Py_ssize_t count = len(self.names), c, v_len, k_len
        cdef const unsigned char *v
        cdef Py_buffer view
        p = nk_write_varint(p, <int32_t>count)
        for c in range(count):
            name = self.names[c]
            k_len = PyBytes_GET_SIZE(name)
            (<BinarySource>self.values[c]).get(self.row, &v, &v_len, &view)
            if p + _nullable_size(k_len) + _nullable_size(v_len) > end:
                raise RuntimeError("header values changed during append")
            p = _write_nullable(p, <const unsigned char *>PyBytes_AS_STRING(name), k_len)
            p = _write_nullable(p, v, v_len)
        return p


@cython.final
@cython.no_gc  # as BinaryColumn: its timestamps buffer
cdef class Rows:
    """The rows of a bulk append (Producer.send_batch(), append_many(),
    append_column()): each argument read in place, row by row, with no Python
    object made per row.

    Args:
        values: per row bytes-like or None (a tombstone): a list or tuple, a
            BinaryColumn (any buffers + offsets), or a pyarrow binary-like Array
            or ChunkedArray (nulls allowed), as BinarySource reads it.
        keys: None (no keys), or per row bytes-like or None, in any form values
            takes.
        headers: None; or per row None or a list of (str or bytes key, bytes or
            None value) pairs, in a list or tuple; or a dict {key: column}, every
            row getting each key with that column's value at the row (a column in
            any form values takes, its nulls null header values).
        timestamps_ms: None (now), a list or tuple of int or None (now), a
            buffer of int64 (array('q'), a numpy int64 array), or a pyarrow
            timestamp (any unit) or integer (milliseconds) Array or ChunkedArray
            without nulls.

    Raises:
        TypeError: an argument of another kind (named).
        ValueError: an argument whose length is not that of values (named).

    Elements are checked as they are read: a bad one fails only its row.
    """

    def __cinit__(self, values, keys=None, headers=None, timestamps_ms=None):
        self.values = _binary_source(values, "values", -1, False)
        self.length = self.values.length
        if keys is not None:
            self.keys = _binary_source(keys, "keys", self.length, False)
        if isinstance(headers, dict):
            self._header_columns = _header_columns(headers, self.length)
        elif headers is not None:
            if not (PyList_CheckExact(headers) or PyTuple_CheckExact(headers)):
                raise TypeError(f"headers must be None, a list or tuple with per row None or "
                                f"a list of (key, value) pairs, or a dict {{key: column}}, "
                                f"not {type(headers).__name__}")
            if len(headers) != self.length:
                raise ValueError(f"headers has {len(headers)} elements, values has "
                                 f"{self.length}")
            self._header_rows = headers
        if timestamps_ms is None:
            self._ts_kind = _TS_NOW
        elif PyList_CheckExact(timestamps_ms) or PyTuple_CheckExact(timestamps_ms):
            if len(timestamps_ms) != self.length:
                raise ValueError(f"timestamps_ms has {len(timestamps_ms)} elements, values "
                                 f"has {self.length}")
            self._ts_kind = _TS_SEQUENCE
            self._ts_sequence = timestamps_ms
        else:
            if _is_pyarrow(timestamps_ms):
                timestamps_ms = _arrow_timestamps_ms(timestamps_ms)
            _borrow_int64s(timestamps_ms, &self._ts_view, self.length)
            self._ts_kind = _TS_INT64

    def __dealloc__(self):
        if self._ts_kind == _TS_INT64:
            PyBuffer_Release(&self._ts_view)

    def __len__(self):
        return self.length

    cdef int64_t _timestamp(self, Py_ssize_t i, int64_t now_ms) except -1:
        cdef int64_t ts
        if self._ts_kind == _TS_NOW:
            return now_ms
        if self._ts_kind == _TS_INT64:
            ts = (<const int64_t *>self._ts_view.buf)[i]
            if ts < 0:
                raise ValueError(f"timestamps_ms[{i}]={ts} is negative; timestamps are "
                                 f"milliseconds since the epoch")
            return ts
        timestamp = _sequence_item(self._ts_sequence, i)
        if timestamp is None:
            return now_ms
        return checked_timestamp_ms(timestamp, "timestamps_ms", i)

    cdef object _headers(self, Py_ssize_t i):
        # What the encoder takes as row i's headers: a list (or None), or the
        # header columns set to row i.
        if self._header_columns is not None:
            self._header_columns.row = i
            return self._header_columns
        if self._header_rows is not None:
            return _sequence_item(self._header_rows, i)
        return None

    cdef Py_ssize_t record_bytes(self, Py_ssize_t i, int32_t offset_delta,
                                 int64_t first_timestamp_ms, int64_t now_ms) except -1:
        # The bytes row i takes when appended at offset_delta to a batch whose
        # first record has first_timestamp_ms (-1: row i would be first): exactly
        # what the encoder writes, but for rows stamped now, which assume the clock
        # has not moved.  Raises what the encoder would raise for the row.
        cdef const unsigned char *k = NULL
        cdef const unsigned char *v
        cdef Py_ssize_t k_len = -1, v_len, headers_bytes = 1, body
        cdef Py_buffer view
        cdef int64_t ts = self._timestamp(i, now_ms)
        if self.keys is not None and self.keys.get(i, &k, &k_len, &view):
            PyBuffer_Release(&view)
        if self.values.get(i, &v, &v_len, &view):
            PyBuffer_Release(&view)
        headers = self._headers(i)
        if headers is not None:
            headers_bytes = _headers_size(headers)
        body = _body_size(k_len, v_len, headers_bytes,
                          0 if first_timestamp_ms < 0 else ts - first_timestamp_ms,
                          offset_delta)
        return nk_uvarint64_size(<uint64_t>body << 1) + body

    def timestamp_ms(self, Py_ssize_t i, int64_t now_ms):
        """Row i's timestamp (now_ms for a row without one)."""
        self._check_row(i)
        return self._timestamp(i, now_ms)

    def record(self, Py_ssize_t i):
        """Row i as (key, value, headers, timestamp_ms) objects, as append() takes
        them: for the one row per batch that goes the per-record way.

        Raises:
            TypeError, ValueError: what the encoder would raise for the row (its
                element named): checked here, before a batch is opened for it.
        """
        self._check_row(i)
        self.record_bytes(i, 0, -1, 0)
        key = None if self.keys is None else self.keys.item(i)
        value = self.values.item(i)
        if self._header_columns is not None:
            headers = [(name, (<BinarySource>column).item(i)) for name, column
                       in zip(self._header_columns.names, self._header_columns.values)]
        else:
            headers = self._headers(i)
        if self._ts_kind == _TS_NOW:
            timestamp = None
        elif self._ts_kind == _TS_INT64:
            timestamp = (<const int64_t *>self._ts_view.buf)[i]
        else:
            timestamp = _sequence_item(self._ts_sequence, i)
        return key, value, headers, timestamp

    cdef int _check_row(self, Py_ssize_t i) except -1:
        if not 0 <= i < self.length:
            raise IndexError(f"row {i} is outside the {self.length} rows")
        return 0


cdef _HeaderColumns _header_columns(dict headers, Py_ssize_t count):
    cdef _HeaderColumns columns = _HeaderColumns.__new__(_HeaderColumns)
    columns.names, columns.values = [], []
    for key, column in headers.items():
        if isinstance(key, str):
            try:
                name = key.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"headers key {key!r} cannot be UTF-8 encoded: {exc}") from None
        elif PyBytes_Check(key):
            name = key
            try:
                name.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"headers key {key!r} is not UTF-8: {exc}") from None
        else:
            raise TypeError(f"headers keys must be str or bytes, not {type(key).__name__}")
        columns.names.append(name)
        columns.values.append(_binary_source(column, f"headers[{key!r}]", count, True))
    return columns
