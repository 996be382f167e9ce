/* CRC32C kernels and the run-time choice between them.
 *
 * Three-stream kernel (SSE4.2 or ARMv8 CRC instructions): the CRC instruction has a
 * latency of about three cycles but issues once per cycle, so one dependency chain uses a
 * third of it. Large inputs are cut into rounds of three adjacent blocks whose CRCs run
 * as three independent chains in one loop; at the end of a round the chains are joined
 * by shifting a register over a block's worth of zero bytes (a multiplication by
 * x^(8 * block) mod P: four table lookups) and XOR-ing in the next chain.
 *
 * Fused kernel (x86-64 with SSE4.2 and PCLMULQDQ), for large inputs: the CRC
 * instruction and the carry-less multiplier are separate execution units, so the input
 * is split in two regions processed in the same loop. The first region is folded 16
 * bytes per lane in four lanes with carry-less multiplication (lane = lane * x^512 mod P,
 * XOR the next 64 bytes); the second is split in three streams for the CRC instruction.
 * At the end the lanes are folded into one, fed to the CRC instruction, and the streams
 * are joined by shifts whose multiplier depends on the length, computed at run time.
 * Inputs of 72 to 1023 bytes, too short for it (a WAL entry, a small batch), go in three
 * adjacent streams of a third of the input each, whose chains run side by side and are
 * joined by the carry-less multiplier; shorter ones word by word.  Neither first aligns
 * its input: for these lengths the up to seven byte steps that take (each in the chain)
 * cost more than word loads that cross a cache line.  Chained calls at the eight
 * alignments in turn, best of four loops (AMD EPYC): 20 bytes 5.4 ns instead of 11.0
 * (the aligning kernel before), 100 11.4 instead of 20.7, 170 16.2 instead of 29.6, 500
 * 28.1 instead of 48.4, 1000 51.0 instead of 77.5; 1024 and up unchanged.
 *
 * Portable kernel: slicing-by-8 (crc_slice8.h).
 *
 * Bit order throughout is the reflected one; see crc_tables.h. */
#include "crc32c.h"

#include <stdatomic.h>
#include <string.h>

#include "crc_slice8.h"
#include "crc_tables.h"

uint32_t nk_crc32c_portable(uint32_t crc, const void *data, size_t length)
{
    return ~nk_crc_slice8(nk_crc32c_slice8_table, ~crc, (const unsigned char *)data, length);
}

/* What this CPU offers, as detected once (see nk_hw_features). */
enum {
    NK_HW_CRC = 1,   /* CRC32C instructions */
    NK_HW_CLMUL = 2, /* carry-less multiplication usable with them (x86 fused kernel) */
};

/* ---- instruction wrappers and feature detection, per architecture ---------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#define NK_HAVE_HW_KERNEL 1
#define NK_HAVE_FUSED_KERNEL 1
#include <cpuid.h>
#include <immintrin.h>
/* Only these functions may use SSE4.2 / PCLMULQDQ; the rest of the build stays baseline
 * x86-64, so the module still loads (and runs the portable kernel) on any x86-64. */
#define NK_HW_TARGET __attribute__((target("sse4.2")))
#define NK_FUSED_TARGET __attribute__((target("sse4.2,pclmul")))

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
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_SSE4_2))
        return 0;
    return NK_HW_CRC | ((ecx & bit_PCLMUL) ? NK_HW_CLMUL : 0);
}

#elif defined(__aarch64__) && defined(__GNUC__) && defined(__linux__)
#define NK_HAVE_HW_KERNEL 1
#define NK_HAVE_FUSED_KERNEL 0
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
    return (getauxval(AT_HWCAP) & HWCAP_CRC32) ? NK_HW_CRC : 0;
}

#else
#define NK_HAVE_HW_KERNEL 0
#define NK_HAVE_FUSED_KERNEL 0
#endif

