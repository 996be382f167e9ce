"""Checked reading of Kafka responses, and the native Produce response decoder.

A response is untrusted input.  Reader checks every length and element count
it reads against the bytes that remain *before* using it, so a truncated,
corrupt or hostile response raises ProtocolError: it can neither make us read
out of bounds nor allocate by a size it chose.  protocol.py's decoders read
through the same Reader, so the checks are written once.

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


cdef enum:
    # Produce versions this decoder knows: v3 is Kafka 4.x's floor (RecordBatch
    # v2), v9 the first flexible one, v13 the first to name topics by id.
    PRODUCE_MIN_VERSION = 3
    PRODUCE_MAX_VERSION = 13
    _PRODUCE_FLEXIBLE_VERSION = 9
    _PRODUCE_TOPIC_ID_VERSION = 13
    # Tag of CurrentLeader (per partition) and NodeEndpoints (top level) from v10.
    _PRODUCE_LEADER_TAG = 0
    _PRODUCE_LEADER_TAG_VERSION = 10
    # An unsigned varint of Kafka's (32 bits) takes at most 5 bytes.
    _UVARINT_MAX_BYTES = 5


# The same numbers for protocol.py, which negotiates and encodes Produce.
PRODUCE_VERSIONS = (PRODUCE_MIN_VERSION, PRODUCE_MAX_VERSION)
PRODUCE_FLEXIBLE_VERSION = _PRODUCE_FLEXIBLE_VERSION
PRODUCE_TOPIC_ID_VERSION = _PRODUCE_TOPIC_ID_VERSION


cdef inline uint32_t _load_be32(const uint8_t *p) noexcept nogil:
    return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16)
            | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


@cython.final
cdef class Reader:
    """Reads Kafka wire types from one response, never past its end.

    Args:
        data: the response bytes (any contiguous buffer; held, not copied).
        flexible: read compact lengths and tagged fields (flexible versions).

    Every read raises ProtocolError, naming the offset, instead of reading out
    of bounds.  One reader serves one decode on one thread.
    """
    cdef Py_buffer _view            # the response bytes, held while the reader lives
    cdef bint _has_view             # _view was acquired and must be released
    cdef const uint8_t *_data       # first byte of the response
    cdef Py_ssize_t _pos            # offset of the next byte to read
    cdef Py_ssize_t _end            # reads stop here: the data's end, or the end of the tagged field being read
    cdef public bint flexible       # compact lengths and tagged fields (flexible versions)

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

    cdef int _need(self, Py_ssize_t n) except -1:
        if n < 0 or n > self._end - self._pos:
            raise ProtocolError(
                f"response truncated: {n} bytes needed at offset {self._pos}, "
                f"{self._end - self._pos} left")
        return 0

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
        self._need(2)
        cdef const uint8_t *p = self._data + self._pos
        self._pos += 2
        return <int16_t>((<uint32_t>p[0] << 8) | <uint32_t>p[1])

    cpdef int32_t int32(self) except? -1:
        """An int32."""
        self._need(4)
        cdef uint32_t v = _load_be32(self._data + self._pos)
        self._pos += 4
        return <int32_t>v

    cpdef int64_t int64(self) except? -1:
        """An int64."""
        self._need(8)
        cdef uint64_t v = ((<uint64_t>_load_be32(self._data + self._pos) << 32)
                           | _load_be32(self._data + self._pos + 4))
        self._pos += 8
        return <int64_t>v

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
        return _UUID(bytes=raw)

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
        cdef Py_ssize_t count = self._tagged_field_count()
        cdef Py_ssize_t i
        for i in range(count):
            self.uvarint()  # tag
            self._skip(self.uvarint())
        return 0

    cpdef int expect_end(self) except -1:
        """Raises ProtocolError unless every byte has been read."""
        if self._pos != self._end:
            raise ProtocolError(
                f"{self._end - self._pos} unexpected bytes after the response's last field "
                f"(offset {self._pos})")
        return 0

    cdef int _skip(self, Py_ssize_t n) except -1:
        self._need(n)
        self._pos += n
        return 0

    cdef Py_ssize_t _tagged_field_count(self) except -1:
        # Each tagged field takes at least 2 bytes (tag and size varints).
        cdef Py_ssize_t at = self._pos
        cdef Py_ssize_t count = self.uvarint()
        if count > (self._end - self._pos) // 2:
            raise ProtocolError(
                f"tagged-field section at offset {at} claims {count} fields, "
                f"but only {self._end - self._pos} bytes are left")
        return count

    cdef Py_ssize_t _enter(self, Py_ssize_t size) except -1:
        # Limits reads to the next `size` bytes (a tagged field's value);
        # returns the end to restore with _leave().
        self._need(size)
        cdef Py_ssize_t outer_end = self._end
        self._end = self._pos + size
        return outer_end

    cdef int _leave(self, Py_ssize_t outer_end, str what) except -1:
        # A known tagged field must be read exactly: leftover bytes mean we
        # misread it.
        if self._pos != self._end:
            raise ProtocolError(
                f"tagged field {what} has {self._end - self._pos} bytes left after its "
                f"last field (offset {self._pos})")
        self._end = outer_end
        return 0


@cython.final
cdef class Node:
    """A broker's address as a response names it (Metadata brokers, Produce NodeEndpoints)."""
    cdef readonly int32_t node_id   # the broker's id
    cdef readonly str host          # host name or address its listener advertises
    cdef readonly int32_t port      # that listener's port
    cdef readonly object rack       # its rack (str), or None if unassigned

    def __init__(self, int32_t node_id, str host, int32_t port, rack=None):
        self.node_id = node_id
        self.host = host
        self.port = port
        self.rack = rack

    def __eq__(self, other):
        if not isinstance(other, Node):
            return NotImplemented
        cdef Node o = <Node>other
        return (self.node_id == o.node_id and self.host == o.host
                and self.port == o.port and self.rack == o.rack)

    def __hash__(self):
        return hash((self.node_id, self.host, self.port, self.rack))

    def __repr__(self):
        return f"Node(node_id={self.node_id}, host={self.host!r}, port={self.port}, rack={self.rack!r})"


