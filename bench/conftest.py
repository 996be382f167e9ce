"""pytest configuration for the benchmarks: the real-Kafka fixtures of netkafka.testing,
with a broker compiled for throughput (tests use a faster-starting, slower one)."""
import pytest

from netkafka.testing.broker import BROKER_JVM_OPTIONS

# environment: the machine and every client's and the broker's version, into the JSON.
pytest_plugins = ["netkafka.testing.fixtures", "netkafka.testing.environment"]


@pytest.fixture(scope="session")
def kafka_jvm_options():
    return BROKER_JVM_OPTIONS
