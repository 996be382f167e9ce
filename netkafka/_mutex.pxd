from cpython.pythread cimport PyThread_type_lock


cdef class Mutex:
    cdef PyThread_type_lock _handle  # owned by this object, freed with it

    cdef void take(self) noexcept
    cdef void give(self) noexcept
