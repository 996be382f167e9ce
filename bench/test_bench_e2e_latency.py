"""End-to-end latency at a moderate, fixed rate: netkafka send() against confluent-kafka
and the Java producer, same broker, same run.

RECORDS records of 100 B at RATE records/s, paced from one thread: record i is sent at
start + i / RATE (late records go at once, they are not skipped).  Latency = acknowledgement
seen by the application - the send call, per record:

    netkafka         send(), future.add_callback(): the callback runs on netkafka's I/O thread
    confluent-kafka  produce(on_delivery=...); the pacing loop waits in poll(), so a delivery
                     report is served as soon as librdkafka has it
    java             ProducerPerformance --throughput RATE: its own send-to-callback times,
                     in whole milliseconds (currentTimeMillis)

acks=all with idempotence (every client's default but librdkafka's, which is set to it),
batch size 1 MiB, linger 5 ms (as the throughput runs), no compression.  A warm-up of WARMUP_RECORDS is
sent and flushed first.  pytest-benchmark's time is just the pacing (RECORDS / RATE); the
numbers are in extra_info (p50_ms, p99_ms, max_ms).

    .venv/bin/python -m pytest bench/test_bench_e2e_latency.py --benchmark-only
"""
import math
import time
from array import array

import pytest

import e2e_results
import peers
from netkafka.testing.admin import create_topic

RATE = 10_000
RECORDS = 30_000
WARMUP_RECORDS = 5_000
RECORD_SIZE = 100
PARTITIONS = 3


def percentile(sorted_ms, fraction: float) -> float:
    """The nearest-rank percentile of already sorted values."""
    return sorted_ms[max(0, math.ceil(fraction * len(sorted_ms)) - 1)]


def paced_netkafka(bootstrap, topic, settings, values):
    """Per-record latencies (ms) of netkafka send() at RATE records/s."""
    from netkafka import Producer

    producer = Producer(bootstrap_servers=bootstrap, acks=settings.python_acks,
                        batch_size=settings.batch_size, linger_ms=settings.linger_ms)
    acked = array("d", bytes(8 * len(values)))  # written by netkafka's I/O thread

    def on_ack(index, _metadata):
        acked[index] = time.perf_counter()

    try:
        for value in values[:WARMUP_RECORDS]:
            producer.send(topic, value)
        producer.flush()
        sent = _paced(values, lambda index, value: producer.send(topic, value).add_callback(
            on_ack, index), time.sleep)
        producer.flush()
    finally:
        producer.close()
    return _latencies_ms(sent, acked)


def paced_confluent(bootstrap, topic, settings, values):
    """Per-record latencies (ms) of confluent-kafka produce() at RATE records/s."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": settings.acks,
                         "enable.idempotence": settings.idempotent,
                         "batch.size": settings.batch_size, "linger.ms": settings.linger_ms})
    acked = array("d", bytes(8 * len(values)))  # written by delivery reports, in poll()
    errors = []

    def reporter(index):
        def on_delivery(error, _message):
            if error is not None:
                errors.append(error)
            acked[index] = time.perf_counter()
        return on_delivery

    def produce(index, value):
        producer.produce(topic, value, on_delivery=reporter(index))
        producer.poll(0)

    for value in values[:WARMUP_RECORDS]:
        producer.produce(topic, value)
    producer.flush()
    sent = _paced(values, produce, producer.poll)
    producer.flush()
    if errors:
        raise RuntimeError(f"confluent-kafka: {len(errors)} records failed, first {errors[:3]}")
    return _latencies_ms(sent, acked)


def _paced(values, send, wait) -> array:
    """send(index, value) for each value, value i at start + i / RATE; wait(seconds) passes
    the time in between.  Returns when each send() was called (perf_counter)."""
    sent = array("d", bytes(8 * len(values)))
    clock = time.perf_counter
    start = clock()
    for index, value in enumerate(values):
        delay = start + index / RATE - clock()
        while delay > 0:
            wait(delay)
            delay = start + index / RATE - clock()
        sent[index] = clock()
        send(index, value)
    return sent


def _latencies_ms(sent, acked) -> list[float]:
    missing = sum(1 for t in acked if t == 0.0)
    if missing:
        raise RuntimeError(f"{missing} records were never acknowledged")
    return sorted((a - s) * 1000.0 for s, a in zip(sent, acked))


PACED = {"netkafka": paced_netkafka, "confluent-kafka": paced_confluent}
MODES = {"netkafka": "send", "confluent-kafka": "callback", "java": "send"}


@pytest.mark.parametrize("client", ["netkafka", "confluent-kafka", "java"])
def test_latency(benchmark, kafka_broker, topic_name, tmp_path, client):
    settings = peers.Settings(RECORD_SIZE, "all", "none")
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=PARTITIONS)
    benchmark.group = f"latency at {RATE} records/s"
    outcome = []
    try:
        if client == "java":
            java = peers.JavaProducerPerformance(
                bootstrap, settings, peers.write_payload_file(tmp_path / "payloads",
                                                              RECORD_SIZE))
            benchmark.pedantic(
                lambda: outcome.append(java.run(topic_name, RECORDS, WARMUP_RECORDS, RATE)),
                rounds=1, iterations=1)
            summary, = outcome
            p50, p99, worst = summary.p50_ms, summary.p99_ms, summary.max_latency_ms
        else:
            values = peers.values_for(RECORD_SIZE, RECORDS)
            benchmark.pedantic(
                lambda: outcome.append(PACED[client](bootstrap, topic_name, settings, values)),
                rounds=1, iterations=1)
            latencies, = outcome
            p50, p99, worst = (percentile(latencies, 0.5), percentile(latencies, 0.99),
                               latencies[-1])
        e2e_results.record_latency(benchmark, client, MODES[client], settings, RATE, RECORDS,
                                   p50, p99, worst)
    finally:
        peers.delete_topic(bootstrap, topic_name)
