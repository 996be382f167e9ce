"""murmur2 and keyed partition choice: netkafka vs kafka-python, in the same run.

Parameters: 1,000 distinct 16-byte keys per round (a UUID-sized key), 12
partitions.  confluent-kafka has no Python-level murmur2 (librdkafka hashes
inside produce()), so kafka-python's pure-Python murmur2 is the peer.

send_batch()'s placement of ROWS rows of a 100-byte value, every other one keyed
(the 1,000 keys cycled), 12 partitions, 1 MiB batches: netkafka's keyed_partitions
alone (the unkeyed rows left at -1), then with place_unkeyed_rows (the sticky batch
plan that keeps each partition in row order); peer: kafka-python's DefaultPartitioner
arithmetic per row ((murmur2(key) & 0x7fffffff) % n, random.choice for no key).

    .venv/bin/python -m pytest bench/test_bench_partitioner.py --benchmark-only
"""
import os
import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from netkafka.producer._batch_send import keyed_partitions, place_unkeyed_rows
from netkafka.producer._partitioner import DefaultPartitioner, murmur2
from netkafka.record._columns import Rows

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


ROWS = 100_000
ROW_KEYS = [KEYS[i % KEY_COUNT] if i % 2 else None for i in range(ROWS)]
ROW_VALUES = [b"v" * 100] * ROWS
PLACEMENT = f"send_batch placement, {ROWS} rows (half keyed), 12 partitions"


@pytest.mark.benchmark(group=PLACEMENT)
def test_place_rows_keyed_only_netkafka(benchmark):
    rows = Rows(ROW_VALUES, ROW_KEYS)
    benchmark(keyed_partitions, rows.keys, NUM_PARTITIONS)


@pytest.mark.benchmark(group=PLACEMENT)
def test_place_rows_with_sticky_plan_netkafka(benchmark):
    rows = Rows(ROW_VALUES, ROW_KEYS)
    partitioner = DefaultPartitioner()

    def run():
        placed = keyed_partitions(rows.keys, NUM_PARTITIONS)
        place_unkeyed_rows(rows, placed, None, partitioner, "t", PARTITIONS, PARTITIONS,
                           1 << 20, lambda partition: None)
        return placed

    assert -1 not in run()
    benchmark(run)


@pytest.mark.benchmark(group=PLACEMENT)
def test_place_rows_kafka_python(benchmark):
    def run():
        return [random.choice(PARTITIONS) if key is None
                else (kafka_python_murmur2(key) & 0x7FFFFFFF) % NUM_PARTITIONS
                for key in ROW_KEYS]

    benchmark(run)
