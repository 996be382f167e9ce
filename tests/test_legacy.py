"""Legacy message sets (v0/v1) from netkafka.record._legacy, checked by independent readers.

Kafka 4.x brokers no longer accept produce requests carrying message format v0/v1,
so no real broker can judge these bytes. The proof is decoding by independent
readers instead: kafka-python's and aiokafka's legacy record readers (which verify
the CRC32s and undo the compression with their own codec libraries), plus a
byte-exact comparison with a naive pure-Python encoder (tests/legacy_reference.py).
"""
import gzip
import random
import struct
import sys
import time

import aiokafka.record.memory_records as aiokafka_records
import kafka.record.memory_records as kafka_python_records
import lz4.frame
import pytest
import snappy
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from legacy_reference import encode_entry, encode_set, encode_wrapper
from netkafka.errors import BatchStateError, BufferPoolExhausted
from netkafka.record._compression import Compressor
from netkafka.record._legacy import LegacyMessageSetBuilder
from netkafka.record._pool import BufferPool

# Codec ids as Kafka's message attributes carry them (bits 0-2).
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
LEGACY_CODECS = [NONE, GZIP, SNAPPY, LZ4]
MAGICS = [0, 1]
MiB = 1 << 20

# Large enough that generated records always fit: fill rules have their own tests.
ROOMY_BYTES = 32 * MiB


def new_builder(magic, codec, batch_size_bytes, max_request_size_bytes, pool=None):
    """A builder on a buffer from `pool` (default: a pool of its own)."""
    if pool is None:
        pool = BufferPool(batch_size_bytes, 4 * max_request_size_bytes)
    compressor = None if codec == NONE else Compressor(codec)
    return LegacyMessageSetBuilder(magic, pool.acquire(), batch_size_bytes,
                                   max_request_size_bytes, compressor)


def decode_with_kafka_python(data):
    """(offset, key, value, timestamp) of every record, CRCs checked at both levels."""
    found = []
    batches = kafka_python_records.MemoryRecords(bytes(data))
    while (batch := batches.next_batch()) is not None:
        assert batch.validate_crc()
        for record in batch:
            assert record.validate_crc()
            found.append((record.offset, record.key, record.value, record.timestamp))
    return found


def decode_with_aiokafka(data):
    """The same through aiokafka's (compiled) reader; it checks the outer CRCs."""
    found = []
    batches = aiokafka_records.MemoryRecords(bytes(data))
    while (batch := batches.next_batch()) is not None:
        assert batch.validate_crc()
        for record in batch:
            found.append((record.offset, record.key, record.value, record.timestamp))
    return found


def expected_records(magic, records):
    return [
        (offset, key, value, timestamp_ms if magic == 1 else None)
        for offset, (key, value, timestamp_ms) in enumerate(records)
    ]


def build(magic, codec, records, batch_size_bytes=ROOMY_BYTES,
          max_request_size_bytes=ROOMY_BYTES):
    builder = new_builder(magic, codec, batch_size_bytes, max_request_size_bytes)
    for offset, (key, value, timestamp_ms) in enumerate(records):
        assert builder.append(key, value, timestamp_ms=None if magic == 0 else timestamp_ms) == offset
    assert builder.record_count == len(records)
    return builder


def split_wrapper(magic, sealed):
    """(offset, attributes, timestamp, value) of a set made of one wrapper message."""
    offset, size, _crc, _magic, attributes = struct.unpack_from(">qiIbb", sealed)
    assert 12 + size == len(sealed), "not a single wrapper message"
    pos = 18
    timestamp = None
    if magic == 1:
        (timestamp,) = struct.unpack_from(">q", sealed, pos)
        pos += 8
    key_length, value_length = struct.unpack_from(">ii", sealed, pos)
    assert key_length == -1
    return offset, attributes, timestamp, sealed[pos + 8:pos + 8 + value_length]


def lz4_header_end(frame):
    """Offset of the HC byte of an LZ4 frame header."""
    flg = frame[4]
    return 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)


