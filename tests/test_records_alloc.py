"""Encoding through RecordBatchBuilder keeps no Python allocation per record alive.

100,000 and then 1,000,000 records (16-byte key, 100-byte value, 64 KiB batches taken
from a pool, sealed, acknowledged, released) must leave the same number of live Python
memory blocks and traced bytes, give or take a small constant: the encoder's live
allocations do not grow with the record count.
"""
import gc
import sys
import tracemalloc

import pytest

from netkafka.record._batch import RecordBatchBuilder
from netkafka.record._pool import BufferPool

BATCH_SIZE_BYTES = 64 * 1024
KEY = b"k" * 16
VALUE = b"v" * 100
KEYS = [KEY] * 10_000
VALUES = [VALUE] * 10_000
# Blocks and bytes the interpreter itself may gain between two measurements (caches of
# the test's own frames, a tracemalloc trace table entry or two).
SLACK_BLOCKS = 64
SLACK_BYTES = 16 * 1024


def encode_per_record(pool, count, compression):
    done = 0
    while done < count:
        builder = RecordBatchBuilder(pool.try_acquire(), BATCH_SIZE_BYTES, BATCH_SIZE_BYTES, compression)
        append = builder.append
        while done < count and append(KEY, VALUE) >= 0:
            done += 1
        finish(builder)


def encode_bulk(pool, count, compression):
    # The same lists over and over: count records go through append_many.
    done = 0
    while done < count:
        builder = RecordBatchBuilder(pool.try_acquire(), BATCH_SIZE_BYTES, BATCH_SIZE_BYTES, compression)
        done += builder.append_many(VALUES, KEYS, start=done % len(VALUES))
        finish(builder)


def finish(builder):
    view = builder.seal()
    view.release()
    builder.mark_acknowledged()
    builder.release()


def live():
    gc.collect()
    return sys.getallocatedblocks(), tracemalloc.get_traced_memory()[0]


@pytest.mark.parametrize("encode", [encode_per_record, encode_bulk])
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_live_allocations_do_not_grow_with_record_count(encode, compression):
    pool = BufferPool(BATCH_SIZE_BYTES * 2, BATCH_SIZE_BYTES * 8)
    encode(pool, 10_000, compression)  # warm: pool buffers, codec state, caches
    tracemalloc.start()
    try:
        base_blocks, base_bytes = live()
        encode(pool, 100_000, compression)
        small_blocks, small_bytes = live()
        encode(pool, 1_000_000, compression)
        large_blocks, large_bytes = live()
    finally:
        tracemalloc.stop()
    assert abs(large_blocks - small_blocks) < SLACK_BLOCKS, (base_blocks, small_blocks, large_blocks)
    assert abs(large_bytes - small_bytes) < SLACK_BYTES, (base_bytes, small_bytes, large_bytes)
    assert abs(small_blocks - base_blocks) < SLACK_BLOCKS
    assert pool.in_use_bytes == 0
