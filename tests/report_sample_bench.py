"""A tiny real run of each end-to-end suite, for tests/test_report.py (not collected by
itself: its name is not test_*.py).

tests/test_report.py runs it under pytest-benchmark in a subprocess against the session's
broker (NETKAFKA_BOOTSTRAP), with bench/ on the path, and feeds the JSON to
bench/report.py.  The numbers are real but small (a few thousand records): enough to check
that the report computes its tables from its input, far too few to mean anything about
speed.  The throughput and latency rows are measured and written by bench/'s own helpers
(rounds.py, e2e_results.py), so their extra_info is the suite's.
"""
import contextlib
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from confluent_kafka import Producer as ConfluentProducer

import e2e_results
import peers
import rounds
from netkafka import Producer
from netkafka.testing.admin import create_topic

RECORDS = 3000
RECORD_SIZE = 100
BATCH_SIZE = 262144
LINGER_MS = 5
ROUNDS = 2
LATENCY_RECORDS = 300
LATENCY_RATE = 1000
VALUE = b"v" * RECORD_SIZE
# Two cells: the second has no Java, so its Java ratio column is empty.
CELLS = {
    "acks1-none": (peers.Settings(RECORD_SIZE, "1", "none", BATCH_SIZE, LINGER_MS),
                   (("netkafka", "send"), ("netkafka", "send_batch"),
                    ("confluent-kafka", "error_only"), ("java", "send"))),
    "acksall-lz4": (peers.Settings(RECORD_SIZE, "all", "lz4", BATCH_SIZE, LINGER_MS),
                    (("netkafka", "send"), ("confluent-kafka", "error_only"))),
}
LATENCY_SETTINGS = peers.Settings(RECORD_SIZE, "1", "none", linger_ms=0)


@pytest.fixture
def topic(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    return topic_name


def netkafka_send(bootstrap, topic, acks, compression):
    with Producer(bootstrap_servers=bootstrap, acks=acks, compression_type=compression,
                  batch_size=BATCH_SIZE, linger_ms=LINGER_MS) as producer:
        producer.partitions_for(topic)
        started = time.perf_counter()
        for _ in range(RECORDS):
            producer.send(topic, VALUE)
        producer.flush()
        assert producer.metrics()["netkafka"]["records_acknowledged"] == RECORDS
        return time.perf_counter() - started


@pytest.mark.parametrize("cell", list(CELLS))
def test_throughput(benchmark, kafka_broker, topic_name, tmp_path, cell):
    settings, clients = CELLS[cell]
    bootstrap, pids = kafka_broker.bootstrap, rounds.broker_pids(kafka_broker)
    assert pids, "the broker's JVM was not found by its port: no broker CPU to report"
    with contextlib.ExitStack() as stack:
        topics, contestants = {}, {}
        for client, mode in clients:
            topic = topics[client, mode] = f"{topic_name}-{client}-{mode}"
            create_topic(bootstrap, topic, partitions=3)
            contestants[client, mode] = peers.contestant(client, mode, bootstrap, topic, settings,
                                                         RECORDS, pids, tmp_path, stack)
        measured = benchmark.pedantic(rounds.alternate, (contestants, ROUNDS), rounds=1,
                                      iterations=1)
        for key, contestant in contestants.items():
            assert peers.acknowledged_records(bootstrap, topics[key]) == contestant.records_sent
    e2e_results.record_throughput(benchmark, settings, measured)


def netkafka_latencies(bootstrap, topic, pids):
    latencies = []
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0) as producer:
        producer.partitions_for(topic)

        def paced():
            started = time.perf_counter()
            for i in range(LATENCY_RECORDS):
                _wait_until(started + i / LATENCY_RATE)
                sent = time.perf_counter()
                producer.send(topic, VALUE).add_callback(
                    lambda _metadata, sent=sent: latencies.append(time.perf_counter() - sent))
            producer.flush()

        measured = rounds.measure(paced, LATENCY_RECORDS, pids)
    return latencies, measured


def confluent_latencies(bootstrap, topic, pids):
    latencies = []
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    producer.list_topics(topic, timeout=30)

    def paced():
        started = time.perf_counter()
        for i in range(LATENCY_RECORDS):
            _wait_until(started + i / LATENCY_RATE)
            sent = time.perf_counter()
            producer.produce(topic, VALUE, on_delivery=lambda error, _message, sent=sent:
                             None if error else latencies.append(time.perf_counter() - sent))
            producer.poll(0)
        assert producer.flush(60) == 0

    return latencies, rounds.measure(paced, LATENCY_RECORDS, pids)


def _wait_until(moment):
    delay = moment - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


@pytest.mark.parametrize("client", ["netkafka", "confluent-kafka"])
def test_latency(benchmark, kafka_broker, topic, client):
    run = netkafka_latencies if client == "netkafka" else confluent_latencies
    latencies, measured = benchmark.pedantic(
        run, (kafka_broker.bootstrap, topic, rounds.broker_pids(kafka_broker)), rounds=1,
        iterations=1)
    latencies.sort()
    assert len(latencies) == LATENCY_RECORDS
    e2e_results.record_latency(
        benchmark, client, "send" if client == "netkafka" else "callback", LATENCY_SETTINGS,
        LATENCY_RATE, 1000 * latencies[len(latencies) // 2],
        1000 * latencies[len(latencies) * 99 // 100], 1000 * latencies[-1], measured)


def _rss_bytes():
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()


def test_memory(benchmark, kafka_broker, topic):
    def run():
        rss_before, blocks_before = _rss_bytes(), sys.getallocatedblocks()
        tracemalloc.start()
        netkafka_send(kafka_broker.bootstrap, topic, 1, None)
        _, peak_traced = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return rss_before, _rss_bytes(), sys.getallocatedblocks() - blocks_before, peak_traced

    rss_before, rss_after, blocks, peak_traced = benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update({
        "suite": "memory", "client": "netkafka", "mode": "send", "records": RECORDS,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rss_growth_bytes": rss_after - rss_before,
        # Blocks still allocated after the run (a leak shows here), and the traced peak.
        "allocs_per_record": blocks / RECORDS, "bytes_per_record": peak_traced / RECORDS})
