/* Checks csrc/wal_entry.h alone: every entry it finishes reads back as valid; a foreign
 * tag or too little room reads as the end; every truncation, every flipped bit of the
 * checksummed bytes and a payload that never reached the disk read as torn.  Built and
 * run by tests/test_wal.py with AddressSanitizer and UBSan: each entry sits in an
 * allocation of exactly its size, so a read past it is caught.
 *
 * Prints what it checked; exits non-zero at the first surprise. */
#include "crc32c.c"
#include "crc_tables.c"
#include "wal_entry.h"

#include <stdio.h>
#include <stdlib.h>

enum { MAX_PAYLOAD_BYTES = 300 };

static int failures;

static void expect(int got, int want, const char *what, uint32_t payload_bytes, size_t at)
{
    if (got != want) {
        printf("MISMATCH %s payload=%u at=%zu got=%d want=%d\n", what, payload_bytes, at,
               got, want);
        failures++;
    }
}

/* A finished entry of payload_bytes (bytes derived from the length) in an exact-size
 * allocation. */
static unsigned char *make_entry(uint32_t payload_bytes, uint32_t tag)
{
    size_t total = NK_WAL_ENTRY_HEADER_BYTES + payload_bytes;
    unsigned char *entry = malloc(total);
    if (entry == NULL)
        abort();
    for (uint32_t i = 0; i < payload_bytes; i++)
        entry[NK_WAL_ENTRY_HEADER_BYTES + i] = (unsigned char)(i * 31 + payload_bytes);
    nk_wal_finish_entry(entry, tag, nk_wal_tag_crc(tag), 3, 1, payload_bytes);
    return entry;
}

static int check(const unsigned char *entry, size_t available, uint32_t tag)
{
    uint32_t length = 0;
    uint8_t type = 0, flags = 0;
    return nk_wal_check_entry(entry, available, tag, nk_wal_tag_crc(tag), &length, &type,
                              &flags);
}

int main(void)
{
    const uint32_t tag = 0x01020304u;
    for (uint32_t n = 0; n <= MAX_PAYLOAD_BYTES; n++) {
        size_t total = NK_WAL_ENTRY_HEADER_BYTES + n;
        unsigned char *entry = make_entry(n, tag);
        uint32_t length = 0;
        uint8_t type = 0, flags = 0;
        expect(nk_wal_check_entry(entry, total, tag, nk_wal_tag_crc(tag), &length, &type,
                                  &flags),
               NK_WAL_ENTRY_VALID, "valid", n, total);
        expect(length == n && type == 3 && flags == 1, 1, "fields", n, 0);
        expect(check(entry, total, tag + 1), NK_WAL_ENTRY_END, "foreign tag", n, 0);
        for (size_t available = 0; available < total; available++) {
            /* A copy of exactly `available` bytes: nothing past them can be read. */
            unsigned char *cut = malloc(available ? available : 1);
            if (cut == NULL)
                abort();
            memcpy(cut, entry, available);
            expect(check(cut, available, tag),
                   available < NK_WAL_ENTRY_HEADER_BYTES ? NK_WAL_ENTRY_END : NK_WAL_ENTRY_TORN,
                   "truncated", n, available);
            free(cut);
        }
        for (size_t at = 4; at < total; at++) {  /* bytes 0..3 are the tag itself */
            for (int bit = 0; bit < 8; bit++) {
                entry[at] ^= (unsigned char)(1u << bit);
                expect(check(entry, total, tag), NK_WAL_ENTRY_TORN, "flipped", n, at);
                entry[at] ^= (unsigned char)(1u << bit);
            }
        }
        if (n > 0) {
            /* The header's page reached the disk, the payload's did not. */
            unsigned char saved[MAX_PAYLOAD_BYTES];
            memcpy(saved, entry + NK_WAL_ENTRY_HEADER_BYTES, n);
            memset(entry + NK_WAL_ENTRY_HEADER_BYTES, 0, n);
            int zeros_were_the_payload = memcmp(saved, entry + NK_WAL_ENTRY_HEADER_BYTES, n) == 0;
            if (!zeros_were_the_payload)
                expect(check(entry, total, tag), NK_WAL_ENTRY_TORN, "lost payload", n, 0);
        }
        free(entry);
    }
    /* A length field far beyond the room: torn, read no further. */
    unsigned char *entry = make_entry(8, tag);
    nk_wal_put32(entry + 8, 0xFFFFFFF0u);
    expect(check(entry, NK_WAL_ENTRY_HEADER_BYTES + 8, tag), NK_WAL_ENTRY_TORN, "huge length",
           8, 0);
    free(entry);
    if (failures)
        return 1;
    printf("checked wal entries\n");
    return 0;
}
