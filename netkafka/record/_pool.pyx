"""Batch memory: a bounded pool of buffers, and the life cycle every pooled batch shares.

A BufferPool hands out PooledBuffers in size classes (a one-off larger buffer for a
first record that needs it), all of them bounded by total_bytes; a batch starts
small and grows a class at a time while OPEN.  PooledBatch is the
base of both builders -- _batch.RecordBatchBuilder (v2) and
_legacy.LegacyMessageSetBuilder (v0/v1) -- so the accumulator and the sender drive
either through one interface: the batch's buffers, its states and the read-only
export of its sealed bytes.

Life of a batch:  OPEN (appends; the records may move to a larger buffer) -> seal() -> SEALED (bytes exported, read-only) ->
mark_acknowledged() / mark_failed() -> DONE -> release() -> RELEASED.  Its memory goes
back to the pool only from DONE with no exported view alive: bytes that may still be
on their way to a socket are never reused.

Threads: the pool is shared (BufferPool's docstring gives its locks); a batch is
owned by one thread at a time (PooledBatch's, in _pool.pxd).
"""
import collections
import threading
import time
from _thread import allocate_lock

from netkafka.errors import BatchStateError, BufferPoolExhausted, RecordTooLargeError

cimport cython
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.pythread cimport (
    WAIT_LOCK, PyThread_acquire_lock, PyThread_allocate_lock, PyThread_free_lock,
    PyThread_release_lock,
)
from libc.stdint cimport INT32_MAX
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from netkafka.record._compression cimport CODEC_NONE

_STATE_NAMES = ("open", "sealed", "done", "released")


# ----------------------------------------------------------------------------------
# Buffer pool


