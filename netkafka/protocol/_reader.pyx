"""Checked reading of Kafka responses: every decoder reads through Reader.

A response is untrusted input.  Reader checks every length and element count
it reads against the bytes that remain *before* using it, so a truncated,
corrupt or hostile response raises ProtocolError: it can neither make us read
out of bounds nor allocate by a size it chose.  The Python decoders (metadata.py,
api_versions.py, ...) and the native Produce decoder (_produce.pyx, which
cimports this class through _reader.pxd) read through the same Reader, so the
checks are written once.

Wire types (big-endian throughout).  Classic versions: strings are an int16
length (-1 = null) + UTF-8, arrays an int32 count (-1 = null).  Flexible
versions: lengths and counts are unsigned varints holding value + 1 (0 = null),
and every struct ends with tagged fields: a count, then per field a tag, a
size and that many bytes.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

import uuid

from netkafka.errors import ProtocolError

_UUID = uuid.UUID

# The UUIDs read, by their bytes: a topic id comes back in every Produce answer, and
# uuid.UUID's constructor is Python (about 70 bytecodes on the I/O thread per answer).
# A cache, so bounded: emptied when full.  Its dict operations are atomic under the GIL.
cdef dict _uuids = {}
cdef Py_ssize_t _UUIDS_MAX = 4096


cdef enum:
    # An unsigned varint of Kafka's (32 bits) takes at most 5 bytes.
    _UVARINT_MAX_BYTES = 5


@cython.final
cdef class Reader:
    """Reads Kafka wire types from one response, never past its end.

    Args:
        data: the response bytes (any contiguous buffer; held, not copied).
        flexible: read compact lengths and tagged fields (flexible versions).

    Every read raises ProtocolError, naming the offset, instead of reading out
    of bounds.  One reader serves one decode on one thread.  Fields: _reader.pxd.
    """

    def __cinit__(self, data, bint flexible):
        PyObject_GetBuffer(data, &self._view, PyBUF_SIMPLE)
        self._has_view = True
        self._data = <const uint8_t *>self._view.buf
        self._pos = 0
        self._end = self._view.len
        self.flexible = flexible

    def __dealloc__(self):
        if self._has_view:
            PyBuffer_Release(&self._view)

    @property
    def position(self):
        """Offset of the next byte to read."""
        return self._pos

    @property
    def remaining(self):
        """Bytes left before the end of the data (or of the tagged field being read)."""
        return self._end - self._pos

    cdef int _truncated(self, Py_ssize_t n) except -1:
        raise ProtocolError(
            f"response truncated: {n} bytes needed at offset {self._pos}, "
            f"{self._end - self._pos} left")

    cpdef int8_t int8(self) except? -1:
        """An int8."""
        self._need(1)
        self._pos += 1
        return <int8_t>self._data[self._pos - 1]

    cpdef bint boolean(self) except -1:
        """A bool (any non-zero byte is true, as Kafka reads it)."""
        self._need(1)
        self._pos += 1
        return self._data[self._pos - 1] != 0

    cpdef int16_t int16(self) except? -1:
        """An int16."""
        return self.read_int16()

    cpdef int32_t int32(self) except? -1:
        """An int32."""
        return self.read_int32()

    cpdef int64_t int64(self) except? -1:
        """An int64."""
        return self.read_int64()

    cpdef int64_t uvarint(self) except -1:
        """An unsigned varint of at most 32 bits (returned as 0 .. 2**32-1)."""
        cdef uint64_t value = 0
        cdef int shift = 0
        cdef uint8_t byte
        cdef Py_ssize_t start = self._pos
        while True:
            if self._pos >= self._end:
                raise ProtocolError(f"response truncated in the varint at offset {start}")
            byte = self._data[self._pos]
            self._pos += 1
            value |= <uint64_t>(byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift >= 7 * _UVARINT_MAX_BYTES:
                raise ProtocolError(f"varint at offset {start} is longer than 5 bytes")
        if value > 0xFFFFFFFF:
            raise ProtocolError(f"varint at offset {start} exceeds 32 bits")
        return <int64_t>value

    cpdef object uuid(self):
        """A UUID (16 bytes), as uuid.UUID; Kafka's "no id" is the zero UUID."""
        self._need(16)
        cdef bytes raw = PyBytes_FromStringAndSize(<const char *>self._data + self._pos, 16)
        self._pos += 16
        known = _uuids.get(raw)
        if known is None:
            if len(_uuids) >= _UUIDS_MAX:
                _uuids.clear()
            known = _uuids[raw] = _UUID(bytes=raw)
        return known

    cdef Py_ssize_t _string_length(self) except -2:
        # A string's byte length (int16 when not flexible), -1 for null.
        return self._length(False, "string")

    cdef Py_ssize_t _array_count(self) except -2:
        # An array's element count (int32 when not flexible), -1 for null.
        return self._length(True, "array")

    cdef Py_ssize_t _length(self, bint int32_width, str what) except -2:
        # Flexible versions write length + 1 as an unsigned varint, others a
        # signed int16 or int32; -1 is null either way, anything lower is refused.
        cdef Py_ssize_t at = self._pos
        cdef int64_t n
        if self.flexible:
            return <Py_ssize_t>(self.uvarint() - 1)
        n = self.int32() if int32_width else self.int16()
        if n < -1:
            raise ProtocolError(f"negative {what} length {n} at offset {at}")
        return <Py_ssize_t>n

    cpdef object nullable_string(self):
        """A UTF-8 string, or None for null."""
        cdef Py_ssize_t n = self._string_length()
        if n < 0:
            return None
        self._need(n)
        cdef const char *start = <const char *>self._data + self._pos
        try:
            text = PyUnicode_DecodeUTF8(start, n, NULL)
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"string at offset {self._pos} is not UTF-8: {exc}") from None
        self._pos += n
        return text

    cpdef str string(self):
        """A UTF-8 string that may not be null."""
        cdef Py_ssize_t at = self._pos
        text = self.nullable_string()
        if text is None:
            raise ProtocolError(f"null string at offset {at} where the field may not be null")
        return text

    cpdef bytes bytes_field(self):
        """A bytes field that may not be null (int32 length when not flexible), copied
        out: SASL tokens, a few hundred bytes."""
        cdef Py_ssize_t at = self._pos
        cdef Py_ssize_t n = self._length(True, "bytes")
        if n < 0:
            raise ProtocolError(f"null bytes at offset {at} where the field may not be null")
        self._need(n)
        cdef bytes data = PyBytes_FromStringAndSize(<const char *>self._data + self._pos, n)
        self._pos += n
        return data

    cpdef Py_ssize_t array_length(self, Py_ssize_t min_item_bytes) except -2:
        """An array's element count, or -1 for a null array.

        Args:
            min_item_bytes: fewest bytes one element takes on the wire (>= 1);
                a count that cannot fit in the bytes left raises ProtocolError.
        """
        if min_item_bytes < 1:
            raise ValueError("min_item_bytes must be at least 1")
        cdef Py_ssize_t at = self._pos
        cdef Py_ssize_t n = self._array_count()
        if n > (self._end - self._pos) // min_item_bytes:
            raise ProtocolError(
                f"array at offset {at} claims {n} elements of at least {min_item_bytes} "
                f"bytes, but only {self._end - self._pos} bytes are left")
        return n

    cpdef Py_ssize_t required_array_length(self, Py_ssize_t min_item_bytes,
                                           str what) except -1:
        """The element count of an array that may not be null.

        Args:
            min_item_bytes: as for array_length.
            what: the array's name for the error message ("brokers").
        """
        cdef Py_ssize_t at = self._pos
        cdef Py_ssize_t n = self.array_length(min_item_bytes)
        if n < 0:
            raise ProtocolError(f"null {what} array at offset {at}")
        return n

    cpdef list int32_array(self):
        """A non-null array of int32, as a list."""
        cdef Py_ssize_t at = self._pos
        cdef Py_ssize_t n = self.array_length(4)
        if n < 0:
            raise ProtocolError(f"null array at offset {at} where the field may not be null")
        cdef list items = []
        cdef Py_ssize_t i
        for i in range(n):
            items.append(self.int32())
        return items

    cpdef int skip_tagged_fields(self) except -1:
        """Skips a tagged-field section: none of its tags is read."""
        cdef Py_ssize_t count = self.tagged_field_count()
        cdef Py_ssize_t i
        for i in range(count):
            self.uvarint()  # tag
            self.skip(self.uvarint())
        return 0

    cpdef dict tagged_field_values(self):
        """Reads a tagged-field section whole: {tag: the field's bytes}, for the
        Python decoders that read a tag (each value parsed with a Reader of its own)."""
        cdef Py_ssize_t count = self.tagged_field_count()
        cdef Py_ssize_t i, size
        cdef dict values = {}
        for i in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            self._need(size)
            values[tag] = PyBytes_FromStringAndSize(<const char *>self._data + self._pos, size)
            self._pos += size
        return values

    cpdef int expect_end(self) except -1:
        """Raises ProtocolError unless every byte has been read."""
        if self._pos != self._end:
            raise ProtocolError(
                f"{self._end - self._pos} unexpected bytes after the response's last field "
                f"(offset {self._pos})")
        return 0

    cdef int skip(self, Py_ssize_t n) except -1:
        self._need(n)
        self._pos += n
        return 0

    cdef Py_ssize_t tagged_field_count(self) except -1:
        # Each tagged field takes at least 2 bytes (tag and size varints).
        cdef Py_ssize_t at = self._pos
        cdef Py_ssize_t count = self.uvarint()
        if count > (self._end - self._pos) // 2:
            raise ProtocolError(
                f"tagged-field section at offset {at} claims {count} fields, "
                f"but only {self._end - self._pos} bytes are left")
        return count

    cdef Py_ssize_t enter(self, Py_ssize_t size) except -1:
        # Limits reads to the next `size` bytes (a tagged field's value);
        # returns the end to restore with leave().
        self._need(size)
        cdef Py_ssize_t outer_end = self._end
        self._end = self._pos + size
        return outer_end

    cdef int leave(self, Py_ssize_t outer_end, str what) except -1:
        # A known tagged field must be read exactly: leftover bytes mean we
        # misread it.
        if self._pos != self._end:
            raise ProtocolError(
                f"tagged field {what} has {self._end - self._pos} bytes left after its "
                f"last field (offset {self._pos})")
        self._end = outer_end
        return 0
