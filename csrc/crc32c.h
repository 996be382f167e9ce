/* CRC32C (Castagnoli), the checksum of Kafka's RecordBatch v2.
 *
 * Every function takes the running CRC (0 to start) and returns the new one; pre- and
 * post-inversion happen inside, as in zlib, so chaining works:
 * nk_crc32c(nk_crc32c(0, a, na), b, nb) == CRC32C of a followed by b.
 * Any alignment and any length (0 returns crc unchanged). Pure functions, safe to call
 * from any thread, with or without the GIL. */
#ifndef NK_CRC32C_H
#define NK_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The fastest kernel this CPU runs: hardware when available, else portable. */
uint32_t nk_crc32c(uint32_t crc, const void *data, size_t length);

/* Table-driven kernel (slicing-by-8); runs everywhere. */
uint32_t nk_crc32c_portable(uint32_t crc, const void *data, size_t length);

/* CRC instructions: SSE4.2 on x86-64, the ARMv8 CRC extension on aarch64. Meant for
 * callers that checked nk_crc32c_hw_available(); where it returns 0 this computes with
 * the portable kernel instead of faulting on a missing instruction. */
uint32_t nk_crc32c_hw(uint32_t crc, const void *data, size_t length);

/* 1 if this CPU (and this build) has the hardware kernel, else 0. */
int nk_crc32c_hw_available(void);

#endif
