"""pytest plugin: real Kafka brokers and a cluster per test session, and unique topic names.

Registered from tests/conftest.py (and bench/conftest.py) with

    pytest_plugins = ["netkafka.testing.fixtures"]

Each broker fixture is session-scoped and started the first time a test asks for it, so a
run that needs no Kafka 3.9 or no secured broker starts none.

NETKAFKA_BOOTSTRAP=host:port makes kafka_broker use a broker that already runs instead of
starting one, and NETKAFKA_BOOTSTRAP_3_9 does the same for kafka_broker_3_9; kafka_cluster
always starts its own nodes, since failover tests stop them.
"""
import os
import re
import sys
import uuid
from typing import Iterator, NamedTuple

import pytest

from netkafka.testing.broker import FAST_START_JVM_OPTIONS, Cluster, Listener, live_nodes
from netkafka.testing.proxy import TcpProxy, proxy_listener

CLUSTER_NODES = 3
# Every node of kafka_cluster also serves clients on this listener, through a TcpProxy of
# its own (cluster_proxies) that a chaos test can black-hole: the node reachable but silent.
PROXIED_LISTENER = Listener("PROXIED", "PLAINTEXT")
# Longest topic name taken from a test's name; Kafka allows 249 characters.
TOPIC_BASE_CHARS = 180


class ExternalBroker(NamedTuple):
    """A broker this session did not start (NETKAFKA_BOOTSTRAP)."""

    bootstrap: str


@pytest.fixture(scope="session")
def kafka_jvm_options() -> tuple[str, ...]:
    """JVM options of the brokers the fixtures start.

    Tests check behaviour, not speed: their brokers start without the C2 compiler, on 40% less
    CPU.  Benchmarks override this fixture in their conftest.py to return BROKER_JVM_OPTIONS,
    so that a broker compiled for throughput serves them.
    """
    return FAST_START_JVM_OPTIONS


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory, kafka_jvm_options) -> Iterator:
    """One broker for the whole session; `.bootstrap` is "127.0.0.1:PORT".

    Its directory (with server.log) stays under pytest's basetemp for the last few sessions.
    """
    external = os.environ.get("NETKAFKA_BOOTSTRAP")
    if external:
        yield ExternalBroker(external)
        return
    yield from _running(Cluster(1, directory=tmp_path_factory.mktemp("kafka-broker"),
                                jvm_options=kafka_jvm_options))


@pytest.fixture(scope="session")
def kafka_broker_3_9(tmp_path_factory, kafka_jvm_options) -> Iterator:
    """One Apache Kafka 3.9 broker for the session, beside kafka_broker's 4.x.

    3.9 is the last line that takes Produce v0-v2 (legacy message sets v0/v1).  `.bootstrap`
    is "127.0.0.1:PORT"; a broker the session started also has `.release` (e.g. "3.9.2").
    """
    external = os.environ.get("NETKAFKA_BOOTSTRAP_3_9")
    if external:
        yield ExternalBroker(external)
        return
    yield from _running(Cluster(1, directory=tmp_path_factory.mktemp("kafka-3.9-broker"),
                                jvm_options=kafka_jvm_options, kafka_version="3.9"))


@pytest.fixture(scope="session")
def kafka_cluster(_kafka_cluster_with_proxies) -> Cluster:
    """Three combined broker+controller nodes for the session (replication factor 3 possible).

    `.bootstrap` lists every node; `.nodes` give failover tests stop(), kill(), pause(),
    resume() and restart() of one node.  Tests that do so take failover_cluster instead,
    which brings every node back afterwards.
    """
    cluster, _ = _kafka_cluster_with_proxies
    return cluster


@pytest.fixture(scope="session")
def _kafka_cluster_with_proxies(tmp_path_factory, kafka_jvm_options) -> Iterator[tuple[Cluster, dict]]:
    """kafka_cluster and the proxies of its nodes' PROXIED listener (see cluster_proxies)."""
    cluster = Cluster(CLUSTER_NODES, directory=tmp_path_factory.mktemp("kafka-cluster"),
                      jvm_options=kafka_jvm_options, listeners=[PROXIED_LISTENER])
    proxies = proxy_listener(cluster, PROXIED_LISTENER.name)
    try:
        cluster.start()
        try:
            yield cluster, proxies
        finally:
            cluster.stop()
    finally:
        for proxy in proxies.values():
            proxy.close()


