"""pytest configuration: the real-Kafka fixtures of netkafka.testing for every test."""
pytest_plugins = ["netkafka.testing.fixtures"]

import os

import pytest

from netkafka.testing.broker import FAST_START_JVM_OPTIONS, Cluster

# The brokers of issue 12's matrix: the core producer tests run against each.
CORE_BROKERS = {"kafka4": "kafka_broker", "kafka3.9": "kafka_broker_3_9"}


@pytest.fixture(params=list(CORE_BROKERS))
def core_broker(request):
    """kafka_broker (4.x) or kafka_broker_3_9, one test run per broker: for the core
    producer tests (codecs, keyed placement, acks, headers, idempotence).  Each is the
    session's one broker of that version, started when first asked for."""
    return request.getfixturevalue(CORE_BROKERS[request.param])


@pytest.fixture(scope="module")
def broker_without_auto_create(tmp_path_factory):
    """A broker of this module's own with auto.create.topics.enable=false, as
    production clusters often have it."""
    if os.environ.get("NETKAFKA_BOOTSTRAP"):
        pytest.skip("needs a broker this session starts (auto.create.topics.enable=false)")
    cluster = Cluster(1, auto_create_topics=False, jvm_options=FAST_START_JVM_OPTIONS,
                      directory=tmp_path_factory.mktemp("kafka-no-auto-create"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
