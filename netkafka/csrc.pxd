# Cython's view of the C kernels in csrc/: declarations only, no Python in them.
# Every extension is linked with all of csrc/*.c (see setup.py), so any .pyx may
# cimport from here.

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

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

cdef extern from "varint.h" nogil:
    # Zigzag varint (int32) / varlong (int64) and big-endian stores.  Each writer
    # returns the pointer past its bytes and checks no space: size first, check once.
    enum:
        NK_VARINT_MAX_BYTES
        NK_VARLONG_MAX_BYTES
    int nk_varint_size(int32_t v)
    int nk_varlong_size(int64_t v)
    unsigned char *nk_write_varint(unsigned char *p, int32_t v)
    unsigned char *nk_write_varlong(unsigned char *p, int64_t v)
    # The unsigned core of the zigzag writers, for fields that are never negative
    # (lengths, offset deltas): their zigzag is twice the value, no sign to fold in.
    int nk_uvarint64_size(uint64_t u)
    unsigned char *nk_write_uvarint64(unsigned char *p, uint64_t u)
    # Reads back an unsigned varint of netkafka's own writing, bounded by end: the
    # pointer past it, or NULL if it runs to end (or past 10 bytes).
    const unsigned char *nk_read_uvarint64(const unsigned char *p, const unsigned char *end,
                                           uint64_t *value)
    unsigned char *nk_store_be16(unsigned char *p, int16_t v)
    unsigned char *nk_store_be32(unsigned char *p, int32_t v)
    unsigned char *nk_store_be64(unsigned char *p, int64_t v)

cdef extern from "murmur2.h" nogil:
    # Kafka's murmur2 (the Java client's Utils.murmur2), as its 32 bits; cast to
    # int32_t for the signed value Java returns.
    uint32_t nk_murmur2(const void *data, size_t length_bytes)
    # toPositive(murmur2(key)) % num_partitions: the Java client's partition for a
    # keyed record.  num_partitions must be > 0.
    uint32_t nk_murmur2_partition(const void *key, size_t length_bytes,
                                  uint32_t num_partitions)

cdef extern from "clock.h" nogil:
    # Wall-clock ms for record timestamps: the real clock read at most once per
    # millisecond per cache, the CPU tick counter telling when the last reading is
    # surely still current.  A cache is used by one thread at a time.
    ctypedef struct nk_clock_cache:
        pass
    uint64_t nk_clock_ticks_per_ms()
    void nk_clock_init(nk_clock_cache *cache, uint64_t ticks_per_ms)
    int64_t nk_clock_now_ms(nk_clock_cache *cache)

cdef extern from "wal_entry.h" nogil:
    # The framing of a write-ahead log entry (header, CRC32C, tag stored last) and
    # little-endian stores and loads; the layout is described in the header.
    enum:
        NK_WAL_ENTRY_HEADER_BYTES
        NK_WAL_ENTRY_VALID
        NK_WAL_ENTRY_END
        NK_WAL_ENTRY_TORN
    unsigned char *nk_wal_put16(unsigned char *p, uint16_t v)
    unsigned char *nk_wal_put32(unsigned char *p, uint32_t v)
    unsigned char *nk_wal_put64(unsigned char *p, uint64_t v)
    unsigned char *nk_wal_put_bytes(unsigned char *p, const void *data, size_t n)
    uint16_t nk_wal_get16(const unsigned char *p)
    uint32_t nk_wal_get32(const unsigned char *p)
    uint64_t nk_wal_get64(const unsigned char *p)
    uint32_t nk_wal_tag_crc(uint32_t tag)
    void nk_wal_finish_entry(unsigned char *entry, uint32_t tag, uint32_t tag_crc, uint8_t type,
                             uint8_t flags, uint32_t payload_bytes)
    int nk_wal_check_entry(const unsigned char *entry, size_t available, uint32_t tag,
                           uint32_t tag_crc, uint32_t *payload_bytes, uint8_t *type,
                           uint8_t *flags)