/* ---- three-stream kernel (architecture-neutral over the wrappers) ----------------- */

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
            /* Four words per chain per pass: fewer loop-control instructions competing
             * with the CRCs (block_bytes is a multiple of 32). */
            for (size_t i = 0; i < 32; i += 8) {
                reg0 = nk_hw_u64(reg0, nk_load_u64(p + i));
                reg1 = nk_hw_u64(reg1, nk_load_u64(p + i + block_bytes));
                reg2 = nk_hw_u64(reg2, nk_load_u64(p + i + 2 * block_bytes));
            }
            p += 32;
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

/* ---- fused kernel: carry-less folding beside three CRC streams (x86-64) ----------- */

#if NK_HAVE_FUSED_KERNEL

enum {
    /* Bytes of each CRC stream per loop pass, beside the 64 bytes the four lanes fold:
     * seven words per stream balanced the two units best on AMD Zen 3 (5..12 tried). */
    NK_FUSED_STREAM_PASS_BYTES = 7 * 8,
    NK_FUSED_PASS_BYTES = 64 + 3 * NK_FUSED_STREAM_PASS_BYTES,
    /* Below this the fixed costs (multiplier, final folds) outweigh the gain over one
     * round of three streams (1024 bytes: 47.6 ns fused, 52.5 in three streams). */
    NK_FUSED_MIN_BYTES = 1024,
    /* Below this the streams' joins cost what their side-by-side chains save (the
     * crossover measured at 64-72 bytes). */
    NK_STREAMS_MIN_BYTES = 72,
};

/* A * B * x^33 mod P for reflected a, b: the carry-less product of reflected values is
 * A*B*x, and the CRC instruction, fed it as data, multiplies by x^32 and reduces mod P. */
static NK_FUSED_TARGET inline uint32_t nk_mulmod33(uint32_t a, uint32_t b)
{
    __m128i product = _mm_clmulepi64_si128(_mm_cvtsi32_si128((int)a),
                                           _mm_cvtsi32_si128((int)b), 0x00);
    return (uint32_t)_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(product));
}

/* x^(8 * bytes - 33) mod P: the multiplier that makes nk_mulmod33 shift a register over
 * `bytes` zero bytes. Products of table factors x^(2^i - 33), one per set bit. */
static NK_FUSED_TARGET uint32_t nk_shift_multiplier(size_t bytes)
{
    uint64_t exponent = (uint64_t)bytes * 8;
    int bit = __builtin_ctzll(exponent);
    uint32_t multiplier = nk_crc32c_xpow33_table[bit];
    for (exponent &= exponent - 1; exponent != 0; exponent &= exponent - 1)
        multiplier = nk_mulmod33(multiplier, nk_crc32c_xpow33_table[__builtin_ctzll(exponent)]);
    return multiplier;
}

static NK_FUSED_TARGET inline __m128i nk_fold_constants(size_t distance_bytes)
{
    const uint64_t *k = nk_crc32c_fold_table[distance_bytes / 16 - 1];
    return _mm_set_epi64x((long long)k[1], (long long)k[0]);
}

/* lane * x^(8 * distance) mod P, as a 128-bit residue: its first 8 bytes times the
 * low constant, its last 8 times the high one (see fold_constants in the generator). */
static NK_FUSED_TARGET inline __m128i nk_fold(__m128i lane, __m128i constants)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(lane, constants, 0x00),
                         _mm_clmulepi64_si128(lane, constants, 0x11));
}

static NK_FUSED_TARGET inline __m128i nk_load_lane(const unsigned char *p)
{
    return _mm_loadu_si128((const __m128i *)(const void *)p);
}

/* One pass of the three CRC streams over NK_FUSED_STREAM_PASS_BYTES each. */
static NK_FUSED_TARGET inline __attribute__((always_inline)) void
nk_streams_pass(uint64_t reg[3], const unsigned char *p, size_t stream_bytes)
{
    for (size_t i = 0; i < NK_FUSED_STREAM_PASS_BYTES; i += 8) {
        reg[0] = _mm_crc32_u64(reg[0], nk_load_u64(p + i));
        reg[1] = _mm_crc32_u64(reg[1], nk_load_u64(p + i + stream_bytes));
        reg[2] = _mm_crc32_u64(reg[2], nk_load_u64(p + i + 2 * stream_bytes));
    }
}

