"""End-to-end latency at fixed rates: netkafka send() against confluent-kafka and the Java
producer, same broker, same run.

Two cases (CASES): the busy one, 10,000 records/s with linger 5 ms and acks=all, where
batching decides; and the quiet one, 1,000 records/s with linger 0 and acks=1, where a
record should leave at once and every hand-over between threads on its way shows.  The
records of a case are 100 B, sent at its rate from one thread: record i is sent at
start + i / rate (late records go at once, they are not skipped).  Latency = acknowledgement
seen by the application - the send call, per record:

    netkafka         send(), future.add_callback(): the callback runs on netkafka's I/O thread
    confluent-kafka  produce(on_delivery=...); the pacing loop waits in poll(), so a delivery
                     report is served as soon as librdkafka has it
    java             ProducerPerformance --throughput rate: its own send-to-callback times,
                     in whole milliseconds (currentTimeMillis)

acks=all comes with idempotence (every client's default but librdkafka's, which is set to
it), acks=1 without; batch size 1 MiB, no compression.  A warm-up of WARMUP_RECORDS is sent
and flushed first.  Beside the latencies, what the paced records cost (bench/rounds.py):
the client's CPU per record (its process, every thread, the pacing loop's waits included:
what a producer costs at that rate, idle wake-ups and all) and the broker's.  Java's are
those of its paced records alone (rounds.JavaContestant: a run of the warm-up records only
is subtracted).  pytest-benchmark's time is just the pacing (records / rate); the numbers
are in extra_info (p50_ms, p99_ms, max_ms, the CPU per record, and the case's rate, acks,
linger_ms).

    .venv/bin/python -m pytest bench/test_bench_e2e_latency.py --benchmark-only
"""
import math
import time
from array import array
from typing import NamedTuple

import pytest

import e2e_results
import peers
import rounds
from netkafka.testing.admin import create_topic


class Case(NamedTuple):
    rate: int  # records/s
    records: int  # measured, after the warm-up: a few seconds at the rate
    linger_ms: int
    acks: str


CASES = {"10k-linger5-acks-all": Case(10_000, 30_000, 5, "all"),
         "1k-linger0-acks1": Case(1_000, 10_000, 0, "1")}
WARMUP_RECORDS = 5_000
RECORD_SIZE = 100
PARTITIONS = 3


def percentile(sorted_ms, fraction: float) -> float:
    """The nearest-rank percentile of already sorted values."""
    return sorted_ms[max(0, math.ceil(fraction * len(sorted_ms)) - 1)]


def paced_netkafka(bootstrap, topic, settings, rate, values, broker_pids):
    """Per-record latencies (ms) of netkafka send() at rate records/s, and the paced
    records' rounds.Round."""
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
        sent, measured = _measured_paced(values, rate, lambda index, value: producer.send(
            topic, value).add_callback(on_ack, index), time.sleep, producer.flush, broker_pids)
    finally:
        producer.close()
    return _latencies_ms(sent, acked), measured


def paced_confluent(bootstrap, topic, settings, rate, values, broker_pids):
    """Per-record latencies (ms) of confluent-kafka produce() at rate records/s, and the
    paced records' rounds.Round."""
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
    sent, measured = _measured_paced(values, rate, produce, producer.poll, producer.flush,
                                     broker_pids)
    if errors:
        raise RuntimeError(f"confluent-kafka: {len(errors)} records failed, first {errors[:3]}")
    return _latencies_ms(sent, acked), measured


def _measured_paced(values, rate, send, wait, flush, broker_pids):
    """_paced() and then flush(), measured as one round: (send times, rounds.Round)."""
    sent = []

    def paced_round():
        sent.append(_paced(values, rate, send, wait))
        flush()

    measured = rounds.measure(paced_round, len(values), broker_pids)
    return sent[0], measured


def _paced(values, rate, send, wait) -> array:
    """send(index, value) for each value, value i at start + i / rate; wait(seconds) passes
    the time in between.  Returns when each send() was called (perf_counter)."""
    sent = array("d", bytes(8 * len(values)))
    clock = time.perf_counter
    start = clock()
    for index, value in enumerate(values):
        delay = start + index / rate - clock()
        while delay > 0:
            wait(delay)
            delay = start + index / rate - clock()
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
@pytest.mark.parametrize("case", list(CASES))
def test_latency(benchmark, kafka_broker, broker_pids, topic_name, tmp_path, case, client):
    rate, records, linger_ms, acks = CASES[case]
    settings = peers.Settings(RECORD_SIZE, acks, "none", linger_ms=linger_ms)
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=PARTITIONS)
    benchmark.group = f"latency at {rate} records/s, linger {linger_ms} ms, acks={acks}"
    outcome = []
    try:
        if client == "java":
            java = rounds.JavaContestant(
                peers.JavaProducerPerformance(bootstrap, settings, peers.write_payload_file(
                    tmp_path / "payloads", RECORD_SIZE)),
                topic_name, records, WARMUP_RECORDS, broker_pids, throughput=rate)
            java.warm_up()
            benchmark.pedantic(lambda: outcome.append(java.round()), rounds=1, iterations=1)
            measured, = outcome
            summary = java.summaries[-1]
            p50, p99, worst = summary.p50_ms, summary.p99_ms, summary.max_latency_ms
        else:
            values = peers.values_for(RECORD_SIZE, records)
            benchmark.pedantic(
                lambda: outcome.append(PACED[client](bootstrap, topic_name, settings, rate,
                                                     values, broker_pids)),
                rounds=1, iterations=1)
            (latencies, measured), = outcome
            p50, p99, worst = (percentile(latencies, 0.5), percentile(latencies, 0.99),
                               latencies[-1])
        e2e_results.record_latency(benchmark, client, MODES[client], settings, rate, p50, p99,
                                   worst, measured)
    finally:
        peers.delete_topic(bootstrap, topic_name)