@cython.final
cdef class BufferPool:
    """Buffers for record batches in size classes, with a bound on the memory they take.

    The classes are min_buffer_bytes, doubled while below buffer_size_bytes, and
    buffer_size_bytes itself.  A batch starts in a buffer of the smallest class and
    moves up a class when an append does not fit (PooledBatch._grow), so memory is
    charged for what batches hold, not for batch_size per open batch: with 1 MiB
    batches and 32 MiB, 100 partitions used to find the pool empty after 32 open
    batches.  A request larger than buffer_size_bytes (a batch whose first record
    alone is larger) gets a one-off buffer, counted against total_bytes while in use
    and freed on release.

    Buffers are allocated on first demand and then reused: a released buffer goes to
    its class's free list, not back to malloc, so steady-state batching allocates
    nothing.  Cached free buffers count against total_bytes too; when a request finds
    no room they are freed, largest class first, to make it.

    Thread safety: acquire/try_acquire run on user threads (the accumulator), release
    on I/O threads (or wherever a forgotten buffer is garbage-collected).  _mutex, a C
    lock held only around a few lines of C, guards the free lists and the counts.
    _lock, a threading.RLock, guards _line and _sleepers, the locks blocked acquires
    sleep on (one each, held until a wake releases it): a release wakes them only when
    _waiters says someone waits, so giving
    memory back never runs Python code otherwise (it may run from __dealloc__, even
    at interpreter exit).  Waiters are served in the order they came, as the Java
    client's BufferPool serves its waiters: a waiter takes memory only if it leaves
    room for the buffers of all those ahead of it in _line, and a request not in
    line leaves room for the whole line.  Without that a request for a large buffer
    (a batch of a partition whose batches are large, a record larger than a batch)
    never found room in a full pool while smaller ones took each buffer given back,
    and timed out after max_block_ms.  A waiter that polls instead of sleeping
    (backoff='park') keeps a place in the same line (join_line), so the strategies
    cannot overtake each other either.  _reserve_lock is held by the
    thread the compression reserve is lent to; lock order: _reserve_lock, then the
    Compressor's lock and _mutex; _lock, then _mutex.

    The compression reserve (compression_reserve=True): one buffer set aside, out of
    total_bytes, for a sealing batch's compressed copy when the pool has no room for
    it.  A producer faster than its broker keeps the pool full; without the reserve
    such batches went out uncompressed, six times the bytes for the broker to take in
    (measured: 14% of the records of the 100 B lz4 throughput row, send(), in
    bench/; the topic's log showed them).  The reserve is lent to one sealing thread
    at a time, others wait with the GIL released: no deadlock, as its holder only
    compresses (and copies the result back, below) before giving it back (the
    Compressor's lock serialises compressing anyway).  The reserve is of the largest class, so it holds the compressed copy
    of any batch of up to batch_size (pool_buffer_size_bytes), whatever class the
    batch grew to.  It never leaves the pool: when the copy is used it moves into
    the batch's own plain buffer (a copy is used only when smaller than the plain
    bytes, so it fits) and the reserve is given back before seal() returns, never
    lent while a batch waits to be sent.  A pool whose bound holds fewer than two
    buffers of the largest class has no reserve.

    Args:
        buffer_size_bytes: capacity of the largest class (see pool_buffer_size_bytes),
            and of the compression reserve.
        total_bytes: bound on the capacity of all buffers alive, in use or cached, the
            reserve included.
        min_buffer_bytes: capacity of the smallest class; None: buffer_size_bytes (one
            class: every batch takes a whole buffer from the start).
        compression_reserve: set one buffer aside for compressed copies.
    """

    def __cinit__(self, Py_ssize_t buffer_size_bytes, Py_ssize_t total_bytes,
                  min_buffer_bytes=None, bint compression_reserve=False):
        cdef Py_ssize_t size
        if buffer_size_bytes <= 0:
            raise ValueError(f"buffer_size_bytes must be positive, got {buffer_size_bytes}")
        if total_bytes < buffer_size_bytes:
            raise ValueError(f"total_bytes ({total_bytes}) must be at least "
                             f"buffer_size_bytes ({buffer_size_bytes})")
        size = buffer_size_bytes if min_buffer_bytes is None else min_buffer_bytes
        if not 0 < size <= buffer_size_bytes:
            raise ValueError(f"min_buffer_bytes={min_buffer_bytes} must be positive and at "
                             f"most buffer_size_bytes={buffer_size_bytes}")
        self.buffer_size_bytes = buffer_size_bytes
        self.min_buffer_bytes = size
        self.total_bytes = total_bytes
        self.largest_bytes = total_bytes
        while size < buffer_size_bytes:
            self._class_bytes[self._class_count] = size
            self._class_count += 1
            size *= 2
        self._class_bytes[self._class_count] = buffer_size_bytes
        self._class_count += 1
        # Re-entrant: the cyclic collector may give a forgotten buffer back (_give_back,
        # which wakes the waiters) on a thread that holds _lock -- one polling its place
        # in line, say -- and a plain Lock hung that thread and every waiter for good.
        self._lock = threading.RLock()
        self._sleepers = []
        self._line = collections.deque()
        self._mutex = PyThread_allocate_lock()
        if self._mutex == NULL:
            raise MemoryError("cannot allocate a lock")
        if compression_reserve and total_bytes >= 2 * buffer_size_bytes:
            self._reserve_lock = PyThread_allocate_lock()
            self._reserve = <unsigned char *>malloc(buffer_size_bytes)
            if self._reserve_lock == NULL or self._reserve == NULL:
                raise MemoryError("cannot allocate the compression reserve")
            self._in_use_bytes = buffer_size_bytes
            # Counted in use for good: no request can have it.
            self.largest_bytes = total_bytes - buffer_size_bytes
            self.has_compression_reserve = True

    def __dealloc__(self):
        # Every handed-out buffer holds a reference to its pool, so none is in use here.
        cdef int i
        for i in range(self._class_count):
            while self._free[i] != NULL:
                free(_pop_free(&self._free[i]))
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

    @property
    def size_classes(self):
        """The capacities of the size classes, smallest first."""
        return tuple(self._class_bytes[i] for i in range(self._class_count))

    def capacity_for(self, Py_ssize_t size_bytes):
        """The capacity a request for size_bytes (0: the smallest class) is given."""
        cdef int size_class = self._class_for(size_bytes)
        return size_bytes if size_class < 0 else self._class_bytes[size_class]

    def try_acquire(self, Py_ssize_t size_bytes=0, LinePlace place=None):
        """A buffer of the smallest class holding size_bytes (0: the smallest class;
        above buffer_size_bytes: a one-off buffer of size_bytes), or None when the
        pool has no room for it now.  place: the caller's place in line (join_line),
        whose size is asked instead; served, it leaves the line.

        Raises:
            ValueError: size_bytes is larger than largest_bytes: no wait could serve it;
                place is no longer in line.
        """
        if place is None:
            return self._try_acquire(size_bytes)
        with self._lock:
            return self._try_acquire_in_line_locked(place)

    def acquire(self, Py_ssize_t size_bytes=0, timeout_ms=None, LinePlace place=None):
        """As try_acquire, but wait for a release up to timeout_ms (None: forever).
        Returns None if the time runs out.  Without place the wait takes a place at
        the back of the line and leaves it on return; with one it keeps it (the
        caller leaves it if it is not served).
        """
        cdef PooledBuffer buf
        cdef bint own_place = place is None
        if own_place:
            buf = self._try_acquire(size_bytes)
            if buf is not None:
                return buf
        deadline = None if timeout_ms is None else time.monotonic() + max(timeout_ms, 0) / 1000.0
        # acquire() never runs with _lock held, so one release() lets it go while asleep.
        with self._lock:
            if own_place:
                place = self._join_line_locked(size_bytes)
            try:
                while True:
                    # A lock of its own, registered before each retry: a wake from then on
                    # unlocks it, so the sleep returns at once even when the wake came
                    # first.  On a Condition, the collector freeing a forgotten buffer on
                    # this thread (which may take _lock again) between the retry and the
                    # wait notified before the wait registered: the head of the line slept
                    # its whole timeout, and those behind it with it.
                    sleeper = allocate_lock()
                    sleeper.acquire()
                    self._sleepers.append(sleeper)
                    self._add_waiter(1)
                    try:
                        buf = self._try_acquire_in_line_locked(place)
                        if buf is not None:
                            return buf
                        remaining_s = None if deadline is None else deadline - time.monotonic()
                        if remaining_s is not None and remaining_s <= 0:
                            return None
                        self._lock.release()
                        try:
                            sleeper.acquire(True, -1 if remaining_s is None else remaining_s)
                        finally:
                            self._lock.acquire()
                    finally:
                        self._add_waiter(-1)
                        try:
                            self._sleepers.remove(sleeper)
                        except ValueError:
                            pass  # woken: the wake took it out
            finally:
                if own_place:
                    self._leave_line_locked(place)

    def join_line(self, Py_ssize_t size_bytes=0):
        """A place at the back of the line of waiters for a buffer of size_bytes, for
        a caller that polls try_acquire(place=) or waits in acquire(place=); give it
        up with leave_line() unless it was served.

        Raises:
            ValueError: size_bytes is larger than largest_bytes: no wait could serve it.
        """
        with self._lock:
            return self._join_line_locked(size_bytes)

    def leave_line(self, LinePlace place not None):
        """Gives place up (nothing if it was served or given up already)."""
        with self._lock:
            self._leave_line_locked(place)

    cdef LinePlace _join_line_locked(self, Py_ssize_t size_bytes):
        # With _lock held.
        cdef LinePlace place = LinePlace.__new__(LinePlace)
        place.size_bytes = size_bytes
        place.capacity_bytes = self.capacity_for(size_bytes)
        if place.capacity_bytes > self.largest_bytes:
            raise ValueError(f"a buffer of {size_bytes} bytes was asked of a pool bounded "
                             f"to {self.largest_bytes} bytes ({_bound_text(self)})")
        self._line.append(place)
        self._add_line_bytes_locked(place.capacity_bytes)
        return place

    cdef int _leave_line_locked(self, LinePlace place) except -1:
        # With _lock held.  LinePlace compares by identity: remove() takes this one.
        if place in self._line:
            self._line.remove(place)
            self._add_line_bytes_locked(-place.capacity_bytes)
            # Those behind it may go now, and others may use what it does not need.
            self._wake_locked()
        return 0

    cdef int _wake_locked(self) except -1:
        # With _lock held: wakes every sleeper registered so far.  The list is swapped
        # out first: the collector may run a release (and this) from inside the loop.
        cdef list sleepers = self._sleepers
        self._sleepers = []
        for sleeper in sleepers:
            sleeper.release()
        return 0

    cdef PooledBuffer _try_acquire_in_line_locked(self, LinePlace place):
        # With _lock held: a buffer for place if it leaves room for every waiter
        # ahead of it; served, place leaves the line.
        cdef Py_ssize_t ahead_bytes = 0
        cdef LinePlace other
        cdef PooledBuffer buf
        for other in self._line:
            if other is place:
                break
            ahead_bytes += other.capacity_bytes
        else:
            raise ValueError("the place is no longer in line (served or given up)")
        buf = self._try_acquire(place.size_bytes, ahead_bytes)
        if buf is not None:
            self._leave_line_locked(place)
        return buf

    cdef int _add_line_bytes_locked(self, Py_ssize_t change) except -1:
        # With _lock held.
        PyThread_acquire_lock(self._mutex, WAIT_LOCK)
        self._line_bytes += change
        PyThread_release_lock(self._mutex)
        return 0

    cdef void _add_waiter(self, int change) noexcept:
        PyThread_acquire_lock(self._mutex, WAIT_LOCK)
        self._waiters += change
        PyThread_release_lock(self._mutex)

    cdef int _class_for(self, Py_ssize_t size_bytes) noexcept:
        cdef int i
        for i in range(self._class_count):
            if size_bytes <= self._class_bytes[i]:
                return i
        return -1

    cdef PooledBuffer _take_reserve(self):
        # Waits (GIL released) while another thread compresses into the reserve.
        cdef PooledBuffer buf = PooledBuffer.__new__(PooledBuffer)
        with nogil:
            PyThread_acquire_lock(self._reserve_lock, WAIT_LOCK)
        buf.data = self._reserve
        self._reserve = NULL
        self.reserve_lends += 1
        buf.capacity_bytes = self.buffer_size_bytes
        buf.size_class = self._class_count - 1
        buf.reserve = True
        buf.pool = self
        return buf

    cdef void _return_reserve(self, unsigned char *data) noexcept:
        # Called by the reserve's holder: data (buffer_size_bytes, counted in use)
        # becomes the reserve.
        self._reserve = data
        PyThread_release_lock(self._reserve_lock)

    cdef PooledBuffer _try_acquire(self, Py_ssize_t size_bytes, Py_ssize_t ahead_bytes=-1):
        # Thread-safe.  None when there is no room now.
        cdef int size_class = self._class_for(size_bytes)
        cdef Py_ssize_t capacity = size_bytes
        cdef unsigned char *data = NULL
        cdef bint room = True
        cdef int i
        cdef PooledBuffer buf
        if size_class >= 0:
            capacity = self._class_bytes[size_class]
        if capacity > self.largest_bytes:
            raise ValueError(f"a buffer of {size_bytes} bytes was asked of a pool bounded "
                             f"to {self.largest_bytes} bytes ({_bound_text(self)})")
        PyThread_acquire_lock(self._mutex, WAIT_LOCK)
        if ahead_bytes < 0:
            ahead_bytes = self._line_bytes
        if ahead_bytes and self._in_use_bytes + capacity + ahead_bytes > self.total_bytes:
            room = False  # what is left is for those ahead in line
        elif size_class >= 0 and self._free[size_class] != NULL:
            data = _pop_free(&self._free[size_class])
            self._cached_bytes -= capacity
        else:
            # Cached buffers count against the bound too: drop some if needed, the
            # largest first (the fewest frees to make room).
            i = self._class_count - 1
            while self._in_use_bytes + self._cached_bytes + capacity > self.total_bytes \
                    and self._cached_bytes:
                while self._free[i] == NULL:
                    i -= 1
                free(_pop_free(&self._free[i]))
                self._cached_bytes -= self._class_bytes[i]
            room = self._in_use_bytes + self._cached_bytes + capacity <= self.total_bytes
            if room:
                # At least a pointer: a cached buffer holds its free list's link.
                data = <unsigned char *>malloc(max(capacity, <Py_ssize_t>sizeof(void *)))
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
        buf.size_class = size_class
        buf.pool = self
        return buf

    cdef void _give_back(self, unsigned char *data, Py_ssize_t capacity_bytes,
                         int size_class) noexcept:
        # Runs on whatever thread releases (an I/O thread, or the garbage collector).
        # A cached buffer stays within the bound: it was counted in use until now.
        cdef int waiters
        PyThread_acquire_lock(self._mutex, WAIT_LOCK)
        self._in_use_bytes -= capacity_bytes
        if size_class >= 0:
            memcpy(data, &self._free[size_class], sizeof(void *))
            self._free[size_class] = data
            self._cached_bytes += capacity_bytes
        else:
            free(data)
        waiters = self._waiters
        PyThread_release_lock(self._mutex)
        if waiters:
            with self._lock:
                self._wake_locked()


