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

Life of a batch (PooledBatch, shared with _legacy's message sets):  OPEN (appends)
-> seal() -> SEALED (bytes exported, read-only) -> mark_acknowledged() / mark_failed()
-> DONE -> release() -> RELEASED.  Its memory goes back to the pool only from DONE
with no exported view alive: bytes that may still be on their way to a socket are
never reused.
"""
import bisect
import threading
import time

from netkafka.errors import BatchStateError, BufferPoolExhausted

cimport cython
from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS, PyBUF_FORMAT, PyBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release,
    PyObject_GetBuffer,
)
from cpython.bool cimport PyBool_Check
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_GET_SIZE
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLong, PyLong_Check
from cpython.object cimport PyObject
from cpython.pythread cimport (
    WAIT_LOCK, PyThread_acquire_lock, PyThread_allocate_lock, PyThread_free_lock,
    PyThread_release_lock,
)
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_Check, PyUnicode_DecodeUTF8
from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from netkafka.record._compression cimport CODEC_NONE, Compressor
from netkafka.csrc cimport (
    nk_clock_init, nk_clock_now_ms, nk_clock_ticks_per_ms, nk_crc32c, nk_store_be16,
    nk_store_be32, nk_store_be64, nk_uvarint64_size, nk_varlong_size, nk_write_uvarint64,
    nk_write_varint, nk_write_varlong,
)


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
    # Bytes counted by the batch length field start after it.
    _LENGTH_EXCLUDED = 12
    # Upper bound of a record's bytes besides key, value and headers: length varint
    # (5), attributes (1), timestamp delta varlong (10), offset delta varint (5).
    _RECORD_OVERHEAD_MAX = 21
    # The smallest record: 1-byte length, attributes, delta 0, offset delta < 64,
    # null key, null value, no headers.
    _RECORD_MIN_BYTES = 7
    # Below this the CRC takes less time than giving up and retaking the GIL.
    _CRC_NOGIL_MIN_BYTES = 64 * 1024

cdef enum:
    # Attribute bits (the codec takes bits 0-2).
    _ATTR_LOG_APPEND_TIME = 0x08
    _ATTR_TRANSACTIONAL = 0x10
    _ATTR_CONTROL = 0x20

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

_STATE_NAMES = ("open", "sealed", "done", "released")

cdef enum:
    _CACHED_OFFSET_DELTAS = 16384

# append()'s results, made once: creating (and freeing) an int per record cost 14% of
# a per-record append.  About 600 KB; covers batches of up to 16384 records (1 MiB
# of 64-byte records); later offsets are made on demand.
cdef tuple _OFFSET_DELTAS = tuple(range(_CACHED_OFFSET_DELTAS))


# Read once (CPUID may trap to a hypervisor), copied into every builder's clock cache.
cdef uint64_t _TICKS_PER_MS = nk_clock_ticks_per_ms()


cdef str _arg_name(str name, Py_ssize_t index):
    # Error messages name the argument, and the element of a bulk argument.  Built
    # only when raising, so the hot paths create no string.
    return name if index < 0 else f"{name}[{index}]"


cdef int64_t checked_timestamp_ms(object timestamp, str name, Py_ssize_t index) except -1:
    # Java's producer rejects negative timestamps; -1 would read as "no timestamp".
    # A bool is an int to Python, but as a timestamp it can only be a mistake.
    cdef int64_t ts
    if not PyLong_Check(timestamp) or PyBool_Check(timestamp):
        raise TypeError(f"{_arg_name(name, index)} must be an int (milliseconds since the "
                        f"epoch) or None, not {type(timestamp).__name__}")
    try:
        ts = PyLong_AsLongLong(timestamp)
    except OverflowError:
        raise ValueError(f"{_arg_name(name, index)}={timestamp} does not fit in 64 bits") from None
    if ts < 0:
        raise ValueError(f"{_arg_name(name, index)}={ts} is negative; timestamps are "
                         f"milliseconds since the epoch")
    return ts


# ----------------------------------------------------------------------------------
# Buffer pool


@cython.final
cdef class BufferPool:
    """Fixed-size buffers for record batches, with a bound on the memory they take.

    Buffers are allocated on first demand and then reused: a released pooled buffer
    goes to a free list, not back to malloc, so steady-state batching allocates
    nothing.  A request larger than buffer_size_bytes (a batch whose first record
    alone is larger) gets a one-off buffer, counted against total_bytes while in use
    and freed on release; cached free buffers are dropped to make room for it.

    Thread safety: acquire/try_acquire run on user threads (the accumulator), release
    on I/O threads (or wherever a forgotten buffer is garbage-collected).  _mutex, a C
    lock held only around a few lines of C, guards the free list and the counts.
    Blocked acquires sleep on _lock, a threading.Condition that guards no state: a
    release notifies it only when _waiters says someone sleeps there, so giving
    memory back never runs Python code otherwise (it may run from __dealloc__, even
    at interpreter exit).

    Args:
        buffer_size_bytes: capacity of each pooled buffer (see pool_buffer_size_bytes).
        total_bytes: bound on the capacity of all buffers alive, in use or cached.
    """

    def __cinit__(self, Py_ssize_t buffer_size_bytes, Py_ssize_t total_bytes):
        if buffer_size_bytes <= 0:
            raise ValueError(f"buffer_size_bytes must be positive, got {buffer_size_bytes}")
        if total_bytes < buffer_size_bytes:
            raise ValueError(f"total_bytes ({total_bytes}) must be at least "
                             f"buffer_size_bytes ({buffer_size_bytes})")
        self.buffer_size_bytes = buffer_size_bytes
        self.total_bytes = total_bytes
        self._lock = threading.Condition(threading.Lock())
        self._mutex = PyThread_allocate_lock()
        if self._mutex == NULL:
            raise MemoryError("cannot allocate a lock")
        self._free_slots = total_bytes // buffer_size_bytes
        self._free = <unsigned char **>malloc(self._free_slots * sizeof(unsigned char *))
        if self._free == NULL:
            raise MemoryError()

    def __dealloc__(self):
        # Every handed-out buffer holds a reference to its pool, so none is in use here.
        cdef Py_ssize_t i
        if self._free != NULL:
            for i in range(self._free_count):
                free(self._free[i])
            free(self._free)
        if self._mutex != NULL:
            PyThread_free_lock(self._mutex)

    @property
    def in_use_bytes(self):
        """Capacity of the buffers handed out and not yet released."""
        cdef Py_ssize_t in_use
        PyThread_acquire_lock(self._mutex, WAIT_LOCK)
        in_use = self._in_use_bytes
        PyThread_release_lock(self._mutex)
        return in_use

    @property
    def available_bytes(self):
        """Bytes that could still be handed out (total_bytes - in_use_bytes)."""
        return self.total_bytes - self.in_use_bytes

    def try_acquire(self, Py_ssize_t size_bytes=0):
        """A buffer of at least size_bytes (0: buffer_size_bytes), or None when the
        pool has no room for it now.

        Raises:
            ValueError: size_bytes is larger than total_bytes: no wait could serve it.
        """
        return self._try_acquire(size_bytes)

    def acquire(self, Py_ssize_t size_bytes=0, timeout_ms=None):
        """As try_acquire, but wait for a release up to timeout_ms (None: forever).
        Returns None if the time runs out.
        """
        cdef PooledBuffer buf = self._try_acquire(size_bytes)
        if buf is not None:
            return buf
        deadline = None if timeout_ms is None else time.monotonic() + max(timeout_ms, 0) / 1000.0
        with self._lock:
            # Registered as a waiter before each retry, so a release in between
            # sees us and notifies once we sleep (it needs _lock, held till wait()).
            while True:
                self._add_waiter(1)
                try:
                    buf = self._try_acquire(size_bytes)
                    if buf is not None:
                        return buf
                    remaining_s = None if deadline is None else deadline - time.monotonic()
                    if remaining_s is not None and remaining_s <= 0:
                        return None
                    self._lock.wait(remaining_s)
                finally:
                    self._add_waiter(-1)

    cdef void _add_waiter(self, int change) noexcept:
        PyThread_acquire_lock(self._mutex, WAIT_LOCK)
        self._waiters += change
        PyThread_release_lock(self._mutex)

    cdef PooledBuffer _try_acquire(self, Py_ssize_t size_bytes):
        # Thread-safe.  None when there is no room now.
        cdef Py_ssize_t capacity = max(size_bytes, self.buffer_size_bytes)
        cdef bint pooled = capacity == self.buffer_size_bytes
        cdef unsigned char *data = NULL
        cdef bint room = True
        cdef PooledBuffer buf
        if capacity > self.total_bytes:
            raise ValueError(f"a buffer of {size_bytes} bytes was asked of a pool bounded "
                             f"to {self.total_bytes} bytes (buffer_memory)")
        PyThread_acquire_lock(self._mutex, WAIT_LOCK)
        if pooled and self._free_count:
            self._free_count -= 1
            data = self._free[self._free_count]
        else:
            # Cached buffers count against the bound too: drop some if needed.
            while (self._in_use_bytes + self._free_count * self.buffer_size_bytes
                   + capacity > self.total_bytes and self._free_count):
                self._free_count -= 1
                free(self._free[self._free_count])
            room = (self._in_use_bytes + self._free_count * self.buffer_size_bytes
                    + capacity <= self.total_bytes)
            if room:
                data = <unsigned char *>malloc(capacity)
        if data != NULL:
            self._in_use_bytes += capacity
        PyThread_release_lock(self._mutex)
        if not room:
            return None
        if data == NULL:
            raise MemoryError(f"cannot allocate a buffer of {capacity} bytes")
        buf = PooledBuffer.__new__(PooledBuffer)
        buf.data = data
        buf.capacity_bytes = capacity
        buf.pooled = pooled
        buf.pool = self
        return buf

    cdef void _give_back(self, unsigned char *data, Py_ssize_t capacity_bytes,
                         bint pooled) noexcept:
        # Runs on whatever thread releases (an I/O thread, or the garbage collector).
        cdef int waiters
        PyThread_acquire_lock(self._mutex, WAIT_LOCK)
        self._in_use_bytes -= capacity_bytes
        if pooled and self._free_count < self._free_slots:
            self._free[self._free_count] = data
            self._free_count += 1
        else:
            free(data)
        waiters = self._waiters
        PyThread_release_lock(self._mutex)
        if waiters:
            with self._lock:
                self._lock.notify_all()


@cython.final
@cython.no_gc_clear
cdef class PooledBuffer:
    """Memory lent by a BufferPool; release() gives it back (so does garbage
    collection, as a safety net).  Owned by one thread at a time."""

    def __dealloc__(self):
        self._give_back()

    cdef void _give_back(self) noexcept:
        cdef unsigned char *data = self.data
        if data != NULL:
            self.data = NULL
            self.pool._give_back(data, self.capacity_bytes, self.pooled)

    @property
    def released(self):
        return self.data == NULL

    def release(self):
        """Give the memory back to the pool now.

        Raises:
            BatchStateError: a record batch builder owns this buffer (release that), or
                it was released already.
        """
        if self.claimed:
            raise BatchStateError("this buffer belongs to a builder: "
                                  "release the builder instead")
        if self.data == NULL:
            raise BatchStateError("buffer already released")
        self._give_back()


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


# ----------------------------------------------------------------------------------
# Encoding helpers: sizes and writes of the variable parts of a record


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


cdef extern from "Python.h":
    # The bytes macros on borrowed pointers: no reference counting in the hot loops.
    bint _bytes_check_exact "PyBytes_CheckExact"(PyObject *obj) noexcept
    char *_bytes_as_string "PyBytes_AS_STRING"(PyObject *obj) noexcept
    Py_ssize_t _bytes_get_size "PyBytes_GET_SIZE"(PyObject *obj) noexcept


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
    if PyTuple_CheckExact(header) and PyTuple_GET_SIZE(header) == 2:
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
    # seq is an exact list or tuple (checked by the caller); the length is read again
    # on every access because a list may shrink while we work.
    if PyList_CheckExact(seq):
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
    if not (PyList_CheckExact(headers) or PyTuple_CheckExact(headers)):
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
# The life cycle of a pooled batch


@cython.no_gc_clear
@cython.binding(False)
cdef class PooledBatch:
    """What RecordBatchBuilder and _legacy.LegacyMessageSetBuilder share: a batch's
    buffers from a BufferPool, its states and its read-only export.

    seal() makes the bytes final and exports them; mark_acknowledged() or
    mark_failed() says nothing will send them again; release() gives the memory
    back, refused while a view of the bytes is alive.  A builder dropped without
    release() gives its buffers back through their own references (no view can
    be alive then: a view keeps its exporter alive).

    Not constructed directly: the subclasses take the buffer (see theirs).
    """

    def __cinit__(self, *args, **kwargs):
        # Cython passes a subclass's arguments here too: only the type is checked.
        # A bare PooledBatch has no buffer, and its methods assume one.
        if type(self) is PooledBatch:
            raise TypeError("PooledBatch is the base of RecordBatchBuilder and "
                            "LegacyMessageSetBuilder: construct one of those")

    cdef int _claim(self, PooledBuffer buffer, str kind) except -1:
        if buffer.claimed:
            raise BatchStateError("buffer already belongs to another builder")
        if buffer.data == NULL:
            raise BatchStateError("buffer was released")
        buffer.claimed = True
        self._kind = kind
        self._records_buf = buffer
        self._data = buffer.data
        self.sealed_codec = CODEC_NONE
        self._state = BATCH_OPEN
        return 0

    cdef int _state_error(self, str action) except -1:
        raise BatchStateError(f"cannot {action} a {_STATE_NAMES[self._state]} {self._kind}")

    cdef int _swap_for_larger(self, Py_ssize_t size_bytes) except -1:
        # For a first record larger than the buffer: nothing is written yet.
        cdef BufferPool pool = self._records_buf.pool
        cdef PooledBuffer larger = pool._try_acquire(size_bytes)
        if larger is None:
            raise BufferPoolExhausted(
                f"a {size_bytes}-byte buffer for a record larger than batch_size_bytes="
                f"{self.batch_size_bytes} is not available: {pool.available_bytes} of "
                f"{pool.total_bytes} bytes free")
        larger.claimed = True
        self._records_buf._give_back()
        self._records_buf = larger
        self._data = larger.data
        return 0

    cdef PooledBuffer _compression_output(self, Py_ssize_t size_bytes):
        # None when the pool has no room for the compressed copy: the batch is then
        # sealed uncompressed, never waits and never fails for it.  Waiting could
        # deadlock (every buffer held by open batches waiting to seal, the memory
        # freed only by sending them), failing would drop records that are valid
        # as they are; sealed_codec tells what was written.
        cdef BufferPool pool = self._records_buf.pool
        if size_bytes > pool.total_bytes:
            return None
        return pool._try_acquire(size_bytes)

    cdef void _use_compressed(self, PooledBuffer out, Py_ssize_t size_bytes) noexcept:
        # The plain records will never be sent: their memory goes back to the pool now.
        out.claimed = True
        self._sealed_buf = out
        self._sealed_size_bytes = size_bytes
        self.sealed_codec = self.codec
        self._records_buf._give_back()
        self._data = NULL

    cdef int _seal(self) except -1:
        raise NotImplementedError("PooledBatch is the base of the builders, not a builder")

    def seal(self):
        """Make the bytes final (compress if a codec is set and it pays, header,
        checksums) and return a read-only memoryview of them.

        A sealed batch takes no more records; sealing again returns another view of
        the same bytes (for a retry).  When the pool has no room for the compressed
        copy the batch is sealed uncompressed (sealed_codec says so).

        Raises:
            ValueError: no record was appended (Kafka has no empty batches).
            BatchStateError: acknowledged, failed or released already.
        """
        if self._state == BATCH_OPEN:
            self._seal()
            self._state = BATCH_SEALED
        elif self._state != BATCH_SEALED:
            self._state_error("seal")
        return memoryview(self)

    def __getbuffer__(self, Py_buffer *view, int flags):
        # DONE without bytes: failed before it was ever sealed.
        if self._state not in (BATCH_SEALED, BATCH_DONE) or self._sealed_buf is None:
            raise BufferError(f"a {_STATE_NAMES[self._state]} {self._kind} exports no bytes "
                              f"(seal it first)")
        PyBuffer_FillInfo(view, self, self._sealed_buf.data, self._sealed_size_bytes,
                          1, flags)
        self._view_count += 1

    def __releasebuffer__(self, Py_buffer *view):
        self._view_count -= 1

    def mark_acknowledged(self):
        """The broker acknowledged the bytes: their memory may be released."""
        if self._state != BATCH_SEALED:
            self._state_error("acknowledge")
        self._state = BATCH_DONE

    def mark_failed(self):
        """Failed for good (or never sent): the memory may be released."""
        if self._state > BATCH_SEALED:
            self._state_error("fail")
        self._state = BATCH_DONE

    def release(self):
        """Give the buffers back to the pool.

        Raises:
            BatchStateError: not acknowledged or failed first, or released already.
            BufferError: a view of the bytes is still alive (they may be on their way
                to a socket).
        """
        if self._state != BATCH_DONE:
            raise BatchStateError(f"cannot release a {_STATE_NAMES[self._state]} {self._kind}: "
                                  f"only after mark_acknowledged() or mark_failed()")
        if self._view_count:
            raise BufferError(f"cannot release the {self._kind}: {self._view_count} view(s) "
                              f"of its bytes still alive")
        self._state = BATCH_RELEASED
        if self._records_buf is not None:  # None only in a Python subclass that never claimed one
            self._records_buf._give_back()
        if self._sealed_buf is not None:
            self._sealed_buf._give_back()
        self._data = NULL

    @property
    def record_count(self):
        return self._record_count

    @property
    def is_sealed(self):
        return self._state >= BATCH_SEALED

    @property
    def state(self):
        """'open', 'sealed', 'done' or 'released'."""
        return _STATE_NAMES[self._state]

    @property
    def view_count(self):
        """Exported views of the sealed bytes still alive."""
        return self._view_count


cdef void _store_crc(unsigned char *batch, Py_ssize_t size_bytes) noexcept:
    # The batch's CRC32C field, over attributes .. end (the header fields before
    # the attributes may change on the broker without breaking it).
    cdef const unsigned char *start = batch + _ATTRIBUTES
    cdef size_t length = size_bytes - _ATTRIBUTES
    cdef uint32_t crc
    if length >= _CRC_NOGIL_MIN_BYTES:
        with nogil:
            crc = nk_crc32c(0, start, length)
    else:
        crc = nk_crc32c(0, start, length)
    nk_store_be32(batch + _CRC, <int32_t>crc)


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
    """

    def __cinit__(self, PooledBuffer buffer not None, Py_ssize_t batch_size_bytes,
                  Py_ssize_t max_request_size_bytes, compression=None, *,
                  int timestamp_type=TIMESTAMP_CREATE_TIME, bint transactional=False,
                  bint control=False):
        if batch_size_bytes < HEADER_SIZE_BYTES + _RECORD_MIN_BYTES:
            raise ValueError(f"batch_size_bytes={batch_size_bytes} cannot hold the "
                             f"{HEADER_SIZE_BYTES}-byte batch header and a record")
        if not batch_size_bytes <= max_request_size_bytes <= INT32_MAX:
            raise ValueError(f"max_request_size_bytes={max_request_size_bytes} must be at "
                             f"least batch_size_bytes={batch_size_bytes} and at most "
                             f"{INT32_MAX}")
        if buffer.capacity_bytes < batch_size_bytes:
            raise ValueError(f"a buffer of {buffer.capacity_bytes} bytes cannot hold a batch of "
                             f"batch_size_bytes={batch_size_bytes}: take it from a pool of "
                             f"buffer_size_bytes >= batch_size_bytes")
        if timestamp_type not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
            raise ValueError(f"timestamp_type must be TIMESTAMP_CREATE_TIME (0) or "
                             f"TIMESTAMP_LOG_APPEND_TIME (1), got {timestamp_type}")
        self._claim(buffer, "batch")
        self._pos_bytes = HEADER_SIZE_BYTES
        self.batch_size_bytes = batch_size_bytes
        self.max_request_size_bytes = max_request_size_bytes
        self._compressor = _compressor_for(compression)
        self.codec = CODEC_NONE if self._compressor is None else self._compressor.codec
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
            ValueError: the first record alone exceeds max_request_size_bytes, or a
                bad timestamp.
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
        if _plain_bytes(<PyObject *>key, &k, &k_len) and \
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
        # bytes-like item that is not bytes, and only across its own record.  What
        # is the same for every row (timestamps, headers) is decided once.
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
                                object headers, int64_t timestamp_ms) except -2:
        # The one encoder every append path ends in.  Sizes the record, checks room
        # once, then writes it with no further checks.  The offset delta and the
        # lengths are never negative: they take the unsigned varint helpers.
        cdef int32_t offset_delta = self._record_count
        cdef int64_t ts_delta = 0
        cdef Py_ssize_t headers_bytes = 1, body_bytes, record_bytes
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
        if self._pos_bytes + record_bytes > self.batch_size_bytes:
            if offset_delta:
                self._full = True
                return -1
            self._make_room_for_first(record_bytes)
        p = self._data + self._pos_bytes
        end = p + record_bytes
        p = nk_write_uvarint64(p, <uint64_t>body_bytes << 1)
        p[0] = 0  # record attributes: none defined
        p = nk_write_varlong(p + 1, ts_delta)
        p = nk_write_uvarint64(p, <uint64_t>offset_delta << 1)
        p = _write_nullable(p, key, key_len)
        p = _write_nullable(p, value, value_len)
        if headers is None:
            p[0] = 0  # zero headers
        else:
            # Headers are the one part read twice from objects that user code (a
            # str's encoding, a list changed by another thread) may have changed.
            p = _write_headers(p, end, headers)
            if p != end:
                raise RuntimeError("headers changed during append")
        self._pos_bytes += record_bytes
        if offset_delta == 0:
            self._first_timestamp_ms = timestamp_ms
            self._max_timestamp_ms = timestamp_ms
        elif timestamp_ms > self._max_timestamp_ms:
            self._max_timestamp_ms = timestamp_ms
        self._record_count = offset_delta + 1
        return offset_delta

    cdef int _make_room_for_first(self, Py_ssize_t record_bytes) except -1:
        # The first record goes in whatever its size, up to max_request_size_bytes;
        # if the buffer is too small it is swapped (still empty) for a larger one.
        cdef Py_ssize_t needed = HEADER_SIZE_BYTES + record_bytes
        if needed > self.max_request_size_bytes:
            raise ValueError(f"the record is {needed} bytes when serialized in a batch, larger "
                             f"than max_request_size_bytes={self.max_request_size_bytes}")
        if needed > self._records_buf.capacity_bytes:
            self._swap_for_larger(needed)
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
        _store_crc(batch, self._sealed_size_bytes)

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
        _store_crc(batch, size_bytes)
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


