"""Legacy message sets: message format v0 and v1, for brokers older than 0.11.

The legacy twin of _batch.RecordBatchBuilder, with the same life cycle and pooled
buffers: records are encoded straight into a buffer from a BufferPool; seal()
compresses (if a codec is set) and exports the set read-only. One entry, integers
big-endian:

    offset      int64   index in the set: 0, 1, ... (the broker assigns real offsets;
                        inside a compressed v1 set these are the relative offsets)
    size        int32   bytes after this field
    crc         uint32  CRC32 (IEEE) from magic to the end of the value
    magic       int8    0 or 1
    attributes  int8    bits 0-2 codec, bit 3 timestamp type (always CreateTime, 0)
    timestamp   int64   v1 only: ms since the epoch, -1 for none
    key         int32 length (-1 for null), then the bytes
    value       int32 length (-1 for null), then the bytes

A compressed set is one wrapper entry, as the Java producer writes it: offset = the
last inner offset, the codec in its attributes, timestamp (v1) = the largest inner
timestamp, null key, and as value the codec's output over the inner entries. When
compressing does not make the set smaller the inner entries go out as they are (as
librdkafka does), so a sealed set is never larger than its uncompressed form.

What legacy readers accept, and so what is written:
  gzip    gzip (RFC 1952) format: Java reads it with GZIPInputStream.
  snappy  one raw snappy block. The Java producer wrote xerial framing, but its
          reader (snappy-java's SnappyInputStream) takes a raw block when the xerial
          header is absent, and librdkafka has always written raw blocks here.
  lz4     LZ4 frame with independent blocks (Kafka's LZ4 reader rejects linked
          ones). For magic 0 the header checksum also covers the frame's magic number
          (KAFKA-1493): 0.8/0.9 brokers verify that value and 0.10+ skip the check
          for magic 0; and there is no content-size field, unknown to 0.8/0.9
          readers. Magic 1 frames are standard (KAFKA-3160, Kafka 0.10).
  zstd    not in v0/v1 (it needs RecordBatch v2 and Kafka 2.1): ValueError.

Life of a set: _pool.PooledBatch's, the base of both builders (OPEN -> seal() ->
SEALED -> mark_acknowledged() / mark_failed() -> DONE -> release() -> RELEASED), so
also its rule for a full pool at seal(): the set goes uncompressed.
The entries' CRCs are filled in by seal(), in one pass with the GIL released for a
large set, so that append() stays cheap on the caller's thread.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.number cimport PyIndex_Check
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memcpy
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from netkafka.record._compression cimport CODEC_LZ4, CODEC_NONE, CODEC_ZSTD, Compressor
from netkafka.record._pool cimport BATCH_OPEN, PooledBatch, PooledBuffer, check_max_request_size
from netkafka.csrc cimport nk_crc32, nk_store_be32, nk_store_be64

from netkafka.errors import RecordTooLargeError


cdef enum:
    # Offsets in an entry, and sizes.
    _SIZE = 8
    _CRC = 12
    _MAGIC = 16
    _LENGTH_EXCLUDED = 12       # offset and size: the bytes the size field does not count
    _HEAD_BYTES_V0 = 18         # bytes before the key length
    _HEAD_BYTES_V1 = 26
    _LENGTH_FIELDS = 8          # key length and value length
    _NO_TIMESTAMP = -1
    # Below this a CRC takes less time than giving up and retaking the GIL.
    _CRC_NOGIL_MIN_BYTES = 64 * 1024

cdef enum:
    # LZ4 frame header (little-endian) without optional fields: magic, FLG, BD, HC.
    _LZ4_FRAME_MAGIC = 0x184D2204
    _LZ4_FLG_DICT_ID = 0x01
    _LZ4_FLG_CONTENT_SIZE = 0x08
    _LZ4_FLG_BLOCK_INDEPENDENT = 0x20
    _LZ4_DESCRIPTOR_END = 6     # magic, FLG, BD: what the magic-0 checksum covers
    _LZ4_HEADER_BYTES = 7


cdef inline int64_t _now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef int64_t _timestamp_arg(object timestamp_ms) except -2:
    # Java's rule for v1 (LegacyRecord): -1 (none) or not negative.  Integers only
    # (numpy's through __index__): a float would be truncated without a word.
    cdef int overflow = 0
    cdef long long ts
    if not PyIndex_Check(timestamp_ms):
        raise TypeError(f"timestamp_ms must be an int (milliseconds since the epoch) or "
                        f"None, not {type(timestamp_ms).__name__}")
    ts = PyLong_AsLongLongAndOverflow(timestamp_ms, &overflow)
    if overflow or ts < _NO_TIMESTAMP:
        raise ValueError(f"timestamp_ms must be -1 (none) or in [0, 2**63 - 1], "
                         f"got {timestamp_ms!r}")
    return ts


cdef int _borrow(object obj, Py_buffer *view, str name) except -1:
    # obj's bytes into view; None (Kafka's null) gives len -1 and holds nothing.  On
    # failure view is left as it was, so the caller can release it either way.
    cdef Py_buffer acquired
    if obj is None:
        view.buf = NULL
        view.len = -1
        return 0
    if not PyObject_CheckBuffer(obj):
        raise TypeError(f"{name} must be bytes, bytearray, memoryview or None, "
                        f"not {type(obj).__name__}")
    PyObject_GetBuffer(obj, &acquired, PyBUF_SIMPLE)
    view[0] = acquired
    return 0


cdef inline void _give_back_view(Py_buffer *view) noexcept:
    if view.len >= 0:
        PyBuffer_Release(view)


cdef inline unsigned char *_start_entry(
        unsigned char *entry, int magic, int64_t offset, Py_ssize_t entry_bytes,
        int attributes, int64_t timestamp_ms) noexcept nogil:
    # Writes an entry up to its key length and returns where that goes; the CRC is
    # filled in at seal() (_checksum_set).
    cdef unsigned char *p = nk_store_be64(entry, offset)
    p = nk_store_be32(p, <int32_t>(entry_bytes - _LENGTH_EXCLUDED)) + 4
    p[0] = <unsigned char>magic
    p[1] = <unsigned char>attributes
    p += 2
    if magic == 1:
        p = nk_store_be64(p, timestamp_ms)
    return p


cdef void _checksum_entries(unsigned char *p, Py_ssize_t length) noexcept nogil:
    # Fills in the CRC of every entry of p[0:length].  Only ever given entries this
    # module wrote, so their size fields are trusted.
    cdef const unsigned char *end = p + length
    cdef Py_ssize_t entry_bytes
    while p < end:
        entry_bytes = _LENGTH_EXCLUDED + <int32_t>(
            (<uint32_t>p[_SIZE] << 24) | (<uint32_t>p[_SIZE + 1] << 16)
            | (<uint32_t>p[_SIZE + 2] << 8) | p[_SIZE + 3])
        nk_store_be32(p + _CRC, <int32_t>nk_crc32(0, p + _MAGIC, <size_t>(entry_bytes - _MAGIC)))
        p += entry_bytes


cdef void _checksum_set(unsigned char *p, Py_ssize_t length) noexcept:
    if length < _CRC_NOGIL_MIN_BYTES:
        _checksum_entries(p, length)
    else:
        with nogil:
            _checksum_entries(p, length)


cdef uint32_t _xxh32_short(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    # XXH32, seed 0, for n < 16 (no 16-byte stripes): the LZ4 header checksum below
    # only ever hashes 6 bytes.
    cdef uint32_t P1 = 2654435761u, P2 = 2246822519u, P3 = 3266489917u
    cdef uint32_t P4 = 668265263u, P5 = 374761393u
    cdef uint32_t h = P5 + <uint32_t>n
    while n >= 4:
        h += (p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
              | (<uint32_t>p[3] << 24)) * P3
        h = ((h << 17) | (h >> 15)) * P4
        p += 4
        n -= 4
    while n > 0:
        h += p[0] * P5
        h = ((h << 11) | (h >> 21)) * P1
        p += 1
        n -= 1
    h ^= h >> 15
    h *= P2
    h ^= h >> 13
    h *= P3
    h ^= h >> 16
    return h


cdef int _frame_lz4_for_magic0(unsigned char *frame, Py_ssize_t length) except -1:
    # Sets the header checksum of a standard LZ4 frame the way 0.8/0.9 brokers check
    # it in magic-0 sets: over magic, FLG and BD (KAFKA-1493).  Those brokers also
    # know no content-size field and no dictionary id, and Kafka reads independent
    # blocks only: the Compressor writes frames so; check, rather than send a set
    # no broker could read.
    cdef uint32_t magic
    cdef unsigned char flg
    if length < _LZ4_HEADER_BYTES:
        raise RuntimeError(f"the lz4 compressor returned {length} bytes, not a frame")
    magic = (frame[0] | (<uint32_t>frame[1] << 8) | (<uint32_t>frame[2] << 16)
             | (<uint32_t>frame[3] << 24))
    flg = frame[4]
    if (magic != _LZ4_FRAME_MAGIC or flg & (_LZ4_FLG_DICT_ID | _LZ4_FLG_CONTENT_SIZE)
            or not flg & _LZ4_FLG_BLOCK_INDEPENDENT):
        raise RuntimeError("the lz4 compressor wrote a frame 0.8/0.9 brokers cannot read "
                           "(they need independent blocks, no content size, no "
                           "dictionary id)")
    frame[_LZ4_DESCRIPTOR_END] = <unsigned char>(
        _xxh32_short(frame, _LZ4_DESCRIPTOR_END) >> 8)
    return 0


@cython.final
@cython.no_gc_clear
cdef class LegacyMessageSetBuilder(PooledBatch):
    """Builds one legacy message set (format v0 or v1) in a pooled buffer, then
    exports it read-only (seal, completion and release: _pool.PooledBatch).

    Args:
        magic: 0 (brokers 0.8/0.9) or 1 (0.10, adds timestamps).
        buffer: a PooledBuffer from the pool the set's memory comes from and goes
            back to; the builder owns it from now on.
        batch_size_bytes: appends stop (return -1) once the next record would take
            the set past this size (uncompressed, with the wrapper's own bytes when
            a codec is set) -- except the first record, always taken.
        max_request_size_bytes: hard cap on a set holding a single record.
        compressor: a netkafka.record._compression.Compressor (gzip, snappy or lz4), or None.
    """

    def __cinit__(self, int magic, PooledBuffer buffer not None, Py_ssize_t batch_size_bytes,
                  Py_ssize_t max_request_size_bytes, Compressor compressor=None):
        cdef Py_ssize_t smallest_set_bytes
        if magic != 0 and magic != 1:
            raise ValueError(f"legacy message sets are magic 0 or 1, got {magic}")
        if compressor is not None and compressor.codec == CODEC_ZSTD:
            raise ValueError("zstd is not available in message format v0/v1 "
                             "(it needs RecordBatch v2, Kafka 2.1+)")
        if compressor is not None and compressor.codec == CODEC_NONE:
            compressor = None  # nothing to compress: no wrapper either
        self.magic = magic
        self._head_bytes = _HEAD_BYTES_V0 if magic == 0 else _HEAD_BYTES_V1
        self._wrapper_bytes = 0 if compressor is None else self._head_bytes + _LENGTH_FIELDS
        smallest_set_bytes = self._wrapper_bytes + self._head_bytes + _LENGTH_FIELDS
        if batch_size_bytes < smallest_set_bytes:
            raise ValueError(f"batch_size_bytes={batch_size_bytes} cannot hold a "
                             f"{smallest_set_bytes}-byte set of one empty v{magic} message")
        check_max_request_size(batch_size_bytes, max_request_size_bytes)
        self._claim(buffer, "set", batch_size_bytes - self._wrapper_bytes)
        self.batch_size_bytes = batch_size_bytes
        self.max_request_size_bytes = max_request_size_bytes
        self._compressor = compressor
        self.codec = CODEC_NONE if compressor is None else compressor.codec
        self._max_timestamp_ms = _NO_TIMESTAMP

    # -- appending ------------------------------------------------------------------

    def append(self, key, value, headers=None, timestamp_ms=None):
        """Encode one record at the end of the set.

        Args:
            key, value: bytes, bytearray, memoryview (contiguous) or None.
            headers: None or empty: v0/v1 messages have no headers.
            timestamp_ms: v1: milliseconds since the epoch, or -1 for none; None:
                now.  v0 has no timestamp field: must be None.

        Returns:
            The record's offset in the set (0 for the first), or -1 if it does not
            fit batch_size_bytes: nothing was written, open a new set.

        Raises:
            ValueError: headers given, a timestamp for v0 or out of range, or a first
                record that alone exceeds max_request_size_bytes.
            TypeError: key, value or timestamp_ms of a type not listed above.
            BatchStateError: the set is sealed.
            BufferPoolExhausted: the first record is larger than the buffer and the
                pool has no room for a larger one now.
        """
        cdef Py_buffer k, v
        cdef int64_t ts = _NO_TIMESTAMP
        cdef Py_ssize_t entry_bytes
        cdef unsigned char *entry
        cdef unsigned char *p
        if self._state != BATCH_OPEN:
            self._state_error("append to")
        if headers:
            raise ValueError(f"message format v{self.magic} has no record headers "
                             f"(they need RecordBatch v2, Kafka 0.11+)")
        if self.magic == 0:
            if timestamp_ms is not None:
                raise ValueError("message format v0 has no timestamp field: "
                                 "timestamp_ms must be None")
        elif timestamp_ms is None:
            ts = _now_ms()
        else:
            ts = _timestamp_arg(timestamp_ms)
        k.len = -1  # holds nothing yet: _give_back_view() is safe whatever happens
        v.len = -1
        try:
            _borrow(key, &k, "key")
            _borrow(value, &v, "value")
            entry_bytes = (self._head_bytes + _LENGTH_FIELDS
                           + (k.len if k.len > 0 else 0) + (v.len if v.len > 0 else 0))
            if self._pos_bytes + entry_bytes > self._end_bytes:
                if self._record_count == 0:
                    self._make_room_for_first(entry_bytes)
                elif not self._make_room(entry_bytes):
                    return -1
            # Room is checked: nothing below can fail or leave the set half-written.
            entry = self._data + self._pos_bytes
            p = _start_entry(entry, self.magic, self._record_count, entry_bytes, 0, ts)
            p = nk_store_be32(p, <int32_t>k.len)
            if k.len > 0:
                memcpy(p, k.buf, k.len)
                p += k.len
            p = nk_store_be32(p, <int32_t>v.len)
            if v.len > 0:
                memcpy(p, v.buf, v.len)
        finally:
            _give_back_view(&k)
            _give_back_view(&v)
        if ts > self._max_timestamp_ms:
            self._max_timestamp_ms = ts
        self._pos_bytes += entry_bytes
        self._record_count += 1
        return self._record_count - 1

    cdef int _make_room_for_first(self, Py_ssize_t entry_bytes) except -1:
        # The first record goes in whatever its size, up to max_request_size_bytes;
        # if the buffer is too small the (still empty) set grows into a larger one.
        if self._wrapper_bytes + entry_bytes > self.max_request_size_bytes:
            raise RecordTooLargeError(
                f"the record is {self._wrapper_bytes + entry_bytes} bytes as a v{self.magic} "
                f"message{' in a compressed set' if self._wrapper_bytes else ''}, larger "
                f"than max_request_size={self.max_request_size_bytes}")
        if entry_bytes > self._records_buf.capacity_bytes:
            self._grow(entry_bytes, entry_bytes, True)
        return 0

    # -- sealing and export -------------------------------------------------------------

    cdef int _seal(self) except -1:
        if self._record_count == 0:
            raise ValueError("cannot seal an empty message set")
        _checksum_set(self._data, self._pos_bytes)
        self._sealed_buf = self._records_buf
        self._sealed_size_bytes = self._pos_bytes
        if self._compressor is not None:
            self._compress()
        return 0

    cdef int _compress(self) except -1:
        # Compresses the entries into a second pooled buffer behind room for the
        # wrapper entry, then writes the wrapper; keeps the plain set when that is
        # not smaller, or when the pool has no room for the copy (see
        # PooledBatch._compression_output).
        cdef Py_ssize_t inner_bytes = self._pos_bytes
        cdef Py_ssize_t bound = self._compressor.max_compressed_size(inner_bytes)
        cdef Py_ssize_t compressed_bytes, total_bytes
        cdef PooledBuffer out = self._compression_output(self._wrapper_bytes + bound)
        cdef unsigned char *p
        if out is None:
            return 0
        try:
            compressed_bytes = self._compressor.compress_into(
                self._data, inner_bytes, out.data + self._wrapper_bytes, bound)
            if self.codec == CODEC_LZ4 and self.magic == 0:
                _frame_lz4_for_magic0(out.data + self._wrapper_bytes, compressed_bytes)
        except BaseException:
            out._give_back()
            raise
        total_bytes = self._wrapper_bytes + compressed_bytes
        if total_bytes >= inner_bytes:
            out._give_back()
            return 0
        p = _start_entry(out.data, self.magic, self._record_count - 1, total_bytes,
                         self.codec, self._max_timestamp_ms)
        p = nk_store_be32(p, -1)
        nk_store_be32(p, <int32_t>compressed_bytes)
        _checksum_set(out.data, total_bytes)
        self._use_compressed(out, total_bytes)
        return 0

    # -- accessors --------------------------------------------------------------------

    @property
    def size_bytes(self):
        """Wire size: of the sealed set once sealed, else an upper bound of it (the
        entries so far, plus the wrapper's own bytes when a codec is set)."""
        if self._state == BATCH_OPEN:
            return self._pos_bytes + self._wrapper_bytes
        return self._sealed_size_bytes

    @property
    def is_full(self):
        """True once no further record can be appended: sealed, an append was
        refused, or not even an empty message fits."""
        return bool(self._state != BATCH_OPEN or self._full
                    or (self._record_count and self._pos_bytes + self._head_bytes
                        + _LENGTH_FIELDS > self._limit_bytes))

