"""pytest configuration for the benchmarks: the real-Kafka fixtures of netkafka.testing,
with a broker compiled for throughput (tests use a faster-starting, slower one), and the
end-to-end benchmarks' summary at the end of the session."""
import pytest

import e2e_results
import report
from netkafka.testing.broker import BROKER_JVM_OPTIONS

# environment: the machine and every client's and the broker's version, into the JSON.
pytest_plugins = ["netkafka.testing.fixtures", "netkafka.testing.environment"]


@pytest.fixture(scope="session")
def kafka_jvm_options():
    return BROKER_JVM_OPTIONS


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
