"""End-to-end throughput: every producer against the session's broker, side by side.

Each benchmark sends `records` values of one size to a new topic of PARTITIONS partitions
and ends when the broker has acknowledged every record (flush); after the rounds the
topic's end offsets must add up to every record sent, or the benchmark fails.  Clients,
modes and settings: bench/peers.py.  Every client uses batch size 1 MiB and linger 5 ms
(but in the kafka-python defaults rows).

msgs/s for the Python clients = records / the best round's wall time, first send to last
acknowledgement, after one warm-up round.  The Java producer
(ProducerPerformance, a JVM per round) reports its own numbers: records/sec of its
steady state, after --warmup-records of half the count; the best of its rounds is kept.

The matrix: record size 100 B, 1 KiB, 128 KiB x acks 1, all x compression none, lz4,
zstd x 8 client modes.  By default a subset (DEFAULT_CASES: 6 of the 18 combinations, 48
benchmarks); NETKAFKA_BENCH_FULL=1 runs all 18 (144 benchmarks, three times as long).
Beside it, always, at 100 B: send_batch() with a pyarrow array (acks=all), and netkafka
send() against kafka-python at kafka-python's defaults (batch 16 KiB, linger 0; acks 1 and
all).  The default set with the latency and memory suites took 17 minutes on 2 cores
under a load average of 15 (other jobs); a quiet machine takes less.  Names read like
`test_throughput[100B-acks1-none-netkafka-send]`, so `-k` picks parts:

    .venv/bin/python -m pytest bench/test_bench_e2e_throughput.py --benchmark-only \\
        -k "100B and acks1 and none"

NETKAFKA_BENCH_SECONDS (default 1.5) sets how long a round should take: each client's
record count comes from its expected rate (EXPECTED_MSGS_PER_S, capped by
EXPECTED_MB_PER_S), so kafka-python's rounds last as long as netkafka's.
NETKAFKA_BENCH_ROUNDS (default 3) sets the measured rounds.
"""
import itertools
import os
import time

import pytest

import e2e_results
import peers
from netkafka.testing.admin import create_topic

PARTITIONS = 3
KiB = 1024
SIZES = {"100B": 100, "1KiB": KiB, "128KiB": 128 * KiB}
ACKS = {"acks1": "1", "acksall": "all"}
COMPRESSIONS = ("none", "lz4", "zstd")
CLIENT_MODES = (
    ("netkafka", "send"), ("netkafka", "produce"), ("netkafka", "send_batch"),
    ("confluent-kafka", "error_only"), ("confluent-kafka", "callback"),
    ("kafka-python", "send"), ("aiokafka", "send"), ("java", "send"),
)
# (size, acks, compression) measured without NETKAFKA_BENCH_FULL: the targets' rows
# (100 B and 128 KiB, acks=1, no compression), 1 KiB, acks=all (the default of every client
# but librdkafka) and both fast codecs.
DEFAULT_CASES = (
    ("100B", "acks1", "none"), ("1KiB", "acks1", "none"), ("128KiB", "acks1", "none"),
    ("100B", "acksall", "none"), ("1KiB", "acks1", "lz4"), ("1KiB", "acks1", "zstd"),
)
FULL = os.environ.get("NETKAFKA_BENCH_FULL", "") not in ("", "0")
ROUND_SECONDS = float(os.environ.get("NETKAFKA_BENCH_SECONDS", "1.5"))
ROUNDS = int(os.environ.get("NETKAFKA_BENCH_ROUNDS", "3"))

# What each client reaches on the reference machine (2 shared cores, broker on them too),
# only to size the runs: records of a round = the smaller of the two bounds x ROUND_SECONDS.
EXPECTED_MSGS_PER_S = {
    ("netkafka", "send"): 2_000_000, ("netkafka", "produce"): 2_000_000,
    ("netkafka", "send_batch"): 3_000_000,
    ("confluent-kafka", "error_only"): 700_000, ("confluent-kafka", "callback"): 500_000,
    ("netkafka", "send_batch_arrow"): 3_000_000,
    ("kafka-python", "send"): 60_000, ("aiokafka", "send"): 100_000,
    ("java", "send"): 600_000,
}
EXPECTED_MB_PER_S = 150  # the local broker's ceiling at large records, whoever sends
MIN_RECORDS = 500
DEFAULT_BATCH_SIZE = 16384  # kafka-python's (and netkafka's) default batch_size


