"""pytest configuration for the benchmarks: the real-Kafka fixtures of netkafka.testing,
with a broker compiled for throughput (tests use a faster-starting, slower one), and the
end-to-end benchmarks' summary at the end of the session."""
import itertools
import os
import time

import pytest

import e2e_results
import peers
import report
import rounds
from netkafka.testing.admin import create_topic
from netkafka.testing.broker import BROKER_JVM_OPTIONS

# Seconds of load the session's broker gets before its first benchmark.
WARM_UP_SECONDS = float(os.environ.get("NETKAFKA_BENCH_WARM_UP_SECONDS", "30"))
WARM_UP_BYTES_PER_STEP = 64 * peers.MiB
# The produce paths the suites exercise: small and large records, acks 1 and all
# (idempotent), a codec.
WARM_UP_SETTINGS = (peers.Settings(100, "1"), peers.Settings(128 * 1024, "1"),
                    peers.Settings(100, "all"), peers.Settings(1024, "1", "lz4"))

# environment: the machine and every client's and the broker's version, into the JSON.
pytest_plugins = ["netkafka.testing.fixtures", "netkafka.testing.environment"]


@pytest.fixture(scope="session")
def kafka_jvm_options():
    return BROKER_JVM_OPTIONS


@pytest.fixture(scope="session")
def kafka_broker(kafka_broker):
    """The session's broker, warmed up before any benchmark uses it.

    The broker's JVM compiles its produce path during the first seconds of load, so
    without this whichever client a session measures first meets a slower broker (seen:
    the first client of a run at 0.5-0.7x the same client run later).  The load comes from
    confluent-kafka, a peer, so that no client under test warms a path of its own.
    """
    warm_up(kafka_broker.bootstrap, WARM_UP_SECONDS)
    return kafka_broker


@pytest.fixture(scope="session")
def broker_pids(kafka_broker):
    """The pids of the session's broker JVMs, whose CPU bench/rounds.py counts per round."""
    return rounds.broker_pids(kafka_broker)


def warm_up(bootstrap, seconds):
    topic = "bench-warm-up"
    create_topic(bootstrap, topic, partitions=3)
    deadline = time.monotonic() + seconds
    try:
        for settings in itertools.cycle(WARM_UP_SETTINGS):
            if time.monotonic() >= deadline:
                break
            runner = peers.ConfluentRunner(bootstrap, settings)
            try:
                runner.run(topic, peers.values_for(
                    settings.record_size, WARM_UP_BYTES_PER_STEP // settings.record_size))
            finally:
                runner.close()
    finally:
        peers.delete_topic(bootstrap, topic)


def pytest_terminal_summary(terminalreporter):
    """The end-to-end results of this session as bench/report.py tables them (make report
    writes the same from the saved JSON, with the machine and a chart)."""
    suites = {}
    for info in e2e_results.RESULTS:
        suites.setdefault(info["suite"], []).append(info)
    if suites:
        terminalreporter.write_sep("-", "end-to-end results")
    for suite, rows in suites.items():
        for line in report.SECTIONS[suite](rows):
            terminalreporter.write_line(line)