@cython.final
cdef class PartitionProduceResponse:
    """The broker's answer for one partition of a Produce request."""
    cdef readonly int32_t partition           # the partition index
    cdef readonly int16_t error_code          # 0: the batch was written
    cdef readonly int64_t base_offset         # offset of the batch's first record (-1 on error)
    cdef readonly int64_t log_append_time_ms  # broker time if the topic uses LogAppendTime, else -1
    cdef readonly int64_t log_start_offset    # the partition's log start offset (-1 before v5)
    cdef readonly tuple record_errors         # (batch_index, message or None) of records that failed the batch (v8+)
    cdef readonly object error_message        # the broker's words on error_code (v8+), or None
    cdef readonly int32_t leader_id           # with NOT_LEADER_OR_FOLLOWER: the new leader (v10+), else -1
    cdef readonly int32_t leader_epoch        # that leader's epoch, else -1

    def __repr__(self):
        return (f"PartitionProduceResponse(partition={self.partition}, "
                f"error_code={self.error_code}, base_offset={self.base_offset}, "
                f"log_append_time_ms={self.log_append_time_ms}, "
                f"log_start_offset={self.log_start_offset}, "
                f"record_errors={self.record_errors!r}, error_message={self.error_message!r}, "
                f"leader_id={self.leader_id}, leader_epoch={self.leader_epoch})")


@cython.final
cdef class TopicProduceResponse:
    """The broker's answers for the partitions of one topic."""
    cdef readonly object name        # topic name (str); None from v13, which names topics by id
    cdef readonly object topic_id    # topic id (uuid.UUID) from v13; None before
    cdef readonly list partitions    # PartitionProduceResponse, in the broker's order

    def __repr__(self):
        return (f"TopicProduceResponse(name={self.name!r}, topic_id={self.topic_id!r}, "
                f"partitions={self.partitions!r})")


@cython.final
cdef class ProduceResponse:
    """A decoded Produce response."""
    cdef readonly list topics             # TopicProduceResponse, in the broker's order
    cdef readonly int32_t throttle_time_ms  # time the broker throttled this client (quota)
    cdef readonly list node_endpoints     # Node of each new leader named by leader_id (v10+)

    def __repr__(self):
        return (f"ProduceResponse(topics={self.topics!r}, "
                f"throttle_time_ms={self.throttle_time_ms}, "
                f"node_endpoints={self.node_endpoints!r})")


