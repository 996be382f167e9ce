/* CRC32 (IEEE 802.3, the one zlib computes), for Kafka's legacy message sets v0/v1. */
#ifndef NK_CRC32_H
#define NK_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* CRC32 of `length` bytes at `data` (any alignment; length 0 returns crc), continuing
 * from `crc` (0 to start): nk_crc32(0, d, n) == zlib.crc32(d), and chaining works as
 * zlib's does. Pure function, safe from any thread. */
uint32_t nk_crc32(uint32_t crc, const void *data, size_t length);

#endif