def records_per_round(client_mode, record_size: int) -> int:
    by_count = EXPECTED_MSGS_PER_S[client_mode] * ROUND_SECONDS
    by_bytes = EXPECTED_MB_PER_S * peers.MiB * ROUND_SECONDS / record_size
    wanted = int(min(by_count, by_bytes))
    magnitude = 10 ** max(len(str(wanted)) - 2, 0)  # two significant digits
    return max(MIN_RECORDS, wanted // magnitude * magnitude)


def _cases():
    combos = (itertools.product(SIZES, ACKS, COMPRESSIONS) if FULL else DEFAULT_CASES)
    for size, acks, compression in combos:
        for client, mode in CLIENT_MODES:
            yield pytest.param(size, acks, compression, client, mode, peers.BATCH_SIZE,
                               peers.LINGER_MS,
                               id=f"{size}-{acks}-{compression}-{client}-{mode}")
    # Beside the matrix (from the earlier producer benchmark): a pyarrow array into
    # send_batch(), and netkafka against kafka-python both at kafka-python's defaults.
    yield pytest.param("100B", "acksall", "none", "netkafka", "send_batch_arrow",
                       peers.BATCH_SIZE, peers.LINGER_MS,
                       id="100B-acksall-none-netkafka-send_batch_arrow")
    for acks, client in itertools.product(ACKS, ("netkafka", "kafka-python")):
        yield pytest.param("100B", acks, "none", client, "send", DEFAULT_BATCH_SIZE, 0,
                           id=f"100B-{acks}-none-{client}-send-defaults")


@pytest.mark.parametrize("size, acks, compression, client, mode, batch_size, linger_ms",
                         list(_cases()))
def test_throughput(benchmark, kafka_broker, topic_name, tmp_path, size, acks, compression,
                    client, mode, batch_size, linger_ms):
    settings = peers.Settings(SIZES[size], ACKS[acks], compression, batch_size, linger_ms)
    records = records_per_round((client, mode), settings.record_size)
    if batch_size != peers.BATCH_SIZE:  # small batches: a fraction of the large-batch rate
        records //= 5
    benchmark.group = (f"throughput {size} acks={settings.acks} {compression} "
                       f"batch={batch_size} linger={linger_ms}")
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=PARTITIONS)
    try:
        if client == "java":
            seconds, sent = _java(benchmark, bootstrap, topic_name, tmp_path, settings, records)
        else:
            seconds, sent = _python(benchmark, bootstrap, topic_name, settings, client, mode,
                                    records)
        e2e_results.record_throughput(benchmark, client, mode, settings, records, seconds,
                                      ROUNDS)
        assert peers.acknowledged_records(bootstrap, topic_name) == sent
    finally:
        peers.delete_topic(bootstrap, topic_name)


def _python(benchmark, bootstrap, topic, settings, client, mode, records):
    runner = peers.PYTHON_CLIENTS[client](bootstrap, settings, mode)
    seconds = []  # every round's, the warm-up's first; timed here, as under --benchmark-disable

    def timed_run(values):
        started = time.perf_counter()
        runner.run(topic, values)
        seconds.append(time.perf_counter() - started)

    try:
        values = runner.prepare(peers.values_for(settings.record_size, records))
        benchmark.pedantic(timed_run, args=(values,), rounds=ROUNDS, iterations=1,
                           warmup_rounds=1)
    finally:
        runner.close()
    return min(seconds[-ROUNDS:]), records * len(seconds)


def _java(benchmark, bootstrap, topic, tmp_path, settings, records):
    java = peers.JavaProducerPerformance(
        bootstrap, settings, peers.write_payload_file(tmp_path / "payloads", settings.record_size))
    warmup = records // 2
    summaries = []
    # pytest-benchmark's own time includes the JVM's start; the numbers kept are the tool's.
    benchmark.pedantic(lambda: summaries.append(java.run(topic, records, warmup)),
                       rounds=ROUNDS, iterations=1)
    best = max(summaries, key=lambda s: s.records_per_s)
    return best.records / best.records_per_s, (records + warmup) * len(summaries)
