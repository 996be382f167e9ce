"""The end-to-end benchmarks' own helpers, on a few records: each client's runner
(bench/peers.py) gets every record acknowledged, ProducerPerformance's output is parsed as
the tool really prints it, and a round's costs (bench/rounds.py) are those of known busy
loops.  The benchmarks themselves are in bench/ (make bench)."""
import collections
import contextlib
import importlib.util
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from netkafka.testing.admin import admin_client, create_topic, create_topics
from netkafka.testing.broker import free_ports
from netkafka.testing.fixtures import ExternalBroker

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench_module(name):
    """bench/NAME.py, imported as bench/'s modules import each other (by its bare name)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


peers = _bench_module("peers")
rounds = _bench_module("rounds")

RECORDS = 300
SPIN_S = 0.3  # CPU seconds of a known busy loop
# What measuring adds to a busy loop's CPU: a thread's start, reading /proc; and one tick
# of /proc's CPU times (10 ms) at each end.
OVERHEAD_S = 0.05
# A busy loop of its own process: waits for a line, spins SPIN_S of CPU, says so, and
# exits at the end of its input.
SPINNER = ("import sys, time\n"
           "sys.stdin.readline()\n"
           "end = time.process_time() + float(sys.argv[1])\n"
           "while time.process_time() < end: pass\n"
           "print('spun', flush=True)\n"
           "sys.stdin.read()\n")

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


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
def test_java_producer_performance_takes_a_client_properties(secured_broker, topic_name,
                                                             tmp_path, listener):
    """The TLS benchmark's Java settings (a JAAS line: '=' and quotes) reach the JVM intact:
    its records are written over the secured listener."""
    for name in ("e2e_results", "test_bench_e2e_throughput"):
        _bench_module(name)
    tls_bench = _bench_module("test_bench_tls")
    plaintext = secured_broker.listeners["PLAINTEXT"].bootstrap
    create_topic(plaintext, topic_name, partitions=3)
    bootstrap, security = tls_bench.client_settings(secured_broker, listener)
    java = peers.JavaProducerPerformance(
        bootstrap, peers.Settings(1024, acks="all"), peers.write_payload_file(tmp_path / "p", 1024),
        peers.write_properties_file(tmp_path / "client.properties", security["java"]))
    summary = java.run(topic_name, RECORDS, warmup_records=0)
    assert summary.records == RECORDS
    assert peers.acknowledged_records(plaintext, topic_name) == RECORDS


def test_java_keyed_producer_sends_the_suites_keyed_records_round_after_round(kafka_broker,
                                                                              topic_name,
                                                                              tmp_path):
    """bench/KeyedProducer.java in one JVM for every round: record i to topic i % topics
    with key i % keys, each where Kafka's murmur2 places its key (as netkafka's and the
    suite's other clients' default partitioners do); its CPU is the client's through
    client_pids, and a failed round raises."""
    from netkafka.partitioner import murmur2

    bootstrap, partitions, key_count, records = kafka_broker.bootstrap, 3, 7, 90
    topics = [f"{topic_name}-{t}" for t in range(2)]
    create_topics(bootstrap, topics, partitions)
    java = peers.JavaKeyedProducer(bootstrap, peers.Settings(100), topics, key_count, records,
                                   tmp_path)
    try:
        contestant = rounds.Contestant(java.run, records, [], java, client_pids=(java.pid,))
        measured = rounds.alternate({"java": contestant}, 2)["java"]
    finally:
        java.close()
    assert java._process.returncode == 0  # the end of its commands: it closed its producer
    expected = collections.Counter()
    for i in range(records):
        key = b"key-%d" % (i % key_count)
        expected[topics[i % len(topics)], (murmur2(key) & 0x7FFFFFFF) % partitions] += 3
    assert peers.end_offsets(bootstrap, *topics) == dict(expected)
    assert contestant.records_sent == 3 * records
    # The JVM's CPU (ticks of 10 ms: a round of 90 records may cost less than one).
    assert all(r.client_cpu_s >= 0 for r in measured)
    assert sum(r.client_cpu_s for r in measured) > 0

    # A request limit below a record's size: the Java producer fails it at once.
    failing = peers.JavaKeyedProducer(bootstrap, peers.Settings(100, max_request_bytes=64),
                                      topics, key_count, 1, tmp_path)
    try:
        with pytest.raises(RuntimeError,
                           match="KeyedProducer answered 'failed 1 .*RecordTooLarge"):
            failing.run()
    finally:
        failing.close()


def test_client_cpu_counts_a_process_of_the_client_that_outlives_the_round():
    """The way a JVM kept for every round is counted: client_pids."""
    with _spinner() as client:
        measured = rounds.measure(lambda: _spin_in(client), 1, [], client_pids=[client.pid])
    assert SPIN_S - OVERHEAD_S <= measured.client_cpu_s <= SPIN_S + OVERHEAD_S


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


# -- bench/rounds.py ---------------------------------------------------------------------------


def _spin(seconds):
    """Spins until this thread has used `seconds` of CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@contextlib.contextmanager
