"""The native Produce response decoder, the one hot decoder of the protocol.

Produce answers come back for every request the sender makes, each naming
every partition it carried, so this decoder is Cython over the checked Reader
(cimported from _reader.pxd: the same checks as every other decoder).  The
request's encoder is here too, for the same reason (see its section).  It
also holds the Produce version numbers, as C constants for itself and as
Python names for produce.py, which negotiates Produce.
"""
cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.memoryview cimport PyMemoryView_FromObject
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t
from libc.string cimport memcpy

from netkafka.protocol._reader cimport Reader

from netkafka.protocol.framing import STRING_MAX_BYTES, Node, wire_string


cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size) except NULL
    bint PyUnicode_IS_ASCII(object text)


cdef enum:
    # Produce versions: v3 is the first to carry RecordBatch v2 (Kafka 0.11) and
    # Kafka 4.x's floor, so the lowest negotiated; v0-v2 carry legacy message sets
    # and are only used when api_version pins them (config.py); v9 the first
    # flexible one, v13 the first to name topics by id.
    PRODUCE_LEGACY_MIN_VERSION = 0
    PRODUCE_MIN_VERSION = 3
    PRODUCE_MAX_VERSION = 13
    # v1 adds throttle_time_ms, v2 log_append_time_ms per partition.
    _PRODUCE_THROTTLE_VERSION = 1
    _PRODUCE_APPEND_TIME_VERSION = 2
    _PRODUCE_FLEXIBLE_VERSION = 9
    _PRODUCE_TOPIC_ID_VERSION = 13
    # Tag of CurrentLeader (per partition) and NodeEndpoints (top level) from v10.
    _PRODUCE_LEADER_TAG = 0
    _PRODUCE_LEADER_TAG_VERSION = 10
    _PRODUCE_API_KEY = 0  # Produce's API key (framing.ApiKey.PRODUCE)


# The same numbers for produce.py.
PRODUCE_VERSIONS = (PRODUCE_MIN_VERSION, PRODUCE_MAX_VERSION)
PRODUCE_LEGACY_VERSIONS = (PRODUCE_LEGACY_MIN_VERSION, PRODUCE_MIN_VERSION - 1)
PRODUCE_FLEXIBLE_VERSION = _PRODUCE_FLEXIBLE_VERSION
PRODUCE_TOPIC_ID_VERSION = _PRODUCE_TOPIC_ID_VERSION


