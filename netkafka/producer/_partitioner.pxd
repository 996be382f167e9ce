# The partitioner interface as Cython callers (the accumulator) see it: a cimport of
# Partitioner gives C-vtable calls to whichever partitioner the producer was given.
# Semantics, threads and the on_new_batch flow: _partitioner.pyx's docstring.

# Java's placement of a keyed record (toPositive(murmur2(key)) % num_partitions); no lock.
cdef int keyed_partition(object key_bytes, Py_ssize_t num_partitions, object topic) except -1


cdef class Partitioner:
    cpdef int partition(self, topic, key_bytes, all_partitions,
                        available_partitions) except -1
    cpdef on_new_batch(self, topic, int prev_partition)


cdef class CallablePartitioner(Partitioner):
    cdef readonly object function  # the user's callable; immutable
    cdef readonly str name         # how errors name it

    cdef int _checked(self, topic, result, all_partitions) except -1