def _spinner():
    process = subprocess.Popen([sys.executable, "-I", "-S", "-c", SPINNER, str(SPIN_S)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield process
    finally:
        process.stdin.close()
        process.wait(timeout=30)


def _spin_in(process):
    process.stdin.write("go\n")
    process.stdin.flush()
    assert process.stdout.readline() == "spun\n"


def test_client_cpu_counts_every_thread_of_the_process():
    def two_threads():
        threads = [threading.Thread(target=_spin, args=(SPIN_S / 2,)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    measured = rounds.measure(two_threads, 1000, [])
    assert SPIN_S <= measured.client_cpu_s <= SPIN_S + OVERHEAD_S
    assert measured.client_ns_per_record == measured.client_cpu_s * 1e9 / 1000
    assert measured.broker_cpu_s is None and measured.broker_ns_per_record is None


def test_client_cpu_counts_a_child_process_ended_in_the_round():
    """The way the Java producer's JVM is counted: a subprocess that the round waits for."""
    measured = rounds.measure(lambda: subprocess.run(
        [sys.executable, "-I", "-S", "-c", SPINNER, str(SPIN_S)], input="go\n", text=True,
        capture_output=True, check=True), 1, [])
    assert SPIN_S <= measured.client_cpu_s <= SPIN_S + OVERHEAD_S


def test_broker_cpu_is_its_processes_and_the_rest_is_others():
    with _spinner() as broker, _spinner() as other:
        measured = rounds.measure(lambda: _spin_in(broker), 1, [broker.pid])
        assert SPIN_S - OVERHEAD_S <= measured.broker_cpu_s <= SPIN_S + OVERHEAD_S
        assert measured.client_cpu_s < OVERHEAD_S  # it only waited for the broker
        # A process neither client nor broker: what other jobs of the machine do.
        measured = rounds.measure(lambda: _spin_in(other), 1, [broker.pid])
        assert measured.broker_cpu_s < OVERHEAD_S
        assert measured.others_cores * measured.seconds >= SPIN_S - OVERHEAD_S


def test_broker_pids_of_the_harness_broker_and_of_one_found_by_its_port(kafka_broker):
    (node,) = kafka_broker.nodes
    assert rounds.broker_pids(kafka_broker) == (node.pid,)
    assert rounds.broker_pids(ExternalBroker(kafka_broker.bootstrap)) == (node.pid,)
    (unused,) = free_ports(1)
    assert rounds.broker_pids(ExternalBroker(f"127.0.0.1:{unused}")) == ()
    assert rounds.process_cpu_s(node.pid) > 0


def test_alternate_warms_every_contestant_up_then_takes_turns():
    runs = []
    contestants = {key: rounds.Contestant(lambda key=key: runs.append(key), 10, [])
                   for key in "ABC"}
    measured = rounds.alternate(contestants, 2)
    assert "".join(runs) == "ABC" + "ABC" * 2
    assert {key: len(found) for key, found in measured.items()} == {"A": 2, "B": 2, "C": 2}
    assert all(c.records_sent == 30 for c in contestants.values())
    with pytest.raises(ValueError, match="at least 1 per contestant, got 0"):
        rounds.alternate(contestants, 0)


def test_summary_takes_the_medians_of_the_rounds():
    measured = [rounds.Round(1000, seconds, cpu, broker, load, others)
                for seconds, cpu, broker, load, others in [(3.0, 0.003, 0.02, 5.0, 0.5),
                                                           (1.0, 0.001, 0.01, 1.0, 0.1),
                                                           (2.0, 0.004, 0.03, 9.0, 0.9)]]
    summary = rounds.summary(measured)
    assert (summary["records"], summary["seconds"], summary["msgs_per_s"]) == (1000, 2.0, 500.0)
    assert summary["client_ns_per_record"] == 3000.0 and summary["broker_ns_per_record"] == 20000.0
    assert (summary["load_1m"], summary["others_cores"], summary["rounds"]) == (5.0, 0.5, 3)
    assert summary["round_seconds"] == [3.0, 1.0, 2.0]
    no_broker = rounds.summary([rounds.Round(1000, 1.0, 0.001, None, 1.0, 0.0)])
    assert no_broker["broker_ns_per_record"] is None


@pytest.mark.parametrize("side", ["client", "broker"])
def test_a_cpu_per_record_below_zero_is_left_out(side):
    """A JavaContestant's round is a JVM run's minus its warm-up run's, whose CPU varies by
    0.1 s: in short rounds the client's or the broker's difference can be below zero, and
    its figure was then printed as a negative cost.  The rounds' own figures stay as
    measured."""
    def round_with(cpu_s):
        client, broker = (cpu_s, 0.01) if side == "client" else (0.001, cpu_s)
        return rounds.Round(1000, 1.0, client, broker, 1.0, 0.0)

    measured = [round_with(cpu_s) for cpu_s in (-0.02, -0.01, 0.03)]
    summary = rounds.summary(measured)
    assert summary[f"{side}_ns_per_record"] is None
    assert summary[f"round_{side}_cpu_s"] == [-0.02, -0.01, 0.03]
    measured[1] = round_with(0.01)  # one above zero, the median
    assert rounds.summary(measured)[f"{side}_ns_per_record"] == 10000.0


def _children_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_java_contestant_subtracts_a_run_of_its_warm_up_records(kafka_broker, topic_name,
                                                                 tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    settings = peers.Settings(100)
    java = rounds.JavaContestant(
        peers.JavaProducerPerformance(kafka_broker.bootstrap, settings,
                                      peers.write_payload_file(tmp_path / "p", 100)),
        topic_name, RECORDS, 100, rounds.broker_pids(kafka_broker))
    java.warm_up()
    assert java.baseline.client_cpu_s > 0.3  # a JVM's start: about 1.5 s on 2 cores
    before = _children_cpu_s()
    measured = java.round()
    whole_jvm = _children_cpu_s() - before
    assert measured.client_cpu_s == pytest.approx(whole_jvm - java.baseline.client_cpu_s,
                                                  abs=OVERHEAD_S)
    (summary,) = java.summaries
    assert (measured.records, measured.seconds) == (RECORDS,
                                                    summary.records / summary.records_per_s)
    assert measured.broker_cpu_s is not None
    assert peers.acknowledged_records(kafka_broker.bootstrap, topic_name) == java.records_sent
    assert java.records_sent == 100 + RECORDS + 100
    peers.delete_topic(kafka_broker.bootstrap, topic_name)


def test_scale_layouts_index_files_take_their_budget_and_the_broker_takes_the_size(
        kafka_broker, topic_name):
    """bench/test_bench_scale.py's index_config: Kafka's default for few partitions (no
    segment rolls sooner than the default's), the floor for very many, INDEX_FILES_BYTES
    in all between; and the broker takes a size that is no multiple of an index entry."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    scale = _bench_module("test_bench_scale")
    sizes = {n: int(scale.index_config(n)["segment.index.bytes"])
             for n in (4, 100, 4000, 10_000, 100_000)}
    assert sizes[4] == scale.KAFKA_INDEX_BYTES
    assert sizes[100_000] == scale.MIN_INDEX_BYTES
    for partitions in (100, 4000):
        assert 2 * partitions * sizes[partitions] <= scale.INDEX_FILES_BYTES
        assert 2 * partitions * (sizes[partitions] + 1) > scale.INDEX_FILES_BYTES
    assert sizes[100] % 8  # no multiple of an offset index entry

    create_topic(kafka_broker.bootstrap, topic_name, config=scale.index_config(100))
    admin = admin_client(kafka_broker.bootstrap)  # held until the answer
    topic_config = ConfigResource(ResourceType.TOPIC, topic_name)
    (future,) = admin.describe_configs([topic_config]).values()
    assert future.result(timeout=30)["segment.index.bytes"].value == str(sizes[100])
    peers.delete_topic(kafka_broker.bootstrap, topic_name)
