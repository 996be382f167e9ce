# RecordBatch v2 (magic 2) layout: the header's field offsets and the size of a record,
# as enums and inline functions.  No module stands behind this file (a C header, in
# effect): cimporting it imports nothing at run time, so the column readers (Rows sizes
# a row as it would be encoded) and send_batch()'s batch planner (producer/_batch_send)
# count bytes exactly as the builder (_batch.pyx, which draws the layout) writes them,
# without depending on it.

from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.string cimport memcpy

from netkafka.csrc cimport nk_uvarint64_size, nk_varlong_size, nk_write_uvarint64


cdef enum:
    # Byte offsets of the batch header fields.
    _BASE_OFFSET = 0
    _BATCH_LENGTH = 8
    _LEADER_EPOCH = 12
    _MAGIC = 16
    _CRC = 17
    _ATTRIBUTES = 21
    _LAST_OFFSET_DELTA = 23
    _FIRST_TIMESTAMP = 27
    _MAX_TIMESTAMP = 35
    _PRODUCER_ID = 43
    _PRODUCER_EPOCH = 51
    _BASE_SEQUENCE = 53
    _RECORD_COUNT = 57
    # Bytes of the header, before the records.
    HEADER_SIZE_BYTES = 61
    # Bytes counted by the batch length field start after it.
    _LENGTH_EXCLUDED = 12
    # Upper bound of a record's bytes besides key, value and headers: length varint
    # (5), attributes (1), timestamp delta varlong (10), offset delta varint (5).
    _RECORD_OVERHEAD_MAX = 21
    # The smallest record: 1-byte length, attributes, delta 0, offset delta < 64,
    # null key, null value, no headers.
    _RECORD_MIN_BYTES = 7


cdef inline Py_ssize_t _nullable_size(Py_ssize_t length) noexcept:
    # Null is the varint -1 (one byte); lengths above INT32_MAX are rejected later
    # by the size limits, and 64-bit sizing keeps this exact meanwhile.
    if length < 0:
        return 1
    return nk_uvarint64_size(<uint64_t>length << 1) + length


cdef inline Py_ssize_t _body_size(Py_ssize_t key_len, Py_ssize_t value_len,
                                  Py_ssize_t headers_bytes, int64_t ts_delta,
                                  int32_t offset_delta) noexcept:
    # A record's bytes after its length varint: attributes, the two deltas, key,
    # value, headers.  The encoder writes exactly this; Rows.record_bytes plans with it.
    return (1 + nk_varlong_size(ts_delta) + nk_uvarint64_size(<uint64_t>offset_delta << 1)
            + _nullable_size(key_len) + _nullable_size(value_len) + headers_bytes)


cdef inline unsigned char *_write_nullable(unsigned char *p, const unsigned char *data,
                                           Py_ssize_t length) noexcept:
    if length < 0:
        p[0] = 1  # zigzag varint of -1
        return p + 1
    p = nk_write_uvarint64(p, <uint64_t>length << 1)
    memcpy(p, data, length)
    return p + length
