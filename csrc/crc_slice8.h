/* Table-driven CRC over bytes, eight bytes per step ("slicing-by-8"), for any
 * reflected 32-bit CRC: the polynomial is in the tables (see crc_tables.h).
 * Shared by the portable CRC32C and the CRC32 kernels. */
#ifndef NK_CRC_SLICE8_H
#define NK_CRC_SLICE8_H

#include <stddef.h>
#include <stdint.h>

/* Little-endian load from any address: byte-wise, so alignment and host byte order do
 * not matter (compilers turn it into one load on little-endian machines). */
static inline uint32_t nk_load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Advance the raw CRC register `reg` (no pre-/post-inversion here) over n bytes. */
static inline uint32_t nk_crc_slice8(const uint32_t table[8][256], uint32_t reg,
                                     const unsigned char *p, size_t n)
{
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t lo = reg ^ nk_load_le32(p);
        uint32_t hi = nk_load_le32(p + 4);
        reg = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
              table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
              table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
              table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
    }
    for (; n > 0; p++, n--)
        reg = table[0][(reg ^ *p) & 0xff] ^ (reg >> 8);
    return reg;
}

#endif
