"""Batch memory: a bounded pool of buffers, and the life cycle every pooled batch shares.

A BufferPool hands out PooledBuffers of one size (a one-off larger buffer for a
first record that needs it), all of them bounded by total_bytes.  PooledBatch is the
base of both builders -- _batch.RecordBatchBuilder (v2) and
_legacy.LegacyMessageSetBuilder (v0/v1) -- so the accumulator and the sender drive
either through one interface: the batch's buffers, its states and the read-only
export of its sealed bytes.

Life of a batch:  OPEN (appends) -> seal() -> SEALED (bytes exported, read-only) ->
mark_acknowledged() / mark_failed() -> DONE -> release() -> RELEASED.  Its memory goes
back to the pool only from DONE with no exported view alive: bytes that may still be
on their way to a socket are never reused.

Threads: the pool is shared (BufferPool's docstring gives its locks); a batch is
owned by one thread at a time (PooledBatch's, in _pool.pxd).
"""
import threading
import time

from netkafka.errors import BatchStateError, BufferPoolExhausted

cimport cython
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.pythread cimport (
    WAIT_LOCK, PyThread_acquire_lock, PyThread_allocate_lock, PyThread_free_lock,
    PyThread_release_lock,
)
from libc.stdint cimport INT32_MAX
from libc.stdlib cimport free, malloc

from netkafka.record._compression cimport CODEC_NONE

_STATE_NAMES = ("open", "sealed", "done", "released")


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
    at interpreter exit).  _reserve_lock is held by the thread the compression reserve
    is lent to; lock order: _reserve_lock, then the Compressor's lock and _mutex.

    The compression reserve (compression_reserve=True): one buffer set aside, out of
    total_bytes, for a sealing batch's compressed copy when the pool has no room for
    it.  A producer faster than its broker keeps the pool full; without the reserve
    such batches went out uncompressed, six times the bytes for the broker to take in
    (measured: 14% of the records of the 100 B lz4 throughput row, send(), in
    bench/; the topic's log showed them).  The reserve is lent to one sealing thread
    at a time, others wait with the GIL released: no deadlock, as its holder only
    compresses before giving it back (the Compressor's lock serialises compressing
    anyway).  When the copy is used, the batch's plain buffer (of the same size)
    becomes the reserve.  A pool of fewer than two buffers has no reserve.

    Args:
        buffer_size_bytes: capacity of each pooled buffer (see pool_buffer_size_bytes).
        total_bytes: bound on the capacity of all buffers alive, in use or cached, the
            reserve included.
        compression_reserve: set one buffer aside for compressed copies.
    """

    def __cinit__(self, Py_ssize_t buffer_size_bytes, Py_ssize_t total_bytes,
                  bint compression_reserve=False):
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
        if compression_reserve and total_bytes >= 2 * buffer_size_bytes:
            self._reserve_lock = PyThread_allocate_lock()
            self._reserve = <unsigned char *>malloc(buffer_size_bytes)
            if self._reserve_lock == NULL or self._reserve == NULL:
                raise MemoryError("cannot allocate the compression reserve")
            self._in_use_bytes = buffer_size_bytes
            self.has_compression_reserve = True

    def __dealloc__(self):
        # Every handed-out buffer holds a reference to its pool, so none is in use here.
        cdef Py_ssize_t i
        if self._free != NULL:
            for i in range(self._free_count):
                free(self._free[i])
            free(self._free)
        if self._mutex != NULL:
            PyThread_free_lock(self._mutex)
        # A lent reserve holds a reference to the pool: the reserve is home here.
        free(self._reserve)
        if self._reserve_lock != NULL:
            PyThread_free_lock(self._reserve_lock)

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

    cdef PooledBuffer _take_reserve(self):
        # Waits (GIL released) while another thread compresses into the reserve.
        cdef PooledBuffer buf = PooledBuffer.__new__(PooledBuffer)
        with nogil:
            PyThread_acquire_lock(self._reserve_lock, WAIT_LOCK)
        buf.data = self._reserve
        self._reserve = NULL
        self.reserve_lends += 1
        buf.capacity_bytes = self.buffer_size_bytes
        buf.pooled = True
        buf.reserve = True
        buf.pool = self
        return buf

    cdef void _return_reserve(self, unsigned char *data) noexcept:
        # Called by the reserve's holder: data (buffer_size_bytes, counted in use)
        # becomes the reserve.
        self._reserve = data
        PyThread_release_lock(self._reserve_lock)

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
            if self.reserve:
                self.reserve = False
                self.pool._return_reserve(data)
            else:
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


cdef int check_max_request_size(Py_ssize_t batch_size_bytes,
                                Py_ssize_t max_request_size_bytes) except -1:
    if not batch_size_bytes <= max_request_size_bytes <= INT32_MAX:
        raise ValueError(f"max_request_size_bytes={max_request_size_bytes} must be at "
                         f"least batch_size_bytes={batch_size_bytes} and at most "
                         f"{INT32_MAX}")
    return 0


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
        # When the pool has no room for the compressed copy: the pool's compression
        # reserve if it has one and the copy fits (see BufferPool), else None and
        # the batch is sealed uncompressed, never failing for it.  Waiting for pool
        # memory could deadlock (every buffer held by open batches waiting to seal,
        # the memory freed only by sending them), failing would drop records that
        # are valid as they are; sealed_codec tells what was written.
        cdef BufferPool pool = self._records_buf.pool
        cdef PooledBuffer out
        if size_bytes > pool.total_bytes:
            return None
        out = pool._try_acquire(size_bytes)
        if (out is None and pool.has_compression_reserve and self._records_buf.pooled
                and size_bytes <= pool.buffer_size_bytes):
            out = pool._take_reserve()
        return out

    cdef void _use_compressed(self, PooledBuffer out, Py_ssize_t size_bytes) noexcept:
        # The plain records will never be sent: their memory goes back to the pool
        # now -- or becomes the pool's reserve when the copy was written there.
        cdef unsigned char *plain
        out.claimed = True
        self._sealed_buf = out
        self._sealed_size_bytes = size_bytes
        self.sealed_codec = self.codec
        if out.reserve:
            out.reserve = False
            plain = self._records_buf.data
            self._records_buf.data = NULL
            out.pool._return_reserve(plain)
        else:
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
