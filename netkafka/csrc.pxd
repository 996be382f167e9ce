# Cython's view of the C kernels in csrc/: declarations only, no Python in them.
# Every extension is linked with all of csrc/*.c (see setup.py), so any .pyx may
# cimport from here.

from libc.stdint cimport uint32_t, uint8_t

cdef extern from "crc32c.h" nogil:
    # CRC32C (Castagnoli), as Kafka's RecordBatch v2 uses.  `crc` is the running
    # value (0 to start); pre- and post-inversion happen inside, as in zlib.
    uint32_t nk_crc32c(uint32_t crc, const void *data, size_t length)
    uint32_t nk_crc32c_portable(uint32_t crc, const void *data, size_t length)
    uint32_t nk_crc32c_hw(uint32_t crc, const void *data, size_t length)
    int nk_crc32c_hw_available()

cdef extern from "crc32.h" nogil:
    # CRC32 (IEEE 802.3, zlib's), for legacy message sets v0/v1; `crc` as above.
    uint32_t nk_crc32(uint32_t crc, const void *data, size_t length)

cdef extern from "murmur2.h" nogil:
    # Kafka's murmur2 (the Java client's Utils.murmur2), as its 32 bits; cast to
    # int32_t for the signed value Java returns.
    uint32_t nk_murmur2(const void *data, size_t length_bytes)
    # toPositive(murmur2(key)) % num_partitions: the Java client's partition for a
    # keyed record.  num_partitions must be > 0.
    uint32_t nk_murmur2_partition(const void *key, size_t length_bytes,
                                  uint32_t num_partitions)
