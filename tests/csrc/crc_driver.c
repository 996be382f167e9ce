/* Checks every CRC kernel in csrc/ against bit-at-a-time references, over every
 * alignment mod 16 and lengths that cross all of the kernels' internal boundaries.
 * Built and run by tests/test_csrc_sanitize.py (with AddressSanitizer and UBSan, and
 * for aarch64 under qemu when available). Each input is copied into an allocation of
 * exactly its size, so a read past either end is caught.
 *
 * The .c files are included, not linked, to reach the static kernels (three-stream,
 * fused) that nk_crc32c_hw would otherwise choose between on its own.
 *
 * Prints the kernels it checked; exits non-zero at the first mismatch. */
#include "crc32.c"
#include "crc32c.c"
#include "crc_tables.c"

#include <stdio.h>
#include <stdlib.h>

enum { MAX_LENGTH_BYTES = 70000, ALIGNMENTS = 16, ALL_LENGTHS_UP_TO = 2100 };

typedef uint32_t (*kernel_fn)(uint32_t crc, const unsigned char *p, size_t n);

struct kernel {
    const char *name;
    kernel_fn run;
    const uint32_t *reference; /* reference[n]: CRC of the first n data bytes */
};

/* The definition of a reflected CRC, one bit at a time: shares nothing with csrc/. */
static uint32_t bitwise_crc(uint32_t poly, uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    for (; n > 0; p++, n--) {
        crc ^= *p;
        for (int bit = 0; bit < 8; bit++)
            crc = (crc >> 1) ^ (poly & (0u - (crc & 1)));
    }
    return ~crc;
}

static uint32_t *prefix_crcs(uint32_t poly, const unsigned char *data)
{
    uint32_t *crcs = malloc((MAX_LENGTH_BYTES + 1) * sizeof *crcs);
    if (crcs == NULL)
        abort();
    crcs[0] = 0;
    for (size_t n = 0; n < MAX_LENGTH_BYTES; n++)
        crcs[n + 1] = bitwise_crc(poly, crcs[n], data + n, 1);
    return crcs;
}

static uint32_t run_crc32(uint32_t c, const unsigned char *p, size_t n) { return nk_crc32(c, p, n); }
static uint32_t run_dispatch(uint32_t c, const unsigned char *p, size_t n) { return nk_crc32c(c, p, n); }
static uint32_t run_portable(uint32_t c, const unsigned char *p, size_t n) { return nk_crc32c_portable(c, p, n); }
#if NK_HAVE_HW_KERNEL
static uint32_t run_hw(uint32_t c, const unsigned char *p, size_t n) { return nk_crc32c_hw_kernel(c, p, n); }
#endif
#if NK_HAVE_FUSED_KERNEL
static uint32_t run_fused(uint32_t c, const unsigned char *p, size_t n) { return nk_crc32c_fused_kernel(c, p, n); }
#endif

static int check(const struct kernel *k, const unsigned char *data, size_t n)
{
    for (size_t alignment = 0; alignment < ALIGNMENTS; alignment++) {
        /* malloc returns 16-byte aligned memory: p is `alignment` past a boundary and
         * its last byte is the allocation's last. */
        unsigned char *block = malloc(alignment + n + 1);
        if (block == NULL)
            abort();
        unsigned char *p = block + alignment;
        memcpy(p, data, n);
        uint32_t got = k->run(0, p, n);
        free(block);
        if (got != k->reference[n]) {
            printf("MISMATCH %s length=%zu alignment=%zu got=%08x want=%08x\n", k->name, n,
                   alignment, got, k->reference[n]);
            return 1;
        }
    }
    return 0;
}

int main(void)
{
    unsigned char *data = malloc(MAX_LENGTH_BYTES);
    if (data == NULL)
        abort();
    uint64_t state = 0x9E3779B97F4A7C15u; /* xorshift64: seeded, reproducible */
    for (size_t i = 0; i < MAX_LENGTH_BYTES; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data[i] = (unsigned char)(state >> 32);
    }
    uint32_t *crc32c_ref = prefix_crcs(0x82F63B78u, data);
    uint32_t *crc32_ref = prefix_crcs(0xEDB88320u, data);

    struct kernel kernels[5];
    int count = 0;
    kernels[count++] = (struct kernel){"crc32", run_crc32, crc32_ref};
    kernels[count++] = (struct kernel){"portable", run_portable, crc32c_ref};
    kernels[count++] = (struct kernel){"dispatch", run_dispatch, crc32c_ref};
    int features = nk_hw_features();
#if NK_HAVE_HW_KERNEL
    if (features & NK_HW_CRC)
        kernels[count++] = (struct kernel){"hw", run_hw, crc32c_ref};
#endif
#if NK_HAVE_FUSED_KERNEL
    if (features & NK_HW_CLMUL)
        kernels[count++] = (struct kernel){"fused", run_fused, crc32c_ref};
#endif
    (void)features;

    for (int i = 0; i < count; i++) {
        const struct kernel *k = &kernels[i];
        for (size_t n = 0; n <= ALL_LENGTHS_UP_TO; n++)
            if (check(k, data, n))
                return 1;
        /* Sparser above: still every residue mod 8 and both sides of the round sizes. */
        for (size_t n = ALL_LENGTHS_UP_TO; n <= MAX_LENGTH_BYTES; n += n < 30000 ? 97 : 1999)
            if (check(k, data, n) || check(k, data, MAX_LENGTH_BYTES - n))
                return 1;
        /* Both sides of the three-stream kernel's long rounds (3 x 8192 bytes). */
        static const size_t near_rounds[] = {24567, 24575, 24576, 24577, 24583,
                                             49151, 49152, 49153, MAX_LENGTH_BYTES};
        for (size_t j = 0; j < sizeof near_rounds / sizeof near_rounds[0]; j++)
            if (check(k, data, near_rounds[j]))
                return 1;
        printf("checked %s\n", k->name);
    }
    free(crc32c_ref);
    free(crc32_ref);
    free(data);
    return 0;
}
