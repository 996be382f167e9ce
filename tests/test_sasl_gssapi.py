"""GSSAPI (Kerberos) against a real MIT KDC and a broker that authenticates by it.

The harness (netkafka.testing.kerberos) starts krb5kdc with a realm of its own, makes the
broker's service principal kafka/127.0.0.1 and a client principal, and starts a node whose
SASL_PLAINTEXT_GSSAPI listener takes GSSAPI only.  confluent-kafka's wheels have no GSSAPI,
so what netkafka wrote is read back by confluent-kafka on the node's PLAINTEXT listener.
"""
import pytest

from netkafka import Producer, errors
from refusals import refused_send
from netkafka.testing.admin import create_topic
from netkafka.testing.kerberos import GSSAPI_LISTENER, REALM, Kdc, gssapi_cluster
from netkafka.testing.reader import read_topic

pytest.importorskip("gssapi", reason="the gssapi extra (pip install 'netkafka[gssapi]')")

RECORDS = 50
WAIT_S = 30.0


@pytest.fixture(scope="module")
def kerberos(tmp_path_factory, kafka_jvm_options):
    """(kdc, cluster, client environment) for the module; the KDC and broker stop after."""
    directory = tmp_path_factory.mktemp("kerberos")
    with Kdc(directory / "kdc") as kdc:
        broker_keytab = kdc.add_principal(f"kafka/127.0.0.1@{REALM}")
        client_keytab = kdc.add_principal(f"alice@{REALM}")
        cluster = gssapi_cluster(kdc, directory / "kafka", broker_keytab, kafka_jvm_options)
        cluster.start()
        try:
            yield kdc, cluster, kdc.environment(client_keytab)
        finally:
            cluster.stop()


def gssapi_producer(cluster, **settings):
    return Producer(bootstrap_servers=cluster.listener_bootstrap(GSSAPI_LISTENER),
                    security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI", **settings)


def test_gssapi_produces_with_a_ticket_from_the_kdc(kerberos, topic_name, monkeypatch):
    _, cluster, environment = kerberos
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    create_topic(cluster.bootstrap, topic_name, partitions=2)
    producer = gssapi_producer(cluster)
    try:
        sent = [(b"k%d" % i, b"v%d" % i) for i in range(RECORDS)]
        futures = [producer.send(topic_name, value=v, key=k) for k, v in sent]
        producer.flush(WAIT_S)
        for future in futures:
            future.get(WAIT_S)
    finally:
        producer.close()
    records = read_topic(cluster.bootstrap, topic_name, expected_count=RECORDS)
    assert sorted((r.key, r.value) for r in records) == sorted(sent)


def test_gssapi_without_the_brokers_principal_fails_naming_it(kerberos, topic_name, monkeypatch):
    """A service name the KDC does not know: no ticket, and the error names the
    principal asked for and the broker, well before max_block_ms."""
    _, cluster, environment = kerberos
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    producer = gssapi_producer(cluster, sasl_kerberos_service_name="not-kafka", max_block_ms=60000)
    message = str(refused_send(producer, topic_name, errors.SaslAuthenticationFailedError))
    assert "not-kafka@127.0.0.1" in message and cluster.listener_bootstrap(GSSAPI_LISTENER) in message