@pytest.fixture
def cluster_proxies(failover_cluster, _kafka_cluster_with_proxies) -> Iterator[dict[int, TcpProxy]]:
    """{node id: TcpProxy} of kafka_cluster's PROXIED listener, forwarding again after the test.

    A client bootstrapped on `",".join(p.address for p in cluster_proxies.values())` reaches
    every node through its proxy (the nodes advertise the proxies' ports on that listener);
    replication and the PLAINTEXT listener do not pass through them.
    """
    _, proxies = _kafka_cluster_with_proxies
    try:
        yield proxies
    finally:
        for proxy in proxies.values():
            proxy.forward()


@pytest.fixture(scope="session")
def secured_broker(tmp_path_factory, kafka_jvm_options) -> Iterator:
    """A Kafka 4.x node with a TLS, mTLS and SASL listener per protocol and mechanism.

    A netkafka.testing.security.SecuredBroker: `.listeners` (name -> SecuredListener with
    `.bootstrap`), `.ca_file`, `.client_certs`, `.passwords`, `.oauth` (token_url, clients,
    issue_token), `.client_config(listener, user)`, `.admin_config`, `.acls(deny(...))`.
    """
    # Imported here: the secured broker needs trustme and PyJWT (the test extra), which a
    # session without secured tests does not have to have.
    from netkafka.testing.security import SecuredBroker
    broker = SecuredBroker(tmp_path_factory.mktemp("kafka-secured"), jvm_options=kafka_jvm_options)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


# The secured cluster's client listeners beside the harness's own (PLAINTEXT, and the admin's
# SASL_PLAINTEXT_PLAIN): what a cloud cluster offers.  Brokers replicate over the SCRAM one.
SECURED_CLUSTER_LISTENERS = ("SASL_SSL_SCRAM_SHA_512", "SASL_SSL_PLAIN")


@pytest.fixture(scope="module")
def secured_cluster(tmp_path_factory, kafka_jvm_options) -> Iterator:
    """Three Kafka 4.x nodes that replicate over SASL_SSL (SCRAM-SHA-512, each broker logged
    in as SCRAM user "broker") and serve clients on SASL_SSL with SCRAM-SHA-512 and PLAIN.

    A netkafka.testing.security.SecuredBroker with node_count=3: the secured_broker
    fixture's users, CA, client_config() and acls(), on SECURED_CLUSTER_LISTENERS only.
    Per module, not per session: three more JVMs beside the session's other brokers only
    while a module uses them.  Measured on 2 shared cores under a load average of ~20:
    23 s to start, 7 s to stop.
    """
    from netkafka.testing.security import SecuredBroker
    cluster = SecuredBroker(tmp_path_factory.mktemp("kafka-secured-cluster"),
                            jvm_options=kafka_jvm_options, node_count=CLUSTER_NODES,
                            listener_names=SECURED_CLUSTER_LISTENERS,
                            inter_broker_listener=SECURED_CLUSTER_LISTENERS[0])
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def failover_cluster(kafka_cluster: Cluster) -> Iterator[Cluster]:
    """The session's cluster, healed after the test: paused nodes resumed, stopped ones restarted."""
    yield kafka_cluster
    kafka_cluster.heal()


def _running(cluster: Cluster) -> Iterator[Cluster]:
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def topic_name(request) -> str:
    """A topic name used by no other test: the test's name plus a random suffix."""
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name)[:TOPIC_BASE_CHARS].strip("-")
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session) -> None:
    """Fail the session if a broker it started is still running once fixtures are torn down.

    Runs after pytest's own teardown of session fixtures (also after Ctrl-C); the nodes
    found are killed, so that none outlives the session either way.
    """
    leftover = live_nodes()
    if not leftover:
        return
    for node in leftover:
        node.kill()
    print(f"\nnetkafka.testing: Kafka nodes still running at the end of the session, now killed: "
          f"{leftover}", file=sys.stderr)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