/* CRC register after `passes` passes from p, starting from register reg: 64 * passes
 * bytes of lanes, then three streams of NK_FUSED_STREAM_PASS_BYTES * passes bytes. */
static NK_FUSED_TARGET uint32_t nk_crc32c_fused_passes(uint32_t reg, const unsigned char *p,
                                                      size_t passes)
{
    const size_t stream_bytes = passes * NK_FUSED_STREAM_PASS_BYTES;
    const unsigned char *streams = p + passes * 64;
    /* Independent of the data: computed while the loop runs. */
    const uint32_t shift = nk_shift_multiplier(stream_bytes);
    const __m128i by64 = nk_fold_constants(64);

    /* A register state s before some bytes equals state 0 before those bytes with s
     * XOR-ed into their first four: so the incoming register enters the first lane. */
    __m128i lane0 = _mm_xor_si128(nk_load_lane(p), _mm_cvtsi32_si128((int)reg));
    __m128i lane1 = nk_load_lane(p + 16);
    __m128i lane2 = nk_load_lane(p + 32);
    __m128i lane3 = nk_load_lane(p + 48);
    uint64_t regs[3] = {0, 0, 0};

    for (size_t pass = 1; pass < passes; pass++) {
        p += 64;
        lane0 = _mm_xor_si128(nk_fold(lane0, by64), nk_load_lane(p));
        lane1 = _mm_xor_si128(nk_fold(lane1, by64), nk_load_lane(p + 16));
        lane2 = _mm_xor_si128(nk_fold(lane2, by64), nk_load_lane(p + 32));
        lane3 = _mm_xor_si128(nk_fold(lane3, by64), nk_load_lane(p + 48));
        nk_streams_pass(regs, streams, stream_bytes);
        streams += NK_FUSED_STREAM_PASS_BYTES;
    }
    nk_streams_pass(regs, streams, stream_bytes);

    /* Lanes into one 16-byte residue, then through the CRC instruction as data. */
    __m128i lanes = _mm_xor_si128(
        _mm_xor_si128(nk_fold(lane0, nk_fold_constants(48)), nk_fold(lane1, nk_fold_constants(32))),
        _mm_xor_si128(nk_fold(lane2, nk_fold_constants(16)), lane3));
    uint64_t folded = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(lanes));
    folded = _mm_crc32_u64(folded, (uint64_t)_mm_extract_epi64(lanes, 1));

    /* Join: each stream follows the previous region, stream_bytes long. */
    uint32_t joined = nk_mulmod33((uint32_t)folded, shift) ^ (uint32_t)regs[0];
    joined = nk_mulmod33(joined, shift) ^ (uint32_t)regs[1];
    return nk_mulmod33(joined, shift) ^ (uint32_t)regs[2];
}

/* Word by word from an unaligned p, then the last 0-7 bytes in at most three steps (4,
 * 2, 1): the register after the input. */
static NK_FUSED_TARGET inline uint64_t nk_crc32c_words(uint64_t reg, const unsigned char *p,
                                                      size_t n)
{
    for (; n >= 8; p += 8, n -= 8)
        reg = _mm_crc32_u64(reg, nk_load_u64(p));
    if (n & 4) {
        uint32_t word;
        memcpy(&word, p, sizeof word);
        reg = _mm_crc32_u32((uint32_t)reg, word);
        p += 4;
    }
    if (n & 2) {
        uint16_t half;
        memcpy(&half, p, sizeof half);
        reg = _mm_crc32_u16((uint32_t)reg, half);
        p += 2;
    }
    if (n & 1)
        reg = _mm_crc32_u8((uint32_t)reg, *p);
    return reg;
}

