/* The framing of a write-ahead log entry, shared by the writer and the scanner.
 *
 * Every entry starts with a 16-byte header, little-endian:
 *
 *     tag u32 | crc32c u32 | payload length u32 | type u8 | flags u8 | reserved u16 (0)
 *
 * then its payload.  The tag is the low 32 bits of the segment's id; the CRC32C
 * covers the tag and bytes 8.. to the end of the payload.  The writer fills the
 * payload and bytes 4..16 first and stores the tag last, after a release fence: a
 * process killed at any instruction of an append leaves at that position either a
 * complete entry or bytes with a foreign tag (zeros of a new file, an entry of the
 * segment's previous life if it was recycled), which the scanner reads as the clean
 * end of the log.  A tag that matches over a bad checksum is a torn entry: what a
 * machine crash leaves when the page holding the header reached the disk and a page of
 * the payload did not.
 *
 * Header-only and static inline: the writer runs once per record on send()'s path. */
#ifndef NK_WAL_ENTRY_H
#define NK_WAL_ENTRY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "crc32c.h"

#define NK_WAL_ENTRY_HEADER_BYTES 16

/* What the scanner found at a position. */
#define NK_WAL_ENTRY_VALID 0 /* a whole entry with a good checksum */
#define NK_WAL_ENTRY_END 1   /* a foreign tag, or no room for a header: the log ends */
#define NK_WAL_ENTRY_TORN 2  /* our tag, but a length past the end or a bad checksum */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define NK_WAL_LE16(v) __builtin_bswap16(v)
#define NK_WAL_LE32(v) __builtin_bswap32(v)
#define NK_WAL_LE64(v) __builtin_bswap64(v)
#else
#define NK_WAL_LE16(v) (v)
#define NK_WAL_LE32(v) (v)
#define NK_WAL_LE64(v) (v)
#endif

/* Little-endian stores and loads at any alignment (memcpy compiles to one move). */
static inline unsigned char *nk_wal_put16(unsigned char *p, uint16_t v)
{
    v = NK_WAL_LE16(v);
    memcpy(p, &v, 2);
    return p + 2;
}

static inline unsigned char *nk_wal_put32(unsigned char *p, uint32_t v)
{
    v = NK_WAL_LE32(v);
    memcpy(p, &v, 4);
    return p + 4;
}

static inline unsigned char *nk_wal_put64(unsigned char *p, uint64_t v)
{
    v = NK_WAL_LE64(v);
    memcpy(p, &v, 8);
    return p + 8;
}

static inline unsigned char *nk_wal_put_bytes(unsigned char *p, const void *data, size_t n)
{
    if (n) {
        memcpy(p, data, n);
    }
    return p + n;
}

static inline uint16_t nk_wal_get16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return NK_WAL_LE16(v);
}

static inline uint32_t nk_wal_get32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return NK_WAL_LE32(v);
}

static inline uint64_t nk_wal_get64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return NK_WAL_LE64(v);
}

/* The CRC32C of a tag: where every entry's checksum of its segment starts.  Computed
 * once per segment by the callers, not once per entry (a checksum call of its own:
 * 6.6-8.5 ns here, on send()'s path). */
static inline uint32_t nk_wal_tag_crc(uint32_t tag)
{
    uint32_t tag_le = NK_WAL_LE32(tag);
    return nk_crc32c(0, &tag_le, 4);
}

static inline uint32_t nk_wal_entry_crc(uint32_t tag_crc, const unsigned char *entry,
                                        uint32_t payload_bytes)
{
    return nk_crc32c(tag_crc, entry + 8,
                     (size_t)(NK_WAL_ENTRY_HEADER_BYTES - 8) + payload_bytes);
}

/* Completes the entry at `entry` whose payload (payload_bytes of it) is written:
 * header fields, checksum, and the tag last (see above).  tag_crc: nk_wal_tag_crc(tag). */
static inline void nk_wal_finish_entry(unsigned char *entry, uint32_t tag, uint32_t tag_crc,
                                       uint8_t type, uint8_t flags, uint32_t payload_bytes)
{
    nk_wal_put32(entry + 8, payload_bytes);
    entry[12] = type;
    entry[13] = flags;
    nk_wal_put16(entry + 14, 0);
    nk_wal_put32(entry + 4, nk_wal_entry_crc(tag_crc, entry, payload_bytes));
    __atomic_thread_fence(__ATOMIC_RELEASE);
    nk_wal_put32(entry, tag);
}

/* Reads the entry at `entry`, with `available` bytes of the segment from there on:
 * NK_WAL_ENTRY_* and, when valid, its payload length, type and flags.  tag_crc:
 * nk_wal_tag_crc(tag). */
static inline int nk_wal_check_entry(const unsigned char *entry, size_t available, uint32_t tag,
                                     uint32_t tag_crc, uint32_t *payload_bytes, uint8_t *type,
                                     uint8_t *flags)
{
    uint32_t length;
    if (available < NK_WAL_ENTRY_HEADER_BYTES || nk_wal_get32(entry) != tag) {
        return NK_WAL_ENTRY_END;
    }
    length = nk_wal_get32(entry + 8);
    if (length > available - NK_WAL_ENTRY_HEADER_BYTES
        || nk_wal_get32(entry + 4) != nk_wal_entry_crc(tag_crc, entry, length)) {
        return NK_WAL_ENTRY_TORN;
    }
    *payload_bytes = length;
    *type = entry[12];
    *flags = entry[13];
    return NK_WAL_ENTRY_VALID;
}

#endif