def decompress_independently(magic, codec, payload):
    if codec == GZIP:
        return gzip.decompress(payload)
    if codec == SNAPPY:
        return snappy.decompress(payload)
    assert codec == LZ4
    hc_at = lz4_header_end(payload)
    flg = payload[4]
    assert flg & 0x20, "LZ4 blocks must be independent: Kafka's reader rejects linked ones"
    if magic == 0:
        # KAFKA-1493: 0.8/0.9 brokers check a header checksum taken from the frame's
        # first byte (magic number included), and know no content-size field.
        assert not flg & 0x08
        assert payload[hc_at] == (xxhash.xxh32_intdigest(payload[:hc_at]) >> 8) & 0xFF
        payload = (payload[:hc_at]
                   + bytes([(xxhash.xxh32_intdigest(payload[4:hc_at]) >> 8) & 0xFF])
                   + payload[hc_at + 1:])
    else:
        assert payload[hc_at] == (xxhash.xxh32_intdigest(payload[4:hc_at]) >> 8) & 0xFF
    return lz4.frame.decompress(payload)


def check_sealed(magic, codec, records, sealed):
    """Everything we know about a sealed set, judged without netkafka's own code."""
    sealed = bytes(sealed)
    expected = expected_records(magic, records)
    assert decode_with_kafka_python(sealed) == expected
    if not (codec == LZ4 and magic == 0):  # aiokafka refuses LZ4 in v0 (KAFKA-3160)
        # aiokafka reports "no timestamp" (-1) as None.
        assert decode_with_aiokafka(sealed) == [
            (offset, key, value, None if timestamp_ms == -1 else timestamp_ms)
            for offset, key, value, timestamp_ms in expected
        ]
    inner = encode_set(magic, records)
    if codec == NONE or sealed == inner:
        # Uncompressed, or compressing did not pay and the plain set went instead.
        assert sealed == inner
        return False
    offset, attributes, _timestamp, payload = split_wrapper(magic, sealed)
    assert attributes == codec
    assert offset == len(records) - 1
    assert decompress_independently(magic, codec, payload) == inner
    assert sealed == encode_wrapper(magic, codec, records, payload)
    assert len(sealed) < len(inner)
    return True


def payloads():
    """None, small binary, and large values: compressible and random."""
    return st.one_of(
        st.none(),
        st.binary(max_size=40),
        st.builds(lambda size, byte: bytes([byte]) * size,
                  st.integers(0, MiB), st.integers(0, 255)),
        st.builds(lambda seed, size: random.Random(seed).randbytes(size),
                  st.integers(0, 2**32), st.integers(0, MiB)),
    )


def record_lists(magic):
    timestamps = (st.just(-1) if magic == 0
                  else st.one_of(st.just(-1), st.integers(0, 2**63 - 1)))
    return st.lists(st.tuples(payloads(), payloads(), timestamps), min_size=1, max_size=12)


@st.composite
def magic_codec_records(draw):
    magic = draw(st.sampled_from(MAGICS))
    return magic, draw(st.sampled_from(LEGACY_CODECS)), draw(record_lists(magic))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(magic_codec_records())
def test_random_sets_decode_independently_and_match_reference(case):
    magic, codec, records = case
    builder = build(magic, codec, records)
    assert builder.size_bytes == len(encode_set(magic, records)) + (
        0 if codec == NONE else len(encode_entry(magic, 0, codec, -1, None, b"")))
    sealed = builder.seal()
    assert builder.size_bytes == len(sealed)
    check_sealed(magic, codec, records, sealed)


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", MAGICS)
def test_every_codec_really_compresses_repetitive_records(magic, codec):
    records = [(b"key-%d" % i, b"value %d " % i * 50, 1_700_000_000_000 + i)
               for i in range(200)]
    sealed = build(magic, codec, records).seal()
    assert check_sealed(magic, codec, records, sealed) == (codec != NONE)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
