"""CRC32C: netkafka's kernels vs the `crc32c` package; CRC32 vs zlib; in the same run.

Parameters: one buffer of random bytes per group (1 MiB: a large RecordBatch; 16 KiB:
Kafka's default batch.size), 8-byte aligned (bytes objects are), the same buffer for
every function of a group. Each call goes through the Python layer (argument checks,
buffer protocol, GIL released above 4 KiB) as the `crc32c` package's does.
extra_info["GB/s"] is computed from the minimum time.

    .venv/bin/python -m pytest bench/test_bench_crc32c.py --benchmark-only \\
        --benchmark-columns=min,median,ops
"""
import os
import zlib

import crc32c as crc32c_package
import pytest

from netkafka.record import _crc

SIZES_BYTES = {"1MiB": 1 << 20, "16KiB": 16 << 10}
BUFFERS = {name: os.urandom(size) for name, size in SIZES_BYTES.items()}

requires_hw = pytest.mark.skipif(not _crc.hw_available(), reason="no CRC32C instructions")

FUNCTIONS = [
    pytest.param(_crc.crc32c_hw, id="netkafka-hw", marks=requires_hw),
    pytest.param(_crc.crc32c_portable, id="netkafka-portable"),
    pytest.param(crc32c_package.crc32c, id="crc32c-package"),
]


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("size", list(SIZES_BYTES))
def test_crc32c(benchmark, size, function):
    benchmark.group = f"crc32c {size}"
    data = BUFFERS[size]
    result = benchmark(function, data)
    assert result == crc32c_package.crc32c(data)
    benchmark.extra_info["GB/s"] = round(len(data) / benchmark.stats.stats.min / 1e9, 2)


@pytest.mark.parametrize("function", [
    pytest.param(_crc.crc32, id="netkafka"),
    pytest.param(zlib.crc32, id="zlib"),
])
def test_crc32_1mib(benchmark, function):
    # CRC32 serves only legacy message sets (brokers before 0.11): portable kernel only.
    benchmark.group = "crc32 1MiB"
    data = BUFFERS["1MiB"]
    result = benchmark(function, data)
    assert result == zlib.crc32(data)
    benchmark.extra_info["GB/s"] = round(len(data) / benchmark.stats.stats.min / 1e9, 2)
