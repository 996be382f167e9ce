"""pytest configuration: the real-Kafka fixtures of netkafka.testing for every test."""
pytest_plugins = ["netkafka.testing.fixtures"]

import pytest

# The brokers of issue 12's matrix: the core producer tests run against each.
CORE_BROKERS = {"kafka4": "kafka_broker", "kafka3.9": "kafka_broker_3_9"}


@pytest.fixture(params=list(CORE_BROKERS))
def core_broker(request):
    """kafka_broker (4.x) or kafka_broker_3_9, one test run per broker: for the core
    producer tests (codecs, keyed placement, acks, headers, idempotence).  Each is the
    session's one broker of that version, started when first asked for."""
    return request.getfixturevalue(CORE_BROKERS[request.param])
