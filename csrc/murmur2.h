/* Kafka's murmur2: the hash the Java client's default partitioner applies to
 * record keys (org.apache.kafka.common.utils.Utils.murmur2).  A keyed record
 * must land on the partition a JVM producer would pick, so this is that
 * function bit for bit: MurmurHash2 with Kafka's fixed seed, 4-byte blocks read
 * little-endian, tail bytes taken as unsigned (Java masks each with 0xff).
 *
 * No Python here; callable without the GIL. */
#ifndef NETKAFKA_MURMUR2_H
#define NETKAFKA_MURMUR2_H

#include <stddef.h>
#include <stdint.h>

/* The hash's 32 bits.  Java returns them as a signed int: cast to int32_t to
 * get that value. */
uint32_t nk_murmur2(const void *data, size_t length_bytes);

/* Java's DefaultPartitioner / BuiltInPartitioner choice for a keyed record:
 * toPositive(murmur2(key)) % num_partitions, where toPositive clears the sign
 * bit (it is not abs()).  num_partitions must be > 0: the caller checks. */
static inline uint32_t nk_murmur2_partition(const void *key, size_t length_bytes,
                                            uint32_t num_partitions)
{
    return (nk_murmur2(key, length_bytes) & 0x7fffffffu) % num_partitions;
}

#endif
