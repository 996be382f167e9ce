/* CRC32C kernels and the run-time choice between them.
 *
 * Hardware kernel: the CRC instruction has a latency of about three cycles but issues
 * once per cycle, so one dependency chain uses a third of it. Large inputs are cut
 * into rounds of three adjacent blocks whose CRCs run as three independent chains in
 * one loop; at the end of a round the chains are joined by shifting a register over a
 * block's worth of zero bytes (a multiplication by x^(8 * block) mod P, four table
 * lookups, tables in crc_tables.c) and XOR-ing in the next chain.
 *
 * Portable kernel: slicing-by-8 (crc_slice8.h). */
#include "crc32c.h"

#include <stdatomic.h>
#include <string.h>

#include "crc_slice8.h"
#include "crc_tables.h"

uint32_t nk_crc32c_portable(uint32_t crc, const void *data, size_t length)
{
    return ~nk_crc_slice8(nk_crc32c_slice8_table, ~crc, (const unsigned char *)data, length);
}

/* ---- hardware kernel: instruction wrappers per architecture ---------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#define NK_HAVE_HW_KERNEL 1
#include <cpuid.h>
#include <nmmintrin.h>
/* Only these functions may use SSE4.2; the rest of the build stays baseline x86-64. */
#define NK_HW_TARGET __attribute__((target("sse4.2")))

static NK_HW_TARGET inline uint64_t nk_hw_u64(uint64_t reg, uint64_t word)
{
    return _mm_crc32_u64(reg, word);
}

static NK_HW_TARGET inline uint64_t nk_hw_u8(uint64_t reg, unsigned char byte)
{
    return _mm_crc32_u8((uint32_t)reg, byte);
}

static int nk_detect_hw(void)
{
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        return 0;
    return (ecx & bit_SSE4_2) != 0;
}

#elif defined(__aarch64__) && defined(__GNUC__) && defined(__linux__)
#define NK_HAVE_HW_KERNEL 1
#include <arm_acle.h>
#include <sys/auxv.h>
/* As on x86: CRC instructions only inside the hardware kernel, unless the whole build
 * already targets them. */
#if defined(__ARM_FEATURE_CRC32)
#define NK_HW_TARGET
#elif defined(__clang__)
#define NK_HW_TARGET __attribute__((target("crc")))
#else
#define NK_HW_TARGET __attribute__((target("+crc")))
#endif
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif

static NK_HW_TARGET inline uint64_t nk_hw_u64(uint64_t reg, uint64_t word)
{
    return __crc32cd((uint32_t)reg, word);
}

static NK_HW_TARGET inline uint64_t nk_hw_u8(uint64_t reg, unsigned char byte)
{
    return __crc32cb((uint32_t)reg, byte);
}

static int nk_detect_hw(void)
{
    return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
}

#else
#define NK_HAVE_HW_KERNEL 0
#endif

/* ---- hardware kernel: the three-stream loop (architecture-neutral) ---------------- */

#if NK_HAVE_HW_KERNEL

/* The CRC instructions read a 64-bit word as little-endian; both targets are. */
static inline uint64_t nk_load_u64(const unsigned char *p)
{
    uint64_t word;
    memcpy(&word, p, sizeof word);
    return word;
}

/* reg * x^(8 * block bytes) mod P, by the block's zeros table. */
static inline uint32_t nk_crc32c_shift(const uint32_t table[4][256], uint32_t reg)
{
    return table[0][reg & 0xff] ^ table[1][(reg >> 8) & 0xff] ^
           table[2][(reg >> 16) & 0xff] ^ table[3][reg >> 24];
}

/* Rounds of three adjacent blocks of block_bytes each, while a whole round fits.
 * Advances *pp and *np; returns the register. Inlined with a constant block_bytes. */
static NK_HW_TARGET inline __attribute__((always_inline)) uint64_t
nk_crc32c_hw_rounds(uint64_t reg0, const unsigned char **pp, size_t *np,
                    size_t block_bytes, const uint32_t zeros[4][256])
{
    const unsigned char *p = *pp;
    size_t n = *np;
    while (n >= 3 * block_bytes) {
        uint64_t reg1 = 0, reg2 = 0;
        const unsigned char *end = p + block_bytes;
        do {
            reg0 = nk_hw_u64(reg0, nk_load_u64(p));
            reg1 = nk_hw_u64(reg1, nk_load_u64(p + block_bytes));
            reg2 = nk_hw_u64(reg2, nk_load_u64(p + 2 * block_bytes));
            p += 8;
        } while (p < end);
        reg0 = nk_crc32c_shift(zeros, (uint32_t)reg0) ^ reg1;
        reg0 = nk_crc32c_shift(zeros, (uint32_t)reg0) ^ reg2;
        p += 2 * block_bytes;
        n -= 3 * block_bytes;
    }
    *pp = p;
    *np = n;
    return reg0;
}

static NK_HW_TARGET uint32_t nk_crc32c_hw_kernel(uint32_t crc, const unsigned char *p,
                                                size_t n)
{
    uint64_t reg = ~crc;
    /* Bring p to 8-byte alignment so no word load crosses a cache line. */
    for (; n > 0 && ((uintptr_t)p & 7) != 0; p++, n--)
        reg = nk_hw_u8(reg, *p);
    reg = nk_crc32c_hw_rounds(reg, &p, &n, NK_CRC32C_LONG_BLOCK_BYTES,
                              nk_crc32c_long_zeros_table);
    reg = nk_crc32c_hw_rounds(reg, &p, &n, NK_CRC32C_SHORT_BLOCK_BYTES,
                              nk_crc32c_short_zeros_table);
    for (; n >= 8; p += 8, n -= 8)
        reg = nk_hw_u64(reg, nk_load_u64(p));
    for (; n > 0; p++, n--)
        reg = nk_hw_u8(reg, *p);
    return ~(uint32_t)reg;
}

#endif /* NK_HAVE_HW_KERNEL */

/* ---- run-time choice -------------------------------------------------------------- */

/* -1 until first use, then 0 or 1. Any thread may be first; they all compute the same
 * answer, and the atomic makes the concurrent first stores race-free. */
static atomic_int nk_hw_state = -1;

int nk_crc32c_hw_available(void)
{
#if NK_HAVE_HW_KERNEL
    int state = atomic_load_explicit(&nk_hw_state, memory_order_relaxed);
    if (state < 0) {
        state = nk_detect_hw();
        atomic_store_explicit(&nk_hw_state, state, memory_order_relaxed);
    }
    return state;
#else
    return 0;
#endif
}

uint32_t nk_crc32c_hw(uint32_t crc, const void *data, size_t length)
{
#if NK_HAVE_HW_KERNEL
    if (nk_crc32c_hw_available())
        return nk_crc32c_hw_kernel(crc, (const unsigned char *)data, length);
#endif
    return nk_crc32c_portable(crc, data, length);
}

uint32_t nk_crc32c(uint32_t crc, const void *data, size_t length)
{
    return nk_crc32c_hw(crc, data, length);
}