cdef str _bound_text(BufferPool pool):
    # The bound a record's batch must fit, as the user set it.
    if pool.largest_bytes == pool.total_bytes:
        return (f"buffer_memory={pool.total_bytes}, all the memory the producer holds "
                f"records in")
    return (f"the {pool.largest_bytes} bytes of buffer_memory={pool.total_bytes} the "
            f"producer holds records in ({pool.total_bytes - pool.largest_bytes} are set "
            f"aside for compressing batches)")


cdef inline unsigned char *_pop_free(unsigned char **head) noexcept:
    # The first buffer of a non-empty free list; its first bytes link to the next.
    cdef unsigned char *data = head[0]
    memcpy(head, data, sizeof(void *))
    return data


@cython.final
cdef class LinePlace:
    """A waiter's place in a BufferPool's line (BufferPool.join_line).  Compares by
    identity, so that two waiters for the same size keep places of their own."""


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
                self.pool._give_back(data, self.capacity_bytes, self.size_class)

    @property
    def pooled(self):
        """True: returns to its size class's free list; False: a one-off buffer."""
        return self.size_class >= 0

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

    cdef int _claim(self, PooledBuffer buffer, str kind, Py_ssize_t limit_bytes) except -1:
        if buffer.claimed:
            raise BatchStateError("buffer already belongs to another builder")
        if buffer.data == NULL:
            raise BatchStateError("buffer was released")
        if buffer.capacity_bytes < limit_bytes and buffer.pool.buffer_size_bytes < limit_bytes:
            # It could grow only into one-off buffers, malloc'd and freed per batch.
            raise ValueError(f"a {kind} of up to {limit_bytes} bytes cannot start in a buffer of "
                             f"{buffer.capacity_bytes} bytes from a pool of buffer_size_bytes="
                             f"{buffer.pool.buffer_size_bytes}: take it from a pool of "
                             f"buffer_size_bytes >= batch_size_bytes")
        buffer.claimed = True
        self._kind = kind
        self._records_buf = buffer
        self._data = buffer.data
        self._limit_bytes = limit_bytes
        self._end_bytes = min(limit_bytes, buffer.capacity_bytes)
        self.sealed_codec = CODEC_NONE
        self._state = BATCH_OPEN
        return 0

    cdef int _state_error(self, str action) except -1:
        raise BatchStateError(f"cannot {action} a {_STATE_NAMES[self._state]} {self._kind}")

    cdef int _grow(self, Py_ssize_t needed_bytes, Py_ssize_t wanted_bytes,
                   bint first) except -1:
        # Only while OPEN, when no view of the bytes exists (__getbuffer__ refuses an
        # open batch), so moving them can surprise no reader.  The next class up at
        # least (doubling keeps the copies to about one per byte of a full batch), and
        # room for wanted_bytes: see _make_room.
        cdef PooledBuffer old = self._records_buf
        cdef BufferPool pool = old.pool
        cdef PooledBuffer larger
        if self._state != BATCH_OPEN:
            self._state_error("grow")
        if first and needed_bytes > pool.largest_bytes:
            # No wait would make room for it (kafka-python and Java refuse it as too
            # large, too), and the pool's own refusal names no record.  Not total_bytes:
            # a record that fits it but not beside the compression reserve waited
            # max_block_ms for memory on an idle producer, then timed out.
            raise RecordTooLargeError(
                f"the record is {needed_bytes} bytes when serialized in a batch, larger "
                f"than {_bound_text(pool)}")
        larger = pool._try_acquire(max(needed_bytes, min(
            max(2 * old.capacity_bytes, wanted_bytes), pool.buffer_size_bytes)))
        if larger is None:
            if first:
                raise BufferPoolExhausted(
                    f"a {needed_bytes}-byte buffer for the first record is not available: "
                    f"{pool.available_bytes} of {pool.total_bytes} bytes free")
            return 0
        larger.claimed = True
        self._copy_written(larger.data)
        old._give_back()
        self._records_buf = larger
        self._data = larger.data
        self._end_bytes = min(self._limit_bytes, larger.capacity_bytes)
        return 1

    cdef int _copy_written(self, unsigned char *dest) except -1:
        # A held value's place holds nothing yet: copying it would be the copy
        # holding the value saves.
        cdef Py_ssize_t pos = 0, at, i
        if self._held is not None:
            for i in range(0, PyList_GET_SIZE(self._held), 2):
                at = <object>PyList_GET_ITEM(self._held, i)
                memcpy(dest + pos, self._data + pos, at - pos)
                pos = at + PyBytes_GET_SIZE(<object>PyList_GET_ITEM(self._held, i + 1))
        memcpy(dest + pos, self._data + pos, self._pos_bytes - pos)
        return 0

    cdef int _fill_held(self) except -1:
        cdef Py_ssize_t i
        cdef object value
        if self._held is None:
            return 0
        for i in range(0, PyList_GET_SIZE(self._held), 2):
            value = <object>PyList_GET_ITEM(self._held, i + 1)
            memcpy(self._sealed_buf.data + <Py_ssize_t><object>PyList_GET_ITEM(self._held, i),
                   PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value))
        self._held = None
        return 0

    cdef object _raw_view(self):
        self._raw_export = True
        try:
            return memoryview(self)
        finally:
            self._raw_export = False

    cdef int _make_room(self, Py_ssize_t record_bytes) except -1:
        # Room for two more records of this one's size too: a batch of large records
        # (128 KiB in 1 MiB batches) then grows once, copying one record, not once per
        # class up, copying four of its seven: 12.1-12.2 us per record appended and
        # sealed before, 9.1-9.6 after (2-core reference machine, hot caches).  Small
        # records keep growing a class at a time.
        cdef Py_ssize_t needed = self._pos_bytes + record_bytes
        if needed <= self._limit_bytes and self._grow(needed, needed + 2 * record_bytes,
                                                      False):
            return 1
        self._full = True
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
        if size_bytes > pool.largest_bytes:
            return None
        out = pool._try_acquire(size_bytes)
        if (out is None and pool.has_compression_reserve
                and size_bytes <= pool.buffer_size_bytes):
            out = pool._take_reserve()
        return out

    cdef void _use_compressed(self, PooledBuffer out, Py_ssize_t size_bytes) noexcept:
        # The plain records will never be sent: their memory goes back to the pool
        # now.  A copy written in the pool's reserve moves into the plain buffer
        # instead (size_bytes is less than the plain bytes), and the reserve goes
        # back at once (BufferPool's docstring says why).
        self._sealed_size_bytes = size_bytes
        self.sealed_codec = self.codec
        if out.reserve:
            memcpy(self._data, out.data, size_bytes)
            out._give_back()
            self._sealed_buf = self._records_buf
            return
        out.claimed = True
        self._sealed_buf = out
        self._records_buf._give_back()
        self._data = NULL

    cdef int _seal(self) except -1:
        raise NotImplementedError("PooledBatch is the base of the builders, not a builder")

    def seal(self, contiguous=True):
        """Make the bytes final (compress if a codec is set and it pays, header,
        checksums) and return a read-only memoryview of them.

        A sealed batch takes no more records; sealing again returns another view of
        the same bytes (for a retry).  When the pool has no room for the compressed
        copy the batch is sealed uncompressed (sealed_codec says so).

        contiguous=False: the view leaves the places of the values the batch holds
        without a copy unwritten (see segments()): its size and header are the
        batch's, the rest is for no reader.  It keeps the bytes from release() as
        any view does, without copying the values.

        Raises:
            ValueError: no record was appended (Kafka has no empty batches).
            BatchStateError: acknowledged, failed or released already.
        """
        if self._state == BATCH_OPEN:
            self._seal()
            self._state = BATCH_SEALED
        elif self._state != BATCH_SEALED:
            self._state_error("seal")
        return memoryview(self) if contiguous else self._raw_view()

    def segments(self):
        """The sealed bytes as a socket is to take them: a read-only memoryview, or
        a tuple of them, in order, when the batch holds values it did not copy (the
        values' own memoryviews among slices of its buffer) -- the copy the batch
        saved is not made here either.  Like any view they keep the bytes from
        release() until they go."""
        cdef object raw = self._raw_view()
        cdef list held = self._held
        cdef list parts
        cdef Py_ssize_t pos = 0, at, i
        if held is None:
            return raw
        parts = []
        for i in range(0, len(held), 2):
            at = held[i]
            parts.append(raw[pos:at])
            parts.append(memoryview(held[i + 1]))
            pos = at + len(held[i + 1])
        parts.append(raw[pos:])
        return tuple(parts)

    def __getbuffer__(self, Py_buffer *view, int flags):
        # DONE without bytes: failed before it was ever sealed.
        if self._state not in (BATCH_SEALED, BATCH_DONE) or self._sealed_buf is None:
            raise BufferError(f"a {_STATE_NAMES[self._state]} {self._kind} exports no bytes "
                              f"(seal it first)")
        if not self._raw_export:
            self._fill_held()
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
        self._held = None
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