def decode_produce_response(data, int version):
    """Decodes a Produce response.

    Args:
        data: the response after its correlation id (the connection has matched
            that), i.e. from the header's tagged fields (flexible versions) on.
        version: the request's version, 3 to 13.

    Returns:
        ProduceResponse.

    Raises:
        ProtocolError: the bytes are not a valid response of that version.
    """
    if not PRODUCE_MIN_VERSION <= version <= PRODUCE_MAX_VERSION:
        raise ValueError(f"Produce v{version} is not supported "
                         f"(v{PRODUCE_MIN_VERSION}..v{PRODUCE_MAX_VERSION})")
    cdef bint flexible = version >= _PRODUCE_FLEXIBLE_VERSION
    cdef Reader r = Reader(data, flexible)
    if flexible:
        r.skip_tagged_fields()  # response header v1

    # Fewest bytes a partition answer / a topic answer takes at this version.
    cdef Py_ssize_t min_partition = 4 + 2 + 8 + 8   # index, error, base offset, append time
    if version >= 5:
        min_partition += 8                           # log start offset
    if version >= 8:
        min_partition += 2 if flexible else 6        # record errors count, error message length
    if flexible:
        min_partition += 1                           # tagged fields
    cdef Py_ssize_t min_topic = (16 if version >= _PRODUCE_TOPIC_ID_VERSION
                                 else 1 if flexible else 2)
    min_topic += 1 if flexible else 4                # partition count
    if flexible:
        min_topic += 1                               # tagged fields

    cdef ProduceResponse response = ProduceResponse.__new__(ProduceResponse)
    response.topics = []
    response.node_endpoints = []
    cdef Py_ssize_t n_topics = _required_array(r, min_topic, "responses")
    cdef Py_ssize_t i, j, n_partitions
    cdef TopicProduceResponse topic
    cdef PartitionProduceResponse part
    for i in range(n_topics):
        topic = TopicProduceResponse.__new__(TopicProduceResponse)
        if version >= _PRODUCE_TOPIC_ID_VERSION:
            topic.topic_id = r.uuid()
        else:
            topic.name = r.string()
        topic.partitions = []
        n_partitions = _required_array(r, min_partition, "partition responses")
        for j in range(n_partitions):
            part = PartitionProduceResponse.__new__(PartitionProduceResponse)
            part.partition = r.int32()
            part.error_code = r.int16()
            part.base_offset = r.int64()
            part.log_append_time_ms = r.int64()
            part.log_start_offset = r.int64() if version >= 5 else -1
            part.record_errors = _record_errors(r) if version >= 8 else ()
            part.error_message = r.nullable_string() if version >= 8 else None
            part.leader_id = -1
            part.leader_epoch = -1
            if flexible:
                _partition_tagged_fields(r, part, version)
            topic.partitions.append(part)
        if flexible:
            r.skip_tagged_fields()
        response.topics.append(topic)
    response.throttle_time_ms = r.int32()
    if flexible:
        _response_tagged_fields(r, response, version)
    r.expect_end()
    return response


cdef Py_ssize_t _required_array(Reader r, Py_ssize_t min_item_bytes, str what) except -1:
    cdef Py_ssize_t at = r._pos
    cdef Py_ssize_t n = r.array_length(min_item_bytes)
    if n < 0:
        raise ProtocolError(f"null {what} array at offset {at}")
    return n


cdef tuple _record_errors(Reader r):
    # Each entry: batch index int32, message (nullable string)[, tagged fields]:
    # at least 6 bytes in either encoding.
    cdef Py_ssize_t n = _required_array(r, 6, "record errors")
    if n == 0:
        return ()  # the common case: no allocation
    cdef list entries = []
    cdef Py_ssize_t i
    cdef int32_t batch_index
    for i in range(n):
        batch_index = r.int32()
        message = r.nullable_string()
        if r.flexible:
            r.skip_tagged_fields()
        entries.append((batch_index, message))
    return tuple(entries)


cdef int _partition_tagged_fields(Reader r, PartitionProduceResponse part, int version) except -1:
    cdef Py_ssize_t count = r._tagged_field_count()
    cdef Py_ssize_t i, outer_end
    cdef int64_t tag, size
    for i in range(count):
        tag = r.uvarint()
        size = r.uvarint()
        if tag == _PRODUCE_LEADER_TAG and version >= _PRODUCE_LEADER_TAG_VERSION:
            outer_end = r._enter(size)
            part.leader_id = r.int32()     # CurrentLeader: leader id, leader epoch
            part.leader_epoch = r.int32()
            r.skip_tagged_fields()
            r._leave(outer_end, "CurrentLeader")
        else:
            r._skip(size)
    return 0


cdef int _response_tagged_fields(Reader r, ProduceResponse response, int version) except -1:
    cdef Py_ssize_t count = r._tagged_field_count()
    cdef Py_ssize_t i, j, n, outer_end
    cdef int64_t tag, size
    for i in range(count):
        tag = r.uvarint()
        size = r.uvarint()
        if tag == _PRODUCE_LEADER_TAG and version >= _PRODUCE_LEADER_TAG_VERSION:
            outer_end = r._enter(size)
            # NodeEndpoints: node id, host, port, rack, tagged fields (>= 11 bytes).
            n = _required_array(r, 11, "node endpoints")
            for j in range(n):
                node_id = r.int32()
                host = r.string()
                port = r.int32()
                rack = r.nullable_string()
                r.skip_tagged_fields()
                response.node_endpoints.append(Node(node_id, host, port, rack))
            r._leave(outer_end, "NodeEndpoints")
        else:
            r._skip(size)
    return 0