/* NK_STREAMS_MIN_BYTES..NK_FUSED_MIN_BYTES - 1 bytes: three adjacent streams of the same
 * whole number of words (a third of the input, rounded down), their chains side by side,
 * joined by carry-less multiplication; then the rest (under 24 bytes) word by word. */
static NK_FUSED_TARGET uint32_t nk_crc32c_streams_kernel(uint32_t crc, const unsigned char *p,
                                                        size_t n)
{
    const size_t stream_bytes = n / 24 * 8;
    /* Independent of the data: computed while the chains run. */
    const uint32_t shift_one = nk_shift_multiplier(stream_bytes);
    const uint32_t shift_two = nk_shift_multiplier(2 * stream_bytes);
    uint64_t reg0 = ~crc, reg1 = 0, reg2 = 0;
    for (size_t i = 0; i < stream_bytes; i += 8) {
        reg0 = _mm_crc32_u64(reg0, nk_load_u64(p + i));
        reg1 = _mm_crc32_u64(reg1, nk_load_u64(p + i + stream_bytes));
        reg2 = _mm_crc32_u64(reg2, nk_load_u64(p + i + 2 * stream_bytes));
    }
    reg0 = nk_mulmod33((uint32_t)reg0, shift_two) ^ nk_mulmod33((uint32_t)reg1, shift_one) ^ reg2;
    return ~(uint32_t)nk_crc32c_words(reg0, p + 3 * stream_bytes, n - 3 * stream_bytes);
}

/* Inputs under NK_FUSED_MIN_BYTES. */
static NK_FUSED_TARGET inline uint32_t nk_crc32c_short(uint32_t crc, const unsigned char *p,
                                                      size_t n)
{
    if (n < NK_STREAMS_MIN_BYTES)
        return ~(uint32_t)nk_crc32c_words(~crc, p, n);
    return nk_crc32c_streams_kernel(crc, p, n);
}

static NK_FUSED_TARGET uint32_t nk_crc32c_fused_kernel(uint32_t crc, const unsigned char *p,
                                                      size_t n)
{
    if (n < NK_FUSED_MIN_BYTES)
        return nk_crc32c_short(crc, p, n);
    /* Start the streams 8-byte aligned (the lanes' length is a multiple of 64). */
    size_t head = (size_t)(-(uintptr_t)p & 7);
    crc = nk_crc32c_short(crc, p, head);
    p += head;
    n -= head;
    size_t passes = n / NK_FUSED_PASS_BYTES;
    crc = ~nk_crc32c_fused_passes(~crc, p, passes);
    p += passes * NK_FUSED_PASS_BYTES;
    n -= passes * NK_FUSED_PASS_BYTES;
    return nk_crc32c_short(crc, p, n);
}

#endif /* NK_HAVE_FUSED_KERNEL */

/* ---- run-time choice -------------------------------------------------------------- */

/* -1 until first use, then the NK_HW_* flags of this CPU. Any thread may be first; they
 * all compute the same value, and the atomic makes the concurrent first stores
 * race-free. */
static atomic_int nk_hw_state = -1;

static int nk_hw_features(void)
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

int nk_crc32c_hw_available(void)
{
    return (nk_hw_features() & NK_HW_CRC) != 0;
}

uint32_t nk_crc32c_hw(uint32_t crc, const void *data, size_t length)
{
    int features = nk_hw_features();
#if NK_HAVE_FUSED_KERNEL
    if (features & NK_HW_CLMUL)
        return nk_crc32c_fused_kernel(crc, (const unsigned char *)data, length);
#endif
#if NK_HAVE_HW_KERNEL
    if (features & NK_HW_CRC)
        return nk_crc32c_hw_kernel(crc, (const unsigned char *)data, length);
#endif
    (void)features;
    return nk_crc32c_portable(crc, data, length);
}

uint32_t nk_crc32c(uint32_t crc, const void *data, size_t length)
{
    return nk_crc32c_hw(crc, data, length);
}