# ----------------------------------------------------------------------------------
# Binary columns (Arrow layout) and the bulk paths' rows


# Contiguous with its item format: a typed buffer that is a view of another (a cast
# memoryview) exports its format only with its shape.
cdef int _TYPED_CONTIGUOUS = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT


cdef int _get_contiguous(object obj, Py_buffer *view, int flags, str name) except -1:
    # A column's buffers are held for its life: any exporter, one clear error.
    try:
        PyObject_GetBuffer(obj, view, flags)
    except (TypeError, BufferError) as exc:
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


cdef bint _is_native_signed_int(const char *fmt):
    # A struct-module format of one native-order signed integer: 'i', 'l', 'q', ...
    if fmt == NULL:
        return False
    f = fmt
    if f[:1] in (b'@', b'='):
        f = f[1:]
    return f in (b'b', b'h', b'i', b'l', b'q', b'n')


@cython.final
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
            if self.length < 0 or first + self.length + 1 > n_offsets:
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
        (no copy: the array's buffers are used in place)."""
        import pyarrow
        if isinstance(array, pyarrow.ChunkedArray):
            raise TypeError("a ChunkedArray has several buffers: pass its .chunks one by one")
        if not isinstance(array, pyarrow.Array):
            raise TypeError(f"expected a pyarrow array, got {type(array).__name__}")
        width = _arrow_offset_width(pyarrow, array.type, "a pyarrow array")
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


cdef int _arrow_offset_width(object pyarrow, object arrow_type, str what) except -1:
    # Bytes per offset of a pyarrow binary-like type; anything else is refused.
    types = pyarrow.types
    if types.is_binary(arrow_type) or types.is_string(arrow_type):
        return 4
    if types.is_large_binary(arrow_type) or types.is_large_string(arrow_type):
        return 8
    raise TypeError(f"{what} of {arrow_type} is not a binary column: expected binary, "
                    f"large_binary, string or large_string")


cdef BinaryColumn _as_column(object obj, str name):
    if isinstance(obj, BinaryColumn):
        return <BinaryColumn>obj
    if _is_pyarrow(obj):
        return BinaryColumn.from_arrow(obj)
    raise TypeError(f"{name} must be a BinaryColumn or a pyarrow binary/string array, "
                    f"not {type(obj).__name__}")


cdef enum:
    # Where a BinarySource reads its rows from.
    _SOURCE_SEQUENCE = 0    # an exact list or tuple of bytes-like or None
    _SOURCE_COLUMN = 1      # one BinaryColumn
    _SOURCE_CHUNKS = 2      # BinaryColumns end to end (a pyarrow ChunkedArray)


cdef inline bint _read_fast(BinarySource source, Py_ssize_t i, const unsigned char **data,
                            Py_ssize_t *length) noexcept:
    # The common cases of BinarySource.get, inlined into the bulk loop: a column
    # element with sound offsets, or bytes / None in a list.  False for anything
    # else (a tuple, chunks, another bytes-like, an error): then get() decides.
    cdef PyObject *item
    if source._kind == _SOURCE_COLUMN:
        return source._column._element(i, data, length)
    if source._kind == _SOURCE_SEQUENCE and PyList_CheckExact(source._sequence):
        if i < PyList_GET_SIZE(source._sequence):
            item = PyList_GET_ITEM(source._sequence, i)
            return _plain_bytes(item, data, length)
    return False


cdef inline bint _is_pyarrow(object obj):
    # pyarrow is optional: its objects are recognised without importing it.
    return type(obj).__module__.startswith("pyarrow")


@cython.final
cdef class BinarySource:
    """One bulk argument of nullable binaries, read in place by row index: an exact
    list or tuple of bytes-like or None, a BinaryColumn, or a pyarrow Binary,
    String, LargeBinary or LargeString Array or ChunkedArray.  Build it with
    binary_source().  Used by one thread at a time (the chunk it last read is
    remembered)."""

    cdef int get(self, Py_ssize_t i, const unsigned char **data, Py_ssize_t *length,
                 Py_buffer *view) except -1:
        # Row i (0 <= i < self.length, the caller's check): data/length point at its
        # bytes (length -1: null).  Returns 1 when a view was taken that the caller
        # releases after use (a bytes-like item that is not bytes), else 0.
        cdef PyObject *item
        if self._kind == _SOURCE_SEQUENCE:
            # The length is read again: a list may shrink while we work.
            if PyList_CheckExact(self._sequence):
                if i >= PyList_GET_SIZE(self._sequence):
                    raise ValueError(f"{self.name} changed size during the call")
                item = PyList_GET_ITEM(self._sequence, i)
            else:
                item = PyTuple_GET_ITEM(self._sequence, i)
            # Borrowed: no Python code runs before bytes or None are used.
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
        a column -- for the few rows that take a per-record path."""
        cdef const unsigned char *data
        cdef Py_ssize_t length
        cdef Py_buffer view
        if not 0 <= i < self.length:
            raise IndexError(f"{self.name}[{i}] is outside its {self.length} rows")
        if self._kind == _SOURCE_SEQUENCE:
            return self._sequence[i]
        self.get(i, &data, &length, &view)
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
            source._sequence = obj
            source.length = len(obj)
        elif isinstance(obj, BinaryColumn):
            source._kind = _SOURCE_COLUMN
            source._column = obj
            source.length = source._chunk_end = (<BinaryColumn>obj).length
        elif _is_pyarrow(obj) and hasattr(obj, "chunks"):
            _chunked_source(source, obj, name)
        elif _is_pyarrow(obj) and hasattr(obj, "buffers"):
            import pyarrow
            _arrow_offset_width(pyarrow, obj.type, name + ": a pyarrow array")
            source._kind = _SOURCE_COLUMN
            source._column = BinaryColumn.from_arrow(obj)
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
    _arrow_offset_width(pyarrow, chunked.type, name + ": a pyarrow array")
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


cdef enum:
    # Where Rows takes each row's timestamp from.
    _TS_NOW = 0         # none given: the builder's clock, read once per bulk call
    _TS_SEQUENCE = 1    # a list or tuple of int or None (None: now)
    _TS_INT64 = 2       # a buffer of int64


@cython.final
cdef class Rows:
    """The rows of a bulk append (Producer.send_batch(), append_many(),
    append_column()): each argument read in place, row by row, with no Python
    object made per row.

    Args:
        values: per row bytes-like or None (a tombstone): a list or tuple, a
            BinaryColumn (any buffers + offsets), or a pyarrow Binary, String,
            LargeBinary or LargeString Array or ChunkedArray (nulls allowed).
        keys: None (no keys), or per row bytes-like or None, in any form values
            takes.
        headers: None; or per row None or a list of (str or bytes key, bytes or
            None value) pairs, in a list or tuple; or a dict {key: column}, every
            row getting each key with that column's value at the row (a column in
            any form values takes, its nulls null header values).
        timestamps_ms: None (now), a list or tuple of int or None (now), or a
            buffer of int64 (array('q'), a numpy int64 array).

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
        them: for the one row per batch that goes the per-record way."""
        self._check_row(i)
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
            name = key.encode("utf-8")
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
