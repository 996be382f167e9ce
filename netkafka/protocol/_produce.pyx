"""The native Produce response decoder, the one hot decoder of the protocol.

Produce answers come back for every request the sender makes, each naming
every partition it carried, so this decoder is Cython over the checked Reader
(cimported from _reader.pxd: the same checks as every other decoder).  It
also holds the Produce version numbers, as C constants for itself and as
Python names for produce.py, which encodes and negotiates Produce.
"""
cimport cython
from libc.stdint cimport int16_t, int32_t, int64_t

from netkafka.protocol._reader cimport Reader

from netkafka.protocol.framing import Node


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