@cython.final
cdef class PartitionProduceResponse:
    """The broker's answer for one partition of a Produce request."""
    cdef readonly int32_t partition           # the partition index
    cdef readonly int16_t error_code          # 0: the batch was written
    cdef readonly int64_t base_offset         # offset of the batch's first record (-1 on error)
    cdef readonly int64_t log_append_time_ms  # broker time if the topic uses LogAppendTime, else -1 (-1 before v2)
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
    cdef readonly int32_t throttle_time_ms  # time the broker throttled this client (quota); 0 in v0
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
        version: the request's version, 0 to 13.

    Returns:
        ProduceResponse.

    Raises:
        ProtocolError: the bytes are not a valid response of that version.
    """
    if not PRODUCE_LEGACY_MIN_VERSION <= version <= PRODUCE_MAX_VERSION:
        raise ValueError(f"Produce v{version} is not supported "
                         f"(v{PRODUCE_LEGACY_MIN_VERSION}..v{PRODUCE_MAX_VERSION})")
    cdef bint flexible = version >= _PRODUCE_FLEXIBLE_VERSION
    cdef Reader r = Reader(data, flexible)
    if flexible:
        r.skip_tagged_fields()  # response header v1

    # Fewest bytes a partition answer / a topic answer takes at this version.
    cdef Py_ssize_t min_partition = 4 + 2 + 8       # index, error, base offset
    if version >= _PRODUCE_APPEND_TIME_VERSION:
        min_partition += 8                           # log append time
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
    cdef Py_ssize_t n_topics = r.required_array_length(min_topic, "responses")
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
        n_partitions = r.required_array_length(min_partition, "partition responses")
        for j in range(n_partitions):
            part = PartitionProduceResponse.__new__(PartitionProduceResponse)
            part.partition = r.read_int32()
            part.error_code = r.read_int16()
            part.base_offset = r.read_int64()
            part.log_append_time_ms = (r.read_int64()
                                       if version >= _PRODUCE_APPEND_TIME_VERSION else -1)
            part.log_start_offset = r.read_int64() if version >= 5 else -1
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
    response.throttle_time_ms = r.read_int32() if version >= _PRODUCE_THROTTLE_VERSION else 0
    if flexible:
        _response_tagged_fields(r, response, version)
    r.expect_end()
    return response


cdef tuple _record_errors(Reader r):
    # Each entry: batch index int32, message (nullable string)[, tagged fields]:
    # at least 6 bytes in either encoding.
    cdef Py_ssize_t n = r.required_array_length(6, "record errors")
    if n == 0:
        return ()  # the common case: no allocation
    cdef list entries = []
    cdef Py_ssize_t i
    cdef int32_t batch_index
    for i in range(n):
        batch_index = r.read_int32()
        message = r.nullable_string()
        if r.flexible:
            r.skip_tagged_fields()
        entries.append((batch_index, message))
    return tuple(entries)


cdef int _partition_tagged_fields(Reader r, PartitionProduceResponse part, int version) except -1:
    cdef Py_ssize_t count = r.tagged_field_count()
    cdef Py_ssize_t i, outer_end
    cdef int64_t tag, size
    for i in range(count):
        tag = r.uvarint()
        size = r.uvarint()
        if tag == _PRODUCE_LEADER_TAG and version >= _PRODUCE_LEADER_TAG_VERSION:
            outer_end = r.enter(size)
            part.leader_id = r.read_int32()     # CurrentLeader: leader id, leader epoch
            part.leader_epoch = r.read_int32()
            r.skip_tagged_fields()
            r.leave(outer_end, "CurrentLeader")
        else:
            r.skip(size)
    return 0


cdef int _response_tagged_fields(Reader r, ProduceResponse response, int version) except -1:
    cdef Py_ssize_t count = r.tagged_field_count()
    cdef Py_ssize_t i, j, n, outer_end
    cdef int64_t tag, size
    for i in range(count):
        tag = r.uvarint()
        size = r.uvarint()
        if tag == _PRODUCE_LEADER_TAG and version >= _PRODUCE_LEADER_TAG_VERSION:
            outer_end = r.enter(size)
            # NodeEndpoints: node id, host, port, rack, tagged fields (>= 11 bytes).
            n = r.required_array_length(11, "node endpoints")
            for j in range(n):
                node_id = r.read_int32()
                host = r.string()
                port = r.read_int32()
                rack = r.nullable_string()
                r.skip_tagged_fields()
                response.node_endpoints.append(Node(node_id, host, port, rack))
            r.leave(outer_end, "NodeEndpoints")
        else:
            r.skip(size)
    return 0


# -- the request ---------------------------------------------------------------------------
#
# Built for every request the sender makes, so native too: in Python the framing
# around the batches took about 45 calls per request (counted on the I/O thread,
# bench/io_thread_probe.py).  The framing goes into small bytearrays between the
# batches' own memoryviews; each append grows its bytearray by what it writes.

cdef char *_extend(bytearray buf, Py_ssize_t n) except NULL:
    """Grows buf by n bytes (amortised, as bytearray grows) and returns where they start."""
    cdef Py_ssize_t size = PyByteArray_GET_SIZE(buf)
    PyByteArray_Resize(buf, size + n)
    return PyByteArray_AS_STRING(buf) + size


cdef int _put_int16(bytearray buf, int16_t value) except -1:
    cdef uint16_t v = <uint16_t>value
    cdef char *p = _extend(buf, 2)
    p[0] = <char>(v >> 8)
    p[1] = <char>v
    return 0


cdef int _put_int32(bytearray buf, int32_t value) except -1:
    cdef uint32_t v = <uint32_t>value
    cdef char *p = _extend(buf, 4)
    p[0] = <char>(v >> 24)
    p[1] = <char>(v >> 16)
    p[2] = <char>(v >> 8)
    p[3] = <char>v
    return 0


cdef int _put_uvarint(bytearray buf, uint32_t value) except -1:
    cdef char tmp[5]
    cdef Py_ssize_t n = 0
    while value >= 0x80:
        tmp[n] = <char>((value & 0x7F) | 0x80)
        value >>= 7
        n += 1
    tmp[n] = <char>value
    memcpy(_extend(buf, n + 1), tmp, n + 1)
    return 0


cdef int _put_length(bytearray buf, bint flexible, Py_ssize_t count) except -1:
    # An array's count or a bytes field's length (never null here): compact in
    # flexible versions (count + 1 as an unsigned varint), int32 before.
    if flexible:
        return _put_uvarint(buf, <uint32_t>(count + 1))
    return _put_int32(buf, <int32_t>count)


cdef int _put_string(bytearray buf, object text, bint compact, str name) except -1:
    """A nullable string; compact: its length as a varint (flexible versions)."""
    cdef const char *data
    cdef Py_ssize_t size
    if text is None:
        return _put_uvarint(buf, 0) if compact else _put_int16(buf, -1)
    if type(text) is not str:
        wire_string(name, text)  # raises TypeError, naming the field
    data = PyUnicode_AsUTF8AndSize(text, &size) if PyUnicode_IS_ASCII(text) else NULL
    if data == NULL:  # not ASCII: the checked way, which names what cannot be sent
        encoded = wire_string(name, text)
        data, size = <const char *>(<bytes>encoded), len(encoded)
        return _put_string_bytes(buf, data, size, compact)
    if size > STRING_MAX_BYTES:
        wire_string(name, text)  # raises IllegalArgumentError with the sizes
    return _put_string_bytes(buf, data, size, compact)


cdef int _put_string_bytes(bytearray buf, const char *data, Py_ssize_t size,
                           bint compact) except -1:
    if compact:
        _put_uvarint(buf, <uint32_t>(size + 1))
    else:
        _put_int16(buf, <int16_t>size)
    memcpy(_extend(buf, size), data, size)
    return 0


cdef object _byte_view(object buffer, object topic, object partition):
    cdef object view = PyMemoryView_FromObject(buffer)
    if not view.contiguous:
        raise ValueError(f"the batch for {topic!r} partition {partition} is not "
                         "a contiguous buffer")
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


def wire_bytes(batch):
    """The bytes a batch as encode_produce_request takes it (a buffer, or a tuple
    of them) puts on the wire."""
    if type(batch) is tuple:
        return sum([memoryview(part).nbytes for part in batch])
    return memoryview(batch).nbytes


def encode_produce_request(int32_t correlation_id, client_id, int version, int acks,
                           int32_t timeout_ms, dict topic_data, transactional_id=None,
                           dict topic_ids=None):
    """Encodes a Produce request (v0..v13) around the batches, without copying them.

    Args:
        correlation_id, client_id, version: as for every request.
        acks: 0 (no response), 1 (leader) or -1 (all in-sync replicas).
        timeout_ms: how long the broker may wait for the replicas (acks=-1).
        topic_data: {topic name: [(partition, batch), ...]}; a batch is any
            contiguous buffer holding sealed RecordBatch bytes (one or more
            batches of that partition) -- a legacy message set for v0..v2 -- or
            a tuple of such buffers, whose bytes in order are the batch's (a
            batch whose large values were not copied: PooledBatch.segments()).
        transactional_id: the transactional id, or None (always before v3).
        topic_ids: {topic name: uuid.UUID}; required from v13, which names
            topics by id (the ids come from Metadata v10+).

    Returns:
        A list of buffers for socket.sendmsg: framing bytearrays, then each
        batch's memory as given (a 1-D byte memoryview of it), with the framing
        between and after.  The first buffer starts with the frame size,
        computed up front.  A batch must not change until the list has been
        written.
    """
    if acks not in (0, 1, -1):
        raise ValueError(f"acks must be 0, 1 or -1 (all), not {acks!r}")
    if version < PRODUCE_MIN_VERSION and transactional_id is not None:
        raise ValueError(f"Produce v{version} has no transactional id (v3+)")
    if not PRODUCE_LEGACY_MIN_VERSION <= version <= PRODUCE_MAX_VERSION:
        raise ValueError(f"Produce v{version} is not supported "
                         f"(v{PRODUCE_LEGACY_MIN_VERSION}..v{PRODUCE_MAX_VERSION})")
    cdef bint by_id = version >= _PRODUCE_TOPIC_ID_VERSION
    if by_id and topic_ids is None:
        raise ValueError(f"Produce v{version} names topics by id: pass topic_ids")
    cdef bint flexible = version >= _PRODUCE_FLEXIBLE_VERSION
    cdef bytearray w = bytearray()
    cdef list buffers = []
    cdef Py_ssize_t total = 0, n_partitions, batch_bytes
    cdef list views
    cdef bytes id_bytes
    _put_int32(w, 0)  # the frame size, filled in at the end
    _put_int16(w, _PRODUCE_API_KEY)
    _put_int16(w, <int16_t>version)
    _put_int32(w, correlation_id)
    # ClientId keeps its int16 length even in header v2 (framing.py says why).
    _put_string(w, client_id, False, "a string field")
    if flexible:
        _extend(w, 1)[0] = 0  # request header tagged fields
    if version >= PRODUCE_MIN_VERSION:
        _put_string(w, transactional_id, flexible, "a string field")
    _put_int16(w, <int16_t>acks)
    _put_int32(w, timeout_ms)
    _put_length(w, flexible, len(topic_data))
    for topic, partitions in topic_data.items():
        if by_id:
            topic_id = topic_ids.get(topic)
            if topic_id is None or topic_id.int == 0:
                raise ValueError(f"Produce v{version} needs the topic id of {topic!r}")
            id_bytes = topic_id.int.to_bytes(16, "big")
            memcpy(_extend(w, 16), <const char *>id_bytes, 16)
        else:
            if topic is None:
                raise ValueError("string may not be None")
            _put_string(w, topic, flexible, "a string field")
        n_partitions = len(partitions)
        _put_length(w, flexible, n_partitions)
        for partition, batch in partitions:
            views = [_byte_view(part, topic, partition) for part in batch] \
                if type(batch) is tuple else [_byte_view(batch, topic, partition)]
            batch_bytes = sum([view.nbytes for view in views])
            _put_int32(w, <int32_t>partition)
            _put_length(w, flexible, batch_bytes)
            buffers.append(w)
            total += PyByteArray_GET_SIZE(w) + batch_bytes
            buffers.extend(views)
            w = bytearray()
            if flexible:
                _extend(w, 1)[0] = 0  # partition tagged fields
        if flexible:
            _extend(w, 1)[0] = 0  # topic tagged fields
    if flexible:
        _extend(w, 1)[0] = 0  # request tagged fields
    if PyByteArray_GET_SIZE(w) or not buffers:
        buffers.append(w)
        total += PyByteArray_GET_SIZE(w)
    total -= 4
    if total > 0x7FFFFFFF:
        raise ValueError(f"Produce request of {total} bytes exceeds the int32 frame size")
    cdef char *head = PyByteArray_AS_STRING(<bytearray>buffers[0])
    cdef uint32_t size = <uint32_t>total
    head[0] = <char>(size >> 24)
    head[1] = <char>(size >> 16)
    head[2] = <char>(size >> 8)
    head[3] = <char>size
    return buffers
