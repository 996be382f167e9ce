"""The mutex of netkafka's native state (the accumulator's, the partitioners').

Taken by a C call from Cython, without a Python call on the hot path; also usable
from Python as acquire()/release() or `with`.  A thread that has to wait for it
releases the GIL while it waits, so a holder that loses the GIL inside its
critical section (it runs Python code there) can always get it back and finish:
correctness never rests on the GIL.
"""
cimport cython
from cpython.pythread cimport (
    NOWAIT_LOCK, WAIT_LOCK, PyThread_acquire_lock, PyThread_allocate_lock, PyThread_free_lock,
    PyThread_release_lock,
)


@cython.final
cdef class Mutex:
    def __cinit__(self):
        self._handle = PyThread_allocate_lock()
        if self._handle == NULL:
            raise MemoryError("cannot allocate a lock")

    def __dealloc__(self):
        if self._handle != NULL:
            PyThread_free_lock(self._handle)

    cdef void take(self) noexcept:
        if not PyThread_acquire_lock(self._handle, NOWAIT_LOCK):
            with nogil:
                PyThread_acquire_lock(self._handle, WAIT_LOCK)

    cdef void give(self) noexcept:
        PyThread_release_lock(self._handle)

    def acquire(self):
        self.take()
        return True

    def release(self):
        self.give()

    def __enter__(self):
        self.take()
        return self

    def __exit__(self, *exc_info):
        self.give()
