/* CRC32 (IEEE) by slicing-by-8. Legacy message sets are rare and small, so the
 * portable kernel is enough; no hardware path. */
#include "crc32.h"

#include "crc_slice8.h"
#include "crc_tables.h"

uint32_t nk_crc32(uint32_t crc, const void *data, size_t length)
{
    return ~nk_crc_slice8(nk_crc32_slice8_table, ~crc, (const unsigned char *)data, length);
}
