/* Byte-level writers for Kafka's wire format: zigzag varints (RecordBatch v2 record
 * fields) and big-endian fixed-width integers (batch header, request framing).
 *
 * Every writer stores at `p` and returns the pointer just past what it wrote, so a
 * record is encoded as a chain of calls on one cursor. No writer checks space: the
 * caller sizes first (nk_varint*_size) and checks the buffer once for the whole
 * record. Fields land at arbitrary byte offsets, so nothing assumes alignment.
 *
 * Header-only and static inline: these are called per field in the hot append loop,
 * where a call across translation units would cost more than the work. */
#ifndef NK_VARINT_H
#define NK_VARINT_H

#include <stdint.h>
#include <string.h>

/* Longest encodings: 32-bit values need 5 bytes of 7 bits, 64-bit ones 10. */
#define NK_VARINT_MAX_BYTES 5
#define NK_VARLONG_MAX_BYTES 10

/* Zigzag maps signed to unsigned so that small magnitudes of either sign stay short
 * (-1 -> 1, 1 -> 2). The shift of the unsigned value avoids undefined behaviour on
 * signed overflow; the arithmetic right shift spreads the sign bit. */
static inline uint32_t nk_zigzag32(int32_t v)
{
    return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31);
}

static inline uint64_t nk_zigzag64(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

/* Bytes an unsigned base-128 encoding of u takes.  A loop, not a count of leading
 * zeros: record fields repeat their sizes, so its branches are predicted, while
 * x86-64 without -mlzcnt counts with BSR, which made append() slower on the AMD
 * machine we measured despite fewer instructions. */
static inline int nk_uvarint64_size(uint64_t u)
{
    int n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

/* Bytes a zigzag varint (int32) / varlong (int64) of v takes on the wire. */
static inline int nk_varint_size(int32_t v)
{
    return nk_uvarint64_size(nk_zigzag32(v));
}

static inline int nk_varlong_size(int64_t v)
{
    return nk_uvarint64_size(nk_zigzag64(v));
}

/* Unsigned base-128, least significant group first, high bit = "more follows".
 * Record fields mostly fit one byte (attributes, small deltas, short lengths) or
 * two (lengths and offset deltas below 8192): those are written without a loop. */
static inline unsigned char *nk_write_uvarint64(unsigned char *p, uint64_t u)
{
    if (u < 0x80) {
        *p = (unsigned char)u;
        return p + 1;
    }
    if (u < 0x4000) {
        p[0] = (unsigned char)(u | 0x80);
        p[1] = (unsigned char)(u >> 7);
        return p + 2;
    }
    while (u >= 0x80) {
        *p++ = (unsigned char)(u | 0x80);
        u >>= 7;
    }
    *p++ = (unsigned char)u;
    return p;
}

static inline unsigned char *nk_write_varint(unsigned char *p, int32_t v)
{
    return nk_write_uvarint64(p, nk_zigzag32(v));
}

static inline unsigned char *nk_write_varlong(unsigned char *p, int64_t v)
{
    return nk_write_uvarint64(p, nk_zigzag64(v));
}

/* Big-endian fixed-width stores: the bytes are put in order in a local array, then
 * copied with memcpy, which is safe at any alignment; GCC and Clang at -O2 turn the
 * pair into one byte-swapped move. The shifts make it right on any host order. */
static inline unsigned char *nk_store_be16(unsigned char *p, int16_t v)
{
    uint16_t u = (uint16_t)v;
    unsigned char b[2] = {(unsigned char)(u >> 8), (unsigned char)u};
    memcpy(p, b, sizeof b);
    return p + sizeof b;
}

static inline unsigned char *nk_store_be32(unsigned char *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    unsigned char b[4] = {(unsigned char)(u >> 24), (unsigned char)(u >> 16),
                          (unsigned char)(u >> 8), (unsigned char)u};
    memcpy(p, b, sizeof b);
    return p + sizeof b;
}

static inline unsigned char *nk_store_be64(unsigned char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    unsigned char b[8] = {(unsigned char)(u >> 56), (unsigned char)(u >> 48),
                          (unsigned char)(u >> 40), (unsigned char)(u >> 32),
                          (unsigned char)(u >> 24), (unsigned char)(u >> 16),
                          (unsigned char)(u >> 8), (unsigned char)u};
    memcpy(p, b, sizeof b);
    return p + sizeof b;
}

/* Reads an unsigned base-128 varint at p, not reading at or past end: returns the
 * pointer past it and stores it in *value, or returns NULL when it runs to end or
 * beyond 10 bytes.  For reading back netkafka's own encodings (the WAL's records),
 * not the network's: the protocol reader has its own checked reads. */
static inline const unsigned char *nk_read_uvarint64(const unsigned char *p,
                                                     const unsigned char *end, uint64_t *value)
{
    uint64_t result = 0;
    for (int shift = 0; p < end && shift < 70; shift += 7, p++) {
        result |= (uint64_t)(*p & 0x7F) << shift;
        if (*p < 0x80) {
            *value = result;
            return p + 1;
        }
    }
    return NULL;
}

#endif
