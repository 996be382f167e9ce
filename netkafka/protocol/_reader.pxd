# The checked reader of Kafka responses, cimported by the native decoders (see
# _reader.pyx for the wire types and the checking rule).

cimport cython
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef inline uint32_t _load_be32(const uint8_t *p) noexcept nogil:
    return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16)
            | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


@cython.final
cdef class Reader:
    cdef Py_buffer _view            # the response bytes, held while the reader lives
    cdef bint _has_view             # _view was acquired and must be released
    cdef const uint8_t *_data       # first byte of the response
    cdef Py_ssize_t _pos            # offset of the next byte to read
    cdef Py_ssize_t _end            # reads stop here: the data's end, or the end of the tagged field being read
    cdef public bint flexible       # compact lengths and tagged fields (flexible versions)

    # The bounds check and the fixed-width reads are defined here, inline, so that
    # they compile into a cimporting decoder as a few loads and one compare (the
    # cpdef int16/int32/int64 give them to Python); _truncated raises, out of line.
    cdef int _truncated(self, Py_ssize_t n) except -1

    cdef inline int _need(self, Py_ssize_t n) except -1:
        if n < 0 or n > self._end - self._pos:
            return self._truncated(n)
        return 0

    cdef inline int16_t read_int16(self) except? -1:
        self._need(2)
        cdef const uint8_t *p = self._data + self._pos
        self._pos += 2
        return <int16_t>((<uint32_t>p[0] << 8) | <uint32_t>p[1])

    cdef inline int32_t read_int32(self) except? -1:
        self._need(4)
        cdef uint32_t v = _load_be32(self._data + self._pos)
        self._pos += 4
        return <int32_t>v

    cdef inline int64_t read_int64(self) except? -1:
        self._need(8)
        cdef uint64_t v = ((<uint64_t>_load_be32(self._data + self._pos) << 32)
                           | _load_be32(self._data + self._pos + 4))
        self._pos += 8
        return <int64_t>v

    cpdef int8_t int8(self) except? -1
    cpdef bint boolean(self) except -1
    cpdef int16_t int16(self) except? -1
    cpdef int32_t int32(self) except? -1
    cpdef int64_t int64(self) except? -1
    cpdef int64_t uvarint(self) except -1
    cpdef object uuid(self)
    cdef Py_ssize_t _string_length(self) except -2
    cdef Py_ssize_t _array_count(self) except -2
    cdef Py_ssize_t _length(self, bint int32_width, str what) except -2
    cpdef object nullable_string(self)
    cpdef str string(self)
    cpdef bytes bytes_field(self)
    cpdef Py_ssize_t array_length(self, Py_ssize_t min_item_bytes) except -2
    cpdef Py_ssize_t required_array_length(self, Py_ssize_t min_item_bytes, str what) except -1
    cpdef list int32_array(self)
    cpdef int skip_tagged_fields(self) except -1
    cpdef dict tagged_field_values(self)
    cpdef int expect_end(self) except -1

    # For decoders that read some tagged fields (the native Produce decoder):
    # skip n bytes; the count of a tagged-field section, checked against the
    # bytes left; enter(size) limits reads to one field's value and returns the
    # end to give back to leave(), which checks the value was read exactly.
    cdef int skip(self, Py_ssize_t n) except -1
    cdef Py_ssize_t tagged_field_count(self) except -1
    cdef Py_ssize_t enter(self, Py_ssize_t size) except -1
    cdef int leave(self, Py_ssize_t outer_end, str what) except -1
