/* Kafka's murmur2 (see murmur2.h for why it must match Java exactly). */
#include "murmur2.h"

/* Kafka's constants: the seed is fixed by the Java client; m and r are
 * MurmurHash2's mixing constants. */
enum { NK_MURMUR2_R = 24 };
static const uint32_t NK_MURMUR2_SEED = 0x9747b28cu;
static const uint32_t NK_MURMUR2_M = 0x5bd1e995u;

/* Java assembles each block from four bytes masked with 0xff, i.e. a
 * little-endian unsigned read; done byte by byte so the result does not depend
 * on the host's byte order or the pointer's alignment. */
static inline uint32_t load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16)
           | ((uint32_t)p[3] << 24);
}

uint32_t nk_murmur2(const void *data, size_t length_bytes)
{
    const unsigned char *bytes = (const unsigned char *)data;
    /* Java's length is a 32-bit int: the cast keeps its bits for every
     * length Java can hold. */
    uint32_t h = NK_MURMUR2_SEED ^ (uint32_t)length_bytes;
    size_t blocks = length_bytes / 4;

    /* Unsigned arithmetic wraps mod 2^32 exactly like Java's int *, and >>
     * on uint32_t is Java's >>> (no sign fill). */
    for (size_t i = 0; i < blocks; i++) {
        uint32_t k = load_le32(bytes + 4 * i);
        k *= NK_MURMUR2_M;
        k ^= k >> NK_MURMUR2_R;
        k *= NK_MURMUR2_M;
        h *= NK_MURMUR2_M;
        h ^= k;
    }

    /* The tail: Java masks each byte with 0xff before shifting, so a byte
     * >= 0x80 contributes its unsigned value, never a sign-extended one. */
    const unsigned char *tail = bytes + 4 * blocks;
    switch (length_bytes & 3) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)tail[0];
        h *= NK_MURMUR2_M;
    }

    h ^= h >> 13;
    h *= NK_MURMUR2_M;
    h ^= h >> 15;
    return h;
}
