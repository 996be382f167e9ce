"""The mutex of netkafka's native state (the accumulator's, the partitioners').

Taken by a C call from Cython, without a Python call on the hot path; also usable
from Python as acquire()/release() or `with`.  A thread that has to wait for it
releases the GIL while it waits, so a holder that loses the GIL inside its
critical section (it runs Python code there) can always get it back and finish:
correctness never rests on the GIL.  It is released by the thread that took it
(a pthread mutex requires so); not reentrant.
"""
cimport cython


@cython.final
cdef class Mutex:
    def __cinit__(self):
        if pthread_mutex_init(&self._mutex, NULL) != 0:
            raise MemoryError("cannot initialise a mutex")

    def __dealloc__(self):
        pthread_mutex_destroy(&self._mutex)

    cdef void take(self) noexcept:
        # A plain pthread mutex rather than a PyThread lock: CPython's lock reads
        # the monotonic clock on every acquire, even one that does not wait, which
        # cost more than the rest of the per-record path's locking.
        if pthread_mutex_trylock(&self._mutex) != 0:
            with nogil:
                pthread_mutex_lock(&self._mutex)

    cdef void give(self) noexcept:
        pthread_mutex_unlock(&self._mutex)

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