@pytest.mark.parametrize("magic", MAGICS)
def test_incompressible_set_goes_uncompressed(magic, codec):
    records = [(None, random.Random(7).randbytes(300), 5)]
    sealed = build(magic, codec, records).seal()
    assert bytes(sealed) == encode_set(magic, records)
    assert check_sealed(magic, codec, records, sealed) is False


@pytest.mark.parametrize("value", [b"", b"x", bytearray(b"mutable"), memoryview(b"view")])
def test_any_bytes_like_key_and_value(value):
    records = [(value, value, 12)]
    sealed = build(1, NONE, records).seal()
    assert decode_with_kafka_python(sealed) == [(0, bytes(value), bytes(value), 12)]


def test_v1_timestamp_defaults_to_wall_clock():
    builder = new_builder(1, NONE, 1024, 4096)
    before_ms = time.time_ns() // 1_000_000
    builder.append(b"k", b"v")
    after_ms = time.time_ns() // 1_000_000
    [(_, _, _, timestamp_ms)] = decode_with_kafka_python(builder.seal())
    assert before_ms <= timestamp_ms <= after_ms


def test_integer_types_with_index_are_timestamps():
    class Milliseconds:  # as numpy's integers: not int, but __index__
        def __index__(self):
            return 42

    builder = new_builder(1, NONE, 1024, 4096)
    builder.append(b"k", b"v", timestamp_ms=Milliseconds())
    assert decode_with_kafka_python(builder.seal()) == [(0, b"k", b"v", 42)]


def test_compressor_of_codec_none_means_uncompressed():
    pool = BufferPool(1024, 4096)
    builder = LegacyMessageSetBuilder(1, pool.acquire(), 1024, 4096, Compressor("none"))
    assert builder.codec == NONE
    builder.append(b"k", b"v", timestamp_ms=3)
    assert bytes(builder.seal()) == encode_set(1, [(b"k", b"v", 3)])


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", MAGICS)
def test_set_refuses_records_past_batch_size(magic, codec):
    batch_size_bytes = 1000
    timestamp_ms = None if magic == 0 else -1
    wrapper_bytes = 0 if codec == NONE else len(encode_entry(magic, 0, codec, -1, None, b""))
    builder = new_builder(magic, codec, batch_size_bytes, 10_000)
    accepted = []
    while True:
        record = (b"k", b"%d" % len(accepted) * 20, -1)
        offset = builder.append(record[0], record[1], timestamp_ms=timestamp_ms)
        if offset == -1:
            break
        assert offset == len(accepted)
        accepted.append(record)
        assert builder.size_bytes <= batch_size_bytes
    # Refused because it did not fit, and refusing it changed nothing.
    refused_bytes = len(encode_entry(magic, 0, 0, -1, record[0], record[1]))
    assert builder.size_bytes + refused_bytes > batch_size_bytes
    assert builder.size_bytes == len(encode_set(magic, accepted)) + wrapper_bytes
    assert builder.record_count == len(accepted)
    assert builder.is_full
    sealed = builder.seal()
    assert len(sealed) <= batch_size_bytes
    check_sealed(magic, codec, accepted, sealed)


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", MAGICS)
def test_oversized_first_record_gets_a_larger_buffer(magic, codec):
    max_request_size_bytes = 100_000
    timestamp_ms = None if magic == 0 else 9
    pool = BufferPool(1000, 10 * max_request_size_bytes)
    builder = new_builder(magic, codec, 1000, max_request_size_bytes, pool)
    value = random.Random(3).randbytes(50_000)
    assert builder.append(None, value, timestamp_ms=timestamp_ms) == 0
    assert pool.in_use_bytes > 50_000, "the 1000-byte buffer was swapped for a larger one"
    assert builder.append(None, b"", timestamp_ms=timestamp_ms) == -1, \
        "nothing joins an oversized first record"
    sealed = builder.seal()
    assert len(sealed) <= max_request_size_bytes
    check_sealed(magic, codec, [(None, value, 9 if magic else -1)], sealed)


