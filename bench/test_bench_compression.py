"""Each codec: netkafka's Compressor.compress_into vs the codec's library called directly.

Parameters: one 1 MiB records section (about 8,100 RecordBatch v2 records of a 16-byte
key and a 100-byte JSON-like value with random fields), the same bytes and level for
both sides of a group, each group in the same run.  The libraries return new bytes;
netkafka writes into a preallocated buffer.  extra_info holds MB/s (from the minimum
time) and the compression ratio; MB/s = ops * 1.048576.

    .venv/bin/python -m pytest bench/test_bench_compression.py --benchmark-only \\
        --benchmark-columns=min,median,ops
"""
import random
import zlib

import cramjam
import lz4.frame
import pytest
import snappy
import zstandard

from netkafka.record._compression import Compressor

RECORDS_SECTION_BYTES = 1 << 20
WORDS = ("click view purchase login logout search add_to_cart checkout signup share "
         "home products cart account settings help about blog news promo").split()


def varint(value):
    """Kafka's zigzag varint."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def records_section(size_bytes, seed=1):
    """The records of a RecordBatch v2 as a producer writes them, cut at size_bytes."""
    rnd = random.Random(seed)
    out = bytearray()
    index = 0
    while len(out) < size_bytes:
        key = b"user-%011d" % rnd.randrange(10**11)
        value = (b'{"event":"%s","page":"/%s/%d","ts":%d,"amount":%d.%02d,"session":"%08x"}' % (
            rnd.choice(WORDS).encode(), rnd.choice(WORDS).encode(), rnd.randrange(10000),
            1_700_000_000_000 + index * 7, rnd.randrange(1000), rnd.randrange(100),
            rnd.getrandbits(32))).ljust(100)[:100]
        body = (b"\x00" + varint(index * 3) + varint(index) + varint(len(key)) + key
                + varint(len(value)) + value + varint(0))
        out += varint(len(body)) + body
        index += 1
    return bytes(out[:size_bytes])


RECORDS = records_section(RECORDS_SECTION_BYTES)


def measure(benchmark, compress):
    """Benchmark compress(), which returns the compressed length; note MB/s and ratio."""
    compressed_bytes = compress()
    benchmark(compress)
    benchmark.extra_info["ratio"] = round(compressed_bytes / len(RECORDS), 4)
    if benchmark.stats is not None:
        benchmark.extra_info["MB/s"] = round(len(RECORDS) / benchmark.stats.stats.min / 1e6, 1)


def netkafka_compress_into(codec, level=None):
    compressor = Compressor(codec, level)
    out = bytearray(compressor.max_compressed_size(len(RECORDS)))
    return lambda: compressor.compress_into(RECORDS, out)


@pytest.mark.benchmark(group="gzip level 6, 1 MiB records section")
def test_gzip_netkafka(benchmark):
    measure(benchmark, netkafka_compress_into("gzip", 6))


@pytest.mark.benchmark(group="gzip level 6, 1 MiB records section")
def test_gzip_zlib(benchmark):
    measure(benchmark, lambda: len(zlib.compress(RECORDS, 6, wbits=31)))


@pytest.mark.benchmark(group="snappy raw, 1 MiB records section")
def test_snappy_netkafka(benchmark):
    measure(benchmark, netkafka_compress_into("snappy"))


@pytest.mark.benchmark(group="snappy raw, 1 MiB records section")
def test_snappy_python_snappy(benchmark):
    measure(benchmark, lambda: len(snappy.compress(RECORDS)))


@pytest.mark.benchmark(group="snappy raw, 1 MiB records section")
def test_snappy_cramjam_into(benchmark):
    out = bytearray(cramjam.snappy.compress_raw_max_len(RECORDS))
    measure(benchmark, lambda: cramjam.snappy.compress_raw_into(RECORDS, out))


def lz4_frame_compress(level):
    # The frame netkafka writes: 64 KiB independent blocks, no checksums, no size.
    return lambda: len(lz4.frame.compress(
        RECORDS, compression_level=level, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False, content_checksum=False, store_size=False))


@pytest.mark.benchmark(group="lz4 frame level 0 (fast), 1 MiB records section")
def test_lz4_netkafka(benchmark):
    measure(benchmark, netkafka_compress_into("lz4", 0))


@pytest.mark.benchmark(group="lz4 frame level 0 (fast), 1 MiB records section")
def test_lz4_lz4_frame(benchmark):
    measure(benchmark, lz4_frame_compress(0))


@pytest.mark.benchmark(group="lz4 frame level 9 (HC), 1 MiB records section")
def test_lz4_hc9_netkafka(benchmark):
    measure(benchmark, netkafka_compress_into("lz4", 9))


@pytest.mark.benchmark(group="lz4 frame level 9 (HC), 1 MiB records section")
def test_lz4_hc9_lz4_frame(benchmark):
    measure(benchmark, lz4_frame_compress(9))


@pytest.mark.benchmark(group="zstd level 3, 1 MiB records section")
def test_zstd_netkafka(benchmark):
    measure(benchmark, netkafka_compress_into("zstd", 3))


@pytest.mark.benchmark(group="zstd level 3, 1 MiB records section")
def test_zstd_zstandard(benchmark):
    compressor = zstandard.ZstdCompressor(level=3)
    measure(benchmark, lambda: len(compressor.compress(RECORDS)))
