"""The end-to-end benchmarks' own helpers (bench/peers.py), on a few records: each client's
runner gets every record acknowledged, and ProducerPerformance's output is parsed as the
tool really prints it.  The benchmarks themselves are in bench/ (make bench)."""
import importlib.util
from pathlib import Path

import pytest

from netkafka.testing.admin import create_topic

_SPEC = importlib.util.spec_from_file_location(
    "peers", Path(__file__).resolve().parents[1] / "bench" / "peers.py")
peers = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(peers)

RECORDS = 300

# Printed by Kafka 4.4's ProducerPerformance with --warmup-records 500000 on this machine.
CAPTURED = """\
Reading payloads from: /tmp/h6payload.txt
Number of records read: 4
Warmup first 500000 records. Steady state results will print after the complete test summary.
1500000 records sent, 329236.172081 records/sec (31.40 MB/sec), 183.69 ms avg latency, \
777.00 ms max latency, 53 ms 50th, 697 ms 95th, 763 ms 99th, 776 ms 99.9th.
1000000 steady state records sent, 382701.875239 records/sec (36.50 MB/sec), 266.67 ms avg \
latency, 777.00 ms max latency, 72 ms 50th, 737 ms 95th, 763 ms 99th, 776 ms 99.9th.
"""

PYTHON_CASES = [(client, mode) for client, runner in peers.PYTHON_CLIENTS.items()
                for mode in runner.MODES]


def test_parser_prefers_the_steady_state_line():
    summary = peers.parse_producer_performance(CAPTURED)
    assert summary == peers.PerfSummary(1000000, 382701.875239, 36.5, 266.67, 777.0, 72.0,
                                        737.0, 763.0, 776.0, True)


def test_parser_takes_the_whole_run_without_warmup_and_skips_progress_lines():
    output = ("72001 records sent, 14397.3 records/sec (1.37 MB/sec), 1.9 ms avg latency, "
              "31.0 ms max latency.\n" + CAPTURED.splitlines()[3] + "\n")
    summary = peers.parse_producer_performance(output)
    assert (summary.records, summary.steady_state, summary.p99_ms) == (1500000, False, 763.0)


def test_parser_names_missing_summary():
    with pytest.raises(ValueError, match="no ProducerPerformance summary"):
        peers.parse_producer_performance("Exception in thread main\n")


def test_java_producer_performance_runs_and_is_parsed(kafka_broker, topic_name, tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    settings = peers.Settings(1024, acks="all", compression="lz4")
    java = peers.JavaProducerPerformance(
        kafka_broker.bootstrap, settings, peers.write_payload_file(tmp_path / "p", 1024))
    summary = java.run(topic_name, RECORDS, warmup_records=100)
    assert (summary.records, summary.steady_state) == (RECORDS, True)
    assert summary.records_per_s > 0 and summary.p50_ms <= summary.p99_ms <= summary.max_latency_ms
    assert peers.acknowledged_records(kafka_broker.bootstrap, topic_name) == RECORDS + 100


@pytest.mark.parametrize("client, mode", PYTHON_CASES, ids=[f"{c}-{m}" for c, m in PYTHON_CASES])
def test_runner_gets_every_record_acknowledged(kafka_broker, topic_name, client, mode):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    runner = peers.PYTHON_CLIENTS[client](kafka_broker.bootstrap,
                                          peers.Settings(100, acks="all", compression="zstd"),
                                          mode)
    try:
        runner.run(topic_name, runner.prepare(peers.values_for(100, RECORDS)))
    finally:
        runner.close()
    assert peers.acknowledged_records(kafka_broker.bootstrap, topic_name) == RECORDS
    peers.delete_topic(kafka_broker.bootstrap, topic_name)


def test_payloads_are_distinct_exact_and_repeatable():
    pool = peers.payloads(1024)
    assert len(set(pool)) == peers.PAYLOAD_POOL and {len(p) for p in pool} == {1024}
    assert pool == peers.payloads(1024) and b"\n" not in b"".join(pool)
    assert peers.values_for(1024, 130)[129] == pool[129 % peers.PAYLOAD_POOL]