def test_oversized_first_record_when_the_pool_has_no_room():
    pool = BufferPool(1000, 6000)
    builder = new_builder(1, NONE, 1000, 100_000, pool)
    others = [pool.acquire(), pool.acquire()]  # 3000 of 6000 bytes in use
    with pytest.raises(BufferPoolExhausted, match="not available"):
        builder.append(None, b"x" * 5000, timestamp_ms=1)
    assert builder.record_count == 0
    assert pool.in_use_bytes == 3000
    assert builder.append(None, b"x" * 500, timestamp_ms=1) == 0, "the set is still usable"


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", MAGICS)
def test_record_larger_than_max_request_size_is_refused(magic, codec):
    builder = new_builder(magic, codec, 1000, 5000)
    with pytest.raises(ValueError, match="larger than max_request_size=5000"):
        builder.append(None, b"x" * 5000)
    assert builder.record_count == 0
    assert builder.append(b"k", b"v") == 0, "a refused record leaves the set usable"


def test_smallest_batch_size_makes_one_record_sets():
    builder = new_builder(1, NONE, 34, 1000)
    assert builder.append(b"a", b"b", timestamp_ms=1) == 0
    assert builder.is_full
    assert builder.append(None, None, timestamp_ms=1) == -1
    assert decode_with_kafka_python(builder.seal()) == [(0, b"a", b"b", 1)]


def test_compressed_set_takes_the_pool_memory_of_its_compressed_copy_only():
    pool = BufferPool(1 << 16, 1 << 20)
    builder = new_builder(1, GZIP, 1 << 16, 1 << 20, pool)
    records = [(b"k", b"v" * 1000, 1)] * 10
    for key, value, timestamp_ms in records:
        builder.append(key, value, timestamp_ms=timestamp_ms)
    assert pool.in_use_bytes == 1 << 16
    view = builder.seal()
    assert builder.sealed_codec == GZIP
    assert pool.in_use_bytes == 1 << 16, "the plain entries' buffer went back at seal()"
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 1
    assert bytes(builder.seal()) == bytes(view), "seal() again: the same bytes"
    check_sealed(1, GZIP, records, view)
    builder.mark_acknowledged()
    with pytest.raises(BufferError, match="1 view"):
        builder.release()
    view.release()
    builder.release()
    assert pool.in_use_bytes == 0
    assert builder.state == "released"


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
@pytest.mark.parametrize("magic", MAGICS)
def test_seal_without_pool_memory_for_the_compressed_copy_sends_uncompressed(magic, codec):
    # The rule RecordBatchBuilder follows too (PooledBatch): waiting for memory at
    # seal() could deadlock, failing would drop valid records.
    pool = BufferPool(1 << 16, 1 << 17)
    builder = new_builder(magic, codec, 1 << 16, 1 << 17, pool)
    records = [(None, b"abc" * 1000, 1 if magic else -1)]
    builder.append(None, records[0][1], timestamp_ms=1 if magic else None)
    other = pool.acquire()
    sealed = builder.seal()
    assert builder.state == "sealed"
    assert builder.codec == codec and builder.sealed_codec == NONE
    assert check_sealed(magic, codec, records, sealed) is False, "the plain set went"
    assert pool.in_use_bytes == 2 << 16, "no buffer was taken for a copy"
    sealed.release()
    builder.mark_acknowledged()
    builder.release()
    other.release()
    assert pool.in_use_bytes == 0


def test_appending_keeps_no_python_objects_per_record():
    builder = new_builder(1, NONE, 64 * MiB, 64 * MiB)
    key, value = b"0123456789abcdef", b"v" * 100
    builder.append(key, value, timestamp_ms=1)
    blocks_before = sys.getallocatedblocks()
    for _ in range(200_000):
        builder.append(key, value, None, 1)
    assert sys.getallocatedblocks() - blocks_before < 100
    assert builder.record_count == 200_001


# -- bad input: a clear exception naming the problem, and the set left intact --

@pytest.mark.parametrize("magic", MAGICS)
def test_headers_are_refused(magic):
    builder = new_builder(magic, NONE, 1024, 4096)
    with pytest.raises(ValueError, match="no record headers"):
        builder.append(b"k", b"v", [("h", b"1")])
    assert builder.append(b"k", b"v", []) == 0, "empty headers are fine"


