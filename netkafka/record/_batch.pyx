"""RecordBatch v2 (magic 2) encoder: records straight into pooled buffers.

A batch is built in one buffer from a BufferPool: 61 bytes are left for the header,
records are appended behind it as they come, and seal() fills the header in:

    base offset int64 (0) | batch length int32 (bytes after this field) |
    partition leader epoch int32 (-1) | magic int8 (2) | CRC32C uint32 |
    attributes int16 | last offset delta int32 | first timestamp int64 |
    max timestamp int64 | producer id int64 | producer epoch int16 |
    base sequence int32 | record count int32 | records...

The CRC covers attributes .. end.  A record is a varint length, then attributes
int8 (0), timestamp delta varlong, offset delta varint, key and value as varint
length (-1 for null) + bytes, and a varint count of headers, each a varint-length
UTF-8 key and a nullable value.  With a codec, the records region (after the
header) is compressed into a second pooled buffer and the header written before it.
The header's offsets and a record's size rules are in _batch_layout.pxd, where the
column readers (_columns) and send_batch()'s planner size records by them too.

The caller's keys, values, headers, timestamps and bulk columns are read through
_columns; the batch's memory and life cycle (OPEN -> SEALED -> DONE -> RELEASED) are
_pool.PooledBatch's, shared with _legacy's message sets.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

from netkafka.csrc cimport (
    nk_clock_init, nk_clock_now_ms, nk_clock_ticks_per_ms, nk_crc32c, nk_read_uvarint64,
    nk_store_be16,
    nk_store_be32, nk_store_be64, nk_uvarint64_size, nk_write_uvarint64, nk_write_varlong,
)
from netkafka.record._batch_layout cimport (
    HEADER_SIZE_BYTES, _ATTRIBUTES, _BASE_OFFSET, _BASE_SEQUENCE, _BATCH_LENGTH, _CRC,
    _FIRST_TIMESTAMP, _LAST_OFFSET_DELTA, _LEADER_EPOCH, _LENGTH_EXCLUDED, _MAGIC,
    _MAX_TIMESTAMP, _PRODUCER_EPOCH, _PRODUCER_ID, _RECORD_COUNT, _RECORD_MIN_BYTES,
    _RECORD_OVERHEAD_MAX, _body_size, _nullable_size, _write_nullable,
)
from netkafka.record._columns cimport (
    _SOURCE_SEQUENCE, _TS_NOW, BinarySource, Rows, _as_column, _borrow, _headers_size,
    _plain_bytes, _read_fast, _write_headers, checked_timestamp_ms,
)
from netkafka.record._compression cimport CODEC_NONE, Compressor
from netkafka.record._pool cimport (BATCH_OPEN, BATCH_SEALED, PooledBatch, PooledBuffer,
                                     check_max_request_size)

from netkafka.errors import RecordTooLargeError


cdef enum:
    # Below this the CRC takes less time than giving up and retaking the GIL.
    _CRC_NOGIL_MIN_BYTES = 64 * 1024

cdef enum:
    # Attribute bits (the codec takes bits 0-2).
    _ATTR_LOG_APPEND_TIME = 0x08
    _ATTR_TRANSACTIONAL = 0x10
    _ATTR_CONTROL = 0x20

# Bytes of the batch header before the records (the layout above).
BATCH_HEADER_BYTES = HEADER_SIZE_BYTES
# The smallest batch_size_bytes: the header and the smallest record.  A batch of it
# holds one record (the first always goes in, and then no record fits): the Java
# client's and kafka-python's batch size 0.
SMALLEST_BATCH_BYTES = HEADER_SIZE_BYTES + _RECORD_MIN_BYTES

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

cdef enum:
    _CACHED_OFFSET_DELTAS = 16384

# append()'s results, made once: creating (and freeing) an int per record cost 14% of
# a per-record append.  About 600 KB; covers batches of up to 16384 records (1 MiB
# of 64-byte records); later offsets are made on demand.
cdef tuple _OFFSET_DELTAS = tuple(range(_CACHED_OFFSET_DELTAS))


# Read once (CPUID may trap to a hypervisor), copied into every builder's clock cache.
cdef uint64_t _TICKS_PER_MS = nk_clock_ticks_per_ms()


def pool_buffer_size_bytes(Py_ssize_t batch_size_bytes, compression=None):
    """The buffer size a BufferPool needs so that batches of batch_size_bytes, and
    their compressed copies, come from the pool without one-off buffers.

    Args:
        compression: as RecordBatchBuilder takes it.
    """
    cdef Compressor compressor = _compressor_for(compression)
    if compressor is None:
        return batch_size_bytes
    return max(batch_size_bytes, HEADER_SIZE_BYTES
               + compressor.max_compressed_size(batch_size_bytes - HEADER_SIZE_BYTES))


cdef Compressor _compressor_for(object compression):
    # None for no compression; a shared Compressor as given; a codec name or id
    # gets a Compressor of its own at the codec's default level.
    cdef Compressor compressor
    if isinstance(compression, Compressor):
        compressor = <Compressor>compression
    elif compression is None:
        return None
    else:
        compressor = Compressor(compression)
    return None if compressor.codec == CODEC_NONE else compressor


cdef uint32_t _crc_of(uint32_t crc, const unsigned char *data, size_t length) noexcept:
    if length >= _CRC_NOGIL_MIN_BYTES:
        with nogil:
            return nk_crc32c(crc, data, length)
    return nk_crc32c(crc, data, length)


# ----------------------------------------------------------------------------------
# The builder


@cython.final
@cython.no_gc_clear
@cython.binding(False)  # plain C methods: a cheaper call than a bound cyfunction
cdef class RecordBatchBuilder(PooledBatch):
    """Builds one RecordBatch v2 in a pooled buffer, then exports it read-only
    (seal, completion and release: PooledBatch).

    Args:
        buffer: a PooledBuffer from the pool the batch's memory comes from and goes
            back to; the builder owns it from now on.
        batch_size_bytes: appends stop (return -1) once the next record would take
            the batch past this size -- except the first record, always taken.
        max_request_size_bytes: hard cap on a batch holding a single record.
        compression: None, a codec ("none", "gzip", "snappy", "lz4", "zstd" or its
            id) at its default level, or a netkafka.record._compression.Compressor --
            better shared by all batches, as it keeps the codec's state.
        timestamp_type: TIMESTAMP_CREATE_TIME (default) or TIMESTAMP_LOG_APPEND_TIME.
        transactional: set the transactional attribute bit.
        control: set the control attribute bit (transaction markers).
        hold_values_from_bytes: values of type bytes (immutable) this long or longer
            are held by reference, not copied into the buffer (their places in it are
            reserved, so memory is counted as for a copy): segments() gives them to
            the socket as they are, the one copy being the kernel's, as librdkafka
            does above message.copy.max.bytes.  A contiguous export (memoryview,
            seal()) copies them into their places first, once.  0 (default): every
            value is copied.  Ignored with compression: the codec reads the records
            whole.
    """

    def __cinit__(self, PooledBuffer buffer not None, Py_ssize_t batch_size_bytes,
                  Py_ssize_t max_request_size_bytes, compression=None, *,
                  int timestamp_type=TIMESTAMP_CREATE_TIME, bint transactional=False,
                  bint control=False, Py_ssize_t hold_values_from_bytes=0):
        if batch_size_bytes < SMALLEST_BATCH_BYTES:
            raise ValueError(f"batch_size_bytes={batch_size_bytes} cannot hold the "
                             f"{HEADER_SIZE_BYTES}-byte batch header and a record")
        check_max_request_size(batch_size_bytes, max_request_size_bytes)
        if timestamp_type not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
            raise ValueError(f"timestamp_type must be TIMESTAMP_CREATE_TIME (0) or "
                             f"TIMESTAMP_LOG_APPEND_TIME (1), got {timestamp_type}")
        self._claim(buffer, "batch", batch_size_bytes)
        self._pos_bytes = HEADER_SIZE_BYTES
        self.batch_size_bytes = batch_size_bytes
        self.max_request_size_bytes = max_request_size_bytes
        self._compressor = _compressor_for(compression)
        self.codec = CODEC_NONE if self._compressor is None else self._compressor.codec
        if hold_values_from_bytes < 0:
            raise ValueError(f"hold_values_from_bytes must be >= 0, got {hold_values_from_bytes}")
        self._hold_from_bytes = hold_values_from_bytes if self._compressor is None else 0
        self._attributes = ((_ATTR_LOG_APPEND_TIME if timestamp_type else 0)
                            | (_ATTR_TRANSACTIONAL if transactional else 0)
                            | (_ATTR_CONTROL if control else 0))
        self._producer_id = -1
        self._producer_epoch = -1
        self._base_sequence = -1
        nk_clock_init(&self._clock, _TICKS_PER_MS)

    # -- appending ------------------------------------------------------------------

    def append(self, key, value, headers=None, timestamp_ms=None):
        """Encode one record into the batch.

        Args:
            key, value: bytes, bytearray, memoryview (contiguous) or None.
            headers: None or a list/tuple of (key, value): key str or bytes, value
                bytes or None.
            timestamp_ms: milliseconds since the epoch (>= 0); None: now.

        Returns:
            The record's offset delta (its index in the batch), or -1 if it does not
            fit batch_size_bytes: nothing was written, open a new batch.

        Raises:
            TypeError: an argument has a type not listed above (the message names it).
            ValueError: the first record alone exceeds max_request_size_bytes (a
                RecordTooLargeError), or a bad timestamp.
            BatchStateError: the batch is sealed.
            BufferPoolExhausted: the first record is larger than the buffer and the
                pool has no room for a larger one now.
        """
        cdef const unsigned char *k
        cdef const unsigned char *v
        cdef Py_ssize_t k_len, v_len, offset_delta
        cdef int64_t ts
        if timestamp_ms is None:
            ts = nk_clock_now_ms(&self._clock)
        else:
            ts = checked_timestamp_ms(timestamp_ms, "timestamp_ms", -1)
        if not self._hold_from_bytes and _plain_bytes(<PyObject *>key, &k, &k_len) and \
                _plain_bytes(<PyObject *>value, &v, &v_len):
            offset_delta = self._append_raw(k, k_len, v, v_len, headers, ts)
        else:
            offset_delta = self._append_objects(key, value, headers, ts, -1)
        if 0 <= offset_delta < _CACHED_OFFSET_DELTAS:
            return <object>PyTuple_GET_ITEM(_OFFSET_DELTAS, offset_delta)
        return offset_delta

    cdef Py_ssize_t _append_objects(self, object key, object value, object headers,
                                    int64_t timestamp_ms, Py_ssize_t index) except -2:
        # Keys and values of any bytes-like type: their buffers are held across the
        # encoding.  index is the element of a bulk call, for error messages (-1: none).
        cdef const unsigned char *k
        cdef const unsigned char *v
        cdef Py_ssize_t k_len, v_len
        cdef Py_buffer k_view, v_view
        cdef int k_held, v_held = 0
        k_held = _borrow(key, &k, &k_len, &k_view, "key" if index < 0 else "keys", index)
        try:
            v_held = _borrow(value, &v, &v_len, &v_view, "value" if index < 0 else "values",
                             index)
            if (self._hold_from_bytes and PyBytes_CheckExact(value)
                    and v_len >= self._hold_from_bytes):
                return self._append_raw(k, k_len, v, v_len, headers, timestamp_ms, value)
            return self._append_raw(k, k_len, v, v_len, headers, timestamp_ms)
        finally:
            if k_held:
                PyBuffer_Release(&k_view)
            if v_held:
                PyBuffer_Release(&v_view)

    def append_many(self, values, keys=None, headers=None, timestamps_ms=None,
                    Py_ssize_t start=0):
        """Append values[start:] (with keys, headers, timestamps at the same index)
        until the batch is full: append_rows() over Rows(values, keys, headers,
        timestamps_ms), for lists.

        Args:
            values: list or tuple of bytes-like or None.
            keys: None (all keys null) or a list/tuple as long as values.
            headers: None (no headers) or a list/tuple as long as values, each item
                None or a headers list as append() takes.
            timestamps_ms: None (all stamped now, read once) or a list/tuple of int
                or None.
            start: index of the first record to append.

        Returns:
            How many records were appended; fewer than len(values) - start means the
            batch is full: continue from start + that count in a new batch.
        """
        return self._append_rows(Rows(values, keys, headers, timestamps_ms), None, start)

    def append_column(self, values, keys=None, timestamps_ms=None, Py_ssize_t start=0):
        """Append records start.. from binary columns until the batch is full:
        append_rows() for columns.

        Args:
            values: a BinaryColumn, or a pyarrow Binary/LargeBinary/String/LargeString
                array (null elements become null values).
            keys: None (null keys) or a column of the same length, as values.
            timestamps_ms: None (all stamped now, read once) or a buffer-protocol
                object of int64 (e.g. array('q'), a numpy int64 array) of the same
                length.
            start: index of the first record to append.

        Returns:
            How many records were appended (see append_many).
        """
        _as_column(values, "values")
        if keys is not None:
            _as_column(keys, "keys")
        return self._append_rows(Rows(values, keys, None, timestamps_ms), None, start)

    def append_rows(self, Rows rows not None, row_ids=None, Py_ssize_t start=0):
        """Append rows until the batch is full: rows start.. of `rows`, or with
        row_ids the rows row_ids[start], row_ids[start + 1], ...

        Args:
            rows: the caller's columns (Rows).
            row_ids: None, or a buffer of int64 row indices (each checked).
            start: the first position (in row_ids, or in rows) to append.

        Returns:
            How many records were appended (see append_many).

        Raises:
            TypeError, ValueError: the row at position start + (the return value it
                would have had) is refused (named); the rows before it are in.
        """
        return self._append_rows(rows, row_ids, start)

    cdef Py_ssize_t _append_rows(self, Rows rows, object row_ids, Py_ssize_t start) except -1:
        # The one bulk loop (lists, columns, any mix).  Keys and values are read in
        # place (_read_fast, else their BinarySource); a view is held only for a
        # bytes-like item that is not bytes, and only across its own record; a large
        # bytes value of a list or tuple is held by the batch (hold_values_from_bytes).
        # What is the same for every row (timestamps, headers) is decided once.
        cdef const long long[::1] ids
        cdef bint by_id = row_ids is not None
        cdef bint stamped = rows._ts_kind != _TS_NOW
        cdef bint with_headers = rows._header_rows is not None or rows._header_columns is not None
        cdef Py_ssize_t n, pos, i, appended
        cdef int64_t now_ms = nk_clock_now_ms(&self._clock), ts
        cdef const unsigned char *k = NULL
        cdef const unsigned char *v = NULL
        cdef Py_ssize_t k_len = -1, v_len = -1
        cdef Py_buffer k_view, v_view
        cdef int k_held = 0, v_held = 0
        cdef BinarySource keys = rows.keys
        cdef BinarySource values = rows.values
        cdef object headers = None
        if by_id:
            ids = row_ids
            n = ids.shape[0]
        else:
            n = rows.length
        if not 0 <= start <= n:
            raise ValueError(f"start={start} is outside 0..{n}")
        for pos in range(start, n):
            i = ids[pos] if by_id else pos
            if not 0 <= i < rows.length:
                raise IndexError(f"row_ids[{pos}]={i} is outside the {rows.length} rows")
            ts = rows._timestamp(i, now_ms) if stamped else now_ms
            if with_headers:
                headers = rows._headers(i)
            if keys is not None and not _read_fast(keys, i, &k, &k_len):
                k_held = keys.get(i, &k, &k_len, &k_view)
            if _read_fast(values, i, &v, &v_len) and not k_held:
                if self._hold_from_bytes and v_len >= self._hold_from_bytes \
                        and values._kind == _SOURCE_SEQUENCE:  # so the item is exact bytes
                    appended = self._append_raw(k, k_len, v, v_len, headers, ts,
                                                <object>PyTuple_GET_ITEM(values._sequence, i))
                else:
                    appended = self._append_raw(k, k_len, v, v_len, headers, ts)
            else:
                try:
                    v_held = values.get(i, &v, &v_len, &v_view)
                    appended = self._append_raw(k, k_len, v, v_len, headers, ts)
                finally:
                    if k_held:
                        PyBuffer_Release(&k_view)
                        k_held = 0
                    if v_held:
                        PyBuffer_Release(&v_view)
                        v_held = 0
            if appended < 0:
                return pos - start
        return n - start

    cdef Py_ssize_t _append_raw(self, const unsigned char *key, Py_ssize_t key_len,
                                const unsigned char *value, Py_ssize_t value_len,
                                object headers, int64_t timestamp_ms,
                                object held=None) except -2:
        # The one encoder every append path ends in.  Sizes the record, checks room
        # once, then writes it with no further checks.  The offset delta and the
        # lengths are never negative: they take the unsigned varint helpers.  held:
        # the value's bytes object, held instead of copied (its place left unwritten).
        cdef int32_t offset_delta = self._record_count
        cdef int64_t ts_delta = 0
        cdef Py_ssize_t headers_bytes = 1, body_bytes, record_bytes, held_at = 0
        cdef unsigned char *p
        cdef unsigned char *end
        if self._state != BATCH_OPEN:
            self._state_error("append to")
        if headers is not None:
            headers_bytes = _headers_size(headers)
        if offset_delta:
            ts_delta = timestamp_ms - self._first_timestamp_ms
        body_bytes = _body_size(key_len, value_len, headers_bytes, ts_delta, offset_delta)
        record_bytes = nk_uvarint64_size(<uint64_t>body_bytes << 1) + body_bytes
        if self._pos_bytes + record_bytes > self._end_bytes:
            if offset_delta == 0:
                self._make_room_for_first(record_bytes)
            elif not self._make_room(record_bytes):
                return -1
        p = self._data + self._pos_bytes
        end = p + record_bytes
        p = nk_write_uvarint64(p, <uint64_t>body_bytes << 1)
        p[0] = 0  # record attributes: none defined
        p = nk_write_varlong(p + 1, ts_delta)
        p = nk_write_uvarint64(p, <uint64_t>offset_delta << 1)
        p = _write_nullable(p, key, key_len)
        if held is None:
            p = _write_nullable(p, value, value_len)
        else:
            p = nk_write_uvarint64(p, <uint64_t>value_len << 1)
            held_at = p - self._data
            p += value_len
        if headers is None:
            p[0] = 0  # zero headers
        else:
            # Headers are the one part read twice from objects that user code (a
            # str's encoding, a list changed by another thread) may have changed.
            p = _write_headers(p, end, headers)
            if p != end:
                raise RuntimeError("headers changed during append")
        self._count_appended(record_bytes, offset_delta, timestamp_ms)
        if held is not None:
            if self._held is None:
                self._held = []
            self._held.append(held_at)
            self._held.append(held)
        return offset_delta

    cdef void _count_appended(self, Py_ssize_t record_bytes, int32_t offset_delta,
                              int64_t timestamp_ms) noexcept:
        self._pos_bytes += record_bytes
        if offset_delta == 0:
            self._first_timestamp_ms = timestamp_ms
            self._max_timestamp_ms = timestamp_ms
        elif timestamp_ms > self._max_timestamp_ms:
            self._max_timestamp_ms = timestamp_ms
        self._record_count = offset_delta + 1

    def append_encoded(self, record, int64_t timestamp_ms):
        """Appends a record already in this batch's encoding, as a write-ahead log kept
        it: one record whose offset delta is the batch's record count and whose
        timestamp delta counts from the batch's first timestamp (0 for the first
        record); timestamp_ms is the record's own timestamp.  Copied as it is.

        Returns:
            The record's offset delta, or -1 if it does not fit batch_size_bytes.

        Raises:
            ValueError: the bytes are not one such record (what does not agree is named),
                or a first record larger than max_request_size_bytes.
            BatchStateError: the batch is sealed.
        """
        cdef Py_buffer view
        PyObject_GetBuffer(record, &view, PyBUF_SIMPLE)
        try:
            return self._append_encoded(<const unsigned char *>view.buf, view.len,
                                        timestamp_ms)
        finally:
            PyBuffer_Release(&view)

    cdef Py_ssize_t _append_encoded(self, const unsigned char *record, Py_ssize_t length,
                                    int64_t timestamp_ms) except -2:
        # Its framing read back (length, attributes, the two deltas) before a byte is
        # copied: a record that does not belong at this place is refused.
        cdef int32_t offset_delta = self._record_count
        cdef const unsigned char *end = record + length
        cdef const unsigned char *p
        cdef uint64_t body_zigzag = 0, ts_zigzag = 0, offset_zigzag = 0
        cdef int64_t ts_delta, expected_delta = 0
        if self._state != BATCH_OPEN:
            self._state_error("append to")
        p = nk_read_uvarint64(record, end, &body_zigzag)
        if p == NULL or (body_zigzag >> 1) != <uint64_t>(end - p) or end - p < 3:
            raise ValueError(f"{length} bytes are not one encoded record")
        p = nk_read_uvarint64(p + 1, end, &ts_zigzag)  # past the attributes
        if p != NULL:
            p = nk_read_uvarint64(p, end, &offset_zigzag)
        if p == NULL:
            raise ValueError(f"{length} bytes are not one encoded record")
        ts_delta = <int64_t>((ts_zigzag >> 1) ^ (0 - (ts_zigzag & 1)))
        if offset_delta:
            expected_delta = timestamp_ms - self._first_timestamp_ms
        if offset_zigzag != <uint64_t>offset_delta << 1 or ts_delta != expected_delta:
            raise ValueError(
                f"the record has offset delta {offset_zigzag >> 1} and timestamp delta "
                f"{ts_delta}; this batch's next record has {offset_delta} and "
                f"{expected_delta}")
        if self._pos_bytes + length > self._end_bytes:
            if offset_delta == 0:
                self._make_room_for_first(length)
            elif not self._make_room(length):
                return -1
        memcpy(self._data + self._pos_bytes, record, length)
        self._count_appended(length, offset_delta, timestamp_ms)
        return offset_delta

    cdef int _make_room_for_first(self, Py_ssize_t record_bytes) except -1:
        # The first record goes in whatever its size, up to max_request_size_bytes;
        # if the buffer is too small the (still empty) batch grows into a larger one.
        cdef Py_ssize_t needed = HEADER_SIZE_BYTES + record_bytes
        if needed > self.max_request_size_bytes:
            raise RecordTooLargeError(
                f"the record is {needed} bytes when serialized in a batch, larger than "
                f"max_request_size={self.max_request_size_bytes}")
        if needed > self._records_buf.capacity_bytes:
            self._grow(needed, needed, True)
        return 0

    # -- producer state ---------------------------------------------------------------

    def set_producer_state(self, int64_t producer_id, int16_t producer_epoch,
                           int32_t base_sequence):
        """Idempotence fields for the header; allowed until sealed."""
        if self._state != BATCH_OPEN:
            self._state_error("change the producer state of")
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence

    def rewrite_producer_state(self, int64_t producer_id, int16_t producer_epoch,
                               int32_t base_sequence):
        """Re-stamps a sealed batch: producer id, epoch and base sequence in its
        header, and the CRC32C over attributes .. end, which covers them.  The
        records (compressed or not) stay as they are.

        For an idempotent partition that starts over under a new epoch (KIP-360),
        the Java client's ProducerBatch.resetProducerState.  The bytes change under
        any exported view: the caller makes sure nothing reads them meanwhile (no
        request carrying them is being written).

        Raises:
            BatchStateError: not sealed, or done already.
        """
        cdef unsigned char *batch
        if self._state != BATCH_SEALED:
            self._state_error("rewrite the producer state of")
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        batch = self._sealed_buf.data
        nk_store_be64(batch + _PRODUCER_ID, producer_id)
        nk_store_be16(batch + _PRODUCER_EPOCH, producer_epoch)
        nk_store_be32(batch + _BASE_SEQUENCE, base_sequence)
        self._store_crc(batch, self._sealed_size_bytes)

    # -- sealing and export -------------------------------------------------------------

    cdef int _seal(self) except -1:
        if self._record_count == 0:
            raise ValueError("cannot seal an empty batch")
        self._sealed_buf = self._records_buf
        self._sealed_size_bytes = self._pos_bytes
        self.sealed_codec = CODEC_NONE
        if self._compressor is not None:
            self._compress()
        self._write_header(self._sealed_buf.data, self._sealed_size_bytes)
        return 0

    cdef int _compress(self) except -1:
        # Compresses the records into a second pooled buffer, behind room for the
        # header.  When the output is not smaller the batch goes uncompressed, as
        # librdkafka does; so it does when the pool has no room for the output
        # (PooledBatch._compression_output says why).
        cdef Py_ssize_t records_bytes = self._pos_bytes - HEADER_SIZE_BYTES
        cdef Py_ssize_t bound = self._compressor.max_compressed_size(records_bytes)
        cdef Py_ssize_t compressed_bytes
        cdef PooledBuffer out = self._compression_output(HEADER_SIZE_BYTES + bound)
        if out is None:
            return 0
        try:
            compressed_bytes = self._compressor.compress_into(
                self._data + HEADER_SIZE_BYTES, records_bytes,
                out.data + HEADER_SIZE_BYTES, bound)
        except BaseException:
            out._give_back()
            raise
        if compressed_bytes >= records_bytes:
            out._give_back()
            return 0
        self._use_compressed(out, HEADER_SIZE_BYTES + compressed_bytes)
        return 0

    cdef int _write_header(self, unsigned char *batch, Py_ssize_t size_bytes) except -1:
        nk_store_be64(batch + _BASE_OFFSET, 0)
        nk_store_be32(batch + _BATCH_LENGTH, <int32_t>(size_bytes - _LENGTH_EXCLUDED))
        nk_store_be32(batch + _LEADER_EPOCH, -1)
        batch[_MAGIC] = 2
        nk_store_be16(batch + _ATTRIBUTES, self._attributes | self.sealed_codec)
        nk_store_be32(batch + _LAST_OFFSET_DELTA, self._record_count - 1)
        nk_store_be64(batch + _FIRST_TIMESTAMP, self._first_timestamp_ms)
        nk_store_be64(batch + _MAX_TIMESTAMP, self._max_timestamp_ms)
        nk_store_be64(batch + _PRODUCER_ID, self._producer_id)
        nk_store_be16(batch + _PRODUCER_EPOCH, self._producer_epoch)
        nk_store_be32(batch + _BASE_SEQUENCE, self._base_sequence)
        nk_store_be32(batch + _RECORD_COUNT, self._record_count)
        self._store_crc(batch, size_bytes)
        return 0

    cdef int _store_crc(self, unsigned char *batch, Py_ssize_t size_bytes) except -1:
        # The batch's CRC32C field, over attributes .. end (the header fields before
        # the attributes may change on the broker without breaking it); a held
        # value is read where it is.
        cdef Py_ssize_t pos = _ATTRIBUTES, at, i
        cdef uint32_t crc = 0
        cdef object value
        if self._held is not None:
            for i in range(0, len(self._held), 2):
                at = self._held[i]
                value = self._held[i + 1]
                crc = _crc_of(crc, batch + pos, at - pos)
                crc = _crc_of(crc, <const unsigned char *>PyBytes_AS_STRING(value),
                              PyBytes_GET_SIZE(value))
                pos = at + PyBytes_GET_SIZE(value)
        crc = _crc_of(crc, batch + pos, size_bytes - pos)
        nk_store_be32(batch + _CRC, <int32_t>crc)
        return 0

    # -- accessors --------------------------------------------------------------------

    @property
    def size_bytes(self):
        """Wire size: of the sealed batch once sealed, else of the batch so far
        (uncompressed)."""
        if self._state == BATCH_OPEN:
            return self._pos_bytes
        return self._sealed_size_bytes

    @property
    def remaining_bytes(self):
        """Room left below batch_size_bytes (0 when full)."""
        return max(self.batch_size_bytes - self._pos_bytes, 0) if self._state == BATCH_OPEN else 0

    @property
    def is_full(self):
        """True once no further record can be appended: sealed, an append was
        refused, or not even the smallest record fits."""
        return bool(self._state != BATCH_OPEN or self._full
                    or (self._record_count
                        and self._pos_bytes + _RECORD_MIN_BYTES > self.batch_size_bytes))

    @property
    def first_timestamp_ms(self):
        """Timestamp of the first record (None while empty)."""
        return self._first_timestamp_ms if self._record_count else None

    @property
    def max_timestamp_ms(self):
        return self._max_timestamp_ms if self._record_count else None

    @property
    def producer_id(self):
        return self._producer_id

    @property
    def producer_epoch(self):
        return self._producer_epoch

    @property
    def base_sequence(self):
        return self._base_sequence

    @property
    def is_transactional(self):
        return bool(self._attributes & _ATTR_TRANSACTIONAL)

    @staticmethod
    def size_upper_bound_bytes(key, value, headers=None):
        """Bytes a batch holding only this record can take at most: the buffer to
        acquire for a first record that may exceed the pool's buffer size."""
        cdef const unsigned char *k
        cdef const unsigned char *v
        cdef Py_ssize_t k_len, v_len, size
        cdef Py_buffer k_view, v_view
        cdef int k_held, v_held = 0
        k_held = _borrow(key, &k, &k_len, &k_view, "key", -1)
        try:
            v_held = _borrow(value, &v, &v_len, &v_view, "value", -1)
            size = (HEADER_SIZE_BYTES + _RECORD_OVERHEAD_MAX + _nullable_size(k_len)
                    + _nullable_size(v_len) + (1 if headers is None else _headers_size(headers)))
        finally:
            if k_held:
                PyBuffer_Release(&k_view)
            if v_held:
                PyBuffer_Release(&v_view)
        return size
