"""A tiny real run of each end-to-end suite, for tests/test_report.py (not collected by
itself: its name is not test_*.py).

tests/test_report.py runs it under pytest-benchmark in a subprocess against the session's
broker (NETKAFKA_BOOTSTRAP) and feeds the JSON to bench/report.py.  The numbers are real
but small (a few thousand records): enough to check that the report computes its tables
from its input, far too few to mean anything about speed.  Each benchmark's extra_info
follows the schema of bench/'s end-to-end suite.
"""
import os
import re
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from confluent_kafka import Producer as ConfluentProducer

from netkafka import Producer
from netkafka.testing.admin import create_topic
from netkafka.testing.broker import java_executable, kafka_libs_dir

RECORDS = 3000
RECORD_SIZE = 100
BATCH_SIZE = 262144
LINGER_MS = 5
LATENCY_RECORDS = 300
LATENCY_RATE = 1000
VALUE = b"v" * RECORD_SIZE
MIB = 2**20
# The Java tool's final line: records sent, records/sec, MB/sec.
JAVA_SUMMARY = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)",
                          re.MULTILINE)


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


def netkafka_send_batch(bootstrap, topic, acks, compression):
    with Producer(bootstrap_servers=bootstrap, acks=acks, compression_type=compression,
                  batch_size=BATCH_SIZE, linger_ms=LINGER_MS) as producer:
        producer.partitions_for(topic)
        started = time.perf_counter()
        result = producer.send_batch(topic, [VALUE] * RECORDS).get()
        assert result.failed_count == 0
        return time.perf_counter() - started


def confluent_error_only(bootstrap, topic, acks, compression):
    errors = []
    producer = ConfluentProducer({
        "bootstrap.servers": bootstrap, "acks": acks, "compression.type": compression or "none",
        "batch.size": BATCH_SIZE, "linger.ms": LINGER_MS, "delivery.report.only.error": True,
        "on_delivery": lambda error, _message: errors.append(error) if error else None})
    producer.list_topics(topic, timeout=30)
    started = time.perf_counter()
    for _ in range(RECORDS):
        producer.produce(topic, VALUE)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors
    return time.perf_counter() - started


def java_perf(bootstrap, topic, acks, compression):
    """ProducerPerformance's own elapsed time (its JVM start is not counted)."""
    classpath = str(kafka_libs_dir() / "*")
    done = subprocess.run(
        [java_executable(), "-Xmx256m", "-cp", classpath,
         "org.apache.kafka.tools.ProducerPerformance",
         "--topic", topic, "--num-records", str(RECORDS), "--record-size", str(RECORD_SIZE),
         "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
         f"acks={acks}", f"compression.type={compression or 'none'}",
         f"batch.size={BATCH_SIZE}", f"linger.ms={LINGER_MS}"],
        capture_output=True, text=True, timeout=180)
    match = JAVA_SUMMARY.search(done.stdout)
    assert done.returncode == 0 and match, done.stdout + done.stderr
    assert int(match[1]) == RECORDS
    return RECORDS / float(match[2])


CLIENTS = {("netkafka", "send"): netkafka_send, ("netkafka", "send_batch"): netkafka_send_batch,
           ("confluent-kafka", "error_only"): confluent_error_only, ("java", "perf"): java_perf}


@pytest.mark.parametrize("acks, compression, client, mode", [
    ("1", None, "netkafka", "send"),
    ("1", None, "netkafka", "send_batch"),
    ("1", None, "confluent-kafka", "error_only"),
    ("1", None, "java", "perf"),
    ("all", "lz4", "netkafka", "send"),
    ("all", "lz4", "confluent-kafka", "error_only"),  # no Java here: its ratio column is empty
])
def test_throughput(benchmark, kafka_broker, topic, acks, compression, client, mode):
    run = CLIENTS[client, mode]
    acks_value = "all" if acks == "all" else int(acks)
    seconds = benchmark.pedantic(run, (kafka_broker.bootstrap, topic, acks_value, compression),
                                 rounds=1, iterations=1)
    benchmark.extra_info.update({
        "suite": "throughput", "client": client, "mode": mode, "record_size": RECORD_SIZE,
        "acks": acks, "compression": compression or "none", "batch_size": BATCH_SIZE,
        "linger_ms": LINGER_MS, "records": RECORDS, "seconds": seconds,
        "msgs_per_s": RECORDS / seconds, "mb_per_s": RECORDS * RECORD_SIZE / seconds / MIB,
        "load_1m": os.getloadavg()[0]})  # an optional key of the suite's, which the report reads


def netkafka_latencies(bootstrap, topic):
    latencies = []
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0) as producer:
        producer.partitions_for(topic)
        started = time.perf_counter()
        for i in range(LATENCY_RECORDS):
            _wait_until(started + i / LATENCY_RATE)
            sent = time.perf_counter()
            producer.send(topic, VALUE).add_callback(
                lambda _metadata, sent=sent: latencies.append(time.perf_counter() - sent))
        producer.flush()
    return latencies


def confluent_latencies(bootstrap, topic):
    latencies = []
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    producer.list_topics(topic, timeout=30)
    started = time.perf_counter()
    for i in range(LATENCY_RECORDS):
        _wait_until(started + i / LATENCY_RATE)
        sent = time.perf_counter()
        producer.produce(topic, VALUE, on_delivery=lambda error, _message, sent=sent:
                         None if error else latencies.append(time.perf_counter() - sent))
        producer.poll(0)
    assert producer.flush(60) == 0
    return latencies


def _wait_until(moment):
    delay = moment - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


@pytest.mark.parametrize("client", ["netkafka", "confluent-kafka"])
def test_latency(benchmark, kafka_broker, topic, client):
    run = netkafka_latencies if client == "netkafka" else confluent_latencies
    latencies = sorted(benchmark.pedantic(run, (kafka_broker.bootstrap, topic), rounds=1,
                                          iterations=1))
    assert len(latencies) == LATENCY_RECORDS
    benchmark.extra_info.update({
        "suite": "latency", "client": client,
        "mode": "send" if client == "netkafka" else "callback",
        "rate": LATENCY_RATE, "records": LATENCY_RECORDS, "acks": "1", "linger_ms": 0,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[len(latencies) * 99 // 100],
        "max_ms": 1000 * latencies[-1]})


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
