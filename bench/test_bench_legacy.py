"""Legacy message sets: netkafka vs aiokafka's Cython builder vs kafka-python, same run.

Parameters: 100,000 records of a 16-byte key and a 100-byte JSON-like value (1,000
distinct values), each with its timestamp, appended into sets of batch size 1 MiB
which are then sealed (built): magic 1 (Kafka 0.10) and magic 0, codecs none and
snappy. Every side does the whole job: per-message CRC32, compression, the wrapper.
netkafka also gives each set's pooled memory back, as the producer does on an ack.
extra_info["records/s"] comes from the minimum time.

    .venv/bin/python -m pytest bench/test_bench_legacy.py --benchmark-only \\
        --benchmark-columns=min,median,rounds
"""
import random

import pytest
from aiokafka.record._crecords.legacy_records import (
    LegacyRecordBatchBuilder as AiokafkaBuilder,
)
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KafkaPythonBuilder

from netkafka.record._compression import Compressor
from netkafka.record._legacy import LegacyMessageSetBuilder
from netkafka.record._pool import BufferPool

RECORD_COUNT = 100_000
BATCH_SIZE_BYTES = 1 << 20
TIMESTAMP_MS = 1_700_000_000_000
CODECS = {"none": 0, "snappy": 2}


def _values(count, seed=5):
    rnd = random.Random(seed)
    return [
        (b'{"event":"click","page":"/p/%d","amount":%d.%02d,"session":"%08x"}' % (
            rnd.randrange(10000), rnd.randrange(1000), rnd.randrange(100),
            rnd.getrandbits(32))).ljust(100)[:100]
        for _ in range(count)
    ]


KEY = b"user-00000000042"
VALUES = _values(1000)
RECORDS = [VALUES[i % len(VALUES)] for i in range(RECORD_COUNT)]


def encode_netkafka(magic, codec):
    compressor = Compressor(codec) if codec else None
    buffer_bytes = BATCH_SIZE_BYTES if compressor is None else (
        34 + compressor.max_compressed_size(BATCH_SIZE_BYTES))
    pool = BufferPool(buffer_bytes, 4 * buffer_bytes)
    timestamp_ms = TIMESTAMP_MS if magic else None
    wire_bytes = 0
    i = 0
    while i < RECORD_COUNT:
        builder = LegacyMessageSetBuilder(magic, pool.acquire(), BATCH_SIZE_BYTES,
                                          BATCH_SIZE_BYTES, compressor)
        append = builder.append
        while i < RECORD_COUNT and append(KEY, RECORDS[i], None, timestamp_ms) >= 0:
            i += 1
        with builder.seal() as view:
            wire_bytes += len(view)
        builder.mark_acknowledged()
        builder.release()
    return wire_bytes


def _encode_peer(builder_class, magic, codec):
    wire_bytes = 0
    i = 0
    while i < RECORD_COUNT:
        builder = builder_class(magic, codec, BATCH_SIZE_BYTES)
        offset = 0
        while i < RECORD_COUNT and builder.append(
                offset, TIMESTAMP_MS, KEY, RECORDS[i]) is not None:
            i += 1
            offset += 1
        wire_bytes += len(builder.build())
    return wire_bytes


def encode_aiokafka(magic, codec):
    return _encode_peer(AiokafkaBuilder, magic, codec)


def encode_kafka_python(magic, codec):
    return _encode_peer(KafkaPythonBuilder, magic, codec)


@pytest.mark.parametrize("encode", [
    pytest.param(encode_netkafka, id="netkafka"),
    pytest.param(encode_aiokafka, id="aiokafka-cython"),
    pytest.param(encode_kafka_python, id="kafka-python"),
])
@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("magic", [1, 0])
def test_encode_legacy_sets(benchmark, magic, codec, encode):
    benchmark.group = f"legacy v{magic} {codec}: {RECORD_COUNT} records into 1 MiB sets"
    wire_bytes = benchmark.pedantic(encode, args=(magic, CODECS[codec]), rounds=5,
                                    iterations=1, warmup_rounds=1)
    assert wire_bytes > 0
    benchmark.extra_info["records/s"] = round(RECORD_COUNT / benchmark.stats.stats.min)
    benchmark.extra_info["wire MB"] = round(wire_bytes / 1e6, 2)