def test_v0_refuses_a_timestamp():
    builder = new_builder(0, NONE, 1024, 4096)
    with pytest.raises(ValueError, match="v0 has no timestamp"):
        builder.append(b"k", b"v", timestamp_ms=1_700_000_000_000)
    assert builder.record_count == 0


@pytest.mark.parametrize("timestamp_ms, error, message", [
    (-2, ValueError, "timestamp_ms must be -1"),
    (2**63, ValueError, "timestamp_ms must be -1"),
    (-2**70, ValueError, "timestamp_ms must be -1"),
    (1.5, TypeError, "timestamp_ms must be an int"),
    ("1", TypeError, "timestamp_ms must be an int"),
])
def test_v1_bad_timestamps(timestamp_ms, error, message):
    builder = new_builder(1, NONE, 1024, 4096)
    with pytest.raises(error, match=message):
        builder.append(b"k", b"v", timestamp_ms=timestamp_ms)
    assert builder.record_count == 0


@pytest.mark.parametrize("key, value, which", [
    ("text", b"v", "key"), (b"k", "text", "value"), (b"k", 5, "value"), ([1], b"v", "key"),
])
def test_non_bytes_key_or_value(key, value, which):
    builder = new_builder(1, NONE, 1024, 4096)
    with pytest.raises(TypeError, match=f"{which} must be bytes, bytearray, memoryview or None"):
        builder.append(key, value, timestamp_ms=1)
    assert builder.record_count == 0 and builder.size_bytes == 0


@pytest.mark.parametrize("magic, codec, batch_size_bytes, max_request_size_bytes, message", [
    (2, NONE, 1024, 4096, "magic 0 or 1, got 2"),
    (-1, NONE, 1024, 4096, "magic 0 or 1, got -1"),
    (1, ZSTD, 1024, 4096, "zstd is not available in message format v0/v1"),
    (0, ZSTD, 1024, 4096, "zstd is not available in message format v0/v1"),
    (1, NONE, 33, 4096, "batch_size_bytes=33 cannot hold a 34-byte set"),
    (0, GZIP, 51, 4096, "batch_size_bytes=51 cannot hold a 52-byte set"),
    (1, NONE, 1024, 1023, "must be at least batch_size_bytes=1024"),
    (1, NONE, 1024, 2**31, "and at most 2147483647"),
])
def test_bad_construction(magic, codec, batch_size_bytes, max_request_size_bytes, message):
    pool = BufferPool(1024, 4096)
    compressor = None if codec == NONE else Compressor(codec)
    with pytest.raises(ValueError, match=message):
        LegacyMessageSetBuilder(magic, pool.acquire(), batch_size_bytes,
                                max_request_size_bytes, compressor)


def test_buffer_has_one_owner():
    pool = BufferPool(1024, 4096)
    buffer = pool.acquire()
    LegacyMessageSetBuilder(1, buffer, 1024, 4096)
    with pytest.raises(BatchStateError, match="already belongs"):
        LegacyMessageSetBuilder(1, buffer, 1024, 4096)


def test_life_cycle_misuse():
    builder = new_builder(1, NONE, 1024, 4096)
    with pytest.raises(BufferError, match="seal it first"):
        memoryview(builder)
    with pytest.raises(ValueError, match="empty message set"):
        builder.seal()
    with pytest.raises(BatchStateError, match="cannot release a open set"):
        builder.release()
    builder.append(b"k", b"v", timestamp_ms=1)
    builder.seal()
    with pytest.raises(BatchStateError, match="cannot append to a sealed set"):
        builder.append(b"k", b"v", timestamp_ms=1)
    builder.mark_failed()
    with pytest.raises(BatchStateError, match="cannot acknowledge a done set"):
        builder.mark_acknowledged()
    builder.release()
    with pytest.raises(BatchStateError, match="cannot seal a released set"):
        builder.seal()
