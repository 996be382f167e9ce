"""murmur2 and keyed partition choice: netkafka vs kafka-python, in the same run.

Parameters: 1,000 distinct 16-byte keys per round (a UUID-sized key), 12
partitions.  confluent-kafka has no Python-level murmur2 (librdkafka hashes
inside produce()), so kafka-python's pure-Python murmur2 is the peer.

    .venv/bin/python -m pytest bench/test_bench_partitioner.py --benchmark-only
"""
import os

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from netkafka._partitioner import DefaultPartitioner, murmur2

KEY_BYTES = 16
KEY_COUNT = 1000
NUM_PARTITIONS = 12
KEYS = [os.urandom(KEY_BYTES) for _ in range(KEY_COUNT)]
PARTITIONS = tuple(range(NUM_PARTITIONS))


def hash_all(hash_function):
    for key in KEYS:
        hash_function(key)


@pytest.mark.benchmark(group="murmur2, 1000 keys of 16 bytes")
def test_murmur2_netkafka(benchmark):
    benchmark(hash_all, murmur2)


@pytest.mark.benchmark(group="murmur2, 1000 keys of 16 bytes")
def test_murmur2_kafka_python(benchmark):
    benchmark(hash_all, kafka_python_murmur2)


@pytest.mark.benchmark(group="partition(), 1000 records, 12 partitions")
def test_partition_keyed_netkafka(benchmark):
    partition = DefaultPartitioner().partition

    def run():
        for key in KEYS:
            partition("t", key, PARTITIONS, PARTITIONS)

    benchmark(run)


@pytest.mark.benchmark(group="partition(), 1000 records, 12 partitions")
def test_partition_unkeyed_sticky_netkafka(benchmark):
    partition = DefaultPartitioner().partition

    def run():
        for _ in range(KEY_COUNT):
            partition("t", None, PARTITIONS, PARTITIONS)

    benchmark(run)
