"""netkafka's producer against three nodes that replicate over SASL_SSL.

The secured_cluster fixture's brokers reach each other only over SASL_SSL with SCRAM-SHA-512
(as SCRAM user "broker"), so a partition whose three replicas stay in sync shows the
inter-broker authentication working; the producer writes with acks=all as alice over SASL_SSL
SCRAM, and bob reads back on the SASL_SSL PLAIN listener with confluent-kafka.
"""
from netkafka import Producer
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

RECORDS = 3000
PARTITIONS = 3
WAIT_S = 60.0


def test_acks_all_over_sasl_ssl_to_three_replicas(secured_cluster, topic_name):
    metadata = create_topic(secured_cluster.listeners["PLAINTEXT"].bootstrap, topic_name,
                            partitions=PARTITIONS, replication_factor=3,
                            config={"min.insync.replicas": "3"})
    partitions = metadata.topics[topic_name].partitions.values()
    assert {len(p.replicas) for p in partitions} == {3}
    listener = secured_cluster.listeners["SASL_SSL_SCRAM_SHA_512"]
    producer = Producer(bootstrap_servers=listener.bootstrap, acks="all",
                        security_protocol="SASL_SSL", ssl_cafile=str(secured_cluster.ca_file),
                        sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                        sasl_plain_password=secured_cluster.passwords["SCRAM-SHA-512"]["alice"])
    try:
        sent = [(b"k%d" % i, b"v%d" % i) for i in range(RECORDS)]
        futures = [producer.send(topic_name, key=key, value=value) for key, value in sent]
        producer.flush(WAIT_S)
        acknowledged = [future.get(WAIT_S) for future in futures]
    finally:
        producer.close()
    # min.insync.replicas=3 with acks=all: each acknowledgement means both followers
    # fetched the batch over the SCRAM listener.
    assert {m.partition for m in acknowledged} == set(range(PARTITIONS))
    reader = secured_cluster.listeners["SASL_SSL_PLAIN"]
    records = read_topic(reader.bootstrap, topic_name, RECORDS,
                         client_config=secured_cluster.client_config(reader.name, "bob"))
    assert sorted((r.key, r.value) for r in records) == sorted(sent)
